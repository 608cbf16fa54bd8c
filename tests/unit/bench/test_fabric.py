"""NVLink and InfiniBand facts across nodes, the container toolkit, and the bench's use of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clusterkit.bench import thresholds
from clusterkit.checks.fabric import fabric_findings
from clusterkit.checks.model import Status
from clusterkit.node.nvlink import parse_nvlink_status
from tests.support.nodescripts import write_composed
from tests.unit.checks.test_checks import facts, healthy

SMI = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"


def nvlink_section(links_per_gpu: list[int], total: int = 18) -> dict:
    """What collect_nvlink returns, built the way the real tool prints it."""
    lines = []
    for index, active in enumerate(links_per_gpu):
        lines.append(f"GPU {index}: NVIDIA H100 80GB HBM3 (UUID: GPU-{index:08d})")
        lines += [
            f"\t Link {n}: {'26.562 GB/s' if n < active else '<inactive>'}" for n in range(total)
        ]
    gpus = parse_nvlink_status("\n".join(lines) + "\n")
    active = [sum(1 for speed in gpu["links"] if speed) for gpu in gpus]
    return {"gpus": gpus, "active_links": active, "present": all(active)}


def ib_section(*ports: tuple[str, float]) -> dict:
    """/sys/class/infiniband shape: state '4: ACTIVE' read as ACTIVE, rate '400 Gb/sec (4X NDR)'."""
    return {
        "devices": [
            {"name": f"mlx5_{i}", "ports": [{"port": "1", "state": state, "rate_gbps": rate,
                                             "link_layer": "InfiniBand"}]}
            for i, (state, rate) in enumerate(ports)
        ]
    }  # fmt: skip


def by_id(hosts: dict, image: str | None = None) -> dict:
    return {f.id: f for f in fabric_findings(hosts, image, "inv.yaml")}


def test_recorded_bridge_pair_reads_as_twelve_links() -> None:
    gpus = parse_nvlink_status((SMI / "nvlink-status-h100-pcie-x2.txt").read_text())
    node = facts("healthy-h100")
    node["nvlink"] = {"gpus": gpus, "active_links": [12, 12], "present": True}
    found = by_id({"n1": node, "n2": node})
    assert found["parity.nvlink"].expected == "2 GPUs x 12 links"
    assert found["fabric.nvlink-down"].status is Status.OK


def test_nvlink_parity_and_links_down() -> None:
    hosts = healthy(3)
    for f in hosts.values():
        f["nvlink"] = nvlink_section([18] * 8)
    hosts["node3"]["nvlink"] = nvlink_section([18, 18, 16, 18, 18, 18, 18, 18])
    found = by_id(hosts)
    assert found["parity.nvlink"].found == {"node3": "8 GPUs x 16 links"}
    down = found["fabric.nvlink-down"]
    assert (down.status, down.hosts) == (Status.FAIL, ["node3"])
    assert "GPU 2: 16 of 18 active, links 16, 17 inactive" in down.message


def test_infiniband_parity_names_the_node_with_a_port_down() -> None:
    hosts = healthy(3)
    for f in hosts.values():
        f["infiniband"] = ib_section(*[("ACTIVE", 400.0)] * 4)
    hosts["node2"]["infiniband"] = ib_section(*[("ACTIVE", 400.0)] * 3, ("DOWN", 10.0))
    finding = by_id(hosts)["parity.infiniband"]
    assert finding.expected == "4x ACTIVE 400 Gb/s"
    assert finding.found == {"node2": "3x ACTIVE 400 Gb/s, 1x DOWN 10 Gb/s"}


def test_no_fabric_facts_is_skipped() -> None:
    found = by_id(healthy(2))
    assert {found[i].status for i in ("parity.nvlink", "parity.infiniband")} == {Status.SKIP}


def test_container_toolkit_only_when_an_image_is_set() -> None:
    hosts = healthy(2)  # recorded: docker present, no NVIDIA runtime
    assert "docker.container-toolkit" not in by_id(hosts)
    finding = by_id(hosts, image="registry.example/train:1")["docker.container-toolkit"]
    assert finding.status is Status.FAIL and finding.hosts == ["node1", "node2"]
    assert finding.remedy == (
        "clusterkit provision inv.yaml --tags container-toolkit --limit node1,node2"
    )
    hosts["node2"]["docker"]["runtimes"] = ["nvidia"]
    assert by_id(hosts, image="x")["docker.container-toolkit"].hosts == ["node1"]


def test_bench_default_threshold_sees_nvlink() -> None:
    hosts = {"n1": facts("healthy-h100")}
    assert thresholds.detect_fabric(hosts).nvlink is None  # not reported: unknown
    hosts["n1"]["nvlink"] = nvlink_section([18] * 8)
    assert thresholds.detect_fabric(hosts).nvlink is True
    hosts["n1"]["nvlink"] = nvlink_section([0] * 8)
    assert thresholds.detect_fabric(hosts).nvlink is False


def test_bench_container_gets_the_rdma_devices() -> None:
    from clusterkit.bench.launcher import BenchOptions, node_argv
    from clusterkit.inventory.model import Host

    def argv(infiniband: bool) -> str:
        return node_argv(
            Host("n1", "10.0.0.1"), 0, nodes=2, nproc=8, master="10.0.0.1", port=29500,
            run_name="clusterkit-bench-x", container="c", image="img", gpus=True, interface=None,
            options=BenchOptions(), infiniband=infiniband,
        )[-1]  # fmt: skip

    assert "/dev/infiniband" in argv(True) and "/dev/infiniband" not in argv(False)


def test_container_toolkit_versions_differing_warn_naming_the_odd_node() -> None:
    hosts = healthy(3)
    for host, version in zip(hosts, ("1.17.8", "1.17.8", "1.14.6")):
        hosts[host]["docker"].update(nvidia_ctk="/usr/bin/nvidia-ctk", nvidia_ctk_version=version)
    finding = by_id(hosts, image="x")["docker.container-toolkit"]
    assert finding.status is Status.WARN and finding.hosts == ["node3"]
    assert finding.expected == "1.17.8" and finding.found == {"node3": "1.14.6"}
    hosts["node3"]["docker"]["nvidia_ctk_version"] = "1.17.8"
    assert by_id(hosts, image="x")["docker.container-toolkit"].status is Status.OK


def test_container_toolkit_versions_tied_name_no_node() -> None:
    """1 against 1: the second node in inventory order was named odd and told to install
    the first's version; with no majority the difference is the set's, and nobody's."""
    hosts = healthy(2)
    for host, version in zip(hosts, ("1.17.8", "1.14.6")):
        hosts[host]["docker"].update(nvidia_ctk="/usr/bin/nvidia-ctk", nvidia_ctk_version=version)
    finding = by_id(hosts, image="x")["docker.container-toolkit"]
    assert (finding.status, finding.hosts, finding.fix) == (Status.WARN, [], None)
    assert "no version has a majority: node1: 1.17.8; node2: 1.14.6" in finding.message


