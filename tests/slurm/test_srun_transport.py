"""The srun transport on a real Slurm: one job step per phase carries every node's command."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from clusterkit.errors import TransportError
from clusterkit.transport.base import Deadline
from clusterkit.transport.pool import parallel
from clusterkit.transport.srun import SrunSession
from tests.support.netcluster import kill_netns_processes
from tests.support.slurmcluster import SlurmCluster


@pytest.fixture
def allocation(slurm: SlurmCluster) -> Iterator[str]:
    """A running 3-node job to start steps in, as `salloc -N3` would give."""
    with slurm.allocation(3) as job:
        yield job


@pytest.fixture
def session(slurm: SlurmCluster, allocation: str) -> Iterator[SrunSession]:
    made = SrunSession(
        slurm.node_names, job_id=allocation, env=slurm.env, interpreter=sys.executable
    )
    yield made
    made.close()


def wait_no_steps(slurm: SlurmCluster) -> None:
    """A closed step's srun ends in the background: until Slurm lists none of ours."""
    deadline = time.monotonic() + 30
    while slurm.steps():
        assert time.monotonic() < deadline, slurm.steps()
        time.sleep(0.1)


def node_processes(slurm: SlurmCluster, word: str) -> list[str]:
    return [p.command for node in slurm.net.nodes for p in node.processes() if word in p.command]


def test_one_step_runs_every_node_and_keeps_outputs_apart(
    slurm: SlurmCluster, session: SrunSession
) -> None:
    transports = session.transports()
    script = (
        'hostname; echo "to stderr $(hostname)" >&2; head -c 300000 /dev/zero | tr "\\0" x;'
        ' read line; echo "got $line"; exit $(( ${#line} % 7 ))'
    )
    seen_steps: list[list[str]] = []
    with session.phase("probe"):

        def one(host: str):
            return transports[host].run(
                ["sh", "-c", script], stdin=f"hello-{host}\n".encode(), deadline=Deadline.after(30)
            )

        results = dict(zip(slurm.node_names, parallel(one, slurm.node_names), strict=True))
        seen_steps.append(slurm.steps())
    assert session.steps_opened == 1
    assert len(seen_steps[0]) == 1 and "clusterkit-probe" in seen_steps[0][0]
    for host, result in results.items():
        assert not isinstance(result, BaseException), result
        lines = result.stdout.split(b"\n")
        assert lines[0] == host.encode()  # its own node, not another's
        assert lines[1].startswith(b"x" * 300000)  # long output whole and in order
        assert lines[1].endswith(f"got hello-{host}".encode())  # its own stdin only
        assert result.stderr == f"to stderr {host}\n".encode()
        assert result.exit_code == len(f"hello-{host}") % 7
    wait_no_steps(slurm)


def test_conversation_like_the_network_stage(session: SrunSession) -> None:
    transports = session.transports()
    with session.phase("network"):
        process = transports["node2"].start(
            ["sh", "-c", 'while read a; do echo "echo $a"; [ $a = stop ] && exit 0; done'],
            deadline=Deadline.after(30),
            start_by=Deadline.after(15),
        )
        for word in ("one", "two"):
            process.send(word.encode() + b"\n")
            assert process.expect(b"\n", Deadline.after(10)) == f"echo {word}\n".encode()
        process.send(b"stop\n")
        result = process.finish(Deadline.after(10))
    assert result.exit_code == 0 and result.stdout.endswith(b"echo stop\n")


def test_deadline_kills_the_command_on_its_node(slurm: SlurmCluster, session: SrunSession) -> None:
    transports = session.transports()
    started = time.monotonic()
    result = transports["node3"].run(
        ["sh", "-c", "sleep 1000; echo never"], deadline=Deadline.after(2)
    )
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 2 + 5 + 3
    assert node_processes(slurm, "sleep 1000") == []
    wait_no_steps(slurm)


def test_missing_program_is_exit_127_not_a_hang(session: SrunSession) -> None:
    result = session.transports()["node1"].run(["/nonexistent/tool"], deadline=Deadline.after(20))
    assert result.exit_code == 127 and b"cannot run /nonexistent/tool" in result.stderr


