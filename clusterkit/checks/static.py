"""The static checks, composed once: every check that needs only the probe's facts, with
what each needs. `check` and `launch` run them for a cluster (the static stage); node-check
runs those one node can judge alone, on that node. A check that compares nodes with each
other says so (scope "cluster"), so no caller filters findings by their ids."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from clusterkit.checks.fabric import fabric_findings, node_fabric_findings
from clusterkit.checks.gpu_health import gpu_health_findings
from clusterkit.checks.gpu_use import (
    DEFAULT_BUSY_MIB,
    arch_findings,
    busy_findings,
    cpu_build_findings,
    visibility_findings,
)
from clusterkit.checks.health import (
    environment_findings,
    gpu_findings,
    gpu_presence_findings,
    memory_free_findings,
    memory_parity_findings,
)
from clusterkit.checks.host_health import host_health_findings
from clusterkit.checks.hostlog import host_log_findings
from clusterkit.checks.job_env import job_env_findings
from clusterkit.checks.links import ib_expect_findings
from clusterkit.checks.model import Finding, with_command
from clusterkit.checks.parity import Facts, firmware_parity_findings, parity_findings
from clusterkit.checks.recovery import recovery_findings
from clusterkit.checks.stack import driver_cuda_findings, expectation_findings, torch_findings
from clusterkit.checks.xid import xid_findings
from clusterkit.inventory.model import Expectations, Inventory

Scope = Literal["cluster", "node"]
EVERYWHERE: frozenset[Scope] = frozenset({"cluster", "node"})
CLUSTER: frozenset[Scope] = frozenset({"cluster"})  # compares nodes, or needs the inventory
NODE: frozenset[Scope] = frozenset({"node"})  # a node's own variant of a cluster check


@dataclass(frozen=True)
class StaticInput:
    """What the static checks read: the facts of the hosts that answered and the settings."""

    facts: Facts
    expect: Expectations
    busy_mib: int = DEFAULT_BUSY_MIB
    machine_only: bool = False  # judge the machine, not the job's Python (node-check)
    inventory: Inventory | None = None  # the job's plan: its variables, image and file


@dataclass(frozen=True)
class StaticCheck:
    name: str
    run: Callable[[StaticInput], list[Finding]]
    scopes: frozenset[Scope] = EVERYWHERE


def _with_inventory(
    check: Callable[[StaticInput, Inventory], list[Finding]],
) -> Callable[[StaticInput], list[Finding]]:
    """A check over the inventory's plan: none where there is no inventory."""
    return lambda given: check(given, given.inventory) if given.inventory else []


STATIC_CHECKS: tuple[StaticCheck, ...] = (
    StaticCheck("parity", lambda g: parity_findings(g.facts), CLUSTER),
    StaticCheck("firmware parity", lambda g: firmware_parity_findings(g.facts), CLUSTER),
    StaticCheck("pins", lambda g: expectation_findings(g.facts, g.expect)),
    StaticCheck("torch", lambda g: torch_findings(g.facts, machine_only=g.machine_only)),
    StaticCheck("driver and CUDA", lambda g: driver_cuda_findings(g.facts)),
    StaticCheck("GPUs", lambda g: gpu_findings(g.facts)),
    StaticCheck("GPU health", lambda g: gpu_health_findings(g.facts)),
    StaticCheck("GPUs present", lambda g: gpu_presence_findings(g.facts, g.expect)),
    StaticCheck("Xid", lambda g: xid_findings(g.facts)),
    StaticCheck("host log", lambda g: host_log_findings(g.facts)),
    StaticCheck("recovery", lambda g: recovery_findings(g.facts)),
    StaticCheck("host health", lambda g: host_health_findings(g.facts)),
    StaticCheck("RDMA pins", lambda g: ib_expect_findings(g.facts, g.expect)),
    StaticCheck("GPUs busy", lambda g: busy_findings(g.facts, g.busy_mib)),
    StaticCheck("memory parity", lambda g: memory_parity_findings(g.facts), CLUSTER),
    StaticCheck("memory free", lambda g: memory_free_findings(g.facts)),
    StaticCheck("GPUs visible", lambda g: visibility_findings(g.facts, g.expect)),
    StaticCheck("GPU arch", lambda g: arch_findings(g.facts)),
    StaticCheck("torch build", lambda g: cpu_build_findings(g.facts, g.expect)),
    StaticCheck("environment", lambda g: environment_findings(g.facts)),
    StaticCheck(
        "job variables", _with_inventory(lambda g, i: job_env_findings(g.facts, i)), CLUSTER
    ),
    StaticCheck(
        "fabric",
        _with_inventory(lambda g, inv: fabric_findings(g.facts, inv.settings.image, inv.path)),
        CLUSTER,
    ),
    StaticCheck("fabric, one node", lambda g: node_fabric_findings(g.facts), NODE),
)


def static_findings(
    facts: Facts,
    expect: Expectations,
    inventory_path: str | None = None,
    busy_mib: int = DEFAULT_BUSY_MIB,
    *,
    machine_only: bool = False,
    inventory: Inventory | None = None,
    scope: Scope = "cluster",
) -> list[Finding]:
    """The findings of every static check for `scope`, over the hosts that answered; a fix
    shows its provisioning command (for `inventory_path`) as the remedy."""
    given = StaticInput(facts, expect, busy_mib, machine_only, inventory)
    chosen = [check for check in STATIC_CHECKS if scope in check.scopes]
    return [
        with_command(finding, inventory_path) for check in chosen for finding in check.run(given)
    ]
