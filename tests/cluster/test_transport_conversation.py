"""Talking to a running command (Transport.start): over real SSH to a node, and locally.

The network stage keeps one process per node across its steps, so a reply must arrive while
the command still runs, a silent command must not outlive its deadline, and an interrupt must
kill it on the node.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterkit.errors import TransportError
from clusterkit.inventory import load_inventory
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from clusterkit.transport.local import LocalTransport
from tests.support.netcluster import NetCluster

MARK = b"<end>\n"
# Answers each stdin line with "got LINE" and the marker; exits 7 on "quit", 0 at EOF.
ECHO = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    if line.strip() == 'quit':\n"
    "        sys.stderr.write('asked to quit\\n'); sys.exit(7)\n"
    "    sys.stdout.write('got ' + line.strip() + '\\n<end>\\n'); sys.stdout.flush()\n"
)
STAMP = "clusterkit-conversation-test"  # names the test's processes on the node


@pytest.fixture(params=["ssh", "local"])
def endpoint(
    request: pytest.FixtureRequest, cluster: NetCluster, cluster_inventory: Path
) -> Iterator[tuple[Transport, Callable[[], list[str]]]]:
    """A transport and a function listing the test's processes still alive where it runs."""
    if request.param == "local":
        yield LocalTransport("local"), _local_leftovers
        return
    connections = connect_all(
        load_inventory(cluster_inventory), ConnectOptions(ssh_config="/dev/null")
    )
    node = cluster.nodes[0]
    try:
        yield connections.transports[node.name], lambda: [p.command for p in node.processes()]
    finally:
        connections.close()


def _local_leftovers() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if STAMP in command and int(pid) != os.getpid():
            found.append(command)
    return found


def _python(script: str) -> list[str]:
    return ["python3", "-c", script, STAMP]


def _settled(leftovers: Callable[[], list[str]]) -> list[str]:
    give_up = time.monotonic() + 3
    while leftovers() and time.monotonic() < give_up:
        time.sleep(0.1)  # sshd and the kernel reap asynchronously
    return leftovers()


def test_replies_arrive_while_the_command_runs(endpoint) -> None:
    transport, leftovers = endpoint
    process = transport.start(_python(ECHO), deadline=Deadline.after(30))
    process.send(b"one\n")
    assert process.expect(MARK, Deadline.after(10)) == b"got one\n<end>\n"
    process.send(b"two\nthree\n")
    assert process.expect(MARK, Deadline.after(10)) == b"got two\n<end>\n"
    assert process.expect(MARK, Deadline.after(10)) == b"got three\n<end>\n"
    result = process.finish(Deadline.after(10))
    assert (result.exit_code, result.timed_out) == (0, False)
    assert result.stdout.count(b"<end>") == 3
    assert process.finish(Deadline.after(1)) is result  # idempotent
    assert _settled(leftovers) == []


def test_a_command_that_exits_ends_the_wait_at_once(endpoint) -> None:
    transport, _ = endpoint
    process = transport.start(_python(ECHO), deadline=Deadline.after(30))
    process.send(b"quit\n")
    started = time.monotonic()
    assert process.expect(MARK, Deadline.after(20)) is None
    assert time.monotonic() - started < 5  # the exit ended the wait, not the 20 s bound
    result = process.finish(Deadline.after(10))
    assert (result.exit_code, result.timed_out) == (7, False)
    assert result.stderr_tail() == "asked to quit"


def test_a_silent_command_is_killed_at_its_deadline(endpoint) -> None:
    transport, leftovers = endpoint
    silent = "import time\ntime.sleep(120)\n"
    process = transport.start(_python(silent), deadline=Deadline.after(60))
    started = time.monotonic()
    assert process.expect(MARK, Deadline.after(1.0)) is None
    assert time.monotonic() - started < 4
    result = process.finish(Deadline.after(1.0))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 12
    assert _settled(leftovers) == []


def test_cancel_kills_a_command_that_is_being_waited_on(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    connections = connect_all(
        load_inventory(cluster_inventory), ConnectOptions(ssh_config="/dev/null")
    )
    node = cluster.nodes[0]
    try:
        transport = connections.transports[node.name]
        process = transport.start(
            _python("import time\ntime.sleep(120)\n"), deadline=Deadline.after(60)
        )
        threading.Timer(1.0, transport.cancel).start()
        with pytest.raises(TransportError) as raised:
            process.expect(MARK, Deadline.after(30))
        assert raised.value.kind == "interrupted"
        assert process.finish(Deadline.after(1)).timed_out
        assert _settled(lambda: [p.command for p in node.processes()]) == []
    finally:
        connections.close()
