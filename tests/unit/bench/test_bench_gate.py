"""The gate: threshold precedence and table, slowest-rank verdict, NCCL log warnings,
and attribution of a failed run to the node that failed first."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.bench import gate, nccllog, thresholds
from clusterkit.bench.attribution import NodeRun, failure_findings, read_node, split_nccl_logs
from clusterkit.checks.model import Status
from clusterkit.facts import HostFacts, parse_facts
from clusterkit.transport.base import CommandResult, Deadline
from tests.support.bench_results import worker_result
from tests.unit.bench.test_fabric import nvlink_section

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _node(gpus: int = 8, model: str = "NVIDIA H100 80GB HBM3", nvlink=True, ports=()) -> HostFacts:
    """A node's probe facts, checked as the probe's are on arrival; `nvlink` None: the
    node's NVLink section says nothing (no nvidia-smi nvlink)."""
    facts = {
        "gpus": {"count": gpus, "devices": [{"name": model}] * gpus, "nvlink": None},
        "infiniband": {
            "devices": [
                {"name": f"mlx5_{i}", "ports": [{"state": state, "rate_gbps": rate,
                                                  "link_layer": layer}]}
                for i, (state, rate, layer) in enumerate(ports)
            ]
        },
    }  # fmt: skip
    if nvlink is not None:
        facts["nvlink"] = nvlink_section([18 if nvlink else 0] * gpus)
    return parse_facts(facts)


IB400 = [("ACTIVE", 400, "InfiniBand")] * 8


def test_table_ships_with_the_package() -> None:
    table = thresholds.threshold_table()
    assert table["gate_fraction"] == 0.9
    assert table["per_rdma_nic_gbps"]["400"]["healthy"][0] == 46
    assert table["source"] and table["date"]


def test_single_node_nvlink_h100_default() -> None:
    fabric = thresholds.detect_fabric({"n1": _node()})
    threshold = thresholds.fabric_default(fabric)
    assert threshold.value == pytest.approx(0.9 * 365)
    assert threshold.source == "fabric default"
    assert "NVLink" in threshold.detail and "H100" in threshold.detail


def test_multi_node_ib_takes_the_weaker_of_nvlink_and_nics() -> None:
    eight_200 = [("ACTIVE", 200, "InfiniBand")] * 8
    facts = {"n1": _node(ports=IB400), "n2": _node(ports=eight_200)}
    fabric = thresholds.detect_fabric(facts)
    assert fabric.rdma_port_rates == (200.0,) * 8  # the poorest node decides
    assert thresholds.fabric_default(fabric).value == pytest.approx(0.9 * 8 * 24)
    both_400 = thresholds.detect_fabric({"n1": _node(ports=IB400), "n2": _node(ports=IB400)})
    assert thresholds.fabric_default(both_400).value == pytest.approx(0.9 * 365)  # NVLink bound


def test_down_ports_do_not_count_and_roce_is_named() -> None:
    ports = [("DOWN", 400, "InfiniBand"), ("ACTIVE", 100, "Ethernet")]
    fabric = thresholds.detect_fabric({"n1": _node(ports=ports), "n2": _node(ports=ports)})
    threshold = thresholds.fabric_default(fabric)
    assert threshold.value == pytest.approx(0.9 * 12)
    assert "RoCE" in threshold.detail


def test_multi_node_without_rdma_is_tcp() -> None:
    fabric = thresholds.detect_fabric({"n1": _node(), "n2": _node()})
    threshold = thresholds.fabric_default(fabric)
    assert threshold.value == pytest.approx(0.9 * 4)
    assert "TCP" in threshold.detail


def test_pcie_only_and_unknown_nvlink() -> None:
    pcie = thresholds.detect_fabric({"n1": _node(gpus=4, model="NVIDIA L4", nvlink=False)})
    assert thresholds.fabric_default(pcie).value == pytest.approx(0.9 * 24)
    unknown = thresholds.detect_fabric({"n1": _node(gpus=4, model="NVIDIA L4", nvlink=None)})
    assert thresholds.fabric_default(unknown).value is None


