"""`clusterkit node-check --slurm-drain` on real Slurm nodes, run on the node as an admin's
health check would (logged in, the node's own GPU stand-in and kernel log on PATH; the job's
Python is this venv's, which has torch: the nodes' /usr/bin/python3 has none)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from tests.support.slurmcluster import SlurmCluster


def node_check(slurm: SlurmCluster, node: str, *args: str) -> tuple[int, dict[str, Any], float]:
    command = slurm.net[node].ssh_argv(
        "env", f"SLURM_CONF={slurm.conf}", sys.executable, "-m", "clusterkit", "node-check",
        "--format", "json", "--python", sys.executable, *args,
    )  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), time.monotonic() - started


def failing_ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["findings"] if f["status"] in ("fail", "error")}


def test_healthy_node_passes_quickly(slurm: SlurmCluster) -> None:
    status, report, _ = node_check(slurm, "node1")
    assert status == 0, failing_ids(report)
    assert list(report["hosts"]) == ["node1"]
    assert report["hosts"]["node1"]["facts"]["gpus"]["count"] == 8  # the node's own GPUs
    assert report["seconds"] < 1.0  # the check itself, without the SSH login around it


def test_broken_node_drains_itself_and_is_resumed_once_fixed(slurm: SlurmCluster) -> None:
    slurm.net["node2"].set_gpus(ecc_errors={3: 2})
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 1 and "gpu.ecc" in failing_ids(report)
    state, reason = slurm.node_state("node2")
    assert "DRAIN" in state and reason == "clusterkit: gpu.ecc"

    slurm.net["node2"].set_gpus()
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 0
    assert report["details"]["slurm"]["action"] == "resume"
    assert "DRAIN" not in slurm.node_state("node2")[0]


def test_node_drained_by_an_admin_stays_drained(slurm: SlurmCluster) -> None:
    slurm.run(["scontrol", "update", "nodename=node3", "state=drain", "reason=admin: fan swap"])
    slurm.net["node3"].set_gpus(mode="mismatch")
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status != 0 and report["details"]["slurm"]["action"] == "keep"
    assert slurm.node_state("node3") == ("IDLE+DRAIN", "admin: fan swap")
    slurm.net["node3"].set_gpus()
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "keep"
    assert slurm.node_state("node3") == ("IDLE+DRAIN", "admin: fan swap")


def test_a_hostlist_as_the_node_name_drains_nothing(slurm: SlurmCluster) -> None:
    """SLURMD_NODENAME='node[1-3]' on a failing node once drained the whole range through
    scontrol; a name that is not one node's is a one-line error before scontrol sees it."""
    slurm.net["node2"].set_gpus(ecc_errors={3: 2})
    for variable in ("SLURMD_NODENAME=node[1-3]", "SLURMD_NODENAME=node1,node3"):
        command = slurm.net["node2"].ssh_argv(
            "env", f"SLURM_CONF={slurm.conf}", variable, sys.executable, "-m", "clusterkit",
            "node-check", "--slurm-drain",
        )  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert "SLURMD_NODENAME" in done.stderr and "not a single node name" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    for node in slurm.node_names:
        assert "DRAIN" not in slurm.node_state(node)[0], node


FALLEN = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."  # noqa: E501


def xid_79_on(slurm: SlurmCluster, node: str, gpu: int) -> str:
    """Put an Xid 79 for one GPU in the node's kernel log; the drain note's bus (DDDD:BB:DD)."""
    bus = slurm.net[node].gpu_state()["gpus"][gpu]["pci.bus_id"].split(":")[1].lower()
    slurm.net[node].set_kernel_log([FALLEN.format(bus=bus)])
    return f"0000:{bus}:00"


def test_an_xid_79_drains_naming_gpu_code_and_reboot_and_a_reboot_resumes(
    slurm: SlurmCluster,
) -> None:
    """The kernel log keeps an Xid until the node reboots: the drain says so, and once the
    log is clear again (a reboot) the next check lifts clusterkit's own drain."""
    bus = xid_79_on(slurm, "node2", 1)
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 1 and failing_ids(report) == {"gpu.xid"}
    reason = f"clusterkit: gpu.xid; GPU 1 {bus} Xid 79 needs reboot"
    assert report["details"]["slurm"] == {"node": "node2", "action": "drain", "reason": reason}
    state, drained_for = slurm.node_state("node2")
    assert "DRAIN" in state and drained_for == reason
    assert f"node2 {reason}" in slurm.run(["sinfo", "-R", "-h", "-o", "%n %E"]).stdout
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")  # still failing: kept
    assert status == 1 and report["details"]["slurm"]["action"] == "keep"

    slurm.net["node2"].set_kernel_log()  # rebooted: the log holds no Xid
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume"
    state, reason = slurm.node_state("node2")
    assert "DRAIN" not in state and reason == "", state  # NOT_RESPONDING may show a moment


