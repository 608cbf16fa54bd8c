"""`clusterkit node-check`: this node's own static checks, fast enough for Slurm's
HealthCheckProgram or Prolog; with --slurm-drain, the node drains itself on failure and is
resumed once it passes (only when clusterkit drained it)."""

from __future__ import annotations

import time

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.one_node import node_drain_notes, node_findings, not_judged, one_node
from clusterkit.cli.nodecheck import NodeCheckRequest
from clusterkit.environment import Environment
from clusterkit.errors import TransportError
from clusterkit.facts import HostEntry, HostFacts
from clusterkit.hostlist import check_node_name
from clusterkit.inventory.model import ClusterSettings
from clusterkit.probe.runner import DEFAULT_INTERPRETER, probe_host
from clusterkit.report import Report, emit
from clusterkit.slurm import drain
from clusterkit.slurm.target import load_settings
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport

# Not the cluster's PROBE_SECONDS: the whole (--timeout, 30 s) stays under Slurm's 60 s limit
# for a HealthCheckProgram. Each tool the collector runs keeps its own bound (the collector's
# default), and torch is not imported, so a healthy node answers in well under a second.
PROBE_OPTIONS = {"no_torch_import": True}


def run(request: NodeCheckRequest, env: Environment) -> ExitStatus:
    started = time.monotonic()
    # The name reaches scontrol and the report: one node's, checked before either sees it.
    name = (
        check_node_name(request.node_name, "--node-name")
        if request.node_name
        else drain.local_node_name(env.environ)
    )
    settings, interpreter = (
        load_settings(request.settings) if request.settings else (ClusterSettings(), None)
    )
    # The job's Python, as for any node: not the one clusterkit runs under.
    python = request.python or interpreter or DEFAULT_INTERPRETER
    findings: list[Finding] = []
    facts: dict[str, HostFacts] = {}
    transport = LocalTransport(name, env=dict(env.environ))
    try:
        facts[name] = probe_host(transport, python, PROBE_OPTIONS, Deadline.after(request.timeout))
    except TransportError as error:
        findings.append(Finding("probe.ran", Status.ERROR, f"{name}: {error.detail}", hosts=[name]))
    judged = node_findings(facts, settings, request.settings)
    findings += one_node(not_judged(judged, job_python_named=bool(request.python or interpreter)))
    report = Report(
        command="node-check",
        inventory=request.settings,
        findings=findings,
        hosts={name: HostEntry(address="localhost", reachable=True, facts=facts.get(name))},
        stages={"probe": "ran"},
        details={},
        text_blocks={},
        strict=request.strict,
        seconds=time.monotonic() - started,
    )
    status = report.exit_status
    if request.slurm_drain:
        failing = [
            f.id
            for f in findings
            if f.status in (Status.FAIL, Status.ERROR)
            or (request.strict and f.status is Status.WARN)
        ]
        action = drain.decide(
            drain.node_state(name, env.environ),
            failing if status != 0 else [],
            node_drain_notes(name, findings, facts.get(name) or HostFacts()),
        )
        drain.apply(name, action, env.environ)
        report.details["slurm"] = {"node": name, "action": action.kind, "reason": action.reason}
        print(f"clusterkit: node {name}: {action.kind}: {action.reason}", file=env.stderr)
    shown = request.report
    view = {"only_problems": shown.only_problems, "verbose": shown.verbose > 0}
    emit(report, shown.format, shown.output, env, **view)
    return status
