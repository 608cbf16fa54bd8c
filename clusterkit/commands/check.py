"""`clusterkit check`: inventory -> connect -> probe -> static checks -> stages -> report."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from clusterkit.checks import static_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.inventory import Inventory, load_inventory, local_inventory, select_hosts
from clusterkit.probe.runner import probe_all
from clusterkit.report import Report, emit
from clusterkit.report.progress import progress
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import Connections, connect_all
from clusterkit.transport.endpoint import ConnectOptions


def load_target(args: argparse.Namespace) -> Inventory:
    """The inventory named on the command line (limited), or this machine."""
    inventory = load_inventory(args.inventory) if args.inventory else local_inventory()
    for warning in inventory.warnings:  # keys Ansible would also ignore: say so, once
        print(f"clusterkit: warning: {warning}", file=sys.stderr)
    if getattr(args, "limit", None):
        inventory = select_hosts(inventory, args.limit)
    return inventory


def connect_options(args: argparse.Namespace) -> ConnectOptions:
    return ConnectOptions(
        host_key_policy=args.host_key_policy,
        known_hosts=tuple(args.known_hosts),
        ssh_config=args.ssh_config,
        connect_timeout=args.connect_timeout,
        forks=args.forks,
    )


def connection_findings(inventory: Inventory, connections: Connections) -> list[Finding]:
    findings = [
        Finding(
            "host.reachable",
            Status.ERROR,
            f"{name}: {error.detail}",
            hosts=[name],
            found=error.kind,
            remedy=error.hint,
            stage="connect",
        )
        for name, error in connections.failures.items()
    ]
    if connections.transports:
        findings.insert(
            0,
            Finding(
                "host.reachable",
                Status.OK,
                f"{len(connections.transports)} of {len(inventory.hosts)} hosts connected",
                hosts=list(connections.transports),
                stage="connect",
            ),
        )
    return findings


def host_entries(
    inventory: Inventory,
    connections: Connections,
    facts: dict[str, dict[str, Any]],
    failures: dict[str, str],
) -> dict[str, dict[str, Any]]:
    entries = {}
    for host in inventory.hosts:
        error = connections.failures.get(host.name)
        entries[host.name] = {
            "address": host.address,
            "reachable": host.name in connections.transports,
            "error": (f"{error.kind}: {error.detail}" if error else failures.get(host.name)),
            "facts": facts.get(host.name),
        }
    return entries


def run(args: argparse.Namespace) -> ExitStatus:
    started = time.monotonic()
    inventory = load_target(args)
    findings: list[Finding] = []
    stages: dict[str, str] = {}
    with progress() as bar:
        bar.phase("connect", len(inventory.hosts))
        connections = connect_all(
            inventory,
            connect_options(args),
            on_done=lambda h, e: bar.done(h, e.kind if e else None),
        )
        try:
            findings += connection_findings(inventory, connections)
            bar.phase("probe", len(connections.transports))
            probed = probe_all(
                connections.transports,
                inventory,
                Deadline.after(args.timeout),
                workers=args.forks,
                options=inventory.settings.raw.get("probe") or {},
                on_done=bar.done,
            )
            findings += [
                Finding("probe.ran", Status.ERROR, f"{host}: {why}", hosts=[host], stage="probe")
                for host, why in probed.failures.items()
            ]
            findings += static_findings(probed.facts, inventory.settings.expect, inventory.path)
            for stage in ("network", "image", "bench"):
                stages[stage] = (
                    "skipped by --skip" if stage in args.skip else "not available in this version"
                )
        finally:
            connections.close()
    report = Report(
        command="check",
        inventory=inventory.path,
        findings=findings,
        hosts=host_entries(inventory, connections, probed.facts, probed.failures),
        stages=stages,
        strict=args.strict,
        seconds=time.monotonic() - started,
    )
    emit(report, args.format, args.output)
    if args.fix_plan:
        print_fix_plan(report)
    return report.exit_status


def print_fix_plan(report: Report) -> None:
    """The provisioning commands that fix the current findings, one per line, deduplicated."""
    commands = dict.fromkeys(
        f.remedy
        for f in report.findings
        if f.remedy
        and f.remedy.startswith("clusterkit provision")
        and f.status in (Status.FAIL, Status.WARN, Status.ERROR)
    )
    print("\nfix plan:" if commands else "\nfix plan: nothing a playbook can fix")
    for command in commands:
        print(f"  {command}")