def test_cpu_has_no_default() -> None:
    fabric = thresholds.detect_fabric({"n1": {"gpus": {"count": 0, "devices": []}}})
    assert thresholds.fabric_default(fabric).value is None


def _resolve(**overrides):
    arguments = {
        "flag": None,
        "environ": {},
        "inventory_min_busbw": None,
        "fabric": thresholds.detect_fabric({"n1": _node()}),
        "backend": "nccl",
    }
    arguments.update(overrides)
    return thresholds.resolve_threshold(**arguments)


def test_precedence_flag_env_inventory_fabric() -> None:
    environ = {"NCCL_TESTS_MIN_BW": "100"}
    inventory = 50.0
    assert _resolve(flag=7.0, environ=environ, inventory_min_busbw=inventory).source == (
        "--min-busbw"
    )
    from_env = _resolve(environ=environ, inventory_min_busbw=inventory)
    assert from_env.source == "NCCL_TESTS_MIN_BW"
    assert from_env.value == pytest.approx(90.0)  # the nccl-tests 0.9 rule
    from_inventory = _resolve(inventory_min_busbw=inventory)
    assert (from_inventory.source, from_inventory.value) == ("inventory", 50.0)
    assert _resolve().source == "fabric default"


def test_gloo_reports_only_unless_told() -> None:
    assert _resolve(backend="gloo").value is None
    assert _resolve(backend="gloo", flag=0.5).value == 0.5
    assert _resolve(backend="gloo", environ={"NCCL_TESTS_MIN_BW": "bad"}).value is None


def _result(times: list[float]) -> dict:
    """A result at 64M where rank r took `times[r]` seconds per op."""
    return worker_result([[t] for t in times])


def test_verdict_reads_the_slowest_rank() -> None:
    result = _result([0.010, 0.010, 0.020])
    slowest_busbw = result["results"][0]["slowest"]["bus_bw"]
    verdict = gate.evaluate(result, thresholds.Threshold(slowest_busbw * 1.01, "--min-busbw", "x"))
    assert verdict.passed is False
    assert verdict.slowest_host == "node3"
    finding = gate.busbw_finding(verdict, ["node1", "node2", "node3"])
    assert finding.status is Status.FAIL and finding.hosts == ["node3"]
    assert "--min-busbw" not in finding.message or "x" in finding.message
    passing = gate.evaluate(result, thresholds.Threshold(slowest_busbw * 0.99, "--min-busbw", "x"))
    assert passing.passed is True
    assert gate.busbw_finding(passing, ["node1"]).status is Status.OK


def test_gate_size_picks_the_largest_row_that_fits() -> None:
    result = worker_result([[1e-5] * 3] * 2, sizes=(1024, 4096, 16384))
    assert gate.gate_row(result)["size"] == 16384
    assert gate.gate_row(result, 5000)["size"] == 4096


def test_one_rank_is_not_applicable_and_no_threshold_reports_only() -> None:
    guessed = thresholds.Threshold(1.0, "fabric default", "x")
    single = gate.evaluate(_result([0.01]), guessed)
    assert single.passed is None and gate.busbw_finding(single, ["a"]).status is Status.SKIP
    report = gate.evaluate(_result([0.01, 0.01]), thresholds.Threshold(None, "none", "gloo"))
    assert report.passed is None and gate.busbw_finding(report, ["a"]).status is Status.OK


@pytest.mark.parametrize("source", ["--min-busbw", "NCCL_TESTS_MIN_BW", "inventory"])
def test_one_rank_fails_closed_against_a_threshold_the_user_set(source: str) -> None:
    single = gate.evaluate(_result([0.01]), thresholds.Threshold(40.0, source, f"{source} 40"))
    assert single.passed is False
    finding = gate.busbw_finding(single, ["a"])
    assert finding.status is Status.FAIL and "cannot be met" in finding.message


