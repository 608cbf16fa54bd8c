"""Static checks over recorded probe facts (tests/fixtures/facts): every check id."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks import static_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import parity_finding, sole_majority
from clusterkit.inventory.model import Expectations

FACTS = Path(__file__).parent.parent.parent / "fixtures" / "facts"
INVENTORY = "/srv/clusters/a100 prod.yaml"  # a space: the remedy must quote it


@cache
def _load(name: str) -> str:
    return (FACTS / f"{name}.json").read_text()


def facts(name: str) -> dict[str, Any]:
    return json.loads(_load(name))


def cluster(*names: str, **odd: str) -> dict[str, dict[str, Any]]:
    """node1..nodeN from the named recordings, then odd hosts by name=recording."""
    hosts = {f"node{i}": facts(name) for i, name in enumerate(names, 1)}
    hosts.update({host: facts(name) for host, name in odd.items()})
    return hosts


def healthy(n: int = 4, **odd: str) -> dict[str, dict[str, Any]]:
    return cluster(*["healthy-h100"] * n, **odd)


def run(
    hosts: dict[str, Any], expect: Expectations | None = None, inventory: str | None = INVENTORY
) -> dict[str, Finding]:
    found = static_findings(hosts, expect or Expectations(), inventory)
    ids = [f.id for f in found]
    assert len(ids) == len(set(ids)), f"duplicate check ids: {ids}"
    return {f.id: f for f in found}


def test_healthy_cluster_every_check_ok() -> None:
    findings = run(healthy())
    assert set(findings) == {
        "parity.driver", "parity.cuda-driver", "parity.gpu-model", "parity.gpu-count",
        "parity.torch", "parity.torch-cuda", "parity.nccl", "parity.python", "parity.kernel",
        "torch.present", "compat.driver-cuda", "gpu.nvidia-smi", "gpu.ecc", "gpu.persistence",
        "gpu.present", "env.shm", "env.memlock", "env.clock", "env.nccl-debug-vars",
        "gpu.busy", "gpu.visible", "gpu.arch", "torch.cpu-build", "parity.memory",
        "host.memory-free",
        "gpu.row-remap", "gpu.retired-pages", "gpu.pcie-width", "gpu.clock-reasons",
        "gpu.xid", "nvswitch.sxid", "host.mce", "host.edac", "host.filesystem",
        "gpu.sram-ecc", "gpu.temperature",
    }  # fmt: skip
    assert {f.id: f.status for f in findings.values() if f.status is not Status.OK} == {}
    assert findings["parity.nccl"].expected == "2.21.5"
    assert findings["parity.torch-cuda"].message == "torch CUDA build: 12.4 on all 4 hosts"
    assert all(f.stage == "static" for f in findings.values())


def test_recorded_cluster_nodes_classic_and_r610_banners_agree() -> None:
    findings = run(cluster("probe-node-h100-classic", "probe-node-h100-r610"))
    assert findings["parity.driver"].status is Status.OK
    assert findings["parity.driver"].expected == "550.54.15"
    assert findings["parity.cuda-driver"].expected == "12.4"
    assert findings["parity.gpu-count"].expected == 8
    # CPU torch on GPU nodes: nothing to compare the driver with, no NCCL to compare
    assert findings["compat.driver-cuda"].status is Status.SKIP
    assert findings["parity.nccl"].status is Status.SKIP
    assert findings["parity.torch-cuda"].expected == "cpu"


def test_recorded_local_machine_without_gpus() -> None:
    findings = run({"localhost": facts("probe-local-cpu")})
    for check_id in ("gpu.nvidia-smi", "gpu.ecc", "gpu.persistence", "compat.driver-cuda"):
        assert findings[check_id].status is Status.SKIP, check_id
    assert "no host has NVIDIA GPUs" in findings["gpu.ecc"].message
    assert findings["parity.driver"].status is Status.SKIP
    assert findings["torch.present"].status is Status.OK
    assert findings["gpu.present"].status is Status.WARN  # a CPU machine: say what it can run
    assert "only CPU (gloo) jobs" in findings["gpu.present"].message
    assert "nvidia-smi not found on localhost" in findings["gpu.present"].message


def test_a_node_without_gpus_warns_unless_the_inventory_expects_none() -> None:
    hosts = healthy(2)
    hosts["node3"] = facts("probe-local-cpu")
    finding = run(hosts)["gpu.present"]
    assert (finding.status, finding.hosts) == (Status.WARN, ["node3"])
    assert finding.remedy.endswith("--tags nvidia --limit node3")
    hosts["node3"]["gpus"] = {"present": True, "count": 0, "devices": [], "driver": "550.54.15"}
    assert run(hosts)["gpu.present"].hosts == ["node3"]  # a driver, but no GPU listed
    assert run(healthy(2))["gpu.present"].status is Status.OK
    cpu = {"n1": facts("probe-local-cpu"), "n2": facts("probe-local-cpu")}
    finding = run(cpu, Expectations(gpus_per_node=0))["gpu.present"]
    assert finding.status is Status.SKIP and "gpus_per_node: 0" in finding.message


def test_no_check_is_ok_over_zero_hosts() -> None:
    """0 of N hosts reached: every check is skipped with the reason, none says OK."""
    pins = Expectations(gpus_per_node=8, driver=">=550", torch="2.5.1", nccl="2.21", cuda="12.4")
    findings = static_findings({}, pins, INVENTORY)
    assert findings
    assert {f.status for f in findings} == {Status.SKIP}, [
        (f.id, f.status) for f in findings if f.status is not Status.SKIP
    ]
    assert {"expect.gpus_per_node", "expect.cuda", "torch.present"} <= {f.id for f in findings}
    assert all(f.message for f in findings)


# -- parity ---------------------------------------------------------------------------------


def test_parity_names_the_odd_host_against_the_majority() -> None:
    findings = run(healthy(3, node4="driver-minor-compat"))
    driver = findings["parity.driver"]
    assert driver.status is Status.FAIL
    assert driver.hosts == ["node4"]
    assert driver.expected == "550.54.15"
    assert driver.found == {"node4": "535.183.01"}
    assert "3 hosts have 550.54.15" in driver.message
    assert "node4 has 535.183.01" in driver.message
    assert driver.remedy == (
        "clusterkit provision '/srv/clusters/a100 prod.yaml' --tags nvidia --limit node4"
    )
    assert findings["parity.cuda-driver"].found == {"node4": "12.2"}
    assert findings["parity.gpu-model"].status is Status.OK


@pytest.mark.parametrize(
    ("check_id", "edit", "odd_value"),
    [
        ("parity.gpu-count", lambda f: f["gpus"].update(count=4), 4),
        ("parity.gpu-model", lambda f: f["gpus"]["devices"][0].update(name="NVIDIA A100-SXM4-80GB"),
         "NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3"),
        ("parity.torch", lambda f: f["torch"].update(version="2.4.1+cu124"), "2.4.1+cu124"),
        ("parity.torch-cuda", lambda f: f["torch"].update(cuda="12.1"), "12.1"),
        ("parity.nccl", lambda f: f["torch"].update(nccl="2.20.5"), "2.20.5"),
        ("parity.python", lambda f: f["python"].update(version="3.10.12"), "3.10.12"),
        ("parity.kernel", lambda f: f["system"].update(kernel="5.15.0-91-generic"),
         "5.15.0-91-generic"),
    ],
)  # fmt: skip
def test_each_parity_check_catches_one_odd_host(check_id: str, edit, odd_value: Any) -> None:
    hosts = healthy(3)
    edit(hosts["node2"])
    finding = run(hosts)[check_id]
    assert finding.status is Status.FAIL
    assert finding.hosts == ["node2"]
    assert finding.found == {"node2": odd_value}
    assert finding.remedy is None  # no playbook installs torch or swaps GPUs


def test_parity_nccl_falls_back_to_the_wheel_when_torch_was_not_imported() -> None:
    hosts = healthy(3)
    for f in hosts.values():
        f["torch"]["nccl"] = None
    hosts["node2"]["torch"]["nccl_wheel"] = "2.19.3"
    finding = run(hosts)["parity.nccl"]
    assert finding.status is Status.FAIL
    assert finding.expected == "2.21.5" and finding.found == {"node2": "2.19.3"}


def test_parity_tie_blames_no_host() -> None:
    """2 against 2 (or 1 against 1) has no majority: naming the hosts after the first value
    in inventory order blamed healthy nodes in a launch's post-mortem and re-check."""
    values = {"a": "550", "b": "535", "c": "535", "d": "550"}
    assert sole_majority(values) == (False, None)  # no value to expect, nobody odd
    for tied in (values, {"a": "550", "b": "535"}):
        finding = parity_finding("parity.driver", "NVIDIA driver", tied)
        assert finding.status is Status.FAIL and finding.hosts == []
        assert "no value has a majority" in finding.message and finding.found == tied
    finding = parity_finding("parity.driver", "NVIDIA driver", {**values, "e": "535"})
    assert finding.hosts == ["a", "d"]


