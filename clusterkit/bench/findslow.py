"""`bench --find-slow`: small groups of nodes measured in rounds, to name the slow node.

The global all-reduce says that a cluster is slow, not which node. Here every round (who is
with whom: bench/pairing.py) runs each group as its own small torchrun job, all groups of
the round at once: its master is the group's first node, on a port picked free there just
before, and the worker measures one size. A round gets an equal share of the time left; a
failing group is killed alone, the round's deadline or Ctrl-C kills every group, exactly as
the global bench does (bench/launcher.py:supervise). bench/slowrule.py names the nodes from
the bandwidths; this module runs the rounds and words the finding.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from clusterkit.bench import pairing
from clusterkit.bench.attribution import NodeRun, failure_findings, read_node
from clusterkit.bench.launcher import (
    KILL_GRACE_S,
    NodePlan,
    World,
    job_plans,
    plan_world,
    supervise,
)
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.results import wrong_elements
from clusterkit.bench.slowrule import GroupRun, SlowVerdict, judge_groups
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.registry import CheckId
from clusterkit.errors import TransportError
from clusterkit.inventory.model import Host, Inventory
from clusterkit.node.bench_common import parse_size
from clusterkit.rundir import EACH_OWN_FOLDER
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.pool import parallel

CHECK: CheckId = "bench.slow-node"
READY_SHARE = 0.6  # of a round's time: how long groups wait for each other before timing
GO_S = 10.0  # to write the go files once told
# Runs on a group's first node for the round: says `ready` once the worker's ready file is
# there (or exits 3 when the run directory, once seen, is gone: the group ended), then writes
# the go file when the launcher sends `go` (nothing when stdin closes without it).
_HELPER = (
    EACH_OWN_FOLDER
    + r"""
found() { dir=$1; }
seen=
while :; do
  dir=
  each_own_folder "$1" found
  [ -n "$dir" ] && [ -e "$dir/ready" ] && break
  if [ -n "$dir" ]; then seen=1; elif [ -n "$seen" ]; then exit 3; fi
  sleep 0.2
