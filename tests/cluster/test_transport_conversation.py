"""One transport contract, run over every transport: SSH to a real node, local, srun in a
real Slurm allocation (as testinfra runs its command tests over every backend), and the unit
tests' fake (tests/support/fake_transport.py), so what the unit tests stand in for holds too.

`run` feeds stdin and returns the exit; a deadline kills the command where it runs; a spent
deadline starts nothing; a program that cannot run is exit 127. `start` talks to a running
command: the network stage keeps one process per node across its steps, so a reply must
arrive while the command still runs, a silent command must not outlive its deadline, and an
interrupt must kill it on the node.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterkit.errors import TransportError
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from clusterkit.transport.local import LocalTransport
from clusterkit.transport.srun import SrunSession
from tests.support.fake_transport import FakeTransport
from tests.support.netcluster import NetCluster, Node, unavailable_reason
from tests.support.slurmcluster import SlurmCluster
from tests.support.slurmcluster import unavailable_reason as slurm_unavailable_reason

MARK = b"<end>\n"
# Answers each stdin line with "got LINE" and the marker; exits 7 on "quit", 0 at EOF.
ECHO = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    if line.strip() == 'quit':\n"
    "        sys.stderr.write('asked to quit\\n'); sys.exit(7)\n"
    "    sys.stdout.write('got ' + line.strip() + '\\n<end>\\n'); sys.stdout.flush()\n"
)
# Copies stdin to stdout, says so on stderr, exits 3.
COPY = (
    "import sys\n"
    "sys.stdout.buffer.write(sys.stdin.buffer.read())\n"
    "sys.stderr.write('copied\\n'); sys.exit(3)\n"
)
SILENT = "import time\ntime.sleep(120)\n"
STAMP = "clusterkit-conversation-test"  # names the test's processes on the node

Endpoint = tuple[Transport, Callable[[], list[str]]]


@pytest.fixture(scope="module")
def slurm_node() -> Iterator[SlurmCluster]:
    """A one-node Slurm of this module's own (tests/slurm builds its cluster in its folder)."""
    reason = unavailable_reason() or slurm_unavailable_reason()
    if reason:
        pytest.skip(f"real Slurm cluster unavailable: {reason}")
    with NetCluster(1) as net, SlurmCluster(net) as built:
        yield built


@pytest.fixture(params=["ssh", "local", "fake", pytest.param("srun", marks=pytest.mark.slurm)])
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    """A transport and a function listing the test's processes still alive where it runs.
    "fake" is the unit tests' FakeTransport with nothing scripted: held to the same contract."""
    if request.param == "local":
        yield LocalTransport("local"), _local_leftovers
    elif request.param == "fake":
        yield FakeTransport("fake"), _local_leftovers
    elif request.param == "srun":
        yield from _srun_endpoint(request.getfixturevalue("slurm_node"))
    else:
        yield from _ssh_endpoint(
            request.getfixturevalue("cluster"), request.getfixturevalue("cluster_inventory")
        )


def _ssh_endpoint(cluster: NetCluster, inventory: Path) -> Iterator[Endpoint]:
    connections = connect_all(load_inventory(inventory), ConnectOptions(ssh_config="/dev/null"))
    node = cluster.nodes[0]
    try:
        yield connections.transports[node.name], lambda: [p.command for p in node.processes()]
    finally:
        connections.close()


def _srun_endpoint(slurm: SlurmCluster) -> Iterator[Endpoint]:
    """The node through a session in a running allocation (a step per command, no phase)."""
    slurm.reset()
    node = slurm.net.nodes[0]
    with slurm.allocation(1) as job:
        session = SrunSession([node.name], job_id=job, env=slurm.env, interpreter=sys.executable)
        try:
            yield session.transports()[node.name], lambda: _stamped(node)
        finally:
            session.close()


def _stamped(node: Node) -> list[str]:
    return [p.command for p in node.processes() if STAMP in p.command]


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
    give_up = time.monotonic() + 10
    while leftovers() and time.monotonic() < give_up:
        time.sleep(0.1)  # sshd, slurmstepd and the kernel reap asynchronously
    return leftovers()


def test_run_feeds_stdin_and_returns_the_exit(endpoint: Endpoint) -> None:
    transport, _ = endpoint
    data = bytes(range(256)) * 1200  # binary, and past the srun transport's inline limit
    result = transport.run(_python(COPY), stdin=data, deadline=Deadline.after(30))
    assert (result.exit_code, result.timed_out, result.host) == (3, False, transport.host)
    assert result.stdout == data
    assert result.stderr_tail() == "copied"


def test_run_kills_a_command_at_its_deadline(endpoint: Endpoint) -> None:
    transport, leftovers = endpoint
    started = time.monotonic()
    result = transport.run(_python(SILENT), deadline=Deadline.after(5))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 15
    assert _settled(leftovers) == []


def test_run_with_a_spent_deadline_starts_nothing(endpoint: Endpoint) -> None:
    transport, leftovers = endpoint
    started = time.monotonic()
    result = transport.run(_python(SILENT), deadline=Deadline(time.monotonic() - 1))
    assert result.timed_out and result.exit_code is None and result.stdout == b""
    assert time.monotonic() - started < 0.5
    assert leftovers() == []


def test_a_program_that_cannot_run_is_exit_127(endpoint: Endpoint) -> None:
    transport, _ = endpoint
    result = transport.run(["/nonexistent/clusterkit-tool", STAMP], deadline=Deadline.after(30))
    assert (result.exit_code, result.timed_out) == (127, False)
    assert b"/nonexistent/clusterkit-tool" in result.stderr


def test_replies_arrive_while_the_command_runs(endpoint: Endpoint) -> None:
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


def test_a_command_that_exits_ends_the_wait_at_once(endpoint: Endpoint) -> None:
    transport, _ = endpoint
    process = transport.start(_python(ECHO), deadline=Deadline.after(30))
    process.send(b"quit\n")
    started = time.monotonic()
    assert process.expect(MARK, Deadline.after(20)) is None
    assert time.monotonic() - started < 5  # the exit ended the wait, not the 20 s bound
    # A reader that polls (launch's supervisor) learns of the exit before it calls finish.
    end = time.monotonic() + 10
    while not process.exited and time.monotonic() < end:
        process.read_lines(Deadline.after(0.2))
    assert process.exited
    result = process.finish(Deadline.after(10))
    assert (result.exit_code, result.timed_out) == (7, False)
    assert result.stderr_tail() == "asked to quit"


def test_a_silent_command_is_killed_at_its_deadline(endpoint: Endpoint) -> None:
    transport, leftovers = endpoint
    process = transport.start(_python(SILENT), deadline=Deadline.after(60))
    started = time.monotonic()
    assert process.expect(MARK, Deadline.after(1.0)) is None
    assert time.monotonic() - started < 4
    result = process.finish(Deadline.after(1.0))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 12
    assert _settled(leftovers) == []


def test_cancel_kills_a_command_that_is_being_waited_on(endpoint: Endpoint) -> None:
    transport, leftovers = endpoint
    process = transport.start(_python(SILENT), deadline=Deadline.after(60))
    threading.Timer(1.0, transport.cancel).start()
    with pytest.raises(TransportError) as raised:
        process.expect(MARK, Deadline.after(30))
    assert raised.value.kind == "interrupted"
    assert process.finish(Deadline.after(1)).timed_out
    assert _settled(leftovers) == []