def test_parity_majority_beats_order() -> None:
    assert sole_majority({"a": "535", "b": "550", "c": "550"}) == (True, "550")


def test_parity_ignores_hosts_that_cannot_report_and_skips_when_none_can() -> None:
    hosts = healthy(2, node3="nvidia-smi-failed")
    findings = run(hosts)
    assert findings["parity.driver"].status is Status.OK
    assert findings["parity.driver"].hosts == ["node1", "node2"]
    assert run({"n": facts("nvidia-smi-failed")})["parity.driver"].status is Status.SKIP


# -- pins ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expect", "check_id", "ok"),
    [
        (Expectations(driver="550"), "expect.driver", True),
        (Expectations(driver=">=550,<560"), "expect.driver", True),
        (Expectations(driver="550.54.14"), "expect.driver", False),
        (Expectations(driver=">=555"), "expect.driver", False),
        (Expectations(torch="2.5.1"), "expect.torch", True),
        (Expectations(torch="2.5.1+cu124"), "expect.torch", True),
        (Expectations(torch="2.5.1+cu121"), "expect.torch", False),
        (Expectations(torch="~=2.4.0"), "expect.torch", False),
        (Expectations(nccl=">=2.21"), "expect.nccl", True),
        (Expectations(nccl="2.20"), "expect.nccl", False),
        (Expectations(python="3.11"), "expect.python", True),
        (Expectations(python="!=3.11.7"), "expect.python", False),
        (Expectations(gpus_per_node=8), "expect.gpus_per_node", True),
        (Expectations(gpus_per_node=4), "expect.gpus_per_node", False),
    ],
)
def test_pins(expect: Expectations, check_id: str, ok: bool) -> None:
    finding = run(healthy(2), expect)[check_id]
    assert finding.status is (Status.OK if ok else Status.FAIL), finding.message
    if not ok:
        assert finding.hosts == ["node1", "node2"]


