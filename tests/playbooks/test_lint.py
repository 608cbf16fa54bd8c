"""The playbooks pass ansible-playbook --syntax-check and ansible-lint (production profile)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed (pip install ansible-core ansible-lint)")
    return subprocess.run(
        argv, cwd=PLAYBOOKS, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_syntax_check_passes() -> None:
    done = _run(["ansible-playbook", "--syntax-check", "-i", "localhost,", "site.yml"], 120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ansible_lint_passes() -> None:
    done = _run(["ansible-lint", "--nocolor", "site.yml", "roles"], 300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_every_remedy_tag_is_a_role_tag() -> None:
    from clusterkit.provision.remedy import TAGS

    site = (PLAYBOOKS / "site.yml").read_text()
    for tag in TAGS:
        assert f"tags: [{tag}]" in site, tag
