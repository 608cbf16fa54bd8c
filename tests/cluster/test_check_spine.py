"""`clusterkit check` against real hosts: namespaces with sshd, iptables and a GPU stand-in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster

STATIC_ONLY = ["--skip", "network,bench,image"]


def check(
    inventory: Path, *args: str, timeout: float = 120, home: Path | None = None
) -> tuple[int, dict[str, Any], float]:
    """Run the real CLI (in-process); return (exit status, JSON report, seconds)."""
    env = dict(os.environ)
    if home is not None:
        env["HOME"] = str(home)  # a ~/.ssh of the test's own, never the user's
    started = time.monotonic()
    done = run_cli(
        ["check", str(inventory), "--format", "json", *STATIC_ONLY, *args],
        env=env,
        timeout=timeout,
    )
    elapsed = time.monotonic() - started
    assert done.stdout, f"no report; stderr: {done.stderr}"
    report = json.loads(done.stdout)
    assert report["exit_status"] == done.status
    return done.status, report, elapsed


def finding(report: dict[str, Any], check_id: str, status: str | None = None) -> dict[str, Any]:
    matches = [f for f in report["findings"] if f["id"] == check_id]
    if status is not None:
        matches = [f for f in matches if f["status"] == status]
    assert matches, f"no {check_id} ({status}) in {[f['id'] for f in report['findings']]}"
    return matches[0]


def test_healthy_cluster_passes(cluster: NetCluster, cluster_inventory: Path) -> None:
    status, report, _ = check(cluster_inventory)
    assert status == 0, [f for f in report["findings"] if f["status"] in ("fail", "error")]
    assert report["verdict"] == "pass"
    assert set(report["hosts"]) == {node.name for node in cluster.nodes}
    for node in cluster.nodes:
        facts = report["hosts"][node.name]["facts"]
        assert facts["hostname"]["hostname"] == node.name  # really that node, over SSH
        gpus = facts["gpus"]
        assert gpus["count"] == 8 and gpus["driver"] == "550.54.15"
        assert gpus["cuda_driver"] == "12.4"
        uuids = {d["uuid"] for d in gpus["devices"]}
        assert len(uuids) == 8
    all_uuids = [d["uuid"] for h in report["hosts"].values() for d in h["facts"]["gpus"]["devices"]]
    assert len(set(all_uuids)) == 32  # per-node values, not one canned output
    assert finding(report, "parity.driver")["status"] == "ok"


def test_driver_mismatch_names_the_odd_node(cluster: NetCluster, cluster_inventory: Path) -> None:
    cluster.nodes[2].set_gpus(driver="535.129.03", cuda="12.2")
    status, report, _ = check(cluster_inventory)
    assert status == 1 and report["verdict"] == "fail"
    driver = finding(report, "parity.driver", "fail")
    assert driver["hosts"] == ["node3"]
    assert driver["expected"] == "550.54.15"
    assert driver["found"] == {"node3": "535.129.03"}
    assert "--tags nvidia --limit node3" in driver["remedy"]


def test_r610_banner_is_read_like_the_classic_one(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    for node in cluster.nodes:
        node.set_gpus(banner="r610", driver="610.43.02", cuda="13.2")
    status, report, _ = check(cluster_inventory)
    assert status == 0
    facts = report["hosts"]["node1"]["facts"]["gpus"]
    assert (facts["driver"], facts["cuda_driver"]) == ("610.43.02", "13.2")


def test_gpu_count_mismatch(cluster: NetCluster, cluster_inventory: Path) -> None:
    cluster.nodes[1].set_gpus(count=7)
    status, report, _ = check(cluster_inventory)
    assert status == 1
    count = finding(report, "parity.gpu-count", "fail")
    assert count["found"] == {"node2": 7} and count["expected"] == 8


def test_expected_gpus_per_node_pin(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(
        tmp_path / "inv.yaml", clusterkit={"expect": {"gpus_per_node": 4}}
    )
    status, report, _ = check(inventory)
    assert status == 1
    pin = finding(report, "expect.gpus_per_node", "fail")
    assert sorted(pin["hosts"]) == ["node1", "node2", "node3", "node4"]


def test_ecc_errors_fail_the_node(cluster: NetCluster, cluster_inventory: Path) -> None:
    cluster.nodes[3].set_gpus(ecc_errors={5: 3})
    status, report, _ = check(cluster_inventory)
    assert status == 1
    ecc = finding(report, "gpu.ecc", "fail")
    assert ecc["hosts"] == ["node4"]
    assert "GPU 5: 3" in ecc["message"]


def test_torch_missing_on_a_node(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        host_vars={"node2": {"ansible_python_interpreter": "/usr/bin/python3"}},
    )
    status, report, _ = check(inventory)
    assert status == 1
    missing = finding(report, "torch.present", "fail")
    assert missing["hosts"] == ["node2"]
    assert "/usr/bin/python3" in missing["message"]


def test_hanging_nvidia_smi_is_bounded_and_named(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    cluster.nodes[1].set_gpus(mode="hang")
    status, report, elapsed = check(cluster_inventory, timeout=60)
    assert status == 1
    smi = finding(report, "gpu.nvidia-smi", "fail")
    assert smi["hosts"] == ["node2"] and "timeout" in smi["message"]
    assert elapsed < 30  # the tool's own timeout (10 s), not the probe's or ours
    assert not cluster.nodes[1].processes(), "the hung nvidia-smi was left running"


def test_sshd_down_is_incomplete_and_named(cluster: NetCluster, cluster_inventory: Path) -> None:
    cluster.nodes[3].stop_sshd()
    status, report, elapsed = check(cluster_inventory, "--connect-timeout", "3")
    assert status == 3 and report["verdict"] == "incomplete"
    down = finding(report, "host.reachable", "error")
    assert down["hosts"] == ["node4"] and down["found"] == "refused"
    assert elapsed < 20
    # the other three were still checked
    assert finding(report, "parity.driver")["status"] == "ok"


def test_dropped_ssh_packets_time_out_within_the_connect_deadline(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    cluster.nodes[0].iptables("-I", "INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP")
    status, report, elapsed = check(cluster_inventory, "--connect-timeout", "3")
    assert status == 3
    dropped = finding(report, "host.reachable", "error")
    assert dropped["hosts"] == ["node1"] and dropped["found"] == "timeout"
    assert elapsed < 3 + 10  # connect deadline plus process start, never a hang


def test_unknown_host_key_is_rejected_by_default(cluster: NetCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    inventory = cluster.inventory(tmp_path / "inv.yaml", extra_vars={"ansible_ssh_common_args": ""})
    status, report, _ = check(inventory, home=home)
    assert status == 3
    rejected = [
        f for f in report["findings"] if f["id"] == "host.reachable" and f["status"] == "error"
    ]
    assert len(rejected) == 4 and {f["found"] for f in rejected} == {"hostkey-unknown"}
    assert not (home / ".ssh" / "known_hosts").exists()  # strict never writes


def test_accept_new_records_keys_then_strict_accepts_them(
    cluster: NetCluster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    inventory = cluster.inventory(tmp_path / "inv.yaml", extra_vars={"ansible_ssh_common_args": ""})
    status, _, _ = check(inventory, "--host-key-policy", "accept-new", home=home)
    assert status == 0
    recorded = (home / ".ssh" / "known_hosts").read_text().splitlines()
    assert sorted(line.split()[0] for line in recorded) == sorted(n.address for n in cluster.nodes)
    status, _, _ = check(inventory, home=home)
    assert status == 0


def test_changed_host_key_is_refused_even_with_accept_new(
    cluster: NetCluster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    forged = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "forged")],
        capture_output=True, check=True, timeout=20,
    )  # fmt: skip
    assert forged.returncode == 0
    key = (tmp_path / "forged.pub").read_text().split()[:2]
    (home / ".ssh" / "known_hosts").write_text(
        "@cert-authority *.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO\n"
        f"{cluster.nodes[0].address} {' '.join(key)}\n"
    )
    inventory = cluster.inventory(tmp_path / "inv.yaml", extra_vars={"ansible_ssh_common_args": ""})
    status, report, _ = check(inventory, "--host-key-policy", "accept-new", home=home)
    assert status == 3
    changed = [f for f in report["findings"] if f["found"] == "hostkey-changed"]
    assert [f["hosts"] for f in changed] == [["node1"]]


def test_proxy_jump_reaches_a_node_through_another(cluster: NetCluster, tmp_path: Path) -> None:
    first = cluster.nodes[0]
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        nodes=cluster.nodes[1:3],
        extra_vars={
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={cluster.known_hosts_path} "
            f"-J root@{first.address}"
        },
    )
    # The jump host needs the same client key; ~/.ssh/config supplies it like OpenSSH would.
    config = tmp_path / "ssh_config"
    config.write_text(f"Host {first.address}\n  IdentityFile {cluster.key_path}\n")
    status, report, _ = check(inventory, "--ssh-config", str(config))
    assert status == 0, report["findings"]
    assert report["hosts"]["node2"]["facts"]["hostname"]["hostname"] == "node2"


def test_ctrl_c_leaves_nothing_running_remotely(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    for node in cluster.nodes:
        node.set_gpus(mode="hang")
    process = subprocess.Popen(
        [sys.executable, "-m", "clusterkit", "check", str(cluster_inventory), *STATIC_ONLY],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(
        "nvidia_smi" in p.command for node in cluster.nodes for p in node.processes()
    ):
        time.sleep(0.1)
    assert any(p for node in cluster.nodes for p in node.processes()), "probe never started"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stderr
    # Killed before the exit; sshd may still be reaping the session children.
    give_up = time.monotonic() + 10
    while any(node.processes() for node in cluster.nodes) and time.monotonic() < give_up:
        time.sleep(0.1)
    left = {node.name: node.processes() for node in cluster.nodes}
    assert not any(left.values()), f"left running: {left}"


@pytest.mark.parametrize("policy", ["strict"])
def test_large_output_on_both_streams_does_not_deadlock(
    cluster: NetCluster, cluster_inventory: Path, policy: str
) -> None:
    from clusterkit.settings.loader import load_inventory
    from clusterkit.transport.base import Deadline
    from clusterkit.transport.connect import connect_all
    from clusterkit.transport.endpoint import ConnectOptions

    inventory = load_inventory(cluster_inventory)
    connections = connect_all(inventory, ConnectOptions(host_key_policy=policy))
    try:
        transport = connections.transports["node1"]
        script = (
            "import sys\n"
            "for _ in range(64):\n"
            "    sys.stdout.write('o' * 65536); sys.stderr.write('e' * 65536)\n"
        )
        result = transport.run(["python3", "-c", script], deadline=Deadline.after(30))
        assert result.exit_code == 0 and not result.timed_out
        assert len(result.stdout) == 4 * 2**20 and set(result.stdout) == {ord("o")}
        assert len(result.stderr) == 4 * 2**20 and set(result.stderr) == {ord("e")}

        capped = transport.run(
            ["python3", "-c", script], deadline=Deadline.after(30), output_cap=2**20
        )
        assert capped.truncated and len(capped.stdout) == 2**20

        started = time.monotonic()
        slept = transport.run(["sleep", "60"], deadline=Deadline.after(1.5))
        assert slept.timed_out and slept.exit_code is None
        assert time.monotonic() - started < 10
        # sshd reaps its session children asynchronously; look until the node's own
        # `timeout 2` could be what ended the command.
        while cluster.nodes[0].processes() and time.monotonic() < started + 2:
            time.sleep(0.1)
        assert not cluster.nodes[0].processes(), "the timed-out command is still running"
    finally:
        connections.close()