def test_unset_pins_produce_no_finding() -> None:
    assert not [i for i in run(healthy(2)) if i.startswith("expect.")]


def test_driver_pin_names_the_host_and_the_provision_command() -> None:
    finding = run(healthy(2, node3="driver-too-old"), Expectations(driver=">=550"))["expect.driver"]
    assert finding.status is Status.FAIL
    assert finding.hosts == ["node3"]
    assert finding.expected == ">=550"
    assert finding.found == {"node3": "470.256.02"}
    assert "node3 has 470.256.02" in finding.message
    assert finding.remedy.endswith("--tags nvidia --limit node3")


def test_pin_fails_a_host_that_cannot_report_the_value() -> None:
    finding = run(healthy(1, node2="torch-missing"), Expectations(torch="2.5.1"))["expect.torch"]
    assert finding.hosts == ["node2"]
    assert "node2 has none" in finding.message


def test_cuda_pin() -> None:
    assert run(healthy(2), Expectations(cuda="12.4"))["expect.cuda"].status is Status.OK
    finding = run(healthy(2), Expectations(cuda="12.1"))["expect.cuda"]
    assert finding.status is Status.FAIL
    assert finding.found == {
        "node1": "torch built for CUDA 12.4",
        "node2": "torch built for CUDA 12.4",
    }


