"""The test cluster itself: real sshd per node, real network paths, faithful nvidia-smi."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support import fake_nvidia_smi
from tests.support.netcluster import (
    DEFAULT_MODEL,
    STATE_DIR,
    NetCluster,
    Node,
    gpu_inventory,
    run,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia-smi"
CONNECT = (
    "import socket, sys\n"
    "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))\n"
    "print('connected')\n"
)
LISTEN = (
    "import socket, sys\n"
    "server = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    server.accept()[0].close()\n"
)


def ssh(node: Node, command: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run a command on the node through the real OpenSSH client."""
    return subprocess.run(
        node.ssh_argv(command), capture_output=True, text=True, timeout=timeout, check=False
    )


def connect(source: Node, target: Node, port: int, timeout: float = 2.0) -> str:
    """Outcome of a TCP connect from one node to another: 'connected' or the error."""
    result = source.exec(
        ["/usr/bin/python3", "-c", CONNECT, target.address, str(port), str(timeout)],
        timeout=timeout + 10,
    )
    return result.stdout.strip() or result.stderr.strip().splitlines()[-1]


def listen(node: Node, port: int, timeout: float = 10.0) -> None:
    """Start a TCP listener on the node and return once it accepts connections."""
    process = node.spawn(
        ["/usr/bin/python3", "-c", LISTEN, node.address, str(port)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready and process.stdout.readline() == b"listening\n", "listener did not start"


def fake_smi(state: dict, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    argv = ["/usr/bin/python3", "-S", "-E", fake_nvidia_smi.__file__, str(path), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)


def running(pid: int) -> bool:
    """True if the process exists and is not a zombie waiting for its parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --- SSH -----------------------------------------------------------------------------------


def test_ssh_reaches_every_node_under_its_own_hostname(cluster: NetCluster) -> None:
    for node in cluster:
        result = ssh(node, "hostname")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == node.name


def test_strict_host_key_checking_rejects_a_node_missing_from_known_hosts(
    cluster: NetCluster, tmp_path: Path
) -> None:
    node = cluster.nodes[0]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        cluster.nodes[1].host_key_line().replace(cluster.nodes[1].address, node.address) + "\n"
    )
    argv = node.ssh_argv("true")
    argv[argv.index(f"UserKnownHostsFile={cluster.known_hosts_path}")] = (
        f"UserKnownHostsFile={known_hosts}"
    )
    result = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr


def test_sessions_get_the_node_tool_directory_first_on_path(cluster: NetCluster) -> None:
    node = cluster.nodes[2]
    result = ssh(node, "command -v nvidia-smi")
    assert result.stdout.strip() == str(node.bin_dir / "nvidia-smi")


def test_stopped_sshd_refuses_connections_and_starts_again(cluster: NetCluster) -> None:
    node = cluster.nodes[1]
    node.stop_sshd()
    assert ssh(node, "true").returncode == 255
    node.start_sshd()
    assert ssh(node, "hostname").stdout.strip() == node.name


def test_ansible_can_manage_the_nodes(cluster: NetCluster, tmp_path: Path) -> None:
    if shutil.which("ansible") is None:
        pytest.skip("ansible-core is not installed")
    inventory = cluster.inventory(
        tmp_path / "inventory.yaml", python_interpreter="/usr/bin/python3"
    )
    result = subprocess.run(
        ["ansible", "all", "-i", str(inventory), "-m", "ping", "-f", str(len(cluster))],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(cluster)


def test_inventory_describes_every_node(cluster: NetCluster, tmp_path: Path) -> None:
    path = cluster.inventory(
        tmp_path / "inventory.yaml",
        extra_vars={"ansible_ssh_timeout": 5},
        clusterkit={"master_port": 29600},
        host_vars={"node3": {"ansible_python_interpreter": "/usr/bin/python3"}},
    )
    document = yaml.safe_load(path.read_text())["all"]
    assert {name: host["ansible_host"] for name, host in document["hosts"].items()} == {
        node.name: node.address for node in cluster
    }
    assert document["hosts"]["node3"]["ansible_python_interpreter"] == "/usr/bin/python3"
    group = document["vars"]
    assert group["ansible_user"] == "root"
    assert Path(group["ansible_python_interpreter"]).is_absolute()
    assert str(cluster.known_hosts_path) in group["ansible_ssh_common_args"]
    assert group["ansible_ssh_timeout"] == 5
    assert group["clusterkit"] == {"master": "node1", "interface": "eth0", "master_port": 29600}


# --- network -------------------------------------------------------------------------------


def test_node_to_node_tcp_works_until_one_node_drops_the_port(cluster: NetCluster) -> None:
    first, second, third = cluster.nodes[:3]
    listen(second, 29500)
    assert connect(first, second, 29500, timeout=5) == "connected"

    second.iptables("-I", "INPUT", "-p", "tcp", "--dport", "29500", "-j", "DROP")
    assert "timed out" in connect(first, second, 29500)
    assert connect(third, first, 22) == "connected"  # other paths untouched
    assert ssh(second, "hostname").stdout.strip() == second.name  # its sshd too
    assert ssh(third, "hostname").stdout.strip() == third.name


def test_hosts_file_is_per_node_and_seen_by_ssh_sessions(cluster: NetCluster) -> None:
    first, second, third = cluster.nodes[:3]
    assert ssh(second, "getent hosts node1").stdout.split() == [first.address, "node1"]
    second.set_hosts(node1="127.0.1.1")
    assert ssh(second, "getent hosts node1").stdout.split() == ["127.0.1.1", "node1"]
    assert ssh(third, "getent hosts node1").stdout.split() == [first.address, "node1"]


def test_mtu_is_per_node(cluster: NetCluster) -> None:
    cluster.nodes[2].set_mtu(1400)
    assert ssh(cluster.nodes[2], "cat /sys/class/net/eth0/mtu").stdout.strip() == "1400"
    assert ssh(cluster.nodes[1], "cat /sys/class/net/eth0/mtu").stdout.strip() == "1500"


# --- GPU stand-in ---------------------------------------------------------------------------

QUERY = "index,uuid,pci.bus_id,name,driver_version,memory.total"


def test_nvidia_smi_over_ssh_reports_each_nodes_own_gpus(cluster: NetCluster) -> None:
    first, second = cluster.nodes[:2]
    second.set_gpus(count=4, driver="535.129.03", cuda="12.2")
    rows = {}
    for node in (first, second):
        result = ssh(node, f"nvidia-smi --query-gpu={QUERY} --format=csv,noheader")
        assert result.returncode == 0, result.stdout + result.stderr
        rows[node.name] = [line.split(", ") for line in result.stdout.splitlines()]
    assert len(rows["node1"]) == 8
    assert len(rows["node2"]) == 4
    assert {row[4] for row in rows["node1"]} == {"550.54.15"}
    assert {row[4] for row in rows["node2"]} == {"535.129.03"}
    assert rows["node1"][0][3] == "NVIDIA H100 80GB HBM3"
    assert rows["node1"][0][5] == "81559 MiB"
    assert not {row[1] for row in rows["node1"]} & {row[1] for row in rows["node2"]}
    assert not {row[2] for row in rows["node1"]} & {row[2] for row in rows["node2"]}
    banner = ssh(second, "nvidia-smi | sed -n 3p").stdout
    assert "Driver Version: 535.129.03" in banner and "CUDA Version: 12.2" in banner


def test_nvidia_smi_fault_modes(cluster: NetCluster) -> None:
    fail, absent, hang, r610 = cluster.nodes
    fail.set_gpus(mode="fail")
    absent.set_gpus(mode="absent")
    hang.set_gpus(mode="hang")
    r610.set_gpus(driver="610.43.02", cuda="13.3", banner="r610", ecc_errors={3: 2})

    result = ssh(fail, "nvidia-smi -L")
    assert (result.returncode, result.stdout) == (
        9,
        (FIXTURES / "driver-unreachable.txt").read_text(),
    )
    assert ssh(absent, "nvidia-smi").returncode == 127
    assert ssh(hang, "timeout -k 1 1 nvidia-smi -L").returncode == 124
    summary = ssh(r610, "nvidia-smi").stdout
    assert "KMD Version: 610.43.02     CUDA UMD Version: 13.3" in summary
    errors = ssh(r610, "nvidia-smi --query-gpu=ecc.errors.uncorrected.volatile.total "
                       "--format=csv,noheader").stdout.split()  # fmt: skip
    assert errors == ["0", "0", "0", "2", "0", "0", "0", "0"]
    assert not hang.processes(), "timeout -k must have killed the wedged nvidia-smi"


def test_processes_shows_what_a_session_left_running(cluster: NetCluster) -> None:
    node = cluster.nodes[0]
    assert ssh(node, "setsid sleep 300 >/dev/null 2>&1 < /dev/null &").returncode == 0
    # The session may end before setsid has exec'd sleep: wait for the exec, not a time.
    give_up = time.monotonic() + 30
    argvs = [process.argv for process in node.processes()]
    while argvs == [("setsid", "sleep", "300")] and time.monotonic() < give_up:
        time.sleep(0.05)
        argvs = [process.argv for process in node.processes()]
    assert argvs == [("sleep", "300")]
    cluster.reset()
    assert node.processes() == []


def test_reset_restores_a_broken_cluster(cluster: NetCluster) -> None:
    first, second, third, fourth = cluster.nodes
    first.stop_sshd()
    second.iptables("-P", "INPUT", "DROP")
    third.set_mtu(1400)
    fourth.set_gpus(mode="absent")
    fourth.set_hosts("127.0.0.1 localhost\n")
    cluster.reset()
    for node in cluster:
        result = ssh(node, "hostname; cat /sys/class/net/eth0/mtu; nvidia-smi -L | wc -l; "
                           "getent hosts node2")  # fmt: skip
        assert result.stdout.split() == [node.name, "1500", "8", second.address, "node2"]


# --- fidelity of the stand-in against recorded real output ---------------------------------


def a40_state() -> dict:
    """The 10x A40 node of classic-550.127.05-a40x10.txt."""
    rows = [
        ("4F", 29, 23), ("52", 30, 24), ("53", 27, 15), ("56", 29, 24), ("57", 30, 24),
        ("CE", 29, 24), ("D1", 29, 15), ("D2", 29, 24), ("D5", 29, 15), ("D6", 29, 16),
    ]  # fmt: skip
    gpus = [
        {"index": index, "name": "NVIDIA A40", "persistence_mode": "Enabled",
         "pci.bus_id": f"00000000:{bus}:00.0", "display_active": "Disabled",
         "ecc.mode.current": "Enabled", "ecc.errors.uncorrected.volatile.total": 0,
         "fan.speed": 0, "temperature.gpu": temp, "pstate": "P8", "power.draw": power,
         "power.limit": 300.0, "memory.used": 1, "memory.total": 46068,
         "utilization.gpu": 0, "compute_mode": "Default", "mig.mode.current": "[N/A]"}
        for index, (bus, temp, power) in enumerate(rows)
    ]  # fmt: skip
    return {"driver": "550.127.05", "cuda": "12.4", "banner": "classic", "gpus": gpus}


def test_summary_matches_recorded_driver_550_output(tmp_path: Path) -> None:
    result = fake_smi(a40_state(), tmp_path=tmp_path)
    timestamp, table = result.stdout.split("\n", 1)
    assert len(timestamp.split()) == 5  # e.g. "Thu Sep 10 20:10:49 2026"
    assert table == (FIXTURES / "classic-550.127.05-a40x10.txt").read_text()


def test_summary_matches_recorded_r610_output(tmp_path: Path) -> None:
    gpu = {"index": 0, "name": "NVIDIA GeForce RTX 3090", "persistence_mode": "Disabled",
           "pci.bus_id": "00000000:01:00.0", "display_active": "Disabled",
           "ecc.mode.current": "[N/A]", "fan.speed": 63, "temperature.gpu": 54, "pstate": "P2",
           "power.draw": 162.4, "power.limit": 270.0, "memory.used": 20304,
           "memory.total": 24576, "utilization.gpu": 11, "compute_mode": "Default",
           "mig.mode.current": "[N/A]"}  # fmt: skip
    state = {"driver": "610.57.04", "cuda": "13.3", "banner": "r610", "gpus": [gpu]}
    idle = fake_smi(state, tmp_path=tmp_path).stdout.splitlines()
    want = (FIXTURES / "r610-610.57.04-rtx3090.txt").read_text().splitlines()
    assert idle[1:-2] == want[1:-2]
    assert idle[-2].startswith("|  No running processes found") and len(idle[-2]) == 91
    # The recorded node runs llama-server: with that process, everything but the clock.
    state["processes"] = [{"gpu": 0, "pid": 2905, "used_memory": 20090,
                           "name": "/home/me/llama.cpp/build-cuda/bin/llama-server"}]  # fmt: skip
    assert fake_smi(state, tmp_path=tmp_path).stdout.splitlines()[1:] == want[1:]


def test_query_gpu_csv_formats(tmp_path: Path) -> None:
    state = a40_state()
    state["gpus"][1]["power.draw"] = "[Not Supported]"
    fields = "index,gpu_name,memory.total,power.draw,fan.speed,serial,compute_cap"
    result = fake_smi(
        state, f"--query-gpu={fields}", "--format=csv", "-i", "0,1", tmp_path=tmp_path
    )
    assert result.stdout.splitlines() == [
        "index, name, memory.total [MiB], power.draw [W], fan.speed [%], serial, compute_cap",
        "0, NVIDIA A40, 46068 MiB, 23.00 W, 0 %, [N/A], [N/A]",
        "1, NVIDIA A40, 46068 MiB, [Not Supported], 0 %, [N/A], [N/A]",
    ]
    bare = fake_smi(state, "--query-gpu=memory.total,power.draw", "--format=csv,noheader,nounits",
                    "-i", "2", tmp_path=tmp_path)  # fmt: skip
    assert bare.stdout == "46068, 15.00\n"
    recorded = (FIXTURES / "query-gpu-csv-exporter.txt").read_text().splitlines()
    assert "memory.used [MiB]" in recorded[0] and "575 MiB" in recorded[1]  # same conventions


def test_unknown_query_field_fails_like_the_real_tool(tmp_path: Path) -> None:
    result = fake_smi(a40_state(), "--query-gpu=index,device_minor", "--format=csv",
                      tmp_path=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == (FIXTURES / "query-gpu-invalid-field.txt").read_text()


REMAP_QUERY = (
    "gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,"
    "remapped_rows.pending,remapped_rows.failure"
)


def test_query_remapped_rows_matches_the_recorded_output(tmp_path: Path) -> None:
    """The recorded 4-GPU node after the reset that applied its remap: one uncorrectable remap
    kept on the second GPU, the flags printed Yes/No (the UUIDs as the author shortened them)."""
    uuids = ["GPU-a895322e-...", "GPU-455e672a-...", "GPU-d66f99e9-...", "GPU-cd616af2-..."]
    gpus = [{"index": index, "uuid": uuid, "remapped_rows.correctable": 0,
             "remapped_rows.uncorrectable": int(index == 1), "remapped_rows.pending": "No",
             "remapped_rows.failure": "No"} for index, uuid in enumerate(uuids)]  # fmt: skip
    result = fake_smi(
        {"gpus": gpus}, f"--query-remapped-rows={REMAP_QUERY}", "--format=csv", tmp_path=tmp_path
    )
    assert result.returncode == 0
    assert result.stdout == (FIXTURES / "query-remapped-rows-after-reset-x4.txt").read_text()
    bare = fake_smi({"gpus": gpus}, "--query-remapped-rows", REMAP_QUERY, "--format",
                    "csv,noheader,nounits", "-i", "1", tmp_path=tmp_path)  # fmt: skip
    assert bare.stdout == "GPU-455e672a-..., 0, 1, No, No\n"


def test_query_remapped_rows_on_a_test_node_and_its_rejections(tmp_path: Path) -> None:
    """A test node's own state answers it (a pending remap set as `set_gpus` overrides set
    it), by bus id; an unknown name fails as in --query-gpu, --format is required."""
    gpus = gpu_inventory("node2", 2, 2, DEFAULT_MODEL, ecc_errors=0, persistence=True,
                         memory_mib=None)  # fmt: skip
    gpus[1].update({"remapped_rows.pending": "Yes", "remapped_rows.uncorrectable": 1})
    fields = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
    result = fake_smi({"gpus": gpus}, f"--query-remapped-rows={fields}",
                      "--format=csv,noheader", tmp_path=tmp_path)  # fmt: skip
    assert result.stdout.splitlines() == [
        f"{gpus[0]['pci.bus_id']}, No, No",
        f"{gpus[1]['pci.bus_id']}, Yes, No",
    ]
    wrong = fake_smi({"gpus": gpus}, "--query-remapped-rows=uuid", "--format=csv",
                     tmp_path=tmp_path)  # fmt: skip
    assert wrong.returncode == 2
    assert wrong.stdout == 'Field "uuid" is not a valid field to query.\n\n'
    unformatted = fake_smi({"gpus": gpus}, f"--query-remapped-rows={fields}", tmp_path=tmp_path)
    assert unformatted.returncode == 2 and "Invalid combination" in unformatted.stdout


def test_list_gpus_matches_recorded_layout(tmp_path: Path) -> None:
    state = {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                       "uuid": "GPU-63d1e50a-b952-d15c-0740-12bc14859142"}]}  # fmt: skip
    recorded = (FIXTURES / "list-gpus-h100-mig-head.txt").read_text().splitlines()[0]
    assert fake_smi(state, "-L", tmp_path=tmp_path).stdout == recorded + "\n"


# --- teardown -------------------------------------------------------------------------------


def test_close_leaves_nothing_behind() -> None:
    spare = NetCluster(2)
    node = spare.nodes[0]
    netns_names = [n.netns for n in spare]
    links = [spare.bridge] + [n.host_veth for n in spare]
    assert ssh(node, "setsid sleep 300 >/dev/null 2>&1 < /dev/null &").returncode == 0
    node.spawn(["sleep", "301"])
    # Both sleeps are listed once each has entered the node (a spawn returns before its
    # child is in the namespace): wait for that, not for a time.
    end = time.monotonic() + 15
    while len(sleeps := [p for p in node.processes() if p.argv[:1] == ("sleep",)]) < 2:
        if time.monotonic() > end:
            break
        time.sleep(0.05)
    leftovers = [process.pid for process in sleeps]
    sshd_pids = [n.sshd.pid for n in spare if n.sshd is not None]
    directory, state_file = spare.dir, STATE_DIR / f"{spare.prefix}.json"
    assert len(leftovers) == 2 and len(sshd_pids) == 2 and state_file.exists()

    spare.close()
    listed = run(["ip", "netns", "list"]).stdout.split()
    assert not set(netns_names) & set(listed)
    for link in links:
        assert run(["ip", "link", "show", link], check=False).returncode != 0, link
    assert spare.bridge not in run(["iptables", "-w", "-S", "FORWARD"]).stdout
    assert not [pid for pid in leftovers + sshd_pids if running(pid)]
    listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=10)
    assert str(directory) not in listing.stdout  # no sshd with this cluster's config
    assert not directory.exists() and not state_file.exists()
    assert not any(Path("/etc/netns", name).exists() for name in netns_names)
    spare.close()  # idempotent


# --- several subnets ------------------------------------------------------------------------


def test_subnets_route_between_each_other_until_cut() -> None:
    with NetCluster(4, subnets=2) as split:
        first, second = split.segment(0), split.segment(1)
        assert [len(first), len(second)] == [2, 2]
        assert first[0].address.rsplit(".", 1)[0] != second[0].address.rsplit(".", 1)[0]
        assert connect(first[0], second[1], 22) == "connected"

        split.cut(0, 1)
        assert connect(first[0], second[1], 22, timeout=1.0) != "connected"
        assert connect(second[0], first[1], 22, timeout=1.0) != "connected"
        assert connect(first[0], first[1], 22) == "connected"  # inside a subnet: untouched
        assert connect(second[1], second[0], 22) == "connected"

        split.reset()
        assert connect(second[0], first[1], 22) == "connected"
        bridges, rules = split.bridges, split.forward_rules
    forward = run(["iptables", "-w", "-S", "FORWARD"]).stdout
    assert rules and not any(bridge in forward for bridge in bridges)


def test_more_nodes_than_subnets_hold_is_refused_before_anything_is_built() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        NetCluster(300, subnets=1)
