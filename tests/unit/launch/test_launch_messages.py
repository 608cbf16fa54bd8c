"""The launch node program's control messages are checked where they arrive
(clusterkit/launch/messages.py): the real program's pass strictly, one of another shape is
dropped like a line that is not JSON, with one line naming the path of the bad value, and
the supervisor goes on: a malformed exit report makes the node lost when it ends, never a
supervisor that waits for it."""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clusterkit.launch.messages import MalformedControl, parse_control
from clusterkit.launch.supervise import node_source
from clusterkit.rundir import RUN_DIR
from clusterkit.transport.base import Deadline, RemoteProcess
from clusterkit.transport.local import LocalTransport
from clusterkit.transport.nodescript import shipment
from tests.unit.launch.test_launch_hostile_node import control, supervisor
from tests.unit.launch.test_launch_stacks import rank_entry

# The job: one "rank" (torchrun's variables set by hand) that says it runs, then waits.
JOB = "import time; print('ready', flush=True); time.sleep(60)"
RECORDED = [  # as clusterkit/node/launch.py sent them, token stripped
    {"event": "started", "pid": 4242, "hostname": "node1", "stacks": "py-spy"},
    {"event": "alive"},
    {"event": "dump", "ranks": [
        {"rank": 0, "local_rank": "0", "pid": 4250, "method": "py-spy", "raw": "[]",
         "sources": {"/job/train.py:41": "time.sleep(600)"}},
        {"rank": 1, "local_rank": None, "pid": 4251, "method": "py-spy",
         "error": "py-spy: no answer within 20 s", "sources": {}},
    ]},
    {"event": "exit", "code": 0, "stopped": False, "leftovers": 0},
    {"event": "exit", "code": None, "stopped": True, "leftovers": 1,
     "error": "the job's process 4242 did not end after SIGKILL"},
    {"event": "exit", "code": 127, "error": "cannot start: [Errno 2] No such file"},
]  # fmt: skip


def _until(process: RemoteProcess, token: bytes, wanted: str, seconds: float) -> list[Any]:
    """Control messages (decoded) until one whose event is `wanted`; the job's own lines
    are skipped."""
    deadline = Deadline.after(seconds)
    messages: list[Any] = []
    while not deadline.expired:
        for line in process.read_lines(Deadline.after(0.5)).splitlines():
            if line.startswith(token + b" "):
                messages.append(json.loads(line[len(token) + 1 :]))
                if messages[-1]["event"] == wanted:
                    return messages
    raise AssertionError(f"no {wanted!r} message in {seconds:g} s: {messages}")


def start_node_program(workdir: Path, env: dict[str, str]) -> tuple[RemoteProcess, bytes]:
    """The real node program, shipped as the supervisor ships it, running JOB in `workdir`
    with `env` (torchrun's variables make it a rank): the process and its message token."""
    token = "clusterkit-" + secrets.token_hex(8)
    spec = {
        "token": token, "marker": f"test-{secrets.token_hex(4)}/0",
        "argv": [sys.executable, "-c", JOB], "env": env, "run_name": "clusterkit-test-launch",
        "run_dir_placeholder": RUN_DIR,
        "workdir": str(workdir), "container": None, "stop_grace": 2.0, "stacks": "faulthandler",
    }  # fmt: skip
    argv, stdin = shipment(sys.executable, node_source(), [json.dumps(spec)])
    process = LocalTransport("node1").start(argv, deadline=Deadline.after(60))
    process.send(stdin)
    return process, token.encode()


