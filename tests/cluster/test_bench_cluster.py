"""The bench across real hosts: network namespaces with sshd, real SSH, real torchrun and gloo.

3 of the cluster's nodes run one CPU rank each, or two for --per-node (the nodes' GPUs are
replayed nvidia-smi output; torch sees none, so gloo). Afterwards no process may remain on
any node.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from clusterkit.bench.launcher import BenchOptions, BenchOutcome, launch_bench
from clusterkit.bench.nccltests import parse_table
from clusterkit.checks.model import Status
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.cli import CliRun, run_cli
from tests.support.cpushares import CpuShares
from tests.support.netcluster import NetCluster, Node, pids_in_netns

pytestmark = pytest.mark.cluster

SWEEP = {"minbytes": "256K", "maxbytes": "4M", "iters": 10, "warmup_iters": 2}


def _inventory(cluster: NetCluster, tmp_path: Path, **clusterkit) -> Path:
    return cluster.inventory(
        tmp_path / "inventory.yaml", nodes=cluster.nodes[:3], clusterkit=clusterkit or None
    )


def _launch(path: Path, seconds: float, **options) -> BenchOutcome:
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    assert not connections.failures, connections.failures
    try:
        settings = {"backend": "gloo", "nproc_per_node": 1, "environ": {}, **SWEEP, **options}
        return launch_bench(
            connections.transports, inventory, BenchOptions(**settings), Deadline.after(seconds)
        )
    finally:
        connections.close()


def assert_nothing_left(cluster: NetCluster, run_ids: tuple[str, ...]) -> None:
    """No torchrun, rank or node script, and no run directory of these runs (only theirs:
    other test sessions on this machine may be running their own), left on any node (sshd
    reaps sessions lazily, so give it a few seconds)."""
    assert all(run_ids), "name the runs: an empty id would match every run's folder"
    deadline = time.monotonic() + 8
    while True:
        leftovers = {n.name: [p.command for p in n.processes()] for n in cluster.nodes}
        leftovers = {name: cmds for name, cmds in leftovers.items() if cmds}
        run_dirs = [p for i in run_ids for p in glob.glob(f"/tmp/clusterkit-bench-{i}*")]
        if (not leftovers and not run_dirs) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert leftovers == {}
    assert run_dirs == []


def _by_id(outcome: BenchOutcome) -> dict:
    return {finding.id: finding for finding in outcome.findings}


def test_three_nodes_pass_and_the_table_matches_the_json(
    cluster: NetCluster, tmp_path: Path
) -> None:
    outcome = _launch(_inventory(cluster, tmp_path), 120, min_busbw=0.0001)
    findings = _by_id(outcome)
    assert findings["bench.busbw"].status is Status.OK, outcome.findings
    assert findings["bench.correctness"].status is Status.OK
    result = outcome.result
    assert result["world_size"] == 3
    assert result["gate"]["passed"] is True
    assert result["gate"]["threshold_source"] == "--min-busbw"
    assert [d["host"] for d in result["devices"]] == ["node1", "node2", "node3"]
    table = parse_table(outcome.table)
    assert [r["size"] for r in table["results"]] == [r["size"] for r in result["results"]]
    for row, ours in zip(table["results"], result["results"]):
        for place in ("out_of_place", "in_place"):  # both measured across the nodes
            assert row[place]["bus_bw"] == pytest.approx(ours[place]["bus_bw"], abs=0.006)
            assert ours[place]["nwrong"] == 0 and ours[place]["bus_bw"] > 0
    assert table["out_of_bounds"]["count"] == 0
    assert all(node.ok for node in outcome.nodes)
    assert_nothing_left(cluster, (outcome.run_id,))


def test_impossible_threshold_fails_with_its_source(cluster: NetCluster, tmp_path: Path) -> None:
    path = _inventory(cluster, tmp_path)
    env = {**os.environ, "NCCL_TESTS_MIN_BW": "100000"}  # in the run's environment only
    sweep = ("-b", "256K", "-e", "1M", "-n", "5")
    done = _bench_cli(path, "--nproc-per-node", "1", *sweep, timeout=120, env=env)
    assert done.status == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    busbw = next(f for f in report["findings"] if f["id"] == "bench.busbw")
    assert busbw["status"] == "fail"
    assert "NCCL_TESTS_MIN_BW=100000" in busbw["message"]
    gate = report["details"]["bench"]["result"]["gate"]
    assert gate["threshold_source"] == "NCCL_TESTS_MIN_BW"
    assert gate["threshold"] == pytest.approx(90000)  # the nccl-tests 0.9 rule
    assert_nothing_left(cluster, (report["details"]["bench"]["run_id"],))


def test_sweep_timeout_and_threshold_come_from_the_inventory(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """No sweep flag: `clusterkit bench` runs clusterkit.bench, as `check`'s bench stage does."""
    settings = {**SWEEP, "maxbytes": "1M", "min_busbw": 1e6, "timeout": 120}
    path = _inventory(cluster, tmp_path, bench=settings)
    argv = ["bench", str(path), "--backend", "gloo", "--nproc-per-node", "1"]
    done = run_cli([*argv, "--ssh-config", "/dev/null", "--format", "json"], timeout=180)
    assert done.status == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)["details"]["bench"]["result"]
    assert [row["size"] for row in result["results"]] == [256 * 1024, 512 * 1024, 1024 * 1024]
    assert result["config"]["iters"] == 10
    assert result["gate"]["threshold_source"] == "inventory"
    assert_nothing_left(cluster, (json.loads(done.stdout)["details"]["bench"]["run_id"],))


