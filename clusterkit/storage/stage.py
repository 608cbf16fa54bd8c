"""The `storage` stage: write a token on the master, read it on every node, clean up."""

from __future__ import annotations

import contextlib
import json
import secrets
from typing import TYPE_CHECKING

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.stage import Stage, StageResult, no_hosts_reason
from clusterkit.errors import TransportError
from clusterkit.inventory.model import Inventory
from clusterkit.storage.checks import shared_findings
from clusterkit.storage.results import Action, Answer, MalformedAnswer, Request, parse_answer
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.nodescript import (
    NodeScriptError,
    ScriptFailure,
    node_script,
    run_node_script,
)
from clusterkit.transport.pool import parallel

if TYPE_CHECKING:
    from clusterkit.contract.session import Session


WHAT = "the shared-paths script"


def _run(transport: Transport, interpreter: str, args: Request, deadline: Deadline) -> Answer:
    """The node's answer, checked; TransportError with the reason when there is none or it
    has another shape (storage/results.py)."""
    raw = run_node_script(
        transport,
        node_script("storage"),
        [json.dumps(args, separators=(",", ":"))],
        interpreter=interpreter,
        deadline=deadline,
        what=WHAT,
    )
    try:
        return parse_answer(raw, args["paths"])
    except MalformedAnswer as error:
        failure = ScriptFailure("broken", f"{WHAT} sent a malformed answer: {error}")
        raise NodeScriptError(transport.host, failure) from None


def run_storage_stage(session: Session, deadline: Deadline) -> StageResult:
    """Stage "storage": write on the master, read everywhere, clean up; findings and the raw
    answers."""
    inventory, transports = session.inventory, session.transports
    paths = list(inventory.settings.shared_paths)
    if not paths:
        return StageResult()
    master = _master(inventory)
    if master not in transports:
        why = f"not checked: the master {master} could not be reached"
        return StageResult([Finding("storage.shared", Status.SKIP, why)])
    token = secrets.token_hex(12)

    def on(name: str, action: Action) -> Answer:
        args = Request(action=action, paths=paths, token=token)
        interpreter = inventory.host(name).python_interpreter or "python3"
        return _run(transports[name], interpreter, args, deadline)

    try:
        written = on(master, "write")
    except TransportError as error:
        failure = f"{master}: could not write the token: {error.detail}"
        return StageResult([Finding("storage.shared", Status.ERROR, failure, [master])])
    names = list(transports)
    reads: dict[str, Answer | str] = {}  # a node's answer, or why its read failed
    try:
        for name, outcome in zip(
            names, parallel(lambda n: on(n, "read"), names, workers=session.workers)
        ):
            reads[name] = (
                (outcome.detail if isinstance(outcome, TransportError) else str(outcome))
                if isinstance(outcome, BaseException)
                else outcome
            )
    finally:
        # the read answers are what matter; a leftover token file is harmless
        with contextlib.suppress(TransportError):
            on(master, "remove")
    shown = {n: {"error": r} if isinstance(r, str) else r for n, r in reads.items()}
    details = {"master": master, "token": token, "written": written, "reads": shown}
    return StageResult(shared_findings(paths, master, token, written, reads), details)


def _master(inventory: Inventory) -> str:
    master = inventory.settings.master or inventory.hosts[0].name
    for host in inventory.hosts:
        if master in (host.name, host.address):
            return host.name
    return master


SHARED_SECONDS = 30.0


class StorageStage(Stage):
    name = "storage"

    def __init__(self, seconds: float = SHARED_SECONDS) -> None:
        self.seconds = seconds

    def skip_reason(self, session: Session) -> str | None:
        why = super().skip_reason(session) or no_hosts_reason(session)
        if not why and not session.inventory.settings.shared_paths:
            why = "no clusterkit.shared_paths in the inventory"
        return why

    def run(self, session: Session) -> StageResult:
        return run_storage_stage(session, session.bounded(self.seconds))
