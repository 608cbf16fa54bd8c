"""Can the job use the GPUs: busy, hidden, unsupported architecture, CPU torch on GPU nodes.

Recorded facts (tests/fixtures/facts) with one thing changed per test, and the real output of
the nvidia-smi queries these facts come from (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.checks.gpu_use import runs_on
from clusterkit.checks.model import Status
from clusterkit.inventory.model import Expectations
from clusterkit.node.probe_gpu import COMPUTE_APPS_QUERY, parse_compute_apps
from tests.unit.checks.test_checks import facts, healthy, run

ROOT = Path(__file__).resolve().parents[3]
SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"
STAND_IN = ROOT / "tests" / "support" / "fake_nvidia_smi.py"


# -- the node side: real output shapes ------------------------------------------------------


# parse_compute_apps and parse_nvlink_status over the recordings: tests/fixtures/parsers/


def _stand_in(state: dict, tmp_path: Path, *args: str) -> str:
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(state))
    done = subprocess.run(
        [sys.executable, "-S", str(STAND_IN), str(path), *args],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


def test_stand_in_prints_the_recorded_compute_apps_byte_for_byte(tmp_path: Path) -> None:
    recorded = (SMI / "query-compute-apps-l40x8.txt").read_text()
    rows = [line.split(", ") for line in recorded.splitlines()[1:]]
    gpus = [{"index": i, "name": "NVIDIA L40", "uuid": row[0]} for i, row in enumerate(rows)]
    processes = [
        {"gpu": i, "pid": int(row[1]), "name": row[2], "used_memory": int(row[3].split()[0])}
        for i, row in enumerate(rows)
    ]
    state = {"gpus": gpus, "processes": processes}
    query = "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
    assert _stand_in(state, tmp_path, query, "--format=csv") == recorded
    probe_view = _stand_in(state, tmp_path, COMPUTE_APPS_QUERY, "--format=csv,noheader,nounits")
    assert [a["pid"] for a in parse_compute_apps(probe_view)] == [p["pid"] for p in processes]


def test_stand_in_prints_the_recorded_nvlink_status_byte_for_byte(tmp_path: Path) -> None:
    recorded = (SMI / "nvlink-status-h100-pcie-x2.txt").read_text()
    links = [None if i in (4, 5, 10, 11, 16, 17) else 26.562 for i in range(18)]
    uuids = ["GPU-6968dfc2-d444-d92c-c36b-6abe53445cb9", "GPU-9b1446e2-8a89-4cf6-b68c-a98d99e958d3"]
    gpus = [{"index": i, "name": "NVIDIA H100 PCIe", "uuid": u, "nvlink": links}
            for i, u in enumerate(uuids)]  # fmt: skip
    assert _stand_in({"gpus": gpus}, tmp_path, "nvlink", "--status") == recorded


# -- gpu.busy --------------------------------------------------------------------------------


def _busy_node() -> dict:
    node = facts("healthy-h100")
    uuid = node["gpus"]["devices"][3]["uuid"]
    node["gpu_processes"] = {
        "processes": [{"gpu_uuid": uuid, "pid": 72210, "used_memory_mib": 41502, "name": "python"}]
    }
    return node


def test_a_process_left_on_a_gpu_fails_with_its_pid_and_memory() -> None:
    hosts = healthy(1)
    hosts["node2"] = _busy_node()
    finding = run(hosts)["gpu.busy"]
    assert (finding.status, finding.hosts) == (Status.FAIL, ["node2"])
    assert "GPU 3: pid 72210 (python, 41502 MiB)" in finding.message


def test_memory_in_use_above_the_threshold_fails_without_a_process() -> None:
    hosts = healthy(2)
    hosts["node2"]["gpus"]["devices"][5]["memory.used"] = "30000"
    assert run(hosts)["gpu.busy"].found == {"node2": "GPU 5: 30000 MiB in use, no process listed"}
    hosts["node2"]["gpus"]["devices"][5]["memory.used"] = "4"  # an idle GPU's few MiB
    assert run(hosts)["gpu.busy"].status is Status.OK


def test_busy_threshold_is_a_setting() -> None:
    from clusterkit.checks import static_findings

    hosts = healthy(1)
    hosts["node1"]["gpus"]["devices"][0]["memory.used"] = "600"
    assert run(hosts)["gpu.busy"].status is Status.OK  # default 1024 MiB
    strict = static_findings(hosts, Expectations(), None, busy_mib=500)
    assert next(f for f in strict if f.id == "gpu.busy").status is Status.FAIL


# -- gpu.visible -----------------------------------------------------------------------------


def test_torch_seeing_fewer_gpus_fails_and_names_the_variable() -> None:
    hosts = healthy(2)
    hosts["node2"]["torch"]["device_count"] = 4
    hosts["node2"]["env"]["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
    finding = run(hosts)["gpu.visible"]
    assert (finding.status, finding.hosts) == (Status.FAIL, ["node2"])
    assert "torch sees 4 of the 8 GPUs" in finding.message
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in finding.message


def test_visible_devices_are_judged_against_the_gpus_per_node_pin() -> None:
    hosts = healthy(2)
    assert run(hosts, Expectations(gpus_per_node=8))["gpu.visible"].status is Status.OK
    for f in hosts.values():  # torch not imported: the variable alone tells
        f["torch"]["imported"] = False
    hosts["node1"]["env"]["CUDA_VISIBLE_DEVICES"] = "0,1,-1,3"  # CUDA stops at -1
    finding = run(hosts, Expectations(gpus_per_node=8))["gpu.visible"]
    assert finding.found == {"node1": "CUDA_VISIBLE_DEVICES exposes 2 of the 8 GPUs the job uses"}


# -- gpu.arch --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "arch_list", "ok"),
    [
        ("9.0", ["sm_80", "sm_90"], True),
        ("8.6", ["sm_80"], True),  # same major, lower minor: binary compatible
        ("8.0", ["sm_86"], False),
        ("10.0", ["sm_80", "sm_90"], False),  # Blackwell on a cu124 build
        ("10.0", ["sm_90", "compute_90"], True),  # PTX: the driver compiles it
        ("9.0", ["sm_90a"], True),
        ("12.0", ["sm_100", "sm_120"], True),
        ("8.9", ["sm_90a"], False),
    ],
)
def test_architecture_rules(capability: str, arch_list: list[str], ok: bool) -> None:
    assert runs_on(capability, arch_list) is ok


def test_gpus_newer_than_the_build_fail_before_the_job_does() -> None:
    hosts = healthy(1)
    hosts["node2"] = facts("healthy-h100")
    for device in hosts["node2"]["gpus"]["devices"]:
        device["compute_cap"] = "10.0"
    hosts["node2"]["torch"]["capabilities"] = ["10.0"]
    finding = run(hosts)["gpu.arch"]
    assert (finding.status, finding.hosts) == (Status.FAIL, ["node2"])
    assert "no kernel image" in finding.message and "10.0" in finding.message


# -- torch.cpu-build -------------------------------------------------------------------------


def test_cpu_torch_on_gpu_nodes_warns_with_the_wheel_to_install() -> None:
    hosts = {"n1": facts("probe-node-h100-classic"), "n2": facts("probe-node-h100-classic")}
    findings = run(hosts)
    finding = findings["torch.cpu-build"]
    assert finding.status is Status.WARN and finding.hosts == ["n1", "n2"]
    # torch 2.13.0 publishes no cu124 build (issue 37): its default wheel is CUDA 13.0, newer
    # than the driver's CUDA 12.4, so the remedy names no index, but what to check
    assert "download.pytorch.org/whl/cu" not in (finding.remedy or "")
    assert "torch 2.13.0 has a CUDA 13.0 default wheel, newer than this driver's CUDA 12.4" in (
        finding.remedy or ""
    )
    assert "torch-2.13.0+cuXYZ" in (finding.remedy or "")
    assert findings["parity.torch-cuda"].status is Status.OK  # same CPU build everywhere


@pytest.mark.parametrize(
    ("torch", "driver_cuda", "words"),
    [
        ("2.5.1+cpu", "12.4", "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124"),
        ("2.5.1+cpu", "12.2", "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu121"),
        ("2.7.0+cpu", "13.0", "pip install torch==2.7.0 --index-url https://download.pytorch.org/whl/cu128"),
        ("2.8.0+cpu", "12.4", "torch 2.8.0 has CUDA 12.6, 12.8, 12.9 builds, newer than this"),
        ("2.13.0+cpu", "13.2", "pip install torch==2.13.0 (PyPI's default wheel, a CUDA 13.0"),
        ("9.1.0+cpu", "13.2", "check which CUDA builds torch 9.1.0 has"),
    ],
)  # fmt: skip
def test_the_wheel_named_is_one_the_release_publishes(
    torch: str, driver_cuda: str, words: str
) -> None:
    hosts = {"n1": facts("probe-node-h100-classic")}
    hosts["n1"]["torch"]["version"] = torch
    hosts["n1"]["gpus"]["cuda_driver"] = driver_cuda
    assert words in (run(hosts)["torch.cpu-build"].remedy or "")


def test_cpu_torch_fails_when_the_inventory_expects_cuda() -> None:
    hosts = {"n1": facts("probe-node-h100-classic")}
    assert run(hosts, Expectations(cuda="12.4"))["torch.cpu-build"].status is Status.FAIL
    assert run(hosts, Expectations(torch="2.5.1+cu124"))["torch.cpu-build"].status is Status.FAIL
    assert run({"n1": facts("probe-local-cpu")})["torch.cpu-build"].status is Status.SKIP


def test_bench_runs_one_gloo_rank_per_node_where_torch_has_no_cuda() -> None:
    from clusterkit.bench.launcher import BenchOptions, ranks_per_node
    from clusterkit.inventory.model import ClusterSettings, Host, Inventory

    hosts = (Host("n1", "10.0.0.1"), Host("n2", "10.0.0.2"))
    pinned = Inventory("inv.yaml", hosts, ClusterSettings(expect=Expectations(gpus_per_node=8)))
    cpu = {"n1": facts("probe-node-h100-classic"), "n2": facts("probe-node-h100-classic")}
    assert ranks_per_node(pinned, BenchOptions(facts=cpu), list(hosts)) == 1
    assert ranks_per_node(pinned, BenchOptions(facts=cpu, nproc_per_node=4), list(hosts)) == 4
    cuda = {"n1": facts("healthy-h100"), "n2": facts("healthy-h100")}
    assert ranks_per_node(pinned, BenchOptions(facts=cuda), list(hosts)) == 8


# -- host memory -----------------------------------------------------------------------------


def test_memory_parity_in_whole_gib_and_low_available_memory() -> None:
    hosts = healthy(3)
    gib = 1024**3
    for f in hosts.values():
        f["memory"] = {"total_bytes": 2015 * gib + 12345, "available_bytes": 1900 * gib}
    hosts["node2"]["memory"]["total_bytes"] = 2015 * gib - 4096  # a few pages less: same
    findings = run(hosts)
    assert findings["parity.memory"].status is Status.OK
    assert findings["host.memory-free"].status is Status.OK
    hosts["node3"]["memory"] = {"total_bytes": 1007 * gib, "available_bytes": 50 * gib}
    findings = run(hosts)
    assert findings["parity.memory"].found == {"node3": 1007}
    assert findings["host.memory-free"].found == {"node3": "50.0 of 1007 GiB available"}


def test_stand_in_summary_lists_processes_in_the_driver_550_layout() -> None:
    """Rows of a real driver-550 summary (public captures: graphics processes, type G; the
    stand-in's processes are compute, type C), the long name cut from the left."""
    from tests.support.fake_nvidia_smi import process_rows

    recorded = [
        "|    0   N/A  N/A    121585      G   ...sion,SpareRendererForSitePerProcess"
        "        103MiB |",
        "|    0   N/A  N/A      2659      G   /usr/lib/xorg/Xorg"
        "                             85MiB |",
    ]
    state = {"processes": [
        {"gpu": 0, "pid": 121585, "used_memory": 103,
         "name": "/opt/chrome --disable=Extension,SpareRendererForSitePerProcess"},
        {"gpu": 0, "pid": 2659, "used_memory": 85, "name": "/usr/lib/xorg/Xorg"},
    ]}  # fmt: skip
    rows = process_rows(state, [{"index": 0}], r610=False)
    assert rows == [row.replace("      G   ", "      C   ") for row in recorded]
