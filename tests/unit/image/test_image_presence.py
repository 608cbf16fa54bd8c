"""The image node program's report is checked where it arrives (clusterkit/image/presence.py):
the real program's report passes strictly, and one of another shape makes that node's image
uncheckable with one line naming the path of the bad value, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.model import Status
from clusterkit.contract.session import Session
from clusterkit.image.presence import MalformedPresence, parse_presence
from clusterkit.image.stage import NODE_SCRIPT, run_image_stage
from clusterkit.inventory.model import ClusterSettings, Host, Inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport
from clusterkit.transport.nodescript import node_script, run_node_script
from tests.unit.image.test_image_checks import IMAGE, LABELS, node

NOWHERE = "unix:///nonexistent/clusterkit-test/docker.sock"


def _wire(report: object) -> Any:
    return json.loads(json.dumps(report))


def test_a_recorded_report_passes() -> None:
    recorded = _wire(node())
    assert parse_presence(recorded) == recorded


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"labels": {**LABELS, "io.clusterkit.cuda": 12}},
         "image.labels.io.clusterkit.cuda: str expected, got 12"),
        ({"run": {"ok": True, "facts": {"python": "3.10.12", "shm_bytes": None,
                                        "memlock_soft": None, "memlock_hard": None,
                                        "nvidia_disable_require": None, "gpu_count": 8}}},
         "image.run.facts: unknown key 'gpu_count'"),
        ({"run_args": ["--ipc", "host", ["--privileged"]]},
         "image.run_args[2]: str expected, got ['--privileged']"),
        ({"present": "yes"}, "image.present: "),
        ({"docker": "unix:///run/docker.sock"}, "image: unknown key 'docker'"),
    ],
)  # fmt: skip
def test_a_report_of_another_shape_is_rejected_naming_the_path(
    change: dict[str, Any], why: str
) -> None:
    with pytest.raises(MalformedPresence) as raised:
        parse_presence({**_wire(node()), **change})
    assert str(raised.value).startswith(why)


def test_the_node_programs_report_passes_strictly() -> None:
    """The real program, shipped as the stage ships it, against an engine that is not there."""
    transport = LocalTransport("node1", env={**os.environ, "DOCKER_HOST": NOWHERE})
    report = run_node_script(
        transport, node_script(NODE_SCRIPT), [IMAGE, "--timeout", "20"],
        interpreter="python3", deadline=Deadline.after(60), what="the image check",
        error_report=False,
    )  # fmt: skip
    presence = parse_presence(report)
    assert (presence["image"], presence["docker_host"]) == (IMAGE, NOWHERE)
    assert presence["present"] is None and "docker image inspect" in presence.get("error", "")


HOSTILE_DOCKER = """#!/bin/sh
case "$1" in
  image) echo '{"Id": "sha256:1", "Config": {"Labels": {"io.clusterkit.cuda": 12}}}' ;;
  info) echo '[]|overlay2' ;;
esac
"""


def test_a_hostile_report_fails_that_node_alone(tmp_path: Path) -> None:
    """node2's docker answers with a label that is no string: the real node program passes it
    on, and the stage names node2 and the path instead of checking on a wrong shape."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "docker").write_text(HOSTILE_DOCKER)
    (tools / "docker").chmod(0o755)
    environments = {
        "node1": {**os.environ, "DOCKER_HOST": NOWHERE},
        "node2": {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"},
    }
    inventory = Inventory(
        path=None,
        hosts=tuple(Host(name=name, address=name, connection="local") for name in environments),
        settings=ClusterSettings(image=IMAGE),
    )
    transports = {name: LocalTransport(name, env=env) for name, env in environments.items()}
    result = run_image_stage(Session(inventory, transports=transports), Deadline.after(60))
    errors = {f.hosts[0]: f.message for f in result.findings if f.id == "image.inspect"}
    assert {f.status for f in result.findings if f.id == "image.inspect"} == {Status.ERROR}
    assert errors["node2"] == (
        f"node2: could not inspect {IMAGE}: the image check sent a malformed report: "
        "image.labels.io.clusterkit.cuda: str expected, got 12"
    )
    assert "docker image inspect" in errors["node1"]  # the other node: its own reason