done
echo ready
read -r word && [ "$word" = go ] && [ -d "$dir" ] && : > "$dir/go"
exit 0
"""
)
NO_GO = "no go within"  # the worker's log line when it measured without the go
MIN_ROUND_S = 2 * KILL_GRACE_S  # a round with less time left could only be killed
# Binds an ephemeral port on every address and prints it: the group's master port. The
# socket closes at once; torchrun's store binds the port again a moment later.
PORT_SCRIPT = "import socket\ns = socket.socket()\ns.bind(('', 0))\nprint(s.getsockname()[1])"
REMEDY = (
    "run `clusterkit bench` on the node with a known-good partner; look at its links and NICs "
    "(`ibstat`, `ethtool`), PCIe width and GPU clocks (`nvidia-smi -q`), then drain it"
)


@dataclass
class FindSlowOutcome:
    findings: list[Finding]
    details: dict[str, Any]  # JSON: details.bench.find_slow
    text: list[str]
    interrupted: bool = False


def global_deadline(deadline: Deadline, options: BenchOptions) -> Deadline:
    """The global run's deadline: with find-slow or per-node at most half the time left, so
    a global run that hangs still leaves the rounds time to name the node."""
    if not (options.find_slow or options.per_node):
        return deadline
    return Deadline(min(deadline.at, time.monotonic() + deadline.remaining() / 2))


def not_run(
    reason: str, hosts: list[str] | None = None, *, check: CheckId = CHECK, what: str = "find-slow"
) -> FindSlowOutcome:
    """The outcome of a round-based run (find-slow, per-node) that could not start."""
    finding = Finding(check, Status.SKIP, f"not run: {reason}", hosts=hosts or [])
    return FindSlowOutcome([finding], {"skipped": reason}, [f"{what}: not run: {reason}"])


def round_world(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    options: BenchOptions,
    unusable: Callable[[World], str | None],
    refuse: Callable[[str, list[str] | None], FindSlowOutcome] = not_run,
) -> World | FindSlowOutcome:
    """The world of a round-based run, or `refuse`'s outcome when a host is not connected (a
    partial world would measure the wrong thing) or `unusable` names what is wrong with it."""
    if any(host.name not in transports for host in inventory.hosts):
        return refuse("not every host is connected", None)
    world = plan_world(transports, inventory, options)
    reason = unusable(world)
    return refuse(reason, [host.name for host in world.hosts]) if reason else world


def one_size(options: BenchOptions, size: str) -> BenchOptions:
    """The options a round runs with: all_reduce at `size` alone, with no gate."""
    return replace(
        options, minbytes=size, maxbytes=size, gate_size=None, collectives=("all_reduce",)
    )


def find_slow_nodes(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    options: BenchOptions,
    deadline: Deadline,
) -> FindSlowOutcome:
    """Every round of groups over the connected inventory hosts, then the verdict."""
    group_size = options.find_slow_group
    world = round_world(
        transports, inventory, options, lambda w: pairing.unusable_reason(len(w.hosts), group_size)
    )
    if isinstance(world, FindSlowOutcome):
        return world
    names = [host.name for host in world.hosts]
    plan = pairing.schedule(len(names), group_size, options.find_slow_rounds)
    size = options.find_slow_bytes or options.maxbytes
    group_options = one_size(options, size)
    run_id = uuid.uuid4().hex[:12]
    started = time.monotonic()
    groups: list[GroupRun] = []
    rounds: list[dict[str, Any]] = []
    interrupted = False
    for number, members in enumerate(plan):
        if deadline.remaining() < MIN_ROUND_S:
            break
        share = deadline.remaining() / (len(plan) - number)
        round_deadline = Deadline(min(deadline.at, time.monotonic() + share))
        round_started = time.monotonic()
        try:
            measured, barrier, interrupted = run_round(
                transports,
                inventory,
                world,
                group_options,
                [[world.hosts[i] for i in group] for group in members],
                number,
                f"{run_id}-r{number + 1}",
                round_deadline,
            )
        except KeyboardInterrupt:
            interrupted = True
            break
        groups += measured
        seconds = round(time.monotonic() - round_started, 3)
        rounds.append({"round": number + 1, "seconds": seconds, **barrier})
        if interrupted:
            break
    verdict = judge_groups(groups, names, options.find_slow_fraction)
    details = _details(verdict, groups, rounds, plan, options, size, run_id, started)
    findings = [_finding(verdict, names, options, len(rounds), len(plan))]
    return FindSlowOutcome(findings, details, _text(verdict, details), interrupted)


def run_round(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    world: World,
    options: BenchOptions,
    groups: list[list[Host]],
    number: int,
    run_id: str,
    deadline: Deadline,
) -> tuple[list[GroupRun], dict[str, Any], bool]:
    """One round: pick each group's port on its first node, start every group, say go
    once every group has joined (or READY_SHARE of the round has passed), and wait.
    Also bench/pernode.py's single round, a group per node."""
    started = time.monotonic()
    ready_window = min(READY_SHARE * deadline.remaining(), 0.9 * options.join_timeout)
    firsts = [group[0] for group in groups]
    picked = parallel(lambda host: _pick_port(transports[host.name], host, deadline), firsts)
    jobs: list[list[NodeRun]] = []
    plans: dict[str, NodePlan] = {}
    failed: dict[int, str] = {}
    for index, (group, port) in enumerate(zip(groups, picked)):
        if not isinstance(port, int):
            failed[index] = f"no free port on {group[0].name}: {port}"
            jobs.append([])
            continue
        plans.update(
            job_plans(
                inventory,
                world,
                options,
                group,
                tag=f"{run_id}-g{index + 1}",
                master=group[0].address,
                port=port,
                barrier_timeout=ready_window,
                fill=options.find_slow_seconds,
            )
        )
        jobs.append([NodeRun(host.name, rank) for rank, host in enumerate(group)])
    leaders = [(group[0], plans[group[0].name][0]) for group, runs in zip(groups, jobs) if runs]
    barrier: dict[str, Any] = {}
    release = threading.Thread(
        target=_release,
        args=(transports, leaders, Deadline.after(ready_window), barrier),
        daemon=True,
    )
    release.start()
    try:
        interrupted = supervise(transports, [runs for runs in jobs if runs], plans, deadline)
    finally:
        release.join(max(1.0, deadline.remaining()))
    measured = [
        _group_run(number, group, runs, failed.get(index, ""), started, deadline)
        for index, (group, runs) in enumerate(zip(groups, jobs))
    ]
    return measured, barrier, interrupted


