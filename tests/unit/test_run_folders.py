"""Run folders on nodes are made by the node, fresh and private, and nothing another user of
the node prepared is ever run or signalled from one.

The hostile user here is real: folders and files chowned to `nobody`, real processes as
victims, the real shell scripts the bench and launch send to nodes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.bench import launcher
from clusterkit.bench.findslow import _HELPER
from clusterkit.launch.sweep import SWEEP_SCRIPT
from clusterkit.node import launch as launch_node
from clusterkit.rundir import RUN_DIR, folder_name, shell_line, shell_word
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second user needs root to make")


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sticky, world-writable TMPDIR of this test's own, as /tmp is on a node."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def decoy(parent: Path, name: str) -> Path:
    """A folder another user made first, open to all, as an attacker racing on /proc would."""
    path = parent / name
    path.mkdir()
    path.chmod(0o777)
    os.chown(path, NOBODY, NOBODY)
    return path


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user's that no clusterkit kill may touch unless told by its own file."""
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def sh(script: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["sh", "-c", script, "test", *args], input=stdin, capture_output=True, timeout=60
    )


def test_shell_words_leave_only_the_placeholders_to_the_shell(tmp_path: Path) -> None:
    argv = ["echo", f"{RUN_DIR}/w.py", "$HOME `id` 'q'", "", f"-v{RUN_DIR}:{RUN_DIR}", "{user}"]
    line = shell_line(argv, {RUN_DIR: "dir", "{user}": "user"})
    done = sh(f'dir="{tmp_path}/a b"; user=1:2; printf "%s\\n" {line}')
    assert done.stdout.decode().split("\n")[:-1] == [
        "echo", f"{tmp_path}/a b/w.py", "$HOME `id` 'q'", "", f"-v{tmp_path}/a b:{tmp_path}/a b",
        "1:2",
    ]  # fmt: skip
    assert shell_word("plain", {RUN_DIR: "dir"}) == "plain"
    for hostile in ("../x", "a b", "x;rm", "/tmp/x", "clusterkit-launch-$(id)"):
        with pytest.raises(ValueError):
            folder_name(hostile)


@needs_root
def test_the_launch_runner_makes_its_own_folder_and_ignores_one_made_first(
    tmpdir_env: Path,
) -> None:
    """Another user made the folder names the old plan would have used; the runner makes a
    new one of its own (0700), and the job's variables and argv name it."""
    name = "clusterkit-launch-abc-n0"
    planted = [decoy(tmpdir_env, name), decoy(tmpdir_env, name + ".AAAAAAAA")]
    (planted[0] / "site").mkdir()
    script = "import os, sys; print(os.environ['X']); print(sys.argv[1])"
    runner = launch_node.Runner(
        {
            "token": "t", "marker": "test/0", "run_name": name, "run_dir_placeholder": RUN_DIR,
            "argv": [sys.executable, "-c", script, f"{RUN_DIR}/arg"],
            "env": {"X": f"{RUN_DIR}/nccl_trace_rank_"}, "stacks": "faulthandler",
        }
    )  # fmt: skip
    runner.start()
    assert runner.child is not None and runner.child.stdout is not None
    out = runner.child.stdout.read().decode()
    runner.child.wait(30)
    folder = Path(runner.run_dir or "")
    try:
        assert folder.parent == tmpdir_env and folder not in planted
        assert folder.name.startswith(name + ".")
        info = folder.stat()
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
        assert out.split() == [f"{folder}/nccl_trace_rank_", f"{folder}/arg"]
        hook = folder / "site" / "sitecustomize.py"
        assert hook.stat().st_uid == os.geteuid() and stat.S_IMODE(hook.stat().st_mode) == 0o600
        assert list((planted[0] / "site").iterdir()) == []  # nothing written into the decoy
    finally:
        runner.remove_run_dir()
    assert not folder.exists()


