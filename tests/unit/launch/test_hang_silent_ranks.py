"""A hang's dump asks no stack of a rank that cannot write one: a stopped process (state T)
runs no signal handler and no thread until it is continued, a gone one never will. The node
runner (clusterkit/node/launch.py) reads each rank's state from /proc and neither signals
nor waits for those ranks; their entries say why, and the hang's report with them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from clusterkit.launch import stacks
from clusterkit.node.launch import FAULTHANDLER_SECONDS, MARKER, Runner
from clusterkit.node.launch_processes import cannot_answer, process_state


@pytest.mark.parametrize(
    ("state", "says"),
    [
        ("T", "stopped (state T)"),
        ("t", "stopped by a tracer (state t)"),
        ("Z", "ended (state Z)"),
        ("X", "ended (state X)"),
        (None, "ended (gone)"),
        ("R", None),
        ("S", None),
        ("D", None),  # in the kernel for now: it answers once back, within the bound
    ],
)
def test_which_ranks_are_not_asked(state: str | None, says: str | None) -> None:
    why = cannot_answer(state)
    assert (why is None) if says is None else (why is not None and says in why)


def test_the_state_is_read_after_the_commands_last_parenthesis(tmp_path: Path) -> None:
    """The command in /proc/PID/stat is the process's own choice, spaces, parentheses and
    bytes that are no UTF-8 included."""
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "stat").write_bytes(b"41 (evil) R \xff(x) T 1 41 41 0 -1 4194560\n")
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_bytes(b"42 (python3) S 1 42 42 0 -1 4194304\n")
    assert process_state(41, str(tmp_path)) == "T"
    assert process_state(42, str(tmp_path)) == "S"
    assert process_state(43, str(tmp_path)) is None
    assert process_state(os.getpid()) in ("R", "S")


@pytest.mark.parametrize("py_spy", [None, "/nonexistent/py-spy"])
def test_a_stopped_rank_is_neither_signalled_nor_waited_for(
    tmp_path: Path, py_spy: str | None
) -> None:
    """Without the skip, the dump waited FAULTHANDLER_SECONDS for a stack and the flight
    recorder's bound for a record the stopped rank never writes, and its SIGUSR1, pending,
    killed it once continued."""
    marker = f"test-{uuid.uuid4().hex}/0"
    runner = Runner({"token": "t", "marker": marker})
    runner.run_dir, runner.py_spy = str(tmp_path), py_spy
    (tmp_path / "stacks").mkdir()
    sent: list[dict[str, Any]] = []
    runner.control = sent.append  # type: ignore[method-assign]
    env = {**os.environ, MARKER: marker, "GROUP_RANK": "0", "RANK": "1", "LOCAL_RANK": "1"}
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        os.kill(rank.pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while process_state(rank.pid) != "T":
            assert time.monotonic() < end, "the rank never stopped"
            time.sleep(0.01)
        started = time.monotonic()
        runner.dump()
        took = time.monotonic() - started
        os.kill(rank.pid, signal.SIGCONT)
        with pytest.raises(subprocess.TimeoutExpired):
            rank.wait(0.5)  # alive: no SIGUSR1 was left pending for it
    finally:
        rank.kill()
        rank.wait()
    assert took < FAULTHANDLER_SECONDS, took
    ((message,),) = [[m] for m in sent]
    (entry,) = message["ranks"]
    assert (entry["rank"], entry["pid"]) == (1, rank.pid) and "flight" not in entry
    assert "its process is stopped (state T)" in entry["error"]
    parsed = stacks.parse_dump("node3", entry)
    assert parsed.where() == f"no stack ({entry['error']})"
