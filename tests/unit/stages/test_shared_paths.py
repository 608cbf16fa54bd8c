"""storage.shared / storage.free from what the nodes answered (pure part of the check), the
node program that answers, run here as a node runs it, and its answers checked on arrival
(clusterkit/storage/results.py): the real program's pass strictly, one of another shape
fails that node with one line naming the path of the bad value, never a traceback."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit import framing
from clusterkit.checks.model import Status
from clusterkit.contract.session import Session
from clusterkit.inventory.model import ClusterSettings, Host, Inventory
from clusterkit.storage.checks import shared_findings
from clusterkit.storage.results import MalformedAnswer, parse_answer
from clusterkit.storage.stage import run_storage_stage
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
    found = by_id({"n1": {"/ckpt": entry()}, "n2": "timeout: no answer"})
    assert found["storage.shared"].found == {"n2": "timeout: no answer"}


def test_the_node_program_writes_reads_and_removes_the_token(tmp_path: Path) -> None:
    """clusterkit/node/storage.py behind the bootstrap: the write is exclusive, the read
    finds the token, the removal leaves nothing; a missing folder is an error entry."""
    shared, missing = tmp_path / "ckpt", tmp_path / "absent"
    shared.mkdir()

    paths = [str(shared), str(missing)]

    def on(action: str) -> Any:
        args = {"action": action, "paths": paths, "token": TOKEN}
        answer = run_node_script(
            LocalTransport(),
            node_script("storage"),
            [json.dumps(args)],
            interpreter="python3",
            deadline=Deadline.after(30),
            what="the shared-paths script",
        )
        assert parse_answer(answer, paths) == answer  # every answer has the declared shape
        return answer

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


RECORDED = {  # a node's read answer, as clusterkit/node/storage.py sent it
    "/ckpt": {"token": TOKEN, "free_bytes": 536870912000, "total_bytes": 2147483648000},
    "/data": {"error": "FileNotFoundError: No such file or directory"},
}


def test_a_recorded_answer_passes() -> None:
    assert parse_answer(json.loads(json.dumps(RECORDED)), ["/ckpt", "/data"]) == RECORDED


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({**RECORDED, "/ckpt": {"token": 5}}, "storage./ckpt.token: str expected, got 5"),
        ({**RECORDED, "/ckpt": {"free_bytes": "lots"}},
         "storage./ckpt.free_bytes: int expected, got 'lots'"),
        ({**RECORDED, "/ckpt": {"written": True, "mode": "0644"}},
         "storage./ckpt: unknown key 'mode'"),
        ({**RECORDED, "/ckpt": ["token"]}, "storage./ckpt: an object expected, got ['token']"),
        ({"/ckpt": RECORDED["/ckpt"]}, "storage: no entry for '/data'"),
        ({**RECORDED, "/etc": {}}, "storage: unknown path '/etc'"),
        ({**RECORDED, "/x\x1b[2J": {"token": 5}}, "storage: unknown path '/x\\x1b[2J'"),
    ],
)  # fmt: skip
def test_an_answer_of_another_shape_is_rejected_naming_the_path(answer: object, why: str) -> None:
    with pytest.raises(MalformedAnswer) as raised:
        parse_answer(answer, ["/ckpt", "/data"])
    assert str(raised.value) == why


def _answering(tmp_path: Path, answer: object) -> str:
    """An interpreter for a hostile node: whatever it is sent, it answers `answer`."""
    script = tmp_path / "hostile-python"
    frame = framing.encode(answer).decode()
    script.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf %s {shlex.quote(frame)}\n")
    script.chmod(0o755)
    return str(script)


def _inventory(interpreters: dict[str, str], shared: str) -> Inventory:
    """Local nodes, each with its own interpreter, sharing the folder `shared`."""
    hosts = tuple(
        Host(name=name, address=name, connection="local", python_interpreter=python)
        for name, python in interpreters.items()
    )
    return Inventory(path=None, hosts=hosts, settings=ClusterSettings(shared_paths=(shared,)))


def test_a_malformed_answer_fails_that_node_alone_with_one_line(tmp_path: Path) -> None:
    """node2 answers the read with a token that is no string: the stage names node2 and the
    path, as it names a node whose read failed; node1 (the real program) is checked."""
    shared = tmp_path / "ckpt"
    shared.mkdir()
    hostile = _answering(tmp_path, {str(shared): {"token": 5, "free_bytes": 1}})
    inventory = _inventory({"node1": sys.executable, "node2": hostile}, str(shared))
    transports = {name: LocalTransport(name) for name in ("node1", "node2")}
    result = run_storage_stage(Session(inventory, transports=transports), Deadline.after(60))
    (finding,) = [f for f in result.findings if f.id == "storage.shared"]
    assert (finding.status, finding.hosts) == (Status.FAIL, ["node2"])
    why = (
        "the shared-paths script sent a malformed answer: "
        f"storage.{shared}.token: str expected, got 5"
    )
    assert finding.found == {"node2": why}
    assert finding.message == f"not the same storage as on node1: node2: {why}"
    reads = result.details["reads"]
    assert reads["node2"] == {"error": why}  # the report shows it as a read that failed
    assert reads["node1"][str(shared)]["token"] == result.details["token"]
    assert not list(shared.iterdir())


def test_a_master_that_answers_the_write_malformed_is_named(tmp_path: Path) -> None:
    hostile = _answering(tmp_path, {"/ckpt": {"written": "yes"}})
    inventory = _inventory({"node1": hostile}, "/ckpt")
    session = Session(inventory, transports={"node1": LocalTransport("node1")})
    (finding,) = run_storage_stage(session, Deadline.after(60)).findings
    assert (finding.status, finding.hosts) == (Status.ERROR, ["node1"])
    assert finding.message == (
        "node1: could not write the token: the shared-paths script sent a malformed answer: "
        "storage./ckpt.written: bool expected, got 'yes'"
    )