def test_the_node_programs_messages_pass_strictly(tmp_path: Path) -> None:
    """The real program, shipped as the supervisor ships it, runs a one-rank job: started,
    the heartbeat, a stack dump and the exit report all have the declared shape."""
    process, token = start_node_program(
        tmp_path, {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0"}
    )
    try:
        messages = _until(process, token, "started", 20)
        messages += _until(process, token, "alive", 15)
        process.send(b"dump\n")
        messages += _until(process, token, "dump", 20)
        process.send(b"stop\n")
        messages += _until(process, token, "exit", 20)
    finally:
        process.finish(Deadline.after(10))
    for message in messages:
        assert parse_control(message) == (message, [])
    events = [message["event"] for message in messages]
    assert {"started", "alive", "dump", "exit"} <= set(events)
    (dump,) = [message for message in messages if message["event"] == "dump"]
    assert [entry["rank"] for entry in dump["ranks"]] == [0]
    assert messages[-1]["stopped"] is True


def test_recorded_messages_pass_strictly() -> None:
    for message in json.loads(json.dumps(RECORDED)):
        assert parse_control(message) == (message, [])


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ({"event": "exit", "code": "0"}, "exit.code: "),
        ({"event": "exit", "code": 0, "signal": 9}, "exit: unknown key 'signal'"),
        ({"event": "started", "pid": 1, "hostname": "n1", "stacks": "gdb"},
         "started.stacks: 'gdb' not allowed"),
        ({"event": "started", "stacks": "py-spy"}, "started: no 'pid'"),
        ({"event": "alive", "at": 3}, "alive: unknown key 'at'"),
        ({"event": "restart"}, "control.event: 'restart' not allowed"),
        ({"code": 0}, "control.event: None not allowed"),
        ([1, 2], "control: an object expected, got [1, 2]"),
    ],
)  # fmt: skip
def test_a_message_of_another_shape_is_rejected_naming_the_path(message: object, why: str) -> None:
    with pytest.raises(MalformedControl) as raised:
        parse_control(message)
    assert str(raised.value).startswith(why)


def test_a_dump_keeps_its_well_formed_entries_and_names_the_others() -> None:
    good = rank_entry(0, 10, method="faulthandler", raw="")
    message = {"event": "dump", "ranks": [good, {**good, "rank": "0"}, {**good, "tid": 3},
                                          {**good, "pid": 0}], "at": 1}  # fmt: skip
    assert parse_control(message) == (
        {"event": "dump", "ranks": [good]},
        [
            "dump: unknown key 'at'",
            "dump.ranks[1].rank: int expected, got '0'",
            "dump.ranks[2]: unknown key 'tid'",
            "dump.ranks[3].pid: 0 is out of range (1 to 2147483647)",
        ],
    )
    assert parse_control({"event": "dump", "ranks": "all"}) == (
        {"event": "dump", "ranks": []},
        ["dump.ranks: a list expected, got 'all'"],
    )


def test_a_malformed_message_is_dropped_and_named_once() -> None:
    sup, notes = supervisor()
    control(sup, "n1", {"event": "exit", "code": "0", "stopped": False})
    control(sup, "n1", {"event": "exit", "code": [1]})
    node = sup.nodes["n1"]
    assert (node.exit_code, node.reported_at, sup.failures) == (None, None, [])
    assert notes == [
        "clusterkit: n1: a malformed message was dropped: exit.code: int expected, got '0'"
    ]


def test_a_malformed_exit_report_does_not_stall_the_supervisor() -> None:
    """n1's exit report has a code that is no number: dropped, so n1 ended without one and
    is lost; n2 reported. The supervisor stops at once instead of waiting for a report."""
    sup, notes = supervisor()
    prefix = sup.token.encode() + b" "
    sup.events.put(("line", "n1", prefix + json.dumps({"event": "exit", "code": "1"}).encode()))
    sup.events.put(("ended", "n1", ""))
    sup.events.put(("line", "n2", prefix + b'{"event": "exit", "code": 0}'))
    sup.events.put(("ended", "n2", ""))
    watching = threading.Thread(target=sup._watch, args=(Deadline.after(60),), daemon=True)
    started = time.monotonic()
    watching.start()
    watching.join(10)
    assert not watching.is_alive() and time.monotonic() - started < 5
    outcome = sup._outcome()
    assert (outcome.result, outcome.first_failure and outcome.first_failure.host) == ("lost", "n1")
    assert outcome.node_codes == {"n1": None, "n2": 0}
    assert notes[0].endswith("exit.code: int expected, got '1'")
