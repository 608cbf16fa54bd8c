"""Node fault or job fault, over rank outputs as torch, gloo, NCCL, CUDA and the kernel
print them; and the node pool, the incident records and the trace `cost` reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.cost.rates import read_trace
from clusterkit.launch.failure import Failure, node_failures
from clusterkit.launch.faults import JOB, NODE, classify, hardware_error, singled_out
from clusterkit.launch.incidents import Incident, restart_minutes, trace_text
from clusterkit.launch.spares import NodeCount, NodePool, problems_by_host
from clusterkit.launch.stacks import Group
from clusterkit.node.kernellog import parse_kernel_log

# torchrun's summary when the kernel's OOM killer took rank 5 (pid 22629).
OOM_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_11:38:30
  host      : node3
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 22629)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 22629
============================================================
"""
TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 88, in <module>',
    "    loss = step(batch)",
    '  File "/work/train.py", line 41, in step',
    "    raise ValueError('bad batch shape (3, 7)')",
    "ValueError: bad batch shape (3, 7)",
)
GLOO_PEER_GONE = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.13]:5213"  # noqa: E501
NCCL_PEER_GONE = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5"  # noqa: E501
CUDA_ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
CUDA_OFF_BUS = (
    "RuntimeError: CUDA error: unspecified launch failure; Xid 79: GPU has fallen off the bus"
)
NCCL_IB = "node3:1234:1290 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.12<41234> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.13"  # noqa: E501
CUDA_ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


def rank(host: str, number: int, code: int, *lines: str, at: float = 1.0) -> Failure:
    return Failure(host, number, code, at, tuple(lines))


def test_a_lost_node_is_a_node_fault_and_its_peers_failures_are_consequences() -> None:
    fault = classify(
        [
            rank("node1", 0, 1, GLOO_PEER_GONE, at=1.2),
            Failure("node3", None, None, 1.0, lost=True),
            rank("node2", 1, 1, NCCL_PEER_GONE, at=1.1),
        ]
    )
    assert fault.kind == NODE and fault.hosts == ("node3",)
    assert fault.reason == "node3 was lost: no answer from its node process"


def test_an_oom_kill_matched_by_pid_in_the_kernel_log_is_the_node() -> None:
    (killed,) = node_failures("node3", 1, OOM_SUMMARY, {}, 2.0)
    assert killed.pid == 22629
    log = parse_kernel_log(
        "2026-11-23T11:38:29,881000+00:00 Out of memory: Killed process 22629 (python3) "
        "total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:1000\n"
    )
    pids = {"node3": [kill["pid"] for kill in log["oom_kills"]]}
    fault = classify([killed], oom_pids=pids)
    assert fault.kind == NODE and fault.hosts == ("node3",)
    assert "OOM killer (pid 22629)" in fault.reason
    # The same SIGKILL with another pid in the log is not put down to the node.
    assert classify([killed], oom_pids={"node3": [1]}).kind == JOB


@pytest.mark.parametrize("line", [CUDA_ECC, CUDA_OFF_BUS, NCCL_IB])
def test_cuda_and_nccl_errors_naming_hardware_are_node_faults(line: str) -> None:
    fault = classify([rank("node2", 3, 1, "step 9", line), rank("node1", 0, 1, GLOO_PEER_GONE)])
    assert fault.kind == NODE and fault.hosts == ("node2",)
    assert fault.evidence[0].startswith("rank 3 on node2: ")


@pytest.mark.parametrize("line", [CUDA_ILLEGAL, GLOO_PEER_GONE, NCCL_PEER_GONE, *TRACEBACK])
def test_program_errors_name_no_hardware(line: str) -> None:
    assert hardware_error(line) is None


def test_a_traceback_on_a_healthy_node_is_a_job_fault_with_its_last_lines() -> None:
    fault = classify(
        [rank("node2", 1, 1, "step 4", *TRACEBACK), rank("node1", 0, 1, GLOO_PEER_GONE, at=2.0)]
    )
    assert fault.kind == JOB and fault.hosts == ("node2",) and fault.rank == 1
    assert fault.reason == "rank 1 on node2 exited with status 1"
    assert fault.evidence[-1] == "ValueError: bad batch shape (3, 7)"
    assert fault.evidence[0] == "Traceback (most recent call last):"


def test_the_same_exception_on_every_node_is_a_job_fault() -> None:
    fault = classify([rank(f"node{i}", i, 1, *TRACEBACK) for i in (1, 2, 3)])
    assert fault.kind == JOB and "on every failing node alike" in fault.reason


def test_a_node_failing_its_checks_after_the_stop_is_the_node() -> None:
    fault = classify(
        [rank("node2", 1, 1, *TRACEBACK)],
        node_problems={"node4": ["gpu.xid: Xid 79 (GPU has fallen off the bus) on GPU 2"]},
    )
    assert fault.kind == NODE and fault.hosts == ("node4",)
    assert "node4 fails its checks now: gpu.xid" in fault.reason