# `nvidia-ctk --version` as the toolkit prints it.
CTK_OUTPUT = (
    "NVIDIA Container Toolkit CLI version 1.17.8\n"
    "commit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d\n"
)


def _collector(tmp_path: Path, code: str) -> dict:
    probe_dir = write_composed("collector", tmp_path / "node").parent
    done = subprocess.run(
        [sys.executable, "-S", "-c", f"import json, collector; print(json.dumps({code}))"],
        capture_output=True, text=True, timeout=60, check=True,
        env={"PYTHONPATH": str(probe_dir), "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"},
    )  # fmt: skip
    return json.loads(done.stdout)


def test_collector_reads_the_toolkit_version(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "nvidia-ctk"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\nprintf '%s' '{CTK_OUTPUT}'\n")
    tool.chmod(0o755)
    facts = _collector(tmp_path, "collector.collect_docker({})")
    assert facts["nvidia_ctk"] == str(tool) and facts["nvidia_ctk_version"] == "1.17.8"


def test_collector_reads_infiniband_ports_from_sysfs(tmp_path: Path) -> None:
    """The files as the kernel lays them out: state '4: ACTIVE', rate '400 Gb/sec (4X NDR)'."""
    for device, state, rate in (("mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)"),
                                ("mlx5_1", "1: DOWN", "10 Gb/sec (4X SDR)")):  # fmt: skip
        port = tmp_path / "sys" / "class" / "infiniband" / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text(rate + "\n")
        (port / "link_layer").write_text("InfiniBand\n")
    (tmp_path / "bin").mkdir()
    facts = _collector(tmp_path, f"collector.collect_infiniband({{'sysfs': '{tmp_path / 'sys'}'}})")
    ports = {d["name"]: d["ports"][0] for d in facts["devices"]}
    assert ports["mlx5_0"] | {"phys_state": "?", "rate": "?", "counters": "?"} == {
        "port": "1", "state": "ACTIVE", "rate_gbps": 400.0, "link_layer": "InfiniBand",
        "phys_state": "?", "rate": "?", "counters": "?",
    }  # fmt: skip
    assert ports["mlx5_1"]["state"] == "DOWN" and ports["mlx5_1"]["rate_gbps"] == 10.0
    # and the checks read them: the node with a port down is named
    hosts = healthy(3)
    hosts["node1"]["infiniband"] = ib_section(("ACTIVE", 400.0), ("ACTIVE", 400.0))
    hosts["node3"]["infiniband"] = ib_section(("ACTIVE", 400.0), ("ACTIVE", 400.0))
    hosts["node2"]["infiniband"] = facts
    assert by_id(hosts)["parity.infiniband"].hosts == ["node2"]
