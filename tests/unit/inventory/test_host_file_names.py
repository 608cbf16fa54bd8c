"""Host names become file names and list items: a name that is not one plain path component
(`../../x`, `a/b`, `a,b`) is refused when the inventory is loaded, and `--print-dir` writes
neither outside its folder nor through links other users planted in it."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from clusterkit.inventory.names import host_name_problem
from tests.support.cli import run_cli

NOBODY = pwd.getpwnam("nobody").pw_uid
GOOD = "    n1: {ansible_host: 10.0.0.1}\n    n2: {ansible_host: 10.0.0.2}\n"


@pytest.mark.parametrize(
    "name",
    [
        "../../x",
        "..",
        ".",
        ".hidden",
        "a/b",
        "/etc/profile.d/x",
        "a,b",
        "-x",
        "a b",
        "a\tb",
        "a\x00b",
        "a\x1b[2J",
        "a\u202eb",
        "a*b",
        "a@b",
        "[fe80::1]",
        "x" * 201,
    ],
)
def test_names_that_are_not_one_plain_file_name_are_refused(name: str) -> None:
    assert host_name_problem(name) is not None


@pytest.mark.parametrize(
    "name",
    ["node01", "gpu-1.example.com", "10.0.0.1", "fe80::1", "fe80::1%eth0", "::1", "n_1", "nœud"],
)
def test_ordinary_names_and_ipv6_literals_still_pass(name: str) -> None:
    assert host_name_problem(name) is None


@pytest.mark.parametrize(
    ("text", "line", "named"),
    [
        ("all:\n  hosts:\n    n1:\n    '../../x':\n", 4, "'../../x'"),
        ("all:\n  hosts:\n    n1:\n    'a,b':\n", 4, "'a,b'"),
        ("[gpu]\nn1\na,b ansible_host=10.0.0.2\n", 3, "'a,b'"),
        ("[gpu]\nn1\nsub/x ansible_host=10.0.0.2\n", 3, "'sub/x'"),
    ],
)
def test_the_inventory_is_refused_with_one_line_naming_host_and_file(
    tmp_path: Path, text: str, line: int, named: str
) -> None:
    """An executable `x.sh` used to land two folders above --print-dir."""
    inventory = tmp_path / ("hosts.ini" if text.startswith("[") else "inventory.yaml")
    inventory.write_text(text)
    plan = tmp_path / "a" / "plan"
    done = run_cli(["launch", inventory, "--no-check", "--print-dir", plan, "--", "train.py"])
    assert done.status == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{inventory}:{line}:" in done.stderr and f"host {named}" in done.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        inventory.name
    ]  # nothing written, inside the folder or out of it


def print_dir(tmp_path: Path, folder: Path) -> tuple[int, str]:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts:\n" + GOOD)
    done = run_cli(["launch", inventory, "--no-check", "--print-dir", folder, "--", "train.py"])
    return done.status, done.stderr


def root_secret(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    return victim


def assert_untouched(victim: Path) -> None:
    assert victim.read_text() == "root's secret\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: needs root")
@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_print_dir_never_writes_through_a_planted_symlink(tmp_path: Path, mode: int) -> None:
    """`nobody` plants n1.sh -> root's 0600 file in a shared folder; it used to be overwritten
    with the script and made 0755."""
    victim = root_secret(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    (shared / "n1.sh").symlink_to(victim)
    os.lchown(shared / "n1.sh", NOBODY, -1)
    status, stderr = print_dir(tmp_path, shared)
    assert status == 2, stderr
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in stderr
    assert "--print-dir" in errors[0]
    assert ("not sticky" if mode == 0o777 else "belongs to user 'nobody'") in errors[0]
    assert_untouched(victim)


def test_print_dir_files_are_owner_only_and_a_rerun_replaces_them(tmp_path: Path) -> None:
    plan = tmp_path / "plan"
    assert print_dir(tmp_path, plan)[0] == 0
    (plan / "n1.env").write_text("stale\n")
    status, stderr = print_dir(tmp_path, plan)
    assert status == 0, stderr
    assert sorted(p.name for p in plan.iterdir()) == ["n1.env", "n1.sh", "n2.env", "n2.sh"]
    assert stat.S_IMODE(plan.stat().st_mode) == 0o700
    assert stat.S_IMODE((plan / "n1.env").stat().st_mode) == 0o600
    assert stat.S_IMODE((plan / "n1.sh").stat().st_mode) == 0o700
    assert "stale" not in (plan / "n1.env").read_text()
    assert f". {plan / 'n1.env'}\n" in (plan / "n1.sh").read_text()
