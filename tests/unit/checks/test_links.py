"""NVLink links down and error counters, InfiniBand ports from sysfs: probe and checks."""

from __future__ import annotations

from pathlib import Path

from clusterkit.checks.fabric import fabric_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.node.nvlink import parse_nvlink_errors
from tests.unit.bench.test_fabric import SMI, _collector, nvlink_section
from tests.unit.checks.test_checks import healthy


def by_id(hosts: dict) -> dict[str, Finding]:
    return {f.id: f for f in fabric_findings(hosts, None, "inv.yaml")}


def findings(hosts: dict, check_id: str) -> list[Finding]:
    return [f for f in fabric_findings(hosts, None, "inv.yaml") if f.id == check_id]


def counters(gpus: int = 8, links: int = 18, **odd: int) -> dict:
    """What the probe keeps of `nvlink --errorcounters`; odd: 'g3_l5_replay'=12."""
    table = {str(g): {str(n): {"replay": 0, "recovery": 0, "crc": 0} for n in range(links)}
             for g in range(gpus)}  # fmt: skip
    for key, count in odd.items():
        gpu, link, counter = key.split("_")
        table[gpu[1:]][link[1:]][counter] = count
    return table


def nvlink_cluster(n: int = 3) -> dict:
    hosts = healthy(n)
    for f in hosts.values():
        f["nvlink"] = nvlink_section([18] * 8) | {"errors": counters()}
    return hosts


def test_recorded_error_counters_parse_and_zero_is_quiet() -> None:
    """Format from a published H100 capture (tests/fixtures/nvidia-smi/README.md)."""
    table = parse_nvlink_errors((SMI / "nvlink-errors-h100-excerpt.txt").read_text())
    assert table == {"0": {link: {"replay": 0, "recovery": 0, "crc": 0}
                           for link in ("0", "1", "17")}}  # fmt: skip
    hosts = nvlink_cluster(2)
    hosts["node1"]["nvlink"]["errors"] = table
    assert [(f.status, f.hosts) for f in findings(hosts, "gpu.nvlink-errors")] == [
        (Status.OK, ["node1", "node2"])
    ]


def test_replay_warns_and_many_crc_errors_fail_naming_host_gpu_link_counter() -> None:
    hosts = nvlink_cluster(3)
    hosts["node2"]["nvlink"]["errors"] = counters(g3_l5_replay=12, g3_l5_crc=7)
    hosts["node3"]["nvlink"]["errors"] = counters(g0_l17_crc=101)
    found = {f.status: f for f in findings(hosts, "gpu.nvlink-errors")}
    assert found[Status.WARN].hosts == ["node2"]
    assert "GPU 3 (" in found[Status.WARN].message and "link 5: 12 replay errors" in (
        found[Status.WARN].message
    )
    assert "link 5: 7 crc errors" in found[Status.WARN].message
    assert found[Status.FAIL].hosts == ["node3"]
    assert "link 17: 101 crc errors" in found[Status.FAIL].message
    assert "nvidia-smi -r -i 0" in (found[Status.FAIL].remedy or "")


def test_no_nvlink_no_counter_finding() -> None:
    assert findings(healthy(2), "gpu.nvlink-errors") == []


def test_a_link_down_where_the_peers_have_it_fails_naming_gpu_and_link() -> None:
    hosts = nvlink_cluster(3)
    links = [26.562] * 18
    links[7] = None
    hosts["node2"]["nvlink"]["gpus"][4]["links"] = links
    hosts["node2"]["nvlink"]["active_links"][4] = 17
    down = by_id(hosts)["fabric.nvlink-down"]
    assert (down.status, down.hosts) == (Status.FAIL, ["node2"])
    assert "GPU 4: 17 of 18 active, links 7 inactive" in down.message


