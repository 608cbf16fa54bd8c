"""The `image` stage of `check`: ship clusterkit/node/image.py to every host at once, apply
the checks."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.stage import Stage, StageResult, no_hosts_reason
from clusterkit.errors import TransportError
from clusterkit.facts import collected
from clusterkit.image.checks import image_findings, rdma_findings
from clusterkit.image.presence import ImagePresence, MalformedPresence, parse_presence, unchecked
from clusterkit.inventory.model import Inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.nodescript import node_script, run_node_script
from clusterkit.transport.pool import parallel

if TYPE_CHECKING:
    from clusterkit.contract.session import Session

NODE_SCRIPT = "image"  # clusterkit/node/image.py


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


def run_image_stage(session: Session, deadline: Deadline) -> StageResult:
    """Stage "image": findings, and each host's raw facts for the JSON report. A host whose
    script gives no frame counts as could not check (error), never as a pass. Hosts with a
    driver in the probe's facts get `--gpus all` on the run."""
    settings = session.inventory.settings
    if not settings.image:
        return StageResult(image_findings({}, settings), {})
    drivers = {host: collected(f.get("gpus")).get("driver") for host, f in session.facts.items()}
    facts = image_facts(session, deadline, drivers)
    findings = image_findings(facts, settings, drivers)
    if not findings:
        findings = [Finding("image.stage", Status.ERROR, "no image facts")]
    return StageResult(findings + rdma_findings(facts, session.facts), facts)


def image_facts(
    session: Session, deadline: Deadline, drivers: dict[str, str | None]
) -> dict[str, ImagePresence]:
    """What the node script found on each connected host, in host order; a host whose
    report has another shape is one whose image could not be checked, and why."""
    inventory = session.inventory
    script = node_script(NODE_SCRIPT)
    # Inspect + info + run each get a share; the run dominates (python and torch import).
    step_timeout = max(5.0, deadline.remaining() / 3)

    def one(host: str) -> ImagePresence:
        # Its "error" is one of its facts (what went wrong beside what it found), not a
        # report of its own failure: image_findings reads it.
        try:
            report = run_node_script(
                session.transports[host],
                script,
                _node_args(inventory, step_timeout, drivers.get(host) is not None),
                interpreter=_interpreter(inventory, host),
                deadline=deadline,
                what="the image check",
                error_report=False,
            )
        except TransportError as error:
            return unchecked(error.detail)
        try:
            return parse_presence(report)
        except MalformedPresence as error:
            return unchecked(f"the image check sent a malformed report: {error}")

    hosts = sorted(session.transports)
    facts: dict[str, ImagePresence] = {}
    for host, result in zip(hosts, parallel(one, hosts, workers=session.workers), strict=True):
        if isinstance(result, BaseException):
            facts[host] = unchecked(str(result))
        else:
            facts[host] = result
    return facts


IMAGE_SECONDS = 180.0


class ImageStage(Stage):
    name = "image"

    def __init__(self, seconds: float = IMAGE_SECONDS) -> None:
        self.seconds = seconds

    def skip_reason(self, session: Session) -> str | None:
        why = super().skip_reason(session) or no_hosts_reason(session)
        if not why and not session.inventory.settings.image:
            why = "no image named in the inventory (clusterkit.image)"
        return why

    def run(self, session: Session) -> StageResult:
        return run_image_stage(session, session.bounded(self.seconds))
