"""`clusterkit node-check`: this node's own static checks, fast enough for Slurm's
HealthCheckProgram or Prolog; with --slurm-drain, the node drains itself on failure and is
resumed once it passes (only when clusterkit drained it)."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from clusterkit.checks import static_findings
from clusterkit.checks.fabric import node_fabric_findings
from clusterkit.checks.gpu_health import drain_notes as gpu_drain_notes
from clusterkit.checks.host_health import drain_notes as device_drain_notes
from clusterkit.checks.hostlog import drain_notes as host_drain_notes
from clusterkit.checks.links import drain_notes as fabric_drain_notes
from clusterkit.checks.model import BY_HAND, NEEDS_FIX, Finding, Fix, Status
from clusterkit.checks.recovery import drain_notes as recovery_drain_notes
from clusterkit.checks.xid import drain_notes as xid_drain_notes
from clusterkit.environment import Environment
from clusterkit.errors import TransportError
from clusterkit.facts import FactsByHost, HostEntry, HostFacts
from clusterkit.hostlist import check_node_name
from clusterkit.inventory.model import ClusterSettings
from clusterkit.probe.runner import DEFAULT_INTERPRETER, probe_host
from clusterkit.report import Report, emit
from clusterkit.slurm import drain
from clusterkit.slurm.target import load_settings
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport

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

# Not the cluster's PROBE_SECONDS: the whole (--timeout, 30 s) stays under Slurm's 60 s limit
# for a HealthCheckProgram. Each tool the collector runs keeps its own bound (the collector's
# default), and torch is not imported, so a healthy node answers in well under a second.
PROBE_OPTIONS = {"no_torch_import": True}


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    started = time.monotonic()
    # The name reaches scontrol and the report: one node's, checked before either sees it.
    name = (
        check_node_name(args.node_name, "--node-name")
        if args.node_name
        else drain.local_node_name(env.environ)
    )
    settings, interpreter = (
        load_settings(args.settings) if args.settings else (ClusterSettings(), None)
    )
    # The job's Python, as for any node: not the one clusterkit runs under.
    python = args.python or interpreter or DEFAULT_INTERPRETER
    findings: list[Finding] = []
    facts: dict[str, HostFacts] = {}
    transport = LocalTransport(name, env=dict(env.environ))
    try:
        facts[name] = probe_host(transport, python, PROBE_OPTIONS, Deadline.after(args.timeout))
    except TransportError as error:
        findings.append(Finding("probe.ran", Status.ERROR, f"{name}: {error.detail}", hosts=[name]))
    judged = node_findings(facts, settings, args.settings)
    findings += one_node(not_judged(judged, job_python_named=bool(args.python or interpreter)))
    report = Report(
        command="node-check",
        inventory=args.settings,
        findings=findings,
        hosts={name: HostEntry(address="localhost", reachable=True, facts=facts.get(name))},
        stages={"probe": "ran"},
        details={},
        text_blocks={},
        strict=args.strict,
        seconds=time.monotonic() - started,
    )
    status = report.exit_status
    if args.slurm_drain:
        failing = [
            f.id
            for f in findings
            if f.status in (Status.FAIL, Status.ERROR) or (args.strict and f.status is Status.WARN)
        ]
        action = drain.decide(
            drain.node_state(name, env.environ),
            failing if status != 0 else [],
            node_drain_notes(name, findings, facts.get(name) or HostFacts()),
        )
        drain.apply(name, action, env.environ)
        report.details["slurm"] = {"node": name, "action": action.kind, "reason": action.reason}
        print(f"clusterkit: node {name}: {action.kind}: {action.reason}", file=env.stderr)
    view = {"only_problems": args.only_problems, "verbose": args.verbose > 0}
    emit(report, args.format, args.output, env, **view)
    return status


def node_findings(
    facts: FactsByHost, settings: ClusterSettings, settings_path: str | None
) -> list[Finding]:
    """The static checks less parity (it needs several nodes), and the fabric checks one node
    can judge by itself. A fix's command names no inventory: node-check has none (the
    settings file is not one), so node_remedies gives the command for this node."""
    static = static_findings(facts, settings.expect, None, busy_mib=settings.gpu_busy_mib)
    found = [f for f in static if not f.id.startswith("parity.")] + node_fabric_findings(facts)
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