def test_a_node_with_every_link_down_fails_against_its_peers() -> None:
    """Fabric manager stopped: every link `<inactive>` on one node, up on the others."""
    hosts = nvlink_cluster(3)
    hosts["node3"]["nvlink"] = nvlink_section([0] * 8)
    down = by_id(hosts)["fabric.nvlink-down"]
    assert (down.status, down.hosts) == (Status.FAIL, ["node3"])
    assert "GPU 7: 0 of 18 active" in down.message


def test_links_down_everywhere_are_no_fault() -> None:
    """A bridge pair uses 12 of 18 links on every GPU of every node."""
    hosts = nvlink_cluster(2)
    for f in hosts.values():
        f["nvlink"] = nvlink_section([12] * 2)
    assert by_id(hosts)["fabric.nvlink-down"].status is Status.OK


def _fake_smi(tmp_path: Path, status: str) -> Path:
    """nvidia-smi logging its arguments, answering --status and --errorcounters."""
    log = tmp_path / "calls.log"
    errors = (SMI / "nvlink-errors-h100-excerpt.txt").read_text()
    (tmp_path / "status.txt").write_text(status)
    (tmp_path / "errors.txt").write_text(errors)
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in\n'
        f"  'nvlink --status') cat {tmp_path / 'status.txt'} ;;\n"
        f"  'nvlink --errorcounters') cat {tmp_path / 'errors.txt'} ;;\nesac\n"
    )
    tool.chmod(0o755)
    return log


def test_probe_asks_for_counters_only_on_a_node_with_nvlink(tmp_path: Path) -> None:
    log = _fake_smi(tmp_path, (SMI / "nvlink-status-h100-pcie-x2.txt").read_text())
    facts = _collector(tmp_path, "collector.collect_nvlink({})")
    assert facts["errors"]["0"]["17"] == {"replay": 0, "recovery": 0, "crc": 0}
    assert log.read_text().splitlines() == ["nvlink --status", "nvlink --errorcounters"]
    log.unlink()
    (tmp_path / "status.txt").write_text("GPU 0: NVIDIA L40S (UUID: GPU-1)\n")
    facts = _collector(tmp_path, "collector.collect_nvlink({})")
    assert "errors" not in facts
    assert log.read_text().splitlines() == ["nvlink --status"]


# -- InfiniBand -----------------------------------------------------------------------------

# Port files as the kernel writes them (recorded contents).
HEALTHY_PORT = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
                "link_layer": "InfiniBand"}  # fmt: skip
UNCABLED_PORT = {"state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)",
                 "link_layer": "InfiniBand"}  # fmt: skip


def sysfs_tree(root: Path, ports: dict[tuple[str, str], dict[str, str]], **counts: int) -> Path:
    """/sys/class/infiniband/<hca>/ports/<n>/{state,...} and counters/* under root."""
    for (hca, number), files in ports.items():
        port = root / "class" / "infiniband" / hca / "ports" / number
        (port / "counters").mkdir(parents=True)
        for name, text in files.items():
            (port / name).write_text(text + "\n")
        for name in ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery"):
            (port / "counters" / name).write_text(f"{counts.get(f'{hca}_{name}', 0)}\n")
    return root


def read_ports(tmp_path: Path, name: str, ports: dict, **counts: int) -> dict:
    root = sysfs_tree(tmp_path / name, ports, **counts)
    (tmp_path / "bin").mkdir(exist_ok=True)
    return _collector(tmp_path, f"collector.collect_infiniband({{'sysfs': '{root}'}})")


def node_ports(hcas: int = 4, **odd: dict[str, str]) -> dict:
    """mlx5_0..N-1 port 1 healthy, port 2 of mlx5_0 uncabled; odd: mlx5_2={...}."""
    ports = {(f"mlx5_{i}", "1"): dict(HEALTHY_PORT) for i in range(hcas)}
    ports[("mlx5_0", "2")] = dict(UNCABLED_PORT)
    for hca, files in odd.items():
        ports[(hca, "1")].update(files)
    return ports


