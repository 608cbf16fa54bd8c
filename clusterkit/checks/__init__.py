"""Checks are pure functions: (facts of all hosts, expectations) -> findings. No I/O here."""

from __future__ import annotations

from collections.abc import Callable

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
    memory_findings,
)
from clusterkit.checks.host_health import host_health_findings
from clusterkit.checks.hostlog import host_log_findings
from clusterkit.checks.links import ib_expect_findings
from clusterkit.checks.model import Finding, Fix, Status, with_command
from clusterkit.checks.parity import Facts, firmware_parity_findings, parity_findings
from clusterkit.checks.recovery import recovery_findings
from clusterkit.checks.stack import driver_cuda_findings, expectation_findings, torch_findings
from clusterkit.checks.xid import xid_findings
from clusterkit.inventory.model import Expectations

__all__ = ["Finding", "Fix", "Status", "static_findings"]


def static_findings(
    facts: Facts,
    expect: Expectations,
    inventory_path: str | None = None,
    busy_mib: int = DEFAULT_BUSY_MIB,
    *,
    machine_only: bool = False,
) -> list[Finding]:
    """Every check that needs only the probe's facts, over the hosts that answered; a fix
    shows its provisioning command (for `inventory_path`) as the remedy."""
    checks: list[Callable[[], list[Finding]]] = [
        lambda: parity_findings(facts),
        lambda: firmware_parity_findings(facts),
        lambda: expectation_findings(facts, expect),
        lambda: torch_findings(facts, machine_only=machine_only),
        lambda: driver_cuda_findings(facts),
        lambda: gpu_findings(facts),
        lambda: gpu_health_findings(facts),
        lambda: gpu_presence_findings(facts, expect),
        lambda: xid_findings(facts),
        lambda: host_log_findings(facts),
        lambda: recovery_findings(facts),
        lambda: host_health_findings(facts),
        lambda: ib_expect_findings(facts, expect),
        lambda: busy_findings(facts, busy_mib),
        lambda: memory_findings(facts),
        lambda: visibility_findings(facts, expect),
        lambda: arch_findings(facts),
        lambda: cpu_build_findings(facts, expect),
        lambda: environment_findings(facts),
    ]
    return [with_command(finding, inventory_path) for check in checks for finding in check()]
