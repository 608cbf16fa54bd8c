"""CLI plumbing: repeated flags, output checked before the run, one error prefix, a stdout
that is closed or full, and SIGTERM/SIGHUP handled like Ctrl-C."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from clusterkit import cli
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[3]
LOCAL_STATIC = ["check", "--skip", "network", "--skip", "bench,image"]


def clusterkit(*args: str, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "clusterkit", *args],
        cwd=REPO, text=True, stderr=subprocess.PIPE, **kwargs,
    )  # fmt: skip


def test_repeated_skip_accumulates() -> None:
    args = cli.parse(["check", "--skip", "network", "--skip", "bench,image"])
    assert args.skip == {"network", "bench", "image"}
    assert cli.parse(["check"]).skip == frozenset()


def test_an_unwritable_output_is_refused_before_any_host_is_contacted(tmp_path: Path) -> None:
    # A host that never answers: were -o checked only at the end, this would take 60 s.
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {"ansible_host": "192.0.2.1"}}}}))
    for flag, path in (("-o", tmp_path / "missing" / "r.json"), ("-o", tmp_path)):
        started = time.monotonic()
        done = run_cli(["check", inventory, "--connect-timeout", "60", flag, path], timeout=60)
        assert done.status == 2, done.stderr
        assert time.monotonic() - started < 30
        assert done.stderr.strip() == done.stderr.strip().splitlines()[0]
        assert done.stderr.startswith(f"clusterkit: error: {flag} {path}: cannot write the report")
        assert not done.stdout
    assert not (tmp_path / "missing").exists()


def test_a_new_output_file_is_not_left_behind_by_the_early_check(tmp_path: Path) -> None:
    from clusterkit.report import ensure_writable

    ensure_writable(str(tmp_path / "r.json"), "-o")
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "keep.json"
    existing.write_text("old")
    ensure_writable(str(existing), "-o")
    assert existing.read_text() == "old"


@pytest.mark.parametrize("args", [["check", "--skip", "nope"], ["bench", "-b", "2x"], []])
def test_errors_carry_the_clusterkit_prefix_once(args: list[str]) -> None:
    done = run_cli(args, cwd=REPO)
    stderr = done.stderr
    assert done.status == 2
    assert stderr.count("clusterkit") == 1 + stderr.count("`clusterkit"), stderr
    assert stderr.startswith("clusterkit: error: ") and len(stderr.splitlines()) == 1


def test_a_closed_stdout_is_one_line_and_exit_2() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before we write, like `| head -0`
    try:
        process = clusterkit(*LOCAL_STATIC, stdout=write_end)
    finally:
        os.close(write_end)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert errors == ["clusterkit: error: cannot write to standard output: Broken pipe"], stderr


def test_a_full_stdout_is_one_line_and_exit_2() -> None:
    with open("/dev/full", "w") as full:
        process = clusterkit(*LOCAL_STATIC, "--format", "json", stdout=full)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert errors == [
        "clusterkit: error: cannot write to standard output: No space left on device"
    ], stderr


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _as_from_a_terminal() -> None:
    """SIGHUP at its default, as a shell on a terminal starts a command: clusterkit keeps a
    SIGHUP that its parent ignores (a run under nohup), and so would a suite under nohup."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_provision_stops_ansible_on_sigterm_and_sighup(
    tmp_path: Path, signum: int, status: int
) -> None:
    """provision runs ansible-playbook in its own process group: a signal to clusterkit
    must take that whole group down (the ssh connections Ansible opened included)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "started"
    fake = bin_dir / "ansible-playbook"
    fake.write_text(f'#!/bin/sh\nsleep 300 &\necho "$$ $!" > {started}\nwait\n')
    fake.chmod(0o755)
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {}}}}))
    process = clusterkit(
        "provision", str(inventory), stdout=subprocess.DEVNULL,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        preexec_fn=_as_from_a_terminal,
    )  # fmt: skip
    give_up = time.monotonic() + 60
    while not (started.exists() and started.read_text().endswith("\n")):
        assert time.monotonic() < give_up and process.poll() is None, "ansible never started"
        time.sleep(0.02)
    pids = [int(word) for word in started.read_text().split()]
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == status, stderr
    assert "remote commands were stopped" in stderr and "Traceback" not in stderr
    give_up = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < give_up:
        time.sleep(0.02)
    assert not any(_alive(pid) for pid in pids), "ansible-playbook outlived clusterkit"


def test_an_error_message_is_always_one_line() -> None:
    from clusterkit.__main__ import _print_error

    stream = io.StringIO()
    _print_error("node3: probe failed: Traceback\nverdict: PASS\x1b[2J", stream)
    err = stream.getvalue()
    assert err == "clusterkit: error: node3: probe failed: Traceback\\nverdict: PASS\\x1b[2J\n"


def test_a_run_under_nohup_keeps_ignoring_sighup_and_stops_on_sigterm() -> None:
    from clusterkit.__main__ import _stop, _stop_signals_like_ctrl_c

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN), signal.getsignal(signal.SIGTERM)
    try:
        with _stop_signals_like_ctrl_c():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is _stop
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN  # restored as found
        assert signal.getsignal(signal.SIGTERM) is before[1]
    finally:
        signal.signal(signal.SIGHUP, before[0])
