"""The `network` stage of `clusterkit check`: two phases, one execution per node each.

facts: every node reports names as it resolves them, interfaces, ifname variables, a free
mesh port and its firewall rules. mesh: with every port and address planned from those facts,
every node listens and connects to every peer at once. Both phases run on all nodes in
parallel and every node-side step is bounded, so the stage takes about as long for 32 nodes
as for 4.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from typing import Any

from clusterkit.checks.model import Finding
from clusterkit.framing import FrameError, decode
from clusterkit.inventory.model import Inventory
from clusterkit.net import analysis
from clusterkit.net.matrix import build_matrix, render_matrix
from clusterkit.net.plan import NetworkOptions, interface_choices, mesh_args
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.pool import parallel

FACTS_SECONDS = 15.0  # node-side resolver and tool bounds are 3 s and 5 s, run concurrently
TRANSPORT_MARGIN = 10.0  # SSH exec start and output transfer on a busy control machine


def node_script() -> bytes:
    return resources.files("clusterkit.net").joinpath("node.py").read_bytes()


def run_phase(
    transports: dict[str, Transport],
    hosts: list[str],
    interpreters: dict[str, str],
    phase: str,
    args_by_host: dict[str, dict[str, Any]],
    deadline: Deadline,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Run one phase on every host at once; (results by host, error reason by host)."""
    source = node_script()

    def one(host: str) -> dict[str, Any]:
        # -S: the node script is stdlib only; skipping site saves every node a few ms of CPU.
        argv = [interpreters[host], "-S", "-", phase, json.dumps(args_by_host[host])]
        result = transports[host].run(argv, stdin=source, deadline=deadline)
        try:
            payload = decode(result.stdout)
        except FrameError as error:
            if result.timed_out:
                raise RuntimeError(f"{phase} phase did not finish in time") from None
            tail = result.stderr_tail() or str(error)
            raise RuntimeError(f"{phase} phase failed (exit {result.exit_code}): {tail}") from None
        if not isinstance(payload, dict):
            raise RuntimeError(f"{phase} phase returned no result")
        if payload.get("error"):
            raise RuntimeError(payload["error"])
        return payload

    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for host, outcome in zip(hosts, parallel(one, hosts), strict=True):
        if isinstance(outcome, BaseException):
            errors[host] = str(outcome) or type(outcome).__name__
        else:
            results[host] = outcome
    return results, errors


def _bounded(deadline: Deadline, seconds: float) -> Deadline:
    return Deadline(min(deadline.at, time.monotonic() + seconds))


def run_network_stage(
    transports: dict[str, Transport],
    inventory: Inventory,
    facts_by_host: dict[str, dict],
    deadline: Deadline,
) -> tuple[list[Finding], dict]:
    """Findings of stage "network" and the raw per-host data for the JSON report.

    `facts_by_host` (the probe's facts) is accepted for the stage contract; this stage takes
    its own facts in its first phase, because they must come from the same moment and
    environment as the mesh. Hosts of the inventory missing from `transports` are reported
    as net.stage errors and left out of the mesh."""
    del facts_by_host
    started = time.monotonic()
    options = NetworkOptions.from_inventory(inventory)
    hosts = [host.name for host in inventory.hosts]
    interpreters = {host.name: host.python_interpreter or "python3" for host in inventory.hosts}
    ssh_addresses = {host.name: host.address for host in inventory.hosts}
    errors = {host: "not connected" for host in hosts if host not in transports}
    live = [host for host in hosts if host in transports]

    reserved = [options.master_port, options.rdzv_port, *options.extra_ports]
    facts_args = {
        host: {"master": options.master_name, "reserved_ports": reserved} for host in live
    }
    facts, facts_errors = run_phase(
        transports,
        live,
        interpreters,
        "facts",
        facts_args,
        _bounded(deadline, FACTS_SECONDS + TRANSPORT_MARGIN),
    )
    errors.update(facts_errors)
    live = [host for host in live if host in facts]
    facts_seconds = time.monotonic() - started

    choices = interface_choices(facts, options)
    findings: list[Finding] = []
    findings += analysis.interface_findings(choices, facts)
    findings += analysis.ifname_findings(facts, options)
    findings += analysis.master_findings(facts, options)

    mesh: dict[str, dict[str, Any]] = {}
    if options.master_host not in live:
        errors.setdefault(options.master_host, "no facts from the master")
    if live and deadline.remaining() > options.mesh_seconds:
        plans = mesh_args(live, facts, choices, ssh_addresses, options)
        mesh, mesh_errors = run_phase(
            transports,
            live,
            interpreters,
            "mesh",
            plans,
            _bounded(deadline, options.mesh_seconds + TRANSPORT_MARGIN),
        )
        errors.update(mesh_errors)
    elif live:
        for host in live:
            errors.setdefault(host, "the check deadline left no time for the mesh phase")

    connects = _flatten_connects(mesh)
    listeners = {host: result.get("listeners") or [] for host, result in mesh.items()}
    findings += analysis.connect_findings(hosts, connects, listeners, facts, choices, options)
    findings = analysis.stage_errors(errors) + findings

    matrix = build_matrix(hosts, connects)
    raw = {
        "master": {
            "host": options.master_host,
            "name": options.master_name,
            "master_port": options.master_port,
            "rdzv_port": options.rdzv_port,
        },
        "nodes": {host: _node_record(host, facts, choices, mesh) for host in hosts},
        "matrix": matrix,
        "matrix_lines": render_matrix(matrix, hosts),
        "connects": connects,
        "errors": errors,
        "seconds": {
            "facts": round(facts_seconds, 3),
            "total": round(time.monotonic() - started, 3),
        },
    }
    return findings, raw


def _flatten_connects(mesh: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every connect attempt with its source; a clusterkit listener of another node answering
    (a wrong address) is not a success."""
    connects = []
    for host, result in mesh.items():
        for item in result.get("connects") or []:
            entry = dict(item, **{"from": host})
            if entry.get("result") == "ok" and entry.get("detail") != entry.get("peer"):
                entry["result"] = "wrong_node"
                entry["detail"] = f"{entry.get('detail')} answered instead of {entry['peer']}"
            connects.append(entry)
    return connects


def _node_record(host, facts, choices, mesh) -> dict[str, Any]:
    node = facts.get(host)
    if node is None:
        return {"ran": False}
    choice = choices[host]
    return {
        "ran": True,
        "hostname": node.get("hostname"),
        "hostname_addresses": (node.get("own_name") or {}).get("addresses"),
        "master_addresses": (node.get("master") or {}).get("addresses"),
        "interface": {
            "name": choice.name,
            "source": choice.source,
            "spec": choice.spec,
            "address": choice.address,
            "prefixlen": choice.prefixlen,
            "mtu": choice.mtu,
            "up": choice.up,
        },
        "env": node.get("env"),
        "ephemeral_range": node.get("ephemeral_range"),
        "mesh_port": node.get("mesh_port"),
        "firewall": {
            tool: {"state": entry.get("state"), "reason": entry.get("reason")}
            for tool, entry in (node.get("firewall") or {}).items()
        },
        "listeners": (mesh.get(host) or {}).get("listeners"),
        "mesh_seconds": (mesh.get(host) or {}).get("seconds"),
    }
