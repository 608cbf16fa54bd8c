"""The `bench` stage: the global run of the collectives under torchrun on every node at once
(bench/launcher.py), then each node alone (--per-node, bench/pernode.py) and groups of nodes
in rounds (--find-slow, bench/findslow.py), in one result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from clusterkit.bench.findslow import FindSlowOutcome, find_slow_nodes, global_deadline, not_run
from clusterkit.bench.launcher import BenchOutcome, launch_bench
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.pernode import per_node_bench
from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult, no_hosts_reason
from clusterkit.transport.base import Deadline


def run_bench_stage(session: Session, deadline: Deadline, options: BenchOptions) -> StageResult:
    """Stage "bench": the findings of every run asked for, each run's details under its
    name, and the tables for the text report. Ctrl-C during any run ends the stage."""
    outcome = launch_bench(
        session.transports, session.inventory, options, global_deadline(deadline, options)
    )
    if outcome.interrupted:
        raise KeyboardInterrupt
    result = StageResult(
        list(outcome.findings),
        {**bench_details(outcome), "table": outcome.table},
        outcome.table.rstrip().splitlines() if outcome.table else [],
        ran=bool(outcome.nodes),
    )
    if options.per_node:
        # Each node alone (names a bad one also when the global run failed); at most half
        # of what is left when find-slow follows.
        alone = global_deadline(deadline, replace(options, per_node=False))
        nodes = per_node_bench(session.transports, session.inventory, options, alone)
        _add(result, "per_node", nodes)
    if options.find_slow:
        # The global all-reduce gates; the groups say which node, also when it failed.
        slow = (
            find_slow_nodes(session.transports, session.inventory, options, deadline)
            if outcome.nodes
            else not_run("the global all-reduce did not start")
        )
        _add(result, "find_slow", slow)
    return result


def _add(result: StageResult, name: str, outcome: FindSlowOutcome) -> None:
    """A round-based run's findings, details (under `name`) and text, after the global run's."""
    if outcome.interrupted:
        raise KeyboardInterrupt
    result.findings += outcome.findings
    result.details[name] = outcome.details
    result.text += outcome.text


def bench_details(outcome: BenchOutcome) -> dict[str, Any]:
    """The bench section of the JSON report: the result, and what each node printed."""
    return {
        "run_id": outcome.run_id,
        "seconds": round(outcome.duration, 3),
        "result": outcome.result,
        "nodes": [
            {
                "host": node.host,
                "node_rank": node.node_rank,
                "exit_code": node.result.exit_code if node.result else None,
                "timed_out": bool(node.result and node.result.timed_out),
                "killed_by_clusterkit": node.killed,
                "transport_error": node.error.detail if node.error else None,
                "stdout_tail": node.stdout[-4000:],
                "stderr_tail": node.stderr[-8000:],
            }
            for node in outcome.nodes
        ],
    }


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