def test_a_hang_singling_out_one_node_blames_it_and_one_alike_everywhere_the_job() -> None:
    odd = [
        Group("in all_reduce at train.py:88", (0, 1, 2, 3), ("node1", "node2")),
        Group("at train.py:41 in main `time.sleep(60)`", (4, 5), ("node3",)),
    ]
    assert singled_out(odd) == ("node3", "at train.py:41 in main `time.sleep(60)`")
    fault = classify([], hang_groups=odd)
    assert fault.kind == NODE and fault.hosts == ("node3",)
    alike = [Group("in all_reduce at train.py:88", (0, 1, 2), ("node1", "node2", "node3"))]
    fault = classify([], hang_groups=alike)
    assert (
        fault.kind == JOB and fault.reason == "every rank hung alike (in all_reduce at train.py:88)"
    )
    # Odd ranks on two nodes, or on a node that also has ranks in the big group: no culprit.
    mixed = [odd[0], Group("at x.py:1", (4,), ("node3",)), Group("at y.py:2", (5,), ("node4",))]
    assert singled_out(mixed) is None
    assert singled_out([odd[0], Group("at x.py:1", (9,), ("node1",))]) is None
    assert classify([], hang_missing=["node2"]).hosts == ("node2",)


def test_node_count_parses_n_and_min_max_and_refuses_the_rest() -> None:
    assert NodeCount.parse("4") == NodeCount(4, 4)
    assert NodeCount.parse("3:4") == NodeCount(3, 4)
    assert str(NodeCount(3, 4)) == "3:4"
    for bad in ("0", "4:3", "x", "3:", "-1", "1:2:3", "9999999"):
        with pytest.raises(ValueError):
            NodeCount.parse(bad)


def test_the_pool_runs_the_healthy_hosts_master_first_and_takes_spares_in_order() -> None:
    pool = NodePool(NodeCount(2, 3), ("n1", "n2", "n3", "n4", "n5"))
    pool.exclude({"n2": ["gpu.xid: Xid 79"]})
    assert pool.fill(first=True) == ["n1", "n3", "n4"] and pool.spares_used == []
    assert pool.spares == ["n5"]
    assert pool.exclude({"n1": ["lost"], "n9": ["not ours"]}) == ["n1"]
    assert pool.fill() == ["n5"] and pool.active == ["n3", "n4", "n5"]
    # the first running host leads the order: the master once n1 is gone (attempts.subset)
    assert pool.active[0] == "n3" and pool.spares_used == ["n5"]
    pool.exclude({"n3": ["lost"]})
    assert pool.fill() == [] and pool.active == ["n4", "n5"] and pool.enough
    pool.exclude({"n4": ["lost"]})
    assert not pool.enough
    assert pool.excluded == {"n2": "gpu.xid: Xid 79", "n1": "lost", "n3": "lost", "n4": "lost"}


def test_problems_are_by_host_and_a_finding_naming_none_is_the_whole_set() -> None:
    findings = [
        Finding("gpu.xid", Status.FAIL, "Xid 79", hosts=["n2"]),
        Finding("env.clock", Status.WARN, "offset 2 s", hosts=["n3"]),
        Finding("probe.ran", Status.ERROR, "timed out", hosts=["n4"]),
        Finding("parity.torch", Status.OK, "same", hosts=["n1"]),
        Finding("net.mesh", Status.FAIL, "no route between subnets"),
    ]
    hosts = ["n1", "n2", "n3", "n4"]
    by_host, whole = problems_by_host(findings, hosts)
    assert by_host == {"n2": ["gpu.xid: Xid 79"], "n4": ["probe.ran: timed out"]}
    assert whole == ["net.mesh: no route between subnets"]
    strict, _ = problems_by_host(findings, hosts, strict=True)
    assert list(strict) == ["n2", "n3", "n4"]


def test_incidents_become_a_trace_cost_reads_with_the_measured_restart(tmp_path: Path) -> None:
    node = classify([Failure("node3", None, None, 1.0, lost=True)])
    job = classify([rank("node2", 1, 1, *TRACEBACK)])
    incidents = [
        Incident(0, 1_790_000_000.0, node, running_s=42.0),
        Incident(1, 1_790_003_600.0, job, running_s=18.0),
        Incident(2, 1_790_007_200.0, node),  # the run ended: never running again
    ]
    assert restart_minutes(incidents) == pytest.approx(0.5)
    assert restart_minutes([]) is None
    assert "node fault on node3: node3 was lost" in incidents[0].line()
    assert incidents[1].to_dict()["evidence"][-1] == "ValueError: bad batch shape (3, 7)"
    path = tmp_path / "trace.txt"
    path.write_text(trace_text(incidents, nodes=3, hours=4.0))
    text = path.read_text()
    assert "# restart-min: 0.5" in text and text.count(" node3\n") == 2  # job faults: none
    source = read_trace(str(path))
    assert source.rate == pytest.approx(2 / (3 * 4.0))


