"""storage.shared / storage.free from what the nodes answered (pure part of the check), and
the node program that answers, run here as a node runs it."""

from __future__ import annotations

import json
from pathlib import Path

from clusterkit.checks.model import Status
from clusterkit.storage.checks import shared_findings
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport
from clusterkit.transport.nodescript import node_script, run_node_script

GIB = 1024**3
TOKEN = "5f0c2a"


def entry(token: str | None = TOKEN, free: int = 500 * GIB, total: int = 2000 * GIB) -> dict:
    found = {"free_bytes": free, "total_bytes": total}
    if token is None:
        found["error"] = "FileNotFoundError: No such file or directory"
    else:
        found["token"] = token
    return found


def by_id(reads: dict, written: dict | None = None) -> dict:
    written = written or {"/ckpt": {"written": True}}
    return {f.id: f for f in shared_findings(["/ckpt"], "n1", TOKEN, written, reads)}


def test_every_node_reading_the_token_is_ok() -> None:
    found = by_id({"n1": {"/ckpt": entry()}, "n2": {"/ckpt": entry()}})
    assert found["storage.shared"].status is Status.OK
    assert found["storage.free"].status is Status.OK


def test_a_node_with_its_own_local_folder_fails() -> None:
    found = by_id({"n1": {"/ckpt": entry()}, "n2": {"/ckpt": entry(None)}})
    shared = found["storage.shared"]
    assert (shared.status, shared.hosts) == (Status.FAIL, ["n2"])
    assert "/ckpt (FileNotFoundError" in shared.message


def test_low_free_space_warns_per_node() -> None:
    found = by_id({"n1": {"/ckpt": entry()}, "n2": {"/ckpt": entry(free=3 * GIB)}})
    assert found["storage.free"].status is Status.WARN
    assert found["storage.free"].found == {"n2": "/ckpt: 3.0 GiB free"}


def test_master_cannot_write_fails_naming_it() -> None:
    written = {"/ckpt": {"error": "PermissionError: Permission denied"}}
    (finding,) = shared_findings(["/ckpt"], "n1", TOKEN, written, {})
    assert (finding.status, finding.hosts) == (Status.FAIL, ["n1"])
    assert "Permission denied" in finding.message


def test_a_node_whose_read_failed_fails() -> None:
    found = by_id({"n1": {"/ckpt": entry()}, "n2": {"error": "timeout: no answer"}})
    assert found["storage.shared"].found == {"n2": "timeout: no answer"}


def test_the_node_program_writes_reads_and_removes_the_token(tmp_path: Path) -> None:
    """clusterkit/node/storage.py behind the bootstrap: the write is exclusive, the read
    finds the token, the removal leaves nothing; a missing folder is an error entry."""
    shared, missing = tmp_path / "ckpt", tmp_path / "absent"
    shared.mkdir()

    def on(action: str) -> dict:
        args = {"action": action, "paths": [str(shared), str(missing)], "token": TOKEN}
        return run_node_script(
            LocalTransport(),
            node_script("storage"),
            [json.dumps(args)],
            interpreter="python3",
            deadline=Deadline.after(30),
            what="the shared-paths script",
        )

    written = on("write")
    assert written[str(shared)]["written"] is True and written[str(shared)]["free_bytes"] > 0
    assert written[str(missing)]["error"].startswith("FileNotFoundError")
    assert on("write")[str(shared)]["error"].startswith("FileExistsError")
    read = on("read")
    assert read[str(shared)]["token"] == TOKEN
    reads = {"n1": {str(shared): read[str(shared)]}}
    found = shared_findings([str(shared)], "n1", TOKEN, {str(shared): written[str(shared)]}, reads)
    assert [f.status for f in found if f.id == "storage.shared"] == [Status.OK]
    on("remove")
    assert not list(shared.iterdir())
