"""storage.shared / storage.free from what the nodes answered (pure part of the check)."""

from __future__ import annotations

from clusterkit.checks.model import Status
from clusterkit.probe.shared import shared_findings

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
