"""Waits on processes that were told to end are bounded too: an srun that closes its output
but lives on, a job process that outlives its stop, a probe tool whose child holds its
output. Real processes stand in for the misbehaving ones; the bounds are shortened where
they would make the tests slow."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit.errors import TransportError
from clusterkit.node import launch as launch_node
from clusterkit.node import prelude
from clusterkit.transport import srun
from clusterkit.transport.base import Deadline

# Closes its output at once, ignores SIGINT (which srun would take as "cancel the step"),
# and would live ten minutes: only the SIGKILL after the bound ends it.
STUCK_SRUN = (
    "import os, signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); os.close(1); "
    "time.sleep(600)"
)


def test_an_srun_that_closes_its_output_and_lives_on_is_ended_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(srun, "STOP_SECONDS", 0.5)
    session = srun.SrunSession(["n1"], env={}, srun=(sys.executable, "-c", STUCK_SRUN))
    started = time.monotonic()
    try:
        with session.phase("probe", seconds=60), pytest.raises(TransportError) as error:
            # Its relay can never say "ready": the step ends, the start fails, long before
            # the 60 s start deadline.
            session.transports()["n1"].start(["true"], deadline=Deadline.after(60))
        step_ended = time.monotonic() - started
    finally:
        session.close()
    assert error.value.kind == "unreachable", error.value
    assert step_ended < 10
    assert session.steps_opened == 1


def test_a_stuck_srun_is_killed_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(srun, "STOP_SECONDS", 0.5)
    session = srun.SrunSession(["n1"], env={}, srun=(sys.executable, "-c", STUCK_SRUN))
    step = session.open_step(["n1"], "probe", Deadline.after(120))
    end = time.monotonic() + 60  # a bound against a hang, far inside the step's deadline
    while step.popen.poll() is None:
        assert time.monotonic() < end, "srun still running"
        time.sleep(0.05)
    assert step.popen.returncode == -9  # SIGINT was ignored: the bound ended in SIGKILL
    with step.cond:
        assert step.ended
    session.close()


def test_the_node_process_reaps_a_job_that_outlives_its_stop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """torchrun still there after the stop: KILLed after the bound, its status reported."""
    monkeypatch.setattr(launch_node, "CHILD_WAIT_SECONDS", 0.5)
    runner = launch_node.Runner(
        {"token": "t", "marker": "test/0", "run_name": "clusterkit-launch-t-n0", "stop_grace": 0}
    )
    child = subprocess.Popen(["sleep", "600"])
    started = time.monotonic()
    try:
        assert runner.reap(child) == -9
    finally:
        child.kill()
        child.wait(10)
    assert time.monotonic() - started < 5


def test_a_probe_tool_whose_child_holds_its_output_is_not_waited_for(tmp_path: Path) -> None:
    """The tool times out and is killed; the child it left holds the pipe open for ten
    minutes. The probe reports the timeout within the kill wait, not when the child ends."""
    pid_file = tmp_path / "child.pid"
    script = f"sleep 600 & echo $! > {pid_file}; exec sleep 600"
    started = time.monotonic()
    try:
        with pytest.raises(prelude.ToolError, match="timeout"):
            prelude.run_tool(["sh", "-c", script], timeout=0.5)
        assert time.monotonic() - started < 0.5 + prelude.KILL_WAIT + 3
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