def test_cuda_pin_fails_cpu_torch_and_missing_torch() -> None:
    hosts = healthy(1)
    hosts["node2"] = facts("probe-node-h100-classic")  # CPU build of torch
    hosts["node3"] = facts("torch-missing")
    finding = run(hosts, Expectations(cuda="12.4"))["expect.cuda"]
    assert finding.found == {"node2": "torch is a CPU build", "node3": "no torch"}


@pytest.mark.parametrize(
    ("recording", "cuda_available", "compat", "pin"),
    [
        # 535 runs CUDA 12.4 through minor-version compatibility: a warning, and the pin holds
        ("driver-minor-compat", True, Status.WARN, Status.OK),
        # 470 is below CUDA 12's floor and torch could not initialise CUDA: both fail
        ("driver-too-old", False, Status.FAIL, Status.FAIL),
        # the same driver with the cuda-compat package (an NGC image): torch saw CUDA
        ("driver-too-old", True, Status.WARN, Status.OK),
    ],
)
def test_cuda_pin_agrees_with_driver_cuda(
    recording: str, cuda_available: bool, compat: Status, pin: Status
) -> None:
    hosts = healthy(1, node2=recording)
    hosts["node2"]["torch"]["cuda_available"] = cuda_available
    findings = run(hosts, Expectations(cuda="12.4"))
    assert findings["compat.driver-cuda"].status is compat
    assert findings["expect.cuda"].status is pin
    if pin is Status.FAIL:
        assert (
            findings["expect.cuda"].found["node2"] == findings["compat.driver-cuda"].found["node2"]
        )


# -- torch -----------------------------------------------------------------------------------


def test_torch_missing_names_the_interpreter() -> None:
    findings = run(healthy(1, node2="torch-missing"))
    finding = findings["torch.present"]
    assert finding.status is Status.FAIL
    assert finding.hosts == ["node2"]
    assert "node2 (/usr/bin/python3)" in finding.message
    assert "ansible_python_interpreter" in finding.remedy
    assert "torch.import" not in findings


def test_torch_without_numpy_warns_naming_the_object_collectives() -> None:
    hosts = healthy(3)
    hosts["node2"]["torch"]["numpy"] = False
    hosts["node3"]["torch"]["numpy"] = True  # node1: not recorded (older probe): no claim
    finding = run(hosts)["torch.numpy"]
    assert finding.status is Status.WARN and finding.hosts == ["node2"]
    assert "all_gather_object" in finding.message
    hosts["node2"]["torch"]["numpy"] = True
    assert "torch.numpy" not in run(hosts)


def test_torch_import_error() -> None:
    findings = run(healthy(1, node2="torch-import-error"))
    assert findings["torch.present"].status is Status.OK
    finding = findings["torch.import"]
    assert finding.status is Status.FAIL
    assert finding.hosts == ["node2"]
    assert "libcudnn.so.9" in finding.message


def test_torch_collector_error_is_an_import_failure() -> None:
    hosts = healthy(1)
    hosts["node1"]["torch"] = {"error": "timeout: did not finish within 70 s"}
    finding = run(hosts)["torch.import"]
    assert finding.status is Status.FAIL
    assert "timeout" in finding.message


# -- driver vs CUDA --------------------------------------------------------------------------


def test_driver_below_the_floor_fails() -> None:
    finding = run(healthy(1, node2="driver-too-old"))["compat.driver-cuda"]
    assert finding.status is Status.FAIL
    assert finding.hosts == ["node2"]
    assert "470.256.02 < 525" in finding.message
    assert finding.remedy.endswith("--tags nvidia --limit node2")


