"""The srun transport with a hostile node: srun merges every node's output, and a node that
prints lines in another node's name must not be believed (a node2 once answered node1's
probe, and its facts were recorded for node1)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.transport.base import Deadline
from clusterkit.transport.pool import parallel
from clusterkit.transport.srun import SrunSession
from tests.support.slurmcluster import SlurmCluster

# node2's relay: the genuine one runs for node2's own commands, but first node2 says it is
# ready in node1's name and names step 0 (the user's own) as the step to scancel; for every
# command meant for node1 it answers at once in node1's name (output, exit 0, and srun's own
# words for a killed task on stderr), and before every command of its own it prints garbage.
HOSTILE_RELAY = """\
import base64, os, subprocess, sys
job = os.environ.get("SLURM_JOB_ID", "?")
os.write(1, f"node1 - ready {job} 0\\nnode2 - ready {job} 0\\n".encode())
open(__file__ + ".spoke", "w").close()  # the honest nodes wait for this
genuine = subprocess.Popen([sys.executable, *sys.argv[1:]], stdin=subprocess.PIPE)
forged = base64.b64encode(b"torch 9.9.9\\n").decode()
for line in sys.stdin.buffer:
    words = line.decode().split()
    if len(words) >= 3 and words[:2] == ["C", "node1"]:
        os.write(1, f"node1 {words[2]} o {forged}\\nnode1 {words[2]} x 0\\n".encode())
        os.write(2, b"srun: error: node1: task 0: Killed\\n")
    if len(words) >= 3 and words[:2] == ["C", "node2"]:
        os.write(1, f"node2 {words[2]} o %%not-base64%%\\nnode2 {words[2]} x many\\n".encode())
    genuine.stdin.write(line)
    genuine.stdin.flush()
genuine.stdin.close()
genuine.wait()
"""


def hostile_interpreter(tmp_path: Path) -> str:
    """An interpreter that is the hostile relay on node2 and Python elsewhere; the honest
    nodes start once node2 has spoken (or after 10 s), so that node2 speaks first."""
    relay = tmp_path / "hostile_relay.py"
    relay.write_text(HOSTILE_RELAY)
    python = shlex.quote(sys.executable)
    spoke = shlex.quote(f"{relay}.spoke")
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'[ "$SLURMD_NODENAME" = node2 ] && exec {python} {shlex.quote(str(relay))} "$@"\n'
        f"i=0; while [ ! -e {spoke} ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done\n"
        f'exec {python} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def allocation(slurm: SlurmCluster) -> Iterator[str]:
    with slurm.allocation(3) as job:
        yield job


@pytest.fixture
def session(slurm: SlurmCluster, allocation: str, tmp_path: Path) -> Iterator[SrunSession]:
    made = SrunSession(
        slurm.node_names,
        job_id=allocation,
        env=slurm.env,
        interpreter=hostile_interpreter(tmp_path),
    )
    yield made
    made.close()


def test_a_node_cannot_answer_for_another(slurm: SlurmCluster, session: SrunSession) -> None:
    transports = session.transports()
    with session.phase("probe"):
        results = parallel(
            lambda host: transports[host].run(
                ["sh", "-c", "hostname; exit 5"], deadline=Deadline.after(30)
            ),
            slurm.node_names,
        )
    for host, result in zip(slurm.node_names, results, strict=True):
        assert not isinstance(result, BaseException), (host, result)
        # Each node's own answer, whole: nothing node2 said in node1's name, and node2's
        # garbage dropped rather than ending the step for everyone.
        assert (result.stdout, result.exit_code) == (f"{host}\n".encode(), 5), host
        assert not result.timed_out and result.stderr == b"", host


@pytest.fixture
def user_step(slurm: SlurmCluster, allocation: str) -> Iterator[str]:
    """The user's own job step in the allocation (step 0), running beside the check's."""
    argv = ["srun", f"--jobid={allocation}", "--overlap", "-N1", "-n1", "-wnode3"]
    process = subprocess.Popen(
        [*argv, "--job-name=training", "sleep", "300"], env=slurm.env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 15
        while f"{allocation}.0 training" not in slurm.steps():
            assert time.monotonic() < deadline and process.poll() is None, slurm.steps()
            time.sleep(0.1)
        yield f"{allocation}.0 training"
    finally:
        process.kill()
        process.wait()


def test_a_node_cannot_choose_the_step_that_is_cancelled(
    slurm: SlurmCluster, user_step: str, session: SrunSession
) -> None:
    transports = session.transports()
    with session.phase("bench"):
        result = transports["node3"].run(["hostname"], deadline=Deadline.after(30))
        assert result.stdout == b"node3\n"
        session.cancel()  # as on Ctrl-C: scancel would end the step node2 named
    deadline = time.monotonic() + 15
    while slurm.steps() != [user_step]:
        assert time.monotonic() < deadline, slurm.steps()  # ours ends, the user's lives on
        time.sleep(0.1)
