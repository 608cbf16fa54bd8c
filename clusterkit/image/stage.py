"""The `image` stage of `check`: ship image/node.py to every host at once, apply the checks."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.errors import TransportError
from clusterkit.image.checks import STAGE, image_findings
from clusterkit.inventory.model import Inventory
from clusterkit.nodescript.compose import node_script
from clusterkit.nodescript.run import run_node_script
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.pool import parallel

NODE_SCRIPT = "clusterkit.image.node"


def _interpreter(inventory: Inventory, host: str) -> str:
    with contextlib.suppress(KeyError):
        return inventory.host(host).python_interpreter or "python3"
    return "python3"


def _node_args(inventory: Inventory, step_timeout: float, gpus: bool) -> list[str]:
    args = [str(inventory.settings.image), "--timeout", f"{step_timeout:.0f}"]
    override = inventory.settings.image_run_args
    if override is not None:
        args += ["--run-args", json.dumps(list(override))]
    if gpus:
        args += ["--gpus", "all"]
    return args


def run_image_stage(
    transports: dict[str, Transport],
    inventory: Inventory,
    deadline: Deadline,
    *,
    driver_by_host: dict[str, str | None] | None = None,
    workers: int = 64,
) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """Findings and each host's raw facts. A host whose script gives no frame counts as could
    not check (error), never as a pass. Hosts with a driver get `--gpus all` on the run."""
    if not inventory.settings.image:
        return image_findings({}, inventory.settings), {}
    script = node_script(NODE_SCRIPT)
    drivers = driver_by_host or {}
    # Inspect + info + run each get a share; the run dominates (python and torch import).
    step_timeout = max(5.0, deadline.remaining() / 3)

    def one(host: str) -> dict[str, Any]:
        # Its "error" is one of its facts (what went wrong beside what it found), not a
        # report of its own failure: image_findings reads it.
        try:
            return run_node_script(
                transports[host],
                script,
                _node_args(inventory, step_timeout, drivers.get(host) is not None),
                interpreter=_interpreter(inventory, host),
                deadline=deadline,
                what="the image check",
                error_report=False,
            )
        except TransportError as error:
            return {"present": None, "error": error.detail}

    hosts = sorted(transports)
    results = parallel(one, hosts, workers=workers)
    facts: dict[str, dict[str, Any]] = {}
    for host, result in zip(hosts, results, strict=True):
        if isinstance(result, BaseException):
            facts[host] = {"present": None, "error": str(result)}
        else:
            facts[host] = result
    findings = image_findings(facts, inventory.settings, drivers)
    if not findings:
        findings = [Finding("image.stage", Status.ERROR, "no image facts", stage=STAGE)]
    return findings, facts
