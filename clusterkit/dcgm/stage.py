"""Stage `dcgm`: NVIDIA's own GPU validation, `dcgmi diag -r N -j`, on every node at once
(dcgm/checks.py reads its answers). Off unless `--dcgm-level` or `clusterkit.dcgm_level`
names a level: even level 1 loads every GPU, and level 3 takes up to half an hour."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult, no_hosts_reason
from clusterkit.dcgm.checks import LEVEL_SECONDS, NodeDiag, dcgm_findings, parse_diag
from clusterkit.errors import TransportError
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.pool import parallel

MISSING = 127  # the shell's "command not found"
# dcgmi found on the node's PATH, else exit 127 with nothing on stdout. The level is an
# integer checked by the caller, passed as an argument: nothing from outside reaches the shell.
SCRIPT = 'command -v dcgmi >/dev/null 2>&1 || exit 127; exec dcgmi diag -r "$1" -j'


class DcgmStage(Stage):
    name = "dcgm"
    together = True  # every node at once: the stage lasts one node's diagnostic

    def __init__(self, level: int) -> None:
        if level not in LEVEL_SECONDS:
            raise ValueError(f"DCGM level must be one of {sorted(LEVEL_SECONDS)}, not {level}")
        self.level = level
        self.seconds = LEVEL_SECONDS[level]

    def steps(self, session: Session) -> int:
        return len(session.transports)

    def skip_reason(self, session: Session) -> str | None:
        return super().skip_reason(session) or no_hosts_reason(session)

    def run(self, session: Session) -> StageResult:
        deadline = session.bounded(self.seconds)
        names = list(session.transports)

        def one(name: str) -> NodeDiag:
            diag = run_diag(session.transports[name], self.level, deadline)
            session.progress.done(name, diag.problem)
            return diag

        diags: dict[str, NodeDiag] = {}
        for name, outcome in zip(names, parallel(one, names, workers=session.workers)):
            diags[name] = outcome if isinstance(outcome, NodeDiag) else _failed(outcome)
        details: dict[str, Any] = {
            "level": self.level,
            "nodes": {name: asdict(diag) for name, diag in diags.items()},
        }
        return StageResult(dcgm_findings(diags, self.level), details)


def run_diag(transport: Transport, level: int, deadline: Deadline) -> NodeDiag:
    """One node's diagnostic, killed at the deadline like every remote command."""
    result = transport.run(["sh", "-c", SCRIPT, "sh", str(level)], deadline=deadline)
    stdout = result.stdout.decode("utf-8", "replace")
    if result.timed_out:
        return NodeDiag(problem=f"no result within {LEVEL_SECONDS[level]:g} s (killed)")
    if result.exit_code == MISSING and not stdout.strip():
        return NodeDiag(missing=True)
    diag = parse_diag(stdout)
    if diag.problem and not stdout.strip():
        diag = parse_diag(result.stderr.decode("utf-8", "replace"))  # errors may go to stderr
    return diag


def _failed(error: BaseException) -> NodeDiag:
    detail = error.detail if isinstance(error, TransportError) else str(error)
    return NodeDiag(problem=f"could not run dcgmi: {detail}")
