"""Shared storage across nodes: a token written on the master is read back on every node.

`clusterkit.shared_paths` names the folders a job relies on being the same everywhere (the
checkpoint directory rank 0 writes and every rank loads). Three bounded round trips: write a
token file on the master, read it on every node (with the free space there), remove it on
the master. The verdict is a pure function of what came back (`shared_findings`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clusterkit.checks.model import Finding, Status, over_hosts
from clusterkit.errors import TransportError
from clusterkit.inventory.model import Inventory
from clusterkit.nodescript.compose import compose
from clusterkit.nodescript.run import run_node_script
from clusterkit.stages.base import StageResult
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.pool import parallel

if TYPE_CHECKING:
    from clusterkit.stages.session import Session

STAGE = "probe"
LOW_FREE_BYTES = 10 * 1024**3  # a checkpoint of a large model needs far more than this
TOKEN_FILE = ".clusterkit-shared-{token}"
# Runs on the nodes (run_node_script, with JSON arguments), composed with the node-side
# prelude: stdlib only, Python 3.8, one JSON frame out.
NODE_SCRIPT = r"""
import json, os, sys
from clusterkit.nodescript.prelude import emit
args = json.loads(sys.argv[1])
out = {}
for path in args["paths"]:
    name = os.path.join(path, ".clusterkit-shared-" + args["token"])
    entry = {}
    try:
        if args["action"] == "write":
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, args["token"].encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            entry["written"] = True
        elif args["action"] == "read":
            with open(name) as handle:
                entry["token"] = handle.read(200)
        else:
            os.unlink(name)
    except OSError as error:
        entry["error"] = "%s: %s" % (type(error).__name__, error.strerror or error)
    try:
        stat = os.statvfs(path)
        entry["free_bytes"] = stat.f_bavail * stat.f_frsize
        entry["total_bytes"] = stat.f_blocks * stat.f_frsize
    except OSError:
        pass
    out[path] = entry
emit(out)
"""


def _run(
    transport: Transport, interpreter: str, args: dict[str, Any], deadline: Deadline
) -> dict[str, Any]:
    return run_node_script(
        transport,
        compose(NODE_SCRIPT),
        [json.dumps(args, separators=(",", ":"))],
        interpreter=interpreter,
        deadline=deadline,
        what="the shared-paths script",
    )


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
        return StageResult([Finding("storage.shared", Status.SKIP, why, stage=STAGE)])
    token = secrets.token_hex(12)

    def on(name: str, action: str) -> dict[str, Any]:
        args = {"action": action, "paths": paths, "token": token}
        interpreter = inventory.host(name).python_interpreter or "python3"
        return _run(transports[name], interpreter, args, deadline)

    try:
        written = on(master, "write")
    except TransportError as error:
        failure = f"{master}: could not write the token: {error.detail}"
        return StageResult(
            [Finding("storage.shared", Status.ERROR, failure, [master], stage=STAGE)]
        )
    names = list(transports)
    reads: dict[str, Any] = {}
    try:
        for name, outcome in zip(
            names, parallel(lambda n: on(n, "read"), names, workers=session.workers)
        ):
            reads[name] = (
                {"error": outcome.detail if isinstance(outcome, TransportError) else str(outcome)}
                if isinstance(outcome, BaseException)
                else outcome
            )
    finally:
        # the read answers are what matter; a leftover token file is harmless
        with contextlib.suppress(TransportError):
            on(master, "remove")
    details = {"master": master, "token": token, "written": written, "reads": reads}
    return StageResult(shared_findings(paths, master, token, written, reads), details)


def _master(inventory: Inventory) -> str:
    master = inventory.settings.master or inventory.hosts[0].name
    for host in inventory.hosts:
        if master in (host.name, host.address):
            return host.name
    return master


def shared_findings(
    paths: list[str],
    master: str,
    token: str,
    written: Mapping[str, Any],
    reads: Mapping[str, Mapping[str, Any]],
) -> list[Finding]:
    """storage.shared: every node read the master's token in every path; storage.free: free
    space per node and path."""
    not_written = {p: e.get("error", "?") for p, e in written.items() if not e.get("written")}
    if not_written:
        return [_not_written(master, not_written)]
    unshared, low, failed = _read_problems(paths, token, reads)
    findings = [
        over_hosts(
            "storage.shared",
            {**unshared, **failed},
            list(reads),
            ok=f"every node reads what {master} wrote in {', '.join(paths)}",
            failed=f"not the same storage as on {master}: "
            + "; ".join(f"{h}: {why}" for h, why in {**unshared, **failed}.items()),
            remedy="mount the shared filesystem at the same path on every node (NFS, Lustre, "
            "...): rank 0's checkpoint must be readable by every rank",
        ),
        over_hosts(
            "storage.free",
            low,
            list(reads),
            status=Status.WARN,
            ok=f"at least {LOW_FREE_BYTES // 1024**3} GiB free in the shared paths on every node",
            failed="little free space in the shared paths: "
            + "; ".join(f"{h}: {why}" for h, why in low.items()),
            remedy="free space or grow the filesystem before the job writes checkpoints",
        ),
    ]
    for finding in findings:
        finding.stage = STAGE
    return findings


def _not_written(master: str, not_written: dict[str, Any]) -> Finding:
    """storage.shared: the token could not even be written on the master."""
    message = f"{master} could not write in " + "; ".join(
        f"{path} ({why})" for path, why in not_written.items()
    )
    return Finding(
        "storage.shared",
        Status.FAIL,
        message,
        hosts=[master],
        found=not_written,
        remedy="create the folders and make them writable by the job's user on the "
        "master (they must be the same shared filesystem on every node)",
        stage=STAGE,
    )


def _read_problems(
    paths: list[str], token: str, reads: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Per node: the paths where it did not read the token, a path low on space, a read that
    failed outright."""
    unshared: dict[str, str] = {}
    low: dict[str, str] = {}
    failed: dict[str, str] = {}
    for host, answer in reads.items():
        if "error" in answer:  # the read itself failed (paths are absolute: no clash)
            failed[host] = str(answer["error"])
            continue
        missing = []
        for path in paths:
            entry = answer.get(path) or {}
            if entry.get("token") != token:
                missing.append(f"{path} ({entry.get('error') or 'another file'})")
            free = entry.get("free_bytes")
            total = entry.get("total_bytes") or 0
            if free is not None and (free < LOW_FREE_BYTES or (total and free < total * 0.05)):
                low[host] = f"{path}: {free / 1024**3:.1f} GiB free"
        if missing:
            unshared[host] = "token not found in " + ", ".join(missing)
    return unshared, low, failed
