"""`clusterkit check`: inventory -> connect -> probe -> static checks -> stages -> report."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from clusterkit.checks import static_findings
from clusterkit.checks.fabric import fabric_findings
from clusterkit.checks.job_env import job_env_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import torch_cuda
from clusterkit.inventory import Inventory, load_inventory, local_inventory, select_hosts
from clusterkit.probe.runner import probe_all
from clusterkit.probe.shared import check_shared_paths
from clusterkit.remedy import command_of, with_stage_fixes
from clusterkit.report import Report, emit
from clusterkit.report.progress import progress
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import Connections, connect_all
from clusterkit.transport.endpoint import ConnectOptions


def load_target(args: argparse.Namespace) -> Inventory:
    """The inventory named on the command line (limited), or this machine."""
    sources = inventory_sources(args)
    via_ansible = getattr(args, "inventory_via_ansible", False)
    inventory = load_inventory(sources, via_ansible=via_ansible) if sources else local_inventory()
    for warning in inventory.warnings:  # keys Ansible would also ignore: say so, once
        print(f"clusterkit: warning: {warning}", file=sys.stderr)
    if getattr(args, "limit", None):
        inventory = select_hosts(inventory, args.limit)
    return inventory


def inventory_sources(args: argparse.Namespace) -> list[str]:
    """The positional inventory, then every -i source, in the order given."""
    positional = [args.inventory] if getattr(args, "inventory", None) else []
    return positional + list(getattr(args, "inventory_sources", None) or [])


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
    findings += [
        Finding(
            "host.key",
            Status.WARN,
            f"{name}: {what}; accepted only because --host-key-policy is off",
            hosts=[name],
            found="hostkey-mismatch",
            remedy="check the node; if it was reinstalled, update known_hosts (ssh-keygen -R)",
            stage="connect",
        )
        for name, what in connections.key_notices.items()
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
                on_done=bar.done,
            )
            findings += [
                Finding("probe.ran", Status.ERROR, f"{host}: {why}", hosts=[host], stage="probe")
                for host, why in probed.failures.items()
            ]
            findings += static_findings(
                probed.facts,
                inventory.settings.expect,
                inventory.path,
                busy_mib=inventory.settings.gpu_busy_mib,
            )
            findings += job_env_findings(probed.facts, inventory)
            findings += fabric_findings(probed.facts, inventory.settings.image, inventory.path)
            storage, shared = check_shared_paths(
                connections.transports, inventory, Deadline.after(SHARED_SECONDS)
            )
            findings += storage
            details = run_stages(args, inventory, connections, probed.facts, findings, stages, bar)
            if shared:
                details["shared_paths"] = shared
            findings = with_stage_fixes(findings, inventory.path)
        finally:
            connections.close()
    report = Report(
        command="check",
        inventory=inventory.path,
        findings=findings,
        hosts=host_entries(inventory, connections, probed.facts, probed.failures),
        stages=stages,
        details=details,
        text_blocks=text_blocks(details),
        strict=args.strict,
        seconds=time.monotonic() - started,
    )
    emit(report, args.format, args.output)
    if args.fix_plan:
        print_fix_plan(report)
    return report.exit_status


NETWORK_SECONDS = 60.0
SHARED_SECONDS = 30.0
IMAGE_SECONDS = 180.0


def run_stages(
    args: argparse.Namespace,
    inventory: Inventory,
    connections: Connections,
    facts: dict[str, dict[str, Any]],
    findings: list[Finding],
    stages: dict[str, str],
    bar: Any,
) -> dict[str, Any]:
    """network -> image -> bench. A stage that cannot run says why (reported as skipped);
    the bench never starts on a network known to be broken: it would only hang."""
    details: dict[str, Any] = {}
    transports = connections.transports
    settings = inventory.settings

    def skip(stage: str) -> str | None:
        if stage in args.skip:
            return "skipped by --skip"
        if not transports:
            return "no host could be reached"
        return None

    if not (why := skip("network")) and len(inventory.hosts) < 2:
        why = "a single host: there is no network path between nodes to check"
    if why:
        stages["network"] = why
    else:
        from clusterkit.net.stage import run_network_stage

        bar.phase("network", 1)
        found, details["network"] = run_network_stage(
            transports, inventory, facts, Deadline.after(NETWORK_SECONDS)
        )
        findings += found
        stages["network"] = "ran"

    if not (why := skip("image")) and not settings.image:
        why = "no image named in the inventory (clusterkit.image)"
    if why:
        stages["image"] = why
    else:
        from clusterkit.image.checks import rdma_findings
        from clusterkit.image.stage import run_image_stage

        bar.phase("image", 1)
        drivers = {host: (f.get("gpus") or {}).get("driver") for host, f in facts.items()}
        found, details["image"] = run_image_stage(
            transports,
            inventory,
            Deadline.after(IMAGE_SECONDS),
            driver_by_host=drivers,
            workers=args.forks,
        )
        findings += found + rdma_findings(details["image"], facts)
        stages["image"] = "ran"

    why = skip("bench") or bench_blocker(inventory, findings, facts)
    if why:
        stages["bench"] = why
        findings.append(Finding("bench.busbw", Status.SKIP, f"bench not run: {why}", stage="bench"))
    else:
        from clusterkit.bench.launcher import BenchOptions, launch_bench
        from clusterkit.commands.bench import bench_details

        bar.phase("bench", 1)
        outcome = launch_bench(
            transports,
            inventory,
            BenchOptions.from_settings(
                settings.bench,
                min_busbw=args.min_busbw,
                facts=facts,
                # A CPU build of torch runs gloo: one rank per node measures the network;
                # a rank per (unusable) GPU would only measure this machine's cores.
                nproc_per_node=None
                if any(torch_cuda(f) not in (None, "cpu") for f in facts.values())
                else 1,
            ),
            Deadline.after(settings.bench.timeout),
        )
        if outcome.interrupted:
            raise KeyboardInterrupt
        findings += outcome.findings
        details["bench"] = {**bench_details(outcome), "table": outcome.table}
        stages["bench"] = "ran"
    return details


def bench_blocker(
    inventory: Inventory, findings: list[Finding], facts: dict[str, dict[str, Any]]
) -> str | None:
    """Why the all-reduce cannot give a meaningful answer now, or None."""
    broken = sorted(
        {
            f.id
            for f in findings
            if f.stage in ("connect", "probe", "network") and f.status is Status.ERROR
        }
    )
    if broken:
        return "not every host could be reached or probed (" + ", ".join(broken) + ")"
    blocked = sorted({f.id for f in findings if f.stage == "network" and f.status is Status.FAIL})
    if blocked:
        return "the network stage failed (" + ", ".join(blocked) + "); an all-reduce would hang"
    if any(f.id in ("torch.present", "torch.import") and f.status is Status.FAIL for f in findings):
        return "torch is missing or broken on a node"
    if len(inventory.hosts) < 2 and not any(
        (f.get("gpus") or {}).get("count") for f in facts.values()
    ):
        return "a single host without GPUs: nothing to measure"
    return None


def text_blocks(details: dict[str, Any]) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    if details.get("network", {}).get("matrix_lines"):
        blocks["network"] = list(details["network"]["matrix_lines"])
    if details.get("bench", {}).get("table"):
        blocks["bench"] = details["bench"]["table"].rstrip().splitlines()
    return blocks


def print_fix_plan(report: Report) -> None:
    """The provisioning commands that fix the current findings, one per line, deduplicated."""
    commands = dict.fromkeys(
        command
        for f in report.findings
        if (command := command_of(f.remedy))
        and f.status in (Status.FAIL, Status.WARN, Status.ERROR)
    )
    print("\nfix plan:" if commands else "\nfix plan: nothing a playbook can fix")
    for command in commands:
        print(f"  {command}")
