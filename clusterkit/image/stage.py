"""The `image` stage of `check`: ship image/node.py to every host at once, apply the checks."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.framing import FrameError, decode
from clusterkit.image.checks import STAGE, image_findings
from clusterkit.inventory.model import Inventory
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.pool import parallel

NODE_SCRIPT = Path(__file__).with_name("node.py")


def _node_argv(inventory: Inventory, host: str, step_timeout: float, gpus: bool) -> list[str]:
    python = "python3"
    with contextlib.suppress(KeyError):
        python = inventory.host(host).python_interpreter or python
    argv = [python, "-", str(inventory.settings.image), "--timeout", f"{step_timeout:.0f}"]
    override = inventory.settings.image_run_args
    if override is not None:
        argv += ["--run-args", json.dumps(list(override))]
    if gpus:
        argv += ["--gpus", "all"]
    return argv


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
    script = NODE_SCRIPT.read_bytes()
    drivers = driver_by_host or {}
    # Inspect + info + run each get a share; the run dominates (python and torch import).
    step_timeout = max(5.0, deadline.remaining() / 3)

    def one(host: str) -> dict[str, Any]:
        argv = _node_argv(inventory, host, step_timeout, drivers.get(host) is not None)
        result = transports[host].run(argv, stdin=script, deadline=deadline)
        if result.timed_out:
            return {"present": None, "error": "the image check timed out"}
        try:
            return dict(decode(result.stdout))
        except FrameError as error:
            detail = result.stderr_tail() or str(error)
            return {"present": None, "error": f"exit {result.exit_code}: {detail}"}

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
