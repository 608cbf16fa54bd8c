"""Stage `bench`: real collectives (all_reduce and the others asked for) under torchrun on
every node at once; then each node alone (--per-node) and groups of nodes in rounds
(--find-slow): bench/stage.py. Here: when the stage may start."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from clusterkit.checks.model import Finding, Status
from clusterkit.stages.base import Stage, StageResult, no_hosts_reason
from clusterkit.stages.session import Session

if TYPE_CHECKING:  # the bench modules are imported only when a bench runs
    from clusterkit.bench.options import BenchOptions


class BenchStage(Stage):
    """`options` builds the launcher's options from the session (the probe's facts are in
    it by then). With `preflight` (check), the stage does not start where it could only
    hang or measure the wrong thing (see `bench_blocker`) and a skipped bench stands as a
    SKIP finding; without (`clusterkit bench`), it starts and says itself why a world is
    incomplete (bench.not-joined). `seconds` None: the session's own deadline."""

    name = "bench"
    together = True  # every rank must join one rendezvous

    def __init__(
        self,
        options: Callable[[Session], BenchOptions],
        *,
        seconds: float | None = None,
        preflight: bool = True,
    ) -> None:
        self.options, self.seconds, self.preflight = options, seconds, preflight

    def skip_reason(self, session: Session) -> str | None:
        if not self.preflight:
            return None
        return super().skip_reason(session) or no_hosts_reason(session) or bench_blocker(session)

    def skipped(self, reason: str) -> list[Finding]:
        return [Finding("bench.busbw", Status.SKIP, f"bench not run: {reason}")]

    def run(self, session: Session) -> StageResult:
        from clusterkit.bench.stage import run_bench_stage

        if session.failures:
            return not_run_after_probe(list(session.failures))
        options = self.options(session)
        return run_bench_stage(session, session.bounded(self.seconds), options)


def not_run_after_probe(hosts: list[str]) -> StageResult:
    """A node whose probe hung or failed would stall the bench as well, and the ranks left
    waiting for it would be blamed: the bench is not started, and the node is named."""
    finding = Finding(
        "bench.not-joined",
        Status.SKIP,
        f"not run: the probe did not complete on {', '.join(hosts)}; those nodes would stall "
        "the rendezvous",
        hosts=hosts,
    )
    details = {"run_id": "", "seconds": 0.0, "result": None, "nodes": [], "table": ""}
    return StageResult([finding], details, ran=False)


def bench_blocker(session: Session) -> str | None:
    """Why the all-reduce cannot give a meaningful answer now, or None."""
    findings = session.findings
    broken = sorted(
        {
            f.id
            for f in findings
            if f.stage in ("connect", "probe", "storage", "network") and f.status is Status.ERROR
        }
    )
    if broken:
        return "not every host could be reached or probed (" + ", ".join(broken) + ")"
    blocked = sorted({f.id for f in findings if f.stage == "network" and f.status is Status.FAIL})
    if blocked:
        return "the network stage failed (" + ", ".join(blocked) + "); an all-reduce would hang"
    if any(f.id in ("torch.present", "torch.import") and f.status is Status.FAIL for f in findings):
        return "torch is missing or broken on a node"
    if len(session.inventory.hosts) < 2 and not any(
        (f.get("gpus") or {}).get("count") for f in session.facts.values()
    ):
        return "a single host without GPUs: nothing to measure"
    return None