def test_cost_takes_the_restart_time_a_launch_trace_measured(tmp_path: Path) -> None:
    from clusterkit.cli import build_parser
    from clusterkit.cli.cost import cost_command
    from clusterkit.commands.cost import build

    path = tmp_path / "trace.txt"
    node = classify([Failure("node3", None, None, 1.0, lost=True)])
    path.write_text(trace_text([Incident(0, 1_790_000_000.0, node, running_s=90.0)], 4, 10.0))
    common = ["cost", "--nodes", "4", "--hours", "24", "--on-demand-price", "98",
              "--spot-price", "40", "--trace", str(path), "--trials", "0"]  # fmt: skip
    measured = build(cost_command(build_parser().parse_args(common)))
    assert measured.scenario.restart_h == pytest.approx(1.5 / 60)
    given = build(cost_command(build_parser().parse_args([*common, "--restart-min", "20"])))
    assert given.scenario.restart_h == pytest.approx(20 / 60)


def test_node_text_in_an_incident_line_and_a_drain_reason_is_inert() -> None:
    """A hostile job prints a hardware-looking error with terminal escapes and a newline:
    the incident line shows them escaped, and the drain reason (kept in Slurm's state and
    shown by sinfo) holds no control character."""
    from clusterkit.slurm.drain import drain_command, left_out_reason

    line = "uncorrectable ECC error\x1b[2J\x1b]0;owned\x07\nclusterkit: job succeeded"
    fault = classify([rank("node2", 1, 1, line)])
    shown = Incident(0, 1_790_000_000.0, fault).line()
    assert "\x1b" not in shown and "\n" not in shown and "\x07" not in shown
    assert fault.node and "uncorrectable ECC error" in shown
    reason = left_out_reason(fault.reason)
    assert reason.startswith("clusterkit: launch: ") and reason.isprintable()
    assert len(reason) <= 200
    assert drain_command("node2", fault.reason).startswith("scontrol update nodename=node2 ")


def test_only_the_nodes_own_evidence_may_drain_it() -> None:
    """A job that prints "uncorrectable ECC error" got its node drained for every user under
    --slurm-drain. Its words (and its OOM kills, and where its ranks wait) leave the node out
    of this run at most; a lost node, or one failing its own checks after the stop, may be
    drained."""
    words = classify([rank("node2", 1, 1, CUDA_ECC)])
    assert words.node and words.hosts == ("node2",) and words.own_evidence == ()
    (oom,) = node_failures("node3", 1, OOM_SUMMARY, {}, 2.0)
    killed = classify([oom], oom_pids={"node3": [22629]})
    assert killed.node and killed.own_evidence == ()
    odd = [Group("in all_reduce at train.py:88", (0, 1), ("node1",)),
           Group("at train.py:41 in main", (2,), ("node2",))]  # fmt: skip
    assert classify([], hang_groups=odd).own_evidence == ()
    checked = classify(
        [rank("node2", 1, 1, CUDA_ECC)],
        node_problems={"node2": ["gpu.xid: GPU 0 Xid 48 needs GPU reset"]},
    )
    assert checked.own_evidence == ("node2",)
    lost = classify([Failure("node4", None, None, 1.0, lost=True)])
    assert lost.own_evidence == ("node4",)


def test_a_parity_tie_in_the_post_mortem_blames_no_node_and_the_job_fault_stays() -> None:
    """After a plain job bug, the master's probe answer changed (1 against 1): the parity
    comparison failed node2 by inventory order, and every spare lost the same tie after it.
    A tie names no host: the post-mortem finds no node fault and the job fault stays one."""
    from clusterkit.checks import static_findings
    from clusterkit.inventory.model import Expectations
    from tests.unit.checks.test_checks import healthy

    facts = healthy(2)
    facts["node1"]["torch"]["version"] = "2.14.0"  # the master's answer changed since the gate
    findings = static_findings(facts, Expectations())
    problems, whole = problems_by_host(findings, ["node1", "node2"])
    assert problems == {} and any(line.startswith("parity.torch: ") for line in whole)
    fault = classify([rank("node1", 0, 1, *TRACEBACK)], node_problems=problems)
    assert fault.kind == JOB and fault.hosts == ("node1",)
    facts["node3"] = healthy(3)["node3"]  # a spare: now 2 against 1, node1 is the odd one
    problems, _ = problems_by_host(static_findings(facts, Expectations()), list(facts))
    assert list(problems) == ["node1"]