def test_inventory_threshold_is_used_and_reported(cluster: NetCluster, tmp_path: Path) -> None:
    outcome = _launch(_inventory(cluster, tmp_path, bench={"min_busbw": 1e6}), 120)
    assert _by_id(outcome)["bench.busbw"].status is Status.FAIL
    assert outcome.result["gate"]["threshold_source"] == "inventory"
    assert_nothing_left(cluster, (outcome.run_id,))


def test_killing_the_worker_on_one_node_names_it_and_leaves_nothing(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node2's rank is SIGKILLed mid-run: the verdict names node2 within the deadline."""
    killed: list[int] = []

    def kill_node2_rank() -> None:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            files = glob.glob("/tmp/clusterkit-bench-*-n1.*/rank1.kill")
            if files and _measuring(cluster.nodes[1]):  # torch imported, group joined
                pid = int(Path(files[0]).read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_node2_rank, daemon=True)
    killer.start()
    started = time.monotonic()
    deadline_s = 90
    outcome = _launch(_inventory(cluster, tmp_path), deadline_s, iters=100000, maxbytes="1M")
    elapsed = time.monotonic() - started
    killer.join(1)
    assert killed, "the rank on node2 never started"
    assert elapsed < deadline_s
    failed = _by_id(outcome)["bench.rank-failed"]
    assert failed.status is Status.FAIL
    assert failed.hosts == ["node2"], failed.message
    assert "rank 1 on node2 died (signal 9 SIGKILL)" in failed.message
    assert outcome.result is None
    assert_nothing_left(cluster, (outcome.run_id,))


def _measuring(node: Node) -> bool:
    """The node's rank has moved over a MB to its peers (joining the group and gathering the
    devices move a few kB): the all-reduces are being timed."""
    argv = ["ss", "-Htin", "state", "established", "( not sport = :22 and not dport = :22 )"]
    info = node.exec(argv, check=True).stdout
    return sum(int(n) for n in re.findall(r"bytes_(?:acked|received):(\d+)", info)) > 2**20


def _bench_cli(
    path: Path, *flags: str, timeout: float = 300, env: dict[str, str] | None = None
) -> CliRun:
    """`clusterkit bench` in-process (gloo, JSON), bounded by `--timeout` and a minute more."""
    argv = ["bench", str(path), "--backend", "gloo", "--ssh-config", "/dev/null"]
    flags = ("--format", "json", "--timeout", f"{timeout:g}", *flags)
    return run_cli([*argv, *flags], timeout=timeout + 60, env=env)


def test_other_collectives_each_print_their_table_and_finding(
    cluster: NetCluster, tmp_path: Path
) -> None:
    collectives = ("all_gather", "reduce_scatter", "alltoall")
    done = _bench_cli(
        _inventory(cluster, tmp_path, bench=SWEEP),
        "--nproc-per-node", "1", "--min-busbw", "0.0001", "--collective", ",".join(collectives),
    )  # fmt: skip
    assert done.status == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    bench = report["details"]["bench"]
    parts = bench["table"].split("# nccl-tests compatible output")[1:]
    tables = {parse_table(part)["config"]["collective"]: parse_table(part) for part in parts}
    assert sorted(tables) == sorted(f"{name}_perf" for name in collectives)
    findings = {f["id"]: f for f in report["findings"]}
    result = bench["result"]
    measured = {one["config"]["collective"]: one for one in [result, *result["more_collectives"]]}
    for name in collectives:
        finding, table = findings[f"bench.busbw-{name}"], tables[f"{name}_perf"]
        one = measured[f"{name}_perf"]
        if one.get("unsupported"):  # this torch's gloo lacks it: said, not failed
            assert finding["status"] == "skip" and "not supported" in finding["message"]
            continue
        assert finding["status"] == "ok", finding
        assert finding["message"].startswith(f"{name} busbw "), finding
        assert one["world_size"] == 3 and one["gate"]["passed"] is True
        assert [row["size"] for row in table["results"]] == [r["size"] for r in one["results"]]
        for row in one["results"]:
            places = [row[place] for place in ("out_of_place", "in_place") if row[place]]
            assert places and all(p["nwrong"] == 0 and p["bus_bw"] > 0 for p in places), row
        assert table["out_of_bounds"]["count"] == 0
    assert findings["bench.correctness"]["status"] == "ok"
    assert_nothing_left(cluster, (bench["run_id"],))


PER_NODE_SLICE = 0.5  # of a core per node, as for find-slow (test_find_slow_cluster.py)
THROTTLED = "node3"


@pytest.mark.slow
def test_per_node_names_the_throttled_node_alone(cluster: NetCluster, tmp_path: Path) -> None:
    """3 nodes x 2 gloo ranks, node3 with a quarter of the others' CPU: each node is measured
    alone, all at once; node3 alone is named, below 0.7 x the median, without pairing."""
    reason = CpuShares.reason()
    if reason:
        pytest.skip(f"needs CPU slices: {reason}")
    # node3's two ranks import torch on an eighth of a core: on a loaded machine that takes
    # most of a minute, so the nodes may wait for each other longer than the default 60 s.
    bench = {
        **SWEEP, "minbytes": "1M", "maxbytes": "1M", "find_slow_seconds": 2, "join_timeout": 150,
    }  # fmt: skip
    path = _inventory(cluster, tmp_path, bench=bench)
    with CpuShares(PER_NODE_SLICE, weighted=True) as shares:
        for node in cluster.nodes[:3]:  # sshd too: the SSH sessions of the run inherit it
            share = PER_NODE_SLICE / 4 if node.name == THROTTLED else PER_NODE_SLICE
            shares.confine(node.name, pids_in_netns(node.netns), share)
        done = _bench_cli(path, "--nproc-per-node", "2", "--per-node", timeout=600)
    assert done.status == 0, done.stderr[-3000:]  # a node below the median warns
    report = json.loads(done.stdout)
    per_node = report["details"]["bench"]["per_node"]
    found = {f["hosts"][0]: f for f in report["findings"] if f["id"] == "bench.node-busbw"}
    assert sorted(found) == sorted(per_node["nodes"]) == ["node1", "node2", "node3"]
    assert per_node["ranks_per_node"] == 2 and per_node["bytes"] == 1 << 20
    assert per_node["not_ready"] == []  # every node timed together
    for name, node in per_node["nodes"].items():
        assert node["busbw"] > 0 and node["error"] is None, per_node
        assert node["threshold"] is None  # gloo: the median rule only
        assert node["status"] == found[name]["status"]
    assert found[THROTTLED]["status"] == "warn", json.dumps(per_node, indent=1)
    assert per_node["nodes"][THROTTLED]["ratio"] < 0.7
    assert "node3 alone: busbw" in found[THROTTLED]["message"]
    assert found["node1"]["status"] == found["node2"]["status"] == "ok", per_node
    assert_nothing_left(cluster, (report["details"]["bench"]["run_id"], per_node["run_id"]))


def test_per_node_with_one_rank_per_node_is_refused(cluster: NetCluster, tmp_path: Path) -> None:
    done = _bench_cli(_inventory(cluster, tmp_path), "--per-node", "--nproc-per-node", "1")
    assert done.status == 2
    assert done.stderr.strip().splitlines() == [
        "clusterkit: error: bench --per-node: needs --nproc-per-node 2 or more, not 1 (one "
        "rank on a node alone has no bus bandwidth)"
    ]
