"""The CLI runs in an Environment: it writes to the streams, reads the variables and works in
the folder it is given, and touches nothing of the process that calls `main(argv, env)`."""

from __future__ import annotations

import io
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clusterkit import cli
from clusterkit.__main__ import main
from clusterkit.environment import Environment
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COST = ["cost", "--nodes", "2", "--hours", "10", "--preempt-rate", "5%", "--trials", "0"]
COST += ["--on-demand-price", "10", "--spot-price", "3"]


def test_output_errors_help_and_warnings_go_to_the_given_streams(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Nothing reaches the process's own descriptors: the report, an error, argparse's --help
    (which exits) and a deprecation warning all land in the run's streams."""
    env = Environment()
    assert main(["completion", "bash"], env) == 0
    assert "complete" in env.stdout.getvalue()
    env = Environment()
    assert main(["chek"], env) == 2
    assert env.stderr.getvalue().startswith("clusterkit: error: ") and not env.stdout.getvalue()
    env = Environment()
    with pytest.raises(SystemExit) as done:
        main(["check", "--help"], env)
    assert done.value.code == 0 and env.stdout.getvalue().startswith("usage: clusterkit check")
    env = Environment()
    assert cli.parse(["bench", "--check", "0"], env).validate == 0
    assert "--check is deprecated" in env.stderr.getvalue()
    assert capfd.readouterr() == ("", "")


def test_the_variables_are_the_runs_not_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # the process asks for colour; the run does not
    assert "\x1b[" not in run_cli(COST, env={}).stdout
    monkeypatch.delenv("FORCE_COLOR")
    assert "\x1b[" in run_cli(COST, env={"FORCE_COLOR": "1"}).stdout


def test_runs_side_by_side_keep_their_own_streams_and_variables() -> None:
    """Nothing global is patched: runs in threads at once each get their own colour and
    their own output (swapping sys.stdout or os.environ per run would mix them up)."""
    wanted = [bool(index % 2) for index in range(8)]
    with ThreadPoolExecutor(len(wanted)) as pool:
        runs = list(
            pool.map(lambda color: run_cli(COST, env={"FORCE_COLOR": "1"} if color else {}), wanted)
        )
    plain = ANSI.sub("", runs[0].stdout)
    for color, done in zip(wanted, runs):
        assert done.status == 0, done.stderr
        assert ("\x1b[" in done.stdout) is color
        assert ANSI.sub("", done.stdout) == plain  # one whole report each, nothing interleaved


def test_the_working_folder_is_the_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`image render` finds images/ under the run's folder, wherever the process is."""
    monkeypatch.chdir(tmp_path)
    done = run_cli(["image", "render", "--fail-if-stale"], cwd=REPO)
    assert done.status == 0, done.stderr
    assert f"{REPO / 'images' / 'cpu-torch'}: rendered files current" in done.stdout
    assert run_cli(["image", "render", "--fail-if-stale"]).status == 2  # none under tmp_path


def test_from_process_takes_a_snapshot_of_this_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CLUSTERKIT_TEST_VARIABLE", "before")
    env = Environment.from_process()
    monkeypatch.setenv("CLUSTERKIT_TEST_VARIABLE", "after")
    assert env.environ["CLUSTERKIT_TEST_VARIABLE"] == "before"
    assert (env.stdout, env.stderr) == (sys.stdout, sys.stderr)
    assert env.cwd == Path.cwd() and env.stdout_isatty is False  # pytest captures it
    with pytest.raises(TypeError):
        env.environ["PATH"] = "/nowhere"  # type: ignore[index]


def test_a_relative_path_is_taken_from_the_runs_folder(tmp_path: Path) -> None:
    here = Environment(cwd=Path.cwd())
    assert here.path("images") == Path("images")  # as the user wrote it
    assert Environment(cwd=tmp_path).path("images") == tmp_path / "images"
    assert Environment(cwd=tmp_path).path("/etc/hosts") == Path("/etc/hosts")


def test_a_closed_stderr_of_the_process_is_a_silent_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    env = Environment.from_process()
    assert isinstance(env.stderr, io.StringIO) and env.stderr_isatty is False