def test_slow_rank_is_named() -> None:
    warning = gate.slow_rank_finding(_result([0.010, 0.011, 0.010, 0.020]))
    assert warning is not None and warning.hosts == ["node4"]
    assert gate.slow_rank_finding(_result([0.010, 0.011, 0.010, 0.011])) is None


def test_wrong_elements_fail_correctness() -> None:
    result = _result([0.01, 0.01])
    result["results"][0]["in_place"]["nwrong"] = 5
    finding = gate.correctness_finding(result, ["a", "b"])
    assert finding.status is Status.FAIL and finding.found == 5


SOCKET_LOG = """\
Meowth:10107:10107 [0] NCCL INFO Bootstrap : Using eth0:192.168.0.183<0>
NCCL version 2.16.5+cuda11.8
Meowth:10107:10122 [0] NCCL INFO Failed to open libibverbs.so[.1]
Meowth:10107:10122 [0] NCCL INFO NET/Socket : Using [0]eth0:192.168.0.183<0> \
[1]virbr0:192.168.122.1<0>
Meowth:10107:10122 [0] NCCL INFO Using network Socket
"""
IB_LOG = """\
gpu1:20:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>
gpu1:20:20 [0] NCCL INFO Using network IB
gpu1:20:31 [0] NCCL WARN NET/IB : Got async event : port error
"""


def test_nccl_log_parsing() -> None:
    socket = nccllog.parse_nccl_log(SOCKET_LOG)
    assert socket.version == "2.16.5+cuda11.8"
    assert socket.networks == {"Socket"}
    assert socket.socket_interfaces == ["eth0", "virbr0"]
    ib = nccllog.parse_nccl_log(IB_LOG)
    assert ib.networks == {"IB"} and ib.ib_devices == ["mlx5_0:1", "mlx5_1:1"]
    assert ib.warnings == ["NET/IB : Got async event : port error"]


def test_socket_transport_with_ib_present_warns_for_that_host() -> None:
    logs = {"n1": nccllog.parse_nccl_log(SOCKET_LOG), "n2": nccllog.parse_nccl_log(IB_LOG)}
    facts = {"n1": _node(ports=IB400), "n2": _node(ports=IB400)}
    finding = nccllog.socket_transport_finding(logs, facts)
    assert finding is not None and finding.hosts == ["n1"] and finding.status is Status.WARN
    no_ib = {"n1": _node(), "n2": _node()}
    assert nccllog.socket_transport_finding(logs, no_ib) is None


def test_debug_only_variables_warn() -> None:
    finding = nccllog.debug_vars_finding({"n1": {"NCCL_P2P_DISABLE": "1"}, "n2": {"PATH": "/bin"}})
    assert finding is not None and finding.hosts == ["n1"]
    assert "NCCL_P2P_DISABLE=1" in finding.message
    assert nccllog.debug_vars_finding({"n1": {"NCCL_DEBUG": "INFO"}}) is None


def _run(host: str, rank: int, stderr: bytes, code: int | None, ended: float, killed=False):
    run = NodeRun(host, rank)
    run.result = CommandResult(host, code, b"", stderr, timed_out=code is None)
    run.ended_at, run.killed = ended, killed
    return run


def test_torchrun_root_cause_is_read_from_real_output() -> None:
    stderr = (FIXTURES / "bench" / "torchrun-rank-sigkill.stderr.txt").read_bytes()
    report = read_node(_run("node2", 1, stderr, 1, 1.0))
    assert report.root_causes == [(2, -9, "SIGKILL")]