def test_cancel_leaves_no_step_and_no_process(slurm: SlurmCluster, session: SrunSession) -> None:
    transports = session.transports()
    errors: list[BaseException] = []

    def long_run() -> None:
        try:
            with session.phase("bench"):
                parallel(
                    lambda host: transports[host].run(
                        ["sleep", "777"], deadline=Deadline.after(120)
                    ),
                    slurm.node_names,
                )
        except BaseException as error:  # recorded, the thread must not die silently
            errors.append(error)

    thread = threading.Thread(target=long_run)
    thread.start()
    deadline = time.monotonic() + 20
    while len(node_processes(slurm, "sleep 777")) < 3:
        assert time.monotonic() < deadline, "commands never started"
        time.sleep(0.05)
    session.cancel()
    thread.join(20)
    assert not thread.is_alive()
    assert slurm.steps() == []
    deadline = time.monotonic() + 10
    while node_processes(slurm, "sleep 777"):
        assert time.monotonic() < deadline, node_processes(slurm, "sleep 777")
        time.sleep(0.05)
    with pytest.raises(TransportError, match="interrupted"):
        transports["node1"].run(["true"], deadline=Deadline.after(5))


def test_a_phase_over_a_crashed_node_ends_without_waiting_for_its_srun(
    slurm: SlurmCluster, session: SrunSession
) -> None:
    """srun waits for every node's task, and a crashed node never reports its own. The
    phase still ends at once (a restart is never held up by the lost node's clean-up: it
    waited 5 s for srun, then scancel and up to 5 s more); the session's close then ends
    that srun and its step, so nothing is left running."""
    transports = session.transports()
    node2 = slurm.net.nodes[1]
    crashed = False
    try:
        with session.phase("launch") as step:
            for host in ("node1", "node2"):
                transports[host].start(["sleep", "555"], deadline=Deadline.after(120))
            deadline = time.monotonic() + 30
            while len(node_processes(slurm, "sleep 555")) < 2:
                assert time.monotonic() < deadline, "commands never started"
                time.sleep(0.05)
            kill_netns_processes(node2.netns)  # a power cut: slurmd, its stepd, the relay
            crashed = True
        assert step.popen.poll() is None  # not waited for: srun still waits for node2
        deadline = time.monotonic() + 20
        while node_processes(slurm, "sleep 555"):  # node1's command ends all the same
            assert time.monotonic() < deadline, node_processes(slurm, "sleep 555")
            time.sleep(0.05)
        session.close()
        assert step.popen.poll() is not None  # the session's close waited for it to end
    finally:
        if crashed:
            slurm.restart_slurmd(node2)


def test_a_crashed_nodes_command_ends_though_srun_says_nothing(
    slurm: SlurmCluster, session: SrunSession
) -> None:
    """A crashed node's stepd connection to srun closes; srun prints nothing and waits. The
    command on it ends all the same (255, "the node is gone": a closed channel, as over
    SSH), so a launch loses the node in seconds, not at its node timeout; the command on
    the live node, speaking as a launch's node process does, goes on."""
    transports = session.transports()
    node2 = slurm.net.nodes[1]
    beat = ["sh", "-c", "while :; do echo beat; sleep 0.5; done"]
    crashed = False
    try:
        with session.phase("launch"):
            running = {
                host: transports[host].start(beat, deadline=Deadline.after(300))
                for host in ("node1", "node2")
            }
            for process in running.values():
                assert process.expect(b"beat\n", Deadline.after(30)) is not None
            kill_netns_processes(node2.netns)
            crashed = True
            deadline = time.monotonic() + 60  # the command's own deadline is 300 s
            while not running["node2"].exited:
                assert time.monotonic() < deadline, "the crashed node's command never ended"
                for process in running.values():
                    process.read_lines(Deadline.after(0.2))
            assert not running["node1"].exited
            gone = running["node2"].finish(Deadline.after(10))
            assert gone.exit_code == 255 and b"the node is gone" in gone.stderr, gone
    finally:
        if crashed:
            slurm.restart_slurmd(node2)