def test_driver_between_floor_and_ga_warns() -> None:
    finding = run(healthy(1, node2="driver-minor-compat"))["compat.driver-cuda"]
    assert finding.status is Status.WARN
    assert finding.hosts == ["node2"]
    assert "535.183.01 < 550.54.14" in finding.message


def test_fail_wins_over_warn_for_driver_cuda() -> None:
    hosts = healthy(1, node2="driver-minor-compat", node3="driver-too-old")
    finding = run(hosts)["compat.driver-cuda"]
    assert finding.status is Status.FAIL and finding.hosts == ["node3"]


def test_driver_at_the_ga_version_is_ok() -> None:
    hosts = healthy(1)
    hosts["node1"]["gpus"]["driver"] = "550.54.14"
    assert run(hosts)["compat.driver-cuda"].status is Status.OK


def test_forward_compatibility_warns_when_torch_saw_cuda() -> None:
    """A 470 driver with the cuda-compat package runs CUDA 12.4 (what NGC images do)."""
    hosts = healthy(1, node2="driver-too-old")
    hosts["node2"]["torch"].update(cuda_available=True, device_count=8)
    finding = run(hosts)["compat.driver-cuda"]
    assert finding.status is Status.WARN
    assert finding.hosts == ["node2"]
    assert "forward compatibility" in finding.found["node2"]
    assert "cuda-compat" in finding.message


def test_driver_below_the_floor_whose_torch_was_not_imported_fails() -> None:
    hosts = healthy(1, node2="driver-too-old")
    for key in ("cuda_available", "imported", "device_count"):
        hosts["node2"]["torch"].pop(key)
    finding = run(hosts)["compat.driver-cuda"]
    assert finding.status is Status.FAIL
    assert "cannot run" in finding.found["node2"]


@pytest.mark.parametrize(
    ("driver", "cuda", "status", "words"),
    [
        ("610.43.02", "13.3", Status.OK, None),
        ("595.71.05", "13.3", Status.WARN, "595.71.05 < 610.43.02"),
        ("615.28.01", "13.4", Status.OK, None),
        ("610.43.02", "13.4", Status.WARN, "610.43.02 < 615"),
        ("620.10.01", "13.9", Status.WARN, "CUDA 13.9 is not in the table (dated 2026-09)"),
        ("700.10", "14.0", Status.WARN, "CUDA 14.0 is not in the table (dated 2026-09)"),
        ("575.57.08", "13.9", Status.FAIL, "575.57.08 < 580"),
    ],
)
def test_driver_cuda_rows_and_versions_missing_from_the_table(
    driver: str, cuda: str, status: Status, words: str | None
) -> None:
    hosts = healthy(1)
    hosts["node1"]["gpus"]["driver"] = driver
    hosts["node1"]["torch"].update(cuda=cuda, cuda_available=status is not Status.FAIL)
    finding = run(hosts)["compat.driver-cuda"]
    assert finding.status is status, finding.message
    if words:
        assert words in finding.message


# -- GPU health ------------------------------------------------------------------------------


def test_nvidia_smi_failure() -> None:
    findings = run(healthy(2, node3="nvidia-smi-failed"))
    finding = findings["gpu.nvidia-smi"]
    assert finding.status is Status.FAIL
    assert finding.hosts == ["node3"]
    assert "exited 9" in finding.message
    assert "dmesg" in finding.remedy
    assert findings["gpu.ecc"].hosts == ["node1", "node2"]  # checked where it answered


def test_same_failure_on_many_hosts_is_one_clause() -> None:
    finding = run(cluster("nvidia-smi-failed", "nvidia-smi-failed"))["gpu.nvidia-smi"]
    assert finding.message.count("exited 9") == 1
    assert "on node1, node2" in finding.message


def test_ecc_errors_fail_with_the_gpu_index() -> None:
    finding = run(healthy(1, node2="ecc-errors"))["gpu.ecc"]
    assert finding.status is Status.FAIL
    assert finding.found == {"node2": "uncorrected ECC errors on GPU 3: 2"}
    assert "drain" in finding.remedy