def test_the_node_whose_rank_died_is_blamed_not_the_ones_stopped() -> None:
    stderr = (FIXTURES / "bench" / "torchrun-rank-sigkill.stderr.txt").read_bytes()
    gloo_error = (
        b"clusterkit-bench: error rank-failed: rank 0 on node1: Connection closed by peer\n"
    )
    runs = [
        _run("node1", 0, gloo_error, 1, 2.0),
        _run("node2", 1, stderr, 1, 3.0),  # returned later, but a rank died by signal
        _run("node3", 2, b"", None, 5.0, killed=True),
    ]
    findings = failure_findings(runs, {r.host: read_node(r) for r in runs}, Deadline.after(1))
    failed = next(f for f in findings if f.id == "bench.rank-failed")
    assert failed.status is Status.FAIL and failed.hosts == ["node2"]
    assert "rank 2 on node2 died (signal 9 SIGKILL)" in failed.message
    assert "node3" in failed.message  # stopped by clusterkit, listed


def test_nothing_joined_and_deadline() -> None:
    runs = [_run("node1", 0, b"", None, 5.0, killed=True), _run("node2", 1, b"", None, 5.0, True)]
    findings = failure_findings(runs, {r.host: read_node(r) for r in runs}, Deadline.after(0))
    assert [f.id for f in findings] == ["bench.timeout", "bench.not-joined"]
    assert all(f.status is Status.ERROR for f in findings)


def test_nccl_log_sections_are_split_from_stderr() -> None:
    stderr = (
        "own line\n\n--clusterkit-nccl-log-- nccl.a.1.log\nNCCL INFO x\n"
        "--clusterkit-nccl-log-end--\n"
    )
    own, logs = split_nccl_logs(stderr)
    assert "own line" in own and "NCCL INFO" not in own
    assert logs.strip() == "NCCL INFO x"


def test_a_rank_killed_from_outside_beats_a_peer_that_aborted_earlier() -> None:
    killed = (FIXTURES / "bench" / "torchrun-rank-sigkill.stderr.txt").read_bytes()
    aborted = killed.replace(b"-9 (pid", b"-6 (pid").replace(
        b"Signal 9 (SIGKILL)", b"Signal 6 (SIGABRT)"
    )
    runs = [_run("node3", 2, aborted, 1, 1.0), _run("node2", 1, killed, 1, 2.0)]
    findings = failure_findings(runs, {r.host: read_node(r) for r in runs}, Deadline.after(1))
    failed = next(f for f in findings if f.id == "bench.rank-failed")
    assert failed.hosts == ["node2"]
    assert "then failed too: node3" in failed.message


def test_a_node_without_torch_is_named_not_the_network() -> None:
    """Recorded: `python3 -m torch.distributed.run` on a node whose Python lacks torch. It
    read as bench.rank-failed ("look at ... the network stage") and bench.not-joined
    ("check that every node reaches the master port")."""
    no_torch = (FIXTURES / "bench" / "torchrun-no-torch.stderr.txt").read_bytes()
    runs = [
        _run("node1", 0, b"", None, 5.0, killed=True),  # waited in the rendezvous
        _run("node2", 1, no_torch, 1, 1.0),
    ]
    findings = failure_findings(runs, {r.host: read_node(r) for r in runs}, Deadline.after(1))
    assert [(f.id, f.status, f.hosts) for f in findings] == [
        ("bench.rank-failed", Status.FAIL, ["node2"])
    ]
    assert findings[0].message.startswith(
        "torch is not installed for the job's Python on node2 (/usr/bin/python3)"
    )
    assert "stopped: node1" in findings[0].message
    assert "network" not in (findings[0].remedy or "") and "torch" in (findings[0].remedy or "")


def test_a_traceback_without_torch_names_the_default_python() -> None:
    traceback = (
        b"Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n"
    )
    finding = failure_findings([_run("n1", 0, traceback, 1, 1.0)], {}, Deadline.after(1))[0]
    assert "on n1 (python3)" in finding.message


def test_every_collective_the_worker_runs_has_its_bandwidth_check() -> None:
    from clusterkit.node.bench_common import COLLECTIVES

    assert set(gate.BUSBW_IDS) == set(COLLECTIVES)
    assert gate.finding_id("all_reduce") == "bench.busbw"  # the id it always had
