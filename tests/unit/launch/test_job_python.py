"""check and node-check judge torch for the job's Python, not the one clusterkit runs under."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli

SYSTEM_PYTHON = "/usr/bin/python3"


def torchless_python3(tmp_path: Path) -> Path:
    """A `python3` on PATH that is a real interpreter without torch."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"needs {SYSTEM_PYTHON}")
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "python3"
    script.write_text(f'#!/bin/sh\nexec {SYSTEM_PYTHON} -S "$@"\n')
    script.chmod(0o755)
    return folder


def torch_facts(stdout: str) -> dict:
    (host,) = json.loads(stdout)["hosts"].values()
    return host["facts"]["torch"]


def findings(stdout: str, check_id: str) -> list[dict]:
    return [f for f in json.loads(stdout)["findings"] if f["id"] == check_id]


@pytest.mark.parametrize("command", [["node-check"], ["check", "--skip", "bench"]])
def test_python3_on_path_is_the_job_python_not_sys_executable(tmp_path, command) -> None:
    """clusterkit's own venv has torch; the job's python3 does not: torch is missing."""
    folder = torchless_python3(tmp_path)
    env = {"PATH": f"{folder}:{os.environ['PATH']}"}
    result = run_cli([*command, "--format", "json"], env=env)
    facts = torch_facts(result.stdout)
    assert facts["present"] is False and facts["interpreter"] != sys.executable
    (finding,) = findings(result.stdout, "torch.present")
    assert facts["interpreter"] in finding["message"]


def test_check_of_this_machine_warns_and_says_what_it_can_run(tmp_path) -> None:
    folder = torchless_python3(tmp_path)
    env = {"PATH": f"{folder}:{os.environ['PATH']}"}
    result = run_cli(["check", "--skip", "bench", "--format", "json"], env=env)
    (finding,) = findings(result.stdout, "torch.present")
    assert finding["status"] == "warn"
    assert "install torch to run jobs here" in finding["message"]
    assert result.status != 1


@pytest.mark.parametrize("command", [["node-check"], ["check", "--skip", "bench"]])
def test_python_flag_picks_the_interpreter_and_a_missing_torch_fails(tmp_path, command) -> None:
    folder = torchless_python3(tmp_path)
    result = run_cli([*command, "--python", str(folder / "python3"), "--format", "json"])
    (finding,) = findings(result.stdout, "torch.present")
    assert finding["status"] == "fail" and result.status == 1
    assert torch_facts(result.stdout)["present"] is False


@pytest.mark.parametrize("command", [["node-check"], ["check", "--skip", "bench"]])
def test_python_flag_with_torch_passes_torch(command) -> None:
    result = run_cli([*command, "--python", sys.executable, "--format", "json"])
    (finding,) = findings(result.stdout, "torch.present")
    assert finding["status"] == "ok"


def test_python_flag_rejects_an_option() -> None:
    result = run_cli(["node-check", "--python", "-c"])
    assert result.status == 2 and "Traceback" not in result.stderr
