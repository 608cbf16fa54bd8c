"""What happened during a resilient launch, measured: one record per incident.

An incident is a failed attempt: when it began and was detected, what it was put down to
(node or job), the evidence, and what was done. A recovery is timed in steps: detected, every
rank stopped, the new node set checked, every rank of the next attempt running (the restart
overhead; the job's reload from its checkpoint comes after), each counted from the fault's
onset: a lost node's last sign of life, since the outage began there and not when its
silence had lasted the node timeout (otherwise the detection). The incidents are written as
a trace `clusterkit cost --trace` reads, so the spot-vs-on-demand estimate can use what
restarting really costs on this cluster. With --log-dir each attempt keeps its evidence (rank
logs, torchrun's log, stacks) in its own folder, and every incident names it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from clusterkit.escape import printable
from clusterkit.launch.faults import Fault


@dataclass
class Incident:
    attempt: int  # the attempt that failed (0: the first)
    detected: float  # wall clock (time.time()) when the failure was seen
    fault: Fault
    action: str = ""  # what was done: "restart on ...", "stop: ..."
    stop_s: float | None = None  # onset -> every rank stopped
    recheck_s: float | None = None  # onset -> the new node set checked
    running_s: float | None = None  # onset -> every rank of the next attempt running
    excluded: list[str] = field(default_factory=list)  # left out because of this incident
    spares: list[str] = field(default_factory=list)  # taken because of it
    evidence: str | None = None  # the failed attempt's folder in --log-dir, when kept
    onset: float | None = None  # wall clock: a lost node's last sign of life; None: detected

    @property
    def began(self) -> float:
        """When the fault began (wall clock): what the outage is counted from."""
        return self.detected if self.onset is None else min(self.onset, self.detected)

    @property
    def detect_s(self) -> float:
        """The onset -> the detection (a lost node: about the node timeout)."""
        return self.detected - self.began

    @property
    def time(self) -> str:
        return _iso(self.began)

    def line(self) -> str:
        """The one line printed when the incident happens (and again when it is resolved)."""
        fault = self.fault
        where = ", ".join(fault.hosts) or "every node"
        rank = f" rank {fault.rank}" if fault.rank is not None else ""
        evidence = f": {fault.reason}" if fault.reason else ""
        action = f" -> {self.action}" if self.action else ""
        kept = f" (evidence in {self.evidence})" if self.evidence else ""
        # The evidence quotes the ranks' own lines: node data, made inert for a terminal.
        return printable(
            f"incident {self.time} {fault.kind} fault on {where}{rank}{evidence}{action}{kept}"
        )

    def to_dict(self) -> dict[str, Any]:
        fault = asdict(self.fault)
        fault["ranks"] = {host: list(r) for host, r in self.fault.ranks.items()}
        return {
            "attempt": self.attempt,
            "onset": self.time,
            "detected": _iso(self.detected),
            "detect_s": _round(self.detect_s),
            "fault": self.fault.kind,
            "hosts": list(self.fault.hosts),
            "rank": self.fault.rank,
            "reason": self.fault.reason,
            "evidence": list(self.fault.evidence),
            "failed_ranks": fault["ranks"],
            "action": self.action,
            "stop_s": _round(self.stop_s),
            "recheck_s": _round(self.recheck_s),
            "running_s": _round(self.running_s),
            "excluded": self.excluded,
            "spares": self.spares,
            "evidence_dir": self.evidence,
        }


def attempt_folder_name(attempt: int) -> str:
    """The folder of attempt N (0: the first run) in --log-dir."""
    return f"attempt-{attempt:d}"


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat(timespec="seconds")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def restart_minutes(incidents: Sequence[Incident]) -> float | None:
    """The mean restart overhead (onset to every rank running again) in minutes, over
    the incidents after which the job ran again; None when there was none."""
    measured = [i.running_s for i in incidents if i.running_s is not None]
    return statistics.fmean(measured) / 60 if measured else None


def trace_text(incidents: Sequence[Incident], nodes: int, hours: float) -> str:
    """The `cost --trace` format: one node interruption per line (`TIME NODE`; job faults
    are bugs, not interruptions), the nodes watched and the hours observed as headers, and
    the measured restart overhead."""
    lines = [
        "# clusterkit launch: node faults seen during the run",
        f"# nodes: {nodes}",
        f"# hours: {max(hours, 1e-6):.6g}",
    ]
    minutes = restart_minutes(incidents)
    if minutes is not None:
        lines.append(f"# restart-min: {minutes:.4g}")
    for incident in incidents:
        if incident.fault.node:
            if incident.evidence:  # a comment line: `cost --trace` skips it
                lines.append(printable(f"# evidence of the fault below: {incident.evidence}"))
            for host in incident.fault.hosts:
                lines.append(f"{incident.time} {host}")
    return "\n".join(lines) + "\n"