def test_collector_reads_state_phys_state_rate_and_counters(tmp_path: Path) -> None:
    facts = read_ports(tmp_path, "n1", node_ports(1), mlx5_0_symbol_error=42)
    port = facts["devices"][0]["ports"][0]
    assert port == {
        "port": "1", "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400.0,
        "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand",
        "counters": {"link_downed": 0, "symbol_error": 42, "port_rcv_errors": 0,
                     "link_error_recovery": 0},
    }  # fmt: skip
    assert facts["devices"][0]["ports"][1]["phys_state"] == "Polling"


def test_ib_ports_down_slow_or_flapping_are_named(tmp_path: Path) -> None:
    hosts = healthy(4)
    hosts["node1"]["infiniband"] = read_ports(tmp_path, "n1", node_ports())
    hosts["node2"]["infiniband"] = read_ports(
        tmp_path, "n2", node_ports(mlx5_3={"state": "1: DOWN", "phys_state": "2: Polling"})
    )
    hosts["node3"]["infiniband"] = read_ports(
        tmp_path, "n3", node_ports(mlx5_1={"rate": "200 Gb/sec (2X NDR)"})
    )
    hosts["node4"]["infiniband"] = read_ports(
        tmp_path, "n4", node_ports(), mlx5_2_link_downed=3, mlx5_2_symbol_error=5
    )
    found = {f.status: f for f in findings(hosts, "ib.port")}
    assert found[Status.FAIL].hosts == ["node2", "node3"]
    assert found[Status.FAIL].found == {
        "node2": "mlx5_3 port 1 DOWN/Polling",
        "node3": "mlx5_1 port 1 at 200 Gb/s (200 Gb/sec (2X NDR)), its peers 400 Gb/s",
    }
    assert found[Status.WARN].found == {"node4": "mlx5_2 port 1: link_downed 3"}
    assert "mlxlink -d mlx5_3 -p 1" in (found[Status.FAIL].remedy or "")


def test_peers_split_between_two_rates_set_no_rate_to_fall_short_of(tmp_path: Path) -> None:
    """node3's peers are one at 400 Gb/s and one at 200: the first in inventory order set
    the rate node3 fell short of. With no majority among them, node3 is not named."""
    hosts = healthy(3)
    for name, rate in (("node1", "400"), ("node2", "200"), ("node3", "300")):
        port = node_ports(1, mlx5_0={"rate": f"{rate} Gb/sec (4X NDR)"})
        hosts[name]["infiniband"] = read_ports(tmp_path, name, port)
    assert [f.status for f in findings(hosts, "ib.port")] == [Status.OK]
    hosts["node2"]["infiniband"] = hosts["node1"]["infiniband"]  # 400 against 400: a majority
    (slow,) = findings(hosts, "ib.port")
    assert (slow.status, slow.hosts) == (Status.FAIL, ["node3"])


def test_healthy_ports_and_an_uncabled_port_everywhere_are_ok(tmp_path: Path) -> None:
    hosts = healthy(2)
    for name in hosts:
        hosts[name]["infiniband"] = read_ports(tmp_path, name, node_ports())
    assert [(f.status, f.hosts) for f in findings(hosts, "ib.port")] == [
        (Status.OK, ["node1", "node2"])
    ]


def test_a_lone_node_with_a_port_down_fails(tmp_path: Path) -> None:
    """A one-node `check`: no peers to excuse a port that is down (node-check judges a
    port that never came up more gently: tests/unit/slurm/test_nodecheck_fabric.py)."""
    hosts = {"node1": healthy(1)["node1"]}
    hosts["node1"]["infiniband"] = read_ports(
        tmp_path, "n1", {("mlx5_0", "1"): dict(UNCABLED_PORT)}
    )
    assert [f.status for f in findings(hosts, "ib.port")] == [Status.FAIL]


def test_no_rdma_ports_no_ib_finding() -> None:
    assert findings(healthy(3), "ib.port") == []