def _group_run(
    number: int,
    group: list[Host],
    runs: list[NodeRun],
    failure: str,
    started: float,
    deadline: Deadline,
) -> GroupRun:
    """What one group of the round measured, or why it did not start (`failure`)."""
    hosts = tuple(host.name for host in group)
    if not runs:
        return GroupRun(number, hosts, None, 0.0, failure)
    ended = max((run.ended_at or time.monotonic()) for run in runs)
    busbw, error = _group_result(runs, deadline)
    alone = NO_GO in runs[0].stderr  # timed after its own wait, not with the others
    seconds = round(ended - started, 3)
    return GroupRun(number, hosts, busbw, seconds, error, together=not alone)


def _release(
    transports: Mapping[str, Transport],
    leaders: list[tuple[Host, str]],
    ready_by: Deadline,
    report: dict[str, Any],
) -> None:
    """One conversation per leader node, opened with the round: it says `ready` once the
    group has joined (or ends with the group); when every group has said it, or `ready_by`
    has passed, each is sent `go` on stdin and writes the go file. The go needs no new SSH
    channel, which a loaded node can be slow to open. Fills `report`: seconds to the go,
    the leaders not ready by then, those whose conversation could not be started."""
    started = time.monotonic()
    until = Deadline(ready_by.at + GO_S)

    def begin(leader: tuple[Host, str]) -> RemoteProcess:
        host, run_name = leader
        argv = ["sh", "-c", _HELPER, "clusterkit-go", run_name]
        return transports[host.name].start(argv, deadline=until, start_by=ready_by)

    def wait(process: RemoteProcess | BaseException) -> bool:
        if isinstance(process, BaseException):
            return False
        return process.expect(b"ready\n", ready_by) is not None

    def go(process: RemoteProcess | BaseException) -> None:
        if not isinstance(process, BaseException):
            process.send(b"go\n")
            process.finish(Deadline.after(GO_S))

    helpers = parallel(begin, leaders)
    ready = parallel(wait, helpers)
    report["ready_seconds"] = round(time.monotonic() - started, 3)
    report["not_ready"] = [h.name for (h, _), ok in zip(leaders, ready) if ok is not True]
    parallel(go, helpers)
    report["no_go"] = [h.name for (h, _), p in zip(leaders, helpers) if isinstance(p, Exception)]


def _pick_port(transport: Transport, host: Host, deadline: Deadline) -> int | str:
    """A free port on the host, or why none could be had."""
    argv = [host.python_interpreter or "python3", "-S", "-c", PORT_SCRIPT]
    try:
        result = transport.run(argv, deadline=deadline)
    except TransportError as error:
        return error.detail
    text = result.stdout.decode("utf-8", "replace").strip()
    if not result.ok or not text.isdigit():
        return result.stderr_tail() or f"exit {result.exit_code}"
    return int(text)


def _group_result(runs: list[NodeRun], deadline: Deadline) -> tuple[float | None, str]:
    """(busbw of the slowest rank, "") from the group's result, or (None, what failed)."""
    reports = {run.host: read_node(run) for run in runs}
    for report in reports.values():
        if report.result is None or not report.result["results"]:
            continue
        row = report.result["results"][-1]
        if wrong := wrong_elements(row):
            return None, f"{wrong} wrong elements after all_reduce(sum)"
        return float(row["slowest"]["bus_bw"]), ""
    found = failure_findings(runs, reports, deadline)
    return None, found[0].message if found else "no result"