@needs_root
def test_the_bench_node_script_makes_a_private_folder_and_cleans_it(tmpdir_env: Path) -> None:
    name = "clusterkit-bench-abc-n0"
    planted = decoy(tmpdir_env, name)
    line = shell_line(["sh", "-c", 'stat -c "%a %u" "$1"; cat "$1/worker.py"', "x", RUN_DIR],
                      {RUN_DIR: "dir"})  # fmt: skip
    done = sh(launcher._NODE_SCRIPT, name, line, stdin=b"print('worker')\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split("\n")[:2] == [f"700 {os.geteuid()}", "print('worker')"]
    assert sorted(p.name for p in tmpdir_env.iterdir()) == [planted.name]  # ours is gone
    assert list(planted.iterdir()) == []


@needs_root
def test_the_bench_kill_reads_pid_files_only_from_its_own_folders(
    tmpdir_env: Path, victim: subprocess.Popen[bytes]
) -> None:
    """A decoy folder with the run's name holds a pid file naming a process of root's: the
    kill leaves it alone, and kills what the run's real folder names."""
    name = "clusterkit-bench-abc-n1"
    fake = decoy(tmpdir_env, name + ".decoy0000")
    (fake / "launcher.kill").write_text(f"{victim.pid}\n")
    os.chown(fake / "launcher.kill", NOBODY, NOBODY)
    own = Path(subprocess.check_output(["mktemp", "-d", f"{tmpdir_env}/{name}.XXXXXXXXXX"],
                                       text=True).strip())  # fmt: skip
    target = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (own / "launcher.kill").write_text(f"{target.pid}\n")
    (own / "rank0.kill").symlink_to(fake / "launcher.kill")  # a link is never followed
    done = sh(launcher._KILL_SCRIPT, name, "")
    assert done.returncode == 0, done.stderr
    assert target.wait(30) < 0  # ended by a signal
    assert done.stdout.decode().split() == ["killed:", str(target.pid)]
    assert victim.poll() is None


@needs_root
def test_the_launch_sweep_removes_the_runs_folders_and_no_one_elses(tmpdir_env: Path) -> None:
    """The node process was SIGKILLed: the sweep removes its folder, never a decoy's files."""
    name = "clusterkit-launch-abc-n2"
    fake = decoy(tmpdir_env, name + ".decoy0000")
    (fake / "keep").write_text("someone else's")
    left = Path(launch_node.private_folder(name))
    (left / "torchrun").mkdir()
    result = LocalTransport("node3").run(
        ["sh", "-c", SWEEP_SCRIPT, "sweep", "CLUSTERKIT_LAUNCH=abc/2", name],
        deadline=Deadline.after(30),
    )
    assert result.exit_code == 0, result.stderr
    assert not left.exists() and (fake / "keep").read_text() == "someone else's"


@needs_root
def test_the_find_slow_go_waits_for_the_groups_own_folder(tmpdir_env: Path) -> None:
    """A decoy with a `ready` file does not make the helper say ready; the real one does."""
    name = "clusterkit-bench-abc-g1-n0"
    fake = decoy(tmpdir_env, name + ".decoy0000")
    (fake / "ready").touch()
    helper = subprocess.Popen(
        ["sh", "-c", _HELPER, "go", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert helper.stdout is not None
        os.set_blocking(helper.stdout.fileno(), False)
        end = time.monotonic() + 1.0  # several of the helper's polls: it must stay silent
        while time.monotonic() < end:
            assert not helper.stdout.read(), "ready on a decoy"
            time.sleep(0.05)
        own = Path(launch_node.private_folder(name))
        (own / "ready").touch()
        os.set_blocking(helper.stdout.fileno(), True)
        assert helper.stdout.readline() == b"ready\n"
        assert helper.communicate(b"go\n", timeout=30)[0] == b""
        assert (own / "go").exists() and not (fake / "go").exists()
    finally:
        helper.kill()
        helper.wait()