def test_a_pending_remap_drains_for_a_reset_and_a_failed_one_for_replacement(
    slurm: SlurmCluster,
) -> None:
    node = slurm.net["node1"]
    bus = node.gpu_state()["gpus"][3]["pci.bus_id"]
    node.set_gpus(overrides={3: {"remapped_rows.pending": "Yes"}})
    node_check(slurm, "node1", "--slurm-drain")
    pending = f"clusterkit: gpu.row-remap; GPU 3 {bus} row remap pending needs reset"
    assert slurm.node_state("node1") == ("IDLE+DRAIN", pending)

    node.set_gpus(overrides={3: {"remapped_rows.failure": "Yes"}})  # reset: out of spare rows
    status, report, _ = node_check(slurm, "node1", "--slurm-drain")
    assert status == 1 and report["details"]["slurm"]["action"] == "drain"
    state, reason = slurm.node_state("node1")
    assert state == "IDLE+DRAIN" and reason.startswith(f"clusterkit: gpu.row-remap; GPU 3 {bus}")
    assert reason.endswith("needs replacement"), reason

    node.set_gpus()  # the GPU replaced
    status, report, _ = node_check(slurm, "node1", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume"
    state, reason = slurm.node_state("node1")
    assert "DRAIN" not in state and reason == "", state  # NOT_RESPONDING may show a moment


def test_an_admin_drain_is_kept_through_an_xid_and_after_it(slurm: SlurmCluster) -> None:
    """LBNL NHC's rule: a node drained for another reason is neither re-labelled while it
    fails nor resumed once it passes."""
    admin = "admin: PSU swap, do not resume"
    slurm.run(["scontrol", "update", "nodename=node3", "state=drain", f"reason={admin}"])
    xid_79_on(slurm, "node3", 0)
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 1 and report["details"]["slurm"]["action"] == "keep"
    assert slurm.node_state("node3") == ("IDLE+DRAIN", admin)
    slurm.net["node3"].set_kernel_log()
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "keep"
    assert slurm.node_state("node3") == ("IDLE+DRAIN", admin)


def test_an_nvlink_link_down_drains_naming_gpu_and_link_and_resumes_once_up(
    slurm: SlurmCluster,
) -> None:
    """The node's other GPUs have link 7 up: GPU 4's inactive link 7 is a fault node-check
    sees alone. Before, node-check ran no NVLink check and the node stayed in service."""
    node = slurm.net["node3"]
    links = [26.562] * 18
    down = [*links[:7], None, *links[8:]]
    node.set_gpus(nvlink=links, overrides={4: {"nvlink": down}})
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 1 and failing_ids(report) == {"fabric.nvlink-down"}
    reason = "clusterkit: fabric.nvlink-down; GPU 4 NVLink 7 down needs reset"
    assert report["details"]["slurm"] == {"node": "node3", "action": "drain", "reason": reason}
    assert slurm.node_state("node3") == ("IDLE+DRAIN", reason)

    node.set_gpus(nvlink=links)  # the GPU reset: every link up again
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume"
    state, reason = slurm.node_state("node3")
    assert "DRAIN" not in state and reason == "", state  # NOT_RESPONDING may show a moment


def test_a_node_running_a_job_is_never_drained_for_what_the_job_uses(
    slurm: SlurmCluster,
) -> None:
    """Slurm runs the health check on allocated nodes too (HealthCheckNodeState=ANY): a
    node whose GPUs and memory hold a running job's processes was drained as `gpu.busy`.
    node-check judges the node, not the job: shown, not judged, never drained."""
    with slurm.allocation(3):
        assert slurm.node_state("node2")[0] in ("ALLOCATED", "MIXED")  # a job runs there
        job = [
            {"gpu": gpu, "pid": 4242, "name": "python", "used_memory": 70000} for gpu in range(8)
        ]
        slurm.net["node2"].set_gpus(processes=job)
        status, report, _ = node_check(slurm, "node2", "--slurm-drain")
        assert status == 0, [(f["id"], f["message"]) for f in report["findings"]
                             if f["status"] not in ("ok", "skip")]  # fmt: skip
        (busy,) = [f for f in report["findings"] if f["id"] == "gpu.busy"]
        assert busy["status"] == "skip" and busy["message"].startswith("not judged: ")
        assert "4242" in busy["message"]  # still shown: a person can see what runs there
        assert "DRAIN" not in slurm.node_state("node2")[0]


def test_a_node_whose_python3_has_no_torch_is_not_drained_unless_asked(
    slurm: SlurmCluster,
) -> None:
    """Jobs bring their own Python (containers, venvs): the node's /usr/bin/python3 without
    torch drained it. Judged only when the admin names the job's Python."""
    argv = ["env", f"SLURM_CONF={slurm.conf}", sys.executable, "-m", "clusterkit",
            "node-check", "--format", "json", "--slurm-drain"]  # fmt: skip
    done = subprocess.run(
        slurm.net["node3"].ssh_argv(*argv), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    (torch,) = [f for f in json.loads(done.stdout)["findings"] if f["id"] == "torch.present"]
    assert torch["status"] == "skip" and "not installed" in torch["message"]
    assert "DRAIN" not in slurm.node_state("node3")[0]
    asked = subprocess.run(
        slurm.net["node3"].ssh_argv(*argv, "--python", "/usr/bin/python3"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert asked.returncode == 1 and "DRAIN" in slurm.node_state("node3")[0]
