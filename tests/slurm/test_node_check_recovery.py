"""A repaired GPU back in service, and a host fault drained, under `node-check --slurm-drain`
on real Slurm nodes: the node's kernel-log stand-ins print the lines the driver and the
kernel print (tests/fixtures/kernel-log), node-check reads them as a health check would."""

from __future__ import annotations

from tests.slurm.test_node_check import failing_ids, node_check
from tests.support.slurmcluster import SlurmCluster

DBE = "NVRM: Xid (PCI:0000:{bus}:00): 48, pid=91237, name=python3, Ch 00000076, DBE"
RELOAD = (
    "nvidia-uvm: Unloaded the UVM driver.",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
)
EDAC_UE = (
    "EDAC MC3: 1 UE memory read error on CPU_SrcID#0_MC#3_Chan#0_DIMM#0 "
    "(channel:0 slot:0 page:0x7e025e offset:0x400 grain:32)"
)


def test_an_xid_drains_and_the_driver_reload_that_recovered_the_gpu_resumes(
    slurm: SlurmCluster,
) -> None:
    """Before, every Xid since boot kept the node drained until a reboot; the GPU recovery
    (driver unloaded, GPU reset, driver loaded) leaves the Xid in the log, before the load."""
    node = slurm.net["node2"]
    bus = node.gpu_state()["gpus"][1]["pci.bus_id"].split(":")[1].lower()
    node.set_kernel_log([DBE.format(bus=bus)])
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 1 and failing_ids(report) == {"gpu.xid"}
    reason = f"clusterkit: gpu.xid; GPU 1 0000:{bus}:00 Xid 48 needs GPU reset"
    assert report["details"]["slurm"]["reason"] == reason
    assert slurm.node_state("node2")[1] == reason

    node.set_kernel_log([DBE.format(bus=bus), *RELOAD])
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume", failing_ids(report)
    (xid,) = [f for f in report["findings"] if f["id"] == "gpu.xid" and "node2" in f["hosts"]]
    assert xid["status"] == "ok" and "no longer counted" in xid["message"]
    assert "Xid 48" in xid["message"]
    assert "DRAIN" not in slurm.node_state("node2")[0]


def test_an_uncorrected_memory_error_drains_naming_the_controller(slurm: SlurmCluster) -> None:
    slurm.net["node3"].set_kernel_log([EDAC_UE])
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 1 and failing_ids(report) == {"host.edac"}
    reason = "clusterkit: host.edac; EDAC MC3 uncorrected memory error"
    assert report["details"]["slurm"] == {"node": "node3", "action": "drain", "reason": reason}
    assert slurm.node_state("node3")[1] == reason
    slurm.net["node3"].set_kernel_log()  # rebooted, the DIMM replaced
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume"


def test_a_gpu_the_driver_wants_reset_drains_and_resumes_once_reset(slurm: SlurmCluster) -> None:
    """The driver's own verdict counts with no Xid in the log (rotated out, or never logged)."""
    node = slurm.net["node1"]
    bus = node.gpu_state()["gpus"][2]["pci.bus_id"].split(":")[1].lower()
    node.set_gpus(overrides={2: {"reset_status.reset_required": "Yes"}})
    status, report, _ = node_check(slurm, "node1", "--slurm-drain")
    assert status == 1 and failing_ids(report) == {"gpu.reset-required"}
    reason = f"clusterkit: gpu.reset-required; GPU 2 0000:{bus}:00 driver: reset required"
    assert report["details"]["slurm"]["reason"] == reason
    assert slurm.node_state("node1")[1] == reason
    node.set_gpus()  # nvidia-smi -r done: the driver answers No again
    status, report, _ = node_check(slurm, "node1", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume"
