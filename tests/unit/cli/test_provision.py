"""`clusterkit provision`: argv construction, tag validation, playbook lookup, missing ansible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import cli
from clusterkit.cli import provision
from clusterkit.commands.provision import plan
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.provision.playbook import PlaybookRun, build_argv, find_playbook
from tests.support.cli import CliRun, run_cli

INVENTORY = "all:\n  hosts:\n    node1: {ansible_host: 10.0.0.1}\n    node2:\n"


@pytest.fixture
def inventory(tmp_path: Path) -> str:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return str(path)


def test_argv_has_every_option_as_its_own_item(inventory: str) -> None:
    args = cli.parse(
        ["provision", inventory, "--tags", "firewall,limits", "--limit", "node1", "--check",
         "--diff", "-e", "shm_size=64g", "-vv"]
    )  # fmt: skip
    argv = build_argv(plan(provision.request(args), Environment()), "/usr/bin/ansible-playbook")
    assert argv[:3] == ["/usr/bin/ansible-playbook", "-i", inventory]
    assert argv[3].endswith("playbooks/site.yml")
    assert argv[4:] == [
        "--tags", "firewall,limits", "--limit", "node1", "--check", "--diff",
        "-e", "shm_size=64g", "-vv",
    ]  # fmt: skip


def test_plain_run_passes_only_inventory_and_playbook(tmp_path: Path) -> None:
    run = PlaybookRun(inventory="inv; rm -rf /", playbook=tmp_path / "site.yml")
    assert build_argv(run) == ["ansible-playbook", "-i", "inv; rm -rf /", str(run.playbook)]


def test_unknown_tag_is_a_usage_error(inventory: str) -> None:
    with pytest.raises(UsageError, match="unknown tag fw"):
        plan(provision.request(cli.parse(["provision", inventory, "--tags", "fw"])), Environment())


def test_limit_naming_no_host_is_rejected_before_ansible_runs(inventory: str) -> None:
    with pytest.raises(UsageError):
        plan(
            provision.request(cli.parse(["provision", inventory, "--limit", "node9"])),
            Environment(),
        )


def test_playbook_found_in_the_checkout() -> None:
    assert find_playbook() == Path(__file__).resolve().parents[3] / "playbooks" / "site.yml"


def _clusterkit(argv: list[str], path: str) -> CliRun:
    return run_cli(argv, env={**os.environ, "PATH": path})


def test_missing_ansible_playbook_says_how_to_install(inventory: str, tmp_path: Path) -> None:
    done = _clusterkit(["provision", inventory], str(tmp_path))  # PATH without ansible
    assert done.status == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "ansible-playbook is not installed" in lines[0]
    # this venv holds ansible-core (the test extra): the hint says where it is
    assert f"it is in {Path(sys.executable).parent}: put that folder on PATH" in lines[0]


def test_without_ansible_the_hint_is_the_one_command_for_this_python(tmp_path: Path) -> None:
    """The README set-up installs no Ansible: the hint is the exact install command for the
    Python clusterkit runs under, not a bare `pip install` the system Python refuses."""
    python = Path(sys.base_prefix) / "bin" / "python3"
    probe = "from clusterkit.provision.playbook import install_hint; print(install_hint())"
    done = subprocess.run(
        [str(python), "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[3]), "PATH": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"install it: `{python} -m pip install ansible-core` (or your distribution's "
        "ansible-core package)"
    ) or done.stdout.startswith(f"it is in {python.parent}")


def test_bad_inventory_exits_2_before_ansible(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("all:\n  hosts:\n    1234:\n")
    done = _clusterkit(["provision", str(bad)], os.environ["PATH"])
    assert done.status == 2
    assert str(bad) in done.stderr and "Traceback" not in done.stderr
