"""The `bench` stage: the global run of the collectives under torchrun on every node at once
(bench/launcher.py), then each node alone (--per-node, bench/pernode.py) and groups of nodes
in rounds (--find-slow, bench/findslow.py), in one result."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from clusterkit.bench.findslow import FindSlowOutcome, find_slow_nodes, global_deadline, not_run
from clusterkit.bench.launcher import BenchOutcome, launch_bench
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.pernode import per_node_bench
from clusterkit.stages.base import StageResult
from clusterkit.transport.base import Deadline

if TYPE_CHECKING:
    from clusterkit.stages.session import Session


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
