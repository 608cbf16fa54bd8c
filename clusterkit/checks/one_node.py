"""What node-check judges of one node, and how it says it: the static checks one node can
judge by itself, with what a job uses (or a Python nobody named) shown as skips, the
messages said of this node, and what each failing device needs for Slurm's drain reason.
Pure functions over findings and facts; clusterkit/commands/nodecheck.py runs them."""

from __future__ import annotations

from dataclasses import replace

from clusterkit.checks.gpu_health import drain_notes as gpu_drain_notes
from clusterkit.checks.host_health import drain_notes as device_drain_notes
from clusterkit.checks.hostlog import drain_notes as host_drain_notes
from clusterkit.checks.links import drain_notes as fabric_drain_notes
from clusterkit.checks.model import BY_HAND, NEEDS_FIX, Finding, Fix, Status
from clusterkit.checks.recovery import drain_notes as recovery_drain_notes
from clusterkit.checks.static import static_findings
from clusterkit.checks.xid import drain_notes as xid_drain_notes
from clusterkit.facts import FactsByHost, HostFacts
from clusterkit.inventory.model import ClusterSettings

# What node-check judges: the node (hardware, driver, fabric, its settings and the pins the
# settings file asks for), not a job. Slurm runs it on nodes that run a job
# (HealthCheckNodeState=ANY), and jobs bring their own Python (containers, venvs):
# - what a running job uses is never held against the node;
# - the job's Python is judged only when the admin names it (--python, or the settings'
#   ansible_python_interpreter): a python3 without torch is no fault of the node.
# Either is still shown, as a skip that says why it was not judged.
THE_JOBS_USE = frozenset({"gpu.busy", "host.memory-free"})
THE_JOBS_PYTHON = frozenset(
    {"torch.present", "torch.import", "torch.numpy", "torch.cpu-build", "compat.driver-cuda",
     "gpu.visible", "gpu.arch"}
)  # fmt: skip


def node_findings(
    facts: FactsByHost, settings: ClusterSettings, settings_path: str | None
) -> list[Finding]:
    """The static checks one node can judge by itself (parity needs several nodes: the
    table in checks/static.py says which). A fix's command names no inventory: node-check
    has none (the settings file is not one), so node_remedies gives the command for this
    node."""
    found = static_findings(
        facts, settings.expect, None, busy_mib=settings.gpu_busy_mib, scope="node"
    )
    return node_remedies(found)


def node_remedies(findings: list[Finding]) -> list[Finding]:
    """A fix's remedy as it fits where node-check runs (on the node, from Slurm, with no
    inventory): the provision command for this node, run from the machine that holds the
    cluster's inventory, then what the check said to do by hand on the node."""
    fitted = []
    for finding in findings:
        if finding.fix is not None and finding.status in NEEDS_FIX:
            fix = Fix(finding.fix.tags, tuple(finding.hosts) or finding.fix.hosts)
            command = fix.command("INVENTORY")
            by_hand = BY_HAND + finding.remedy if finding.remedy else ""
            finding = replace(
                finding,
                remedy=f"where the cluster's inventory is: {command}{by_hand}",
            )
        fitted.append(finding)
    return fitted


# The checks speak of a cluster ("no host has NVIDIA GPUs"); node-check judges one node.
ONE_NODE = (
    ("no host has both", "this node does not have both"),
    ("no host has NVIDIA GPUs", "this node has no NVIDIA GPU"),
    ("no host with NVIDIA GPUs reported facts", "this node reported no NVIDIA GPU"),
    ("no GPU host with", "this node is not a GPU node with"),
    ("no GPU host where", "this node is not a GPU node where"),
    ("no node reports", "this node reports no"),
    ("on every node", "on this node"),
    ("on every host", "on this node"),
    ("on every GPU node", "on this node"),
)


def one_node(findings: list[Finding]) -> list[Finding]:
    """The findings' messages as said of the one node node-check judges."""
    spoken = []
    for finding in findings:
        message = finding.message
        for cluster, node in ONE_NODE:
            message = message.replace(cluster, node)
        spoken.append(replace(finding, message=message) if message != finding.message else finding)
    return spoken


def not_judged(findings: list[Finding], *, job_python_named: bool) -> list[Finding]:
    """The findings with what node-check does not judge turned into skips that say why."""
    shown = []
    for finding in findings:
        why = None
        if finding.id in THE_JOBS_USE:
            why = "not judged: what a running job uses is no fault of the node"
        elif finding.id in THE_JOBS_PYTHON and not job_python_named:
            why = "not judged: the job's Python was not named (--python)"
        if why is not None and finding.status is not Status.SKIP:
            finding = replace(finding, status=Status.SKIP, message=f"{why}: {finding.message}")
        shown.append(finding)
    return shown


def node_drain_notes(name: str, findings: list[Finding], host_facts: HostFacts) -> list[str]:
    """What each failing device needs, for the drain reason: Xid, memory repair and links."""
    return (
        xid_drain_notes(findings)
        + gpu_drain_notes(host_facts)
        + fabric_drain_notes(name, host_facts)
        + host_drain_notes(host_facts)
        + device_drain_notes(host_facts)
        + recovery_drain_notes(host_facts)
    )