def _finding(
    verdict: SlowVerdict, hosts: list[str], options: BenchOptions, ran: int, planned: int
) -> Finding:
    fraction = options.find_slow_fraction
    expected = f"busbw >= {fraction:g} x its round's median in most rounds"
    cut = f" ({ran} of {planned} rounds before the deadline)" if ran < planned else ""
    if not verdict.measured:
        return Finding(
            CHECK,
            Status.ERROR,
            f"could not tell nodes apart: {verdict.rounds_counted} of {planned} rounds "
            f"measured anything{cut}",
            hosts=hosts,
            expected=expected,
            remedy="raise --timeout or reduce find_slow_bytes; see details.bench.find_slow",
        )
    if not verdict.named:
        median = verdict.median_busbw or 0.0
        return Finding(
            CHECK,
            Status.OK,
            f"no slow node among {len(hosts)}: {verdict.rounds_counted} rounds of groups of "
            f"{options.find_slow_group}, median {median:.3g} GB/s{cut}",
            hosts=hosts,
            expected=expected,
        )
    found = {host: _node_summary(verdict, host) for host in verdict.named}
    words = "; ".join(f"{host}: {_describe(verdict, host)}" for host in verdict.named)
    status = Status.FAIL if options.find_slow_status == "fail" else Status.WARN
    return Finding(
        CHECK,
        status,
        f"slow or failing: {words} (median of every group {verdict.median_busbw or 0:.3g} "
        f"GB/s){cut}",
        hosts=list(verdict.named),
        expected=expected,
        found=found,
        remedy=REMEDY,
    )


def _describe(verdict: SlowVerdict, host: str) -> str:
    node = verdict.nodes[host]
    parts = [f"slow in {node.slow} of {node.counted} rounds"]
    if node.median_busbw is not None:
        parts.append(f"median {node.median_busbw:.3g} GB/s")
    if node.median_ratio is not None:
        parts.append(f"{node.median_ratio:.2f} x its rounds' medians")
    if node.failed:
        parts.append(f"its group failed in {node.failed} rounds")
    return ", ".join(parts)


def _node_summary(verdict: SlowVerdict, host: str) -> dict[str, Any]:
    node = verdict.nodes[host]
    return {
        "median_busbw": _rounded(node.median_busbw),
        "median_ratio": _rounded(node.median_ratio),
        "slow_rounds": node.slow,
        "rounds": node.counted,
        "failed_rounds": node.failed,
    }


def _details(
    verdict: SlowVerdict,
    groups: list[GroupRun],
    rounds: list[dict[str, Any]],
    plan: list[list[tuple[int, ...]]],
    options: BenchOptions,
    size: str,
    run_id: str,
    started: float,
) -> dict[str, Any]:
    """details.bench.find_slow: every round, group and node, with the numbers judged."""
    for entry in rounds:
        number = entry["round"] - 1
        median = verdict.round_medians.get(number)
        entry["median_busbw"] = _rounded(median)
        entry["groups"] = [
            {
                "hosts": list(group.hosts),
                "busbw": _rounded(group.busbw),
                "ratio": _rounded(group.busbw / median) if group.busbw and median else None,
                "seconds": group.seconds,
                "together": group.together,
                "error": group.error or None,
            }
            for group in groups
            if group.round == number
        ]
    return {
        "run_id": run_id,
        "group_size": options.find_slow_group,
        "bytes": parse_size(size),
        "fraction": options.find_slow_fraction,
        "rounds_planned": len(plan),
        "round_count": len(rounds),
        "seconds": round(time.monotonic() - started, 3),
        "median_busbw": _rounded(verdict.median_busbw),
        "slow": list(verdict.named),
        "rounds": rounds,
        "nodes": {host: _node_summary(verdict, host) for host in verdict.nodes},
    }


def _text(verdict: SlowVerdict, details: dict[str, Any]) -> list[str]:
    seconds = ", ".join(f"{entry['seconds']:.1f}" for entry in details["rounds"])
    lines = [
        f"find-slow: {len(verdict.nodes)} nodes, {details['round_count']} rounds of groups of "
        f"{details['group_size']} at {details['bytes'] / 2**20:g} MiB in "
        f"{details['seconds']:.1f} s (rounds: {seconds or 'none'} s)"
    ]
    if verdict.named:
        lines += [f"find-slow: {host}: {_describe(verdict, host)}" for host in verdict.named]
    elif verdict.measured:
        lines.append("find-slow: no slow node")
    return lines


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