def test_ecc_not_supported_is_not_an_error() -> None:
    hosts = healthy(1)
    for d in hosts["node1"]["gpus"]["devices"]:
        d["ecc.errors.uncorrected.volatile.total"] = None
    assert run(hosts)["gpu.ecc"].status is Status.OK


def test_persistence_off_warns() -> None:
    finding = run(healthy(1, node2="persistence-off"))["gpu.persistence"]
    assert finding.status is Status.WARN
    assert finding.found == {"node2": "persistence mode off on GPU 0, 1"}
    assert finding.remedy.endswith("--tags nvidia --limit node2")


# -- environment -----------------------------------------------------------------------------


def test_environment_problems_each_warn_with_their_playbook() -> None:
    findings = run(healthy(1, node2="env-bad"))
    expected = {
        "env.shm": ("/dev/shm is 64 MiB", "shm"),
        "env.memlock": ("memlock limit 64 KiB", "limits"),
        "env.clock": ("not synchronised (offset -2.500 s)", "time"),
    }
    for check_id, (why, tag) in expected.items():
        finding = findings[check_id]
        assert finding.status is Status.WARN, check_id
        assert finding.found == {"node2": why}
        assert finding.remedy.endswith(f"--tags {tag} --limit node2"), finding.remedy
    nccl = findings["env.nccl-debug-vars"]
    assert nccl.status is Status.WARN
    assert nccl.found == {"node2": "NCCL_P2P_DISABLE=1"}  # NCCL_DEBUG is harmless
    assert "unset" in nccl.remedy


def test_environment_checks_skip_without_facts() -> None:
    hosts = healthy(1)
    hosts["node1"]["limits"] = {"error": "timeout"}
    hosts["node1"]["clock"] = {"synchronized": None, "source": None, "offset_seconds": None}
    findings = run(hosts)
    for check_id in ("env.shm", "env.memlock", "env.clock"):
        assert findings[check_id].status is Status.SKIP, check_id


def test_no_inventory_path_means_no_provision_command() -> None:
    findings = run(healthy(1, node2="env-bad"), inventory=None)
    assert findings["env.shm"].status is Status.WARN
    assert findings["env.shm"].remedy is None


def test_remedies_limit_to_every_affected_host() -> None:
    finding = run(healthy(1, node2="env-bad", node3="env-bad"))["env.memlock"]
    assert finding.remedy == (
        "clusterkit provision '/srv/clusters/a100 prod.yaml' --tags limits --limit node2,node3"
    )


def test_facts_fixtures_are_not_mutated_between_tests() -> None:
    first = healthy(1)
    first["node1"]["gpus"]["count"] = 0
    assert healthy(1)["node1"]["gpus"]["count"] == 8
    assert copy.deepcopy(facts("healthy-h100")) == facts("healthy-h100")


def test_the_static_table_says_which_checks_compare_nodes() -> None:
    """check runs every static check; node-check (scope "node") none that compares nodes,
    chosen by the table's scopes, never by the ids' prefixes."""
    from clusterkit.checks import STATIC_CHECKS
    from clusterkit.facts import HostFacts

    names = [check.name for check in STATIC_CHECKS]
    assert len(names) == len(set(names))
    assert all(check.scopes for check in STATIC_CHECKS)
    two = {"n1": HostFacts(), "n2": HostFacts()}
    cluster = {f.id for f in static_findings(two, Expectations())}
    node = {f.id for f in static_findings(two, Expectations(), scope="node")}
    assert {i for i in cluster if i.startswith("parity.")} >= {"parity.driver", "parity.memory"}
    assert not {i for i in node if i.startswith("parity.")}
    assert "fabric.nvlink-down" in node  # the node's own variant of the fabric check
    assert cluster - {i for i in cluster if i.startswith("parity.")} <= node | {"env.job-vars"}
