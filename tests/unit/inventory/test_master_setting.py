"""clusterkit.master must be a host of the inventory: checked when the inventory is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.errors import InventoryError
from clusterkit.settings.loader import load_inventory
from tests.support.cli import run_cli

INVENTORY = """\
all:
  hosts:
    n1: {ansible_host: 10.0.0.1}
    n2: {ansible_host: 10.0.0.2}
  vars:
    clusterkit:
      interface: eth0
      master: MASTER
"""


def write(tmp_path: Path, master: str) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY.replace("MASTER", master))
    return path


@pytest.mark.parametrize("master", ["n2", "10.0.0.2"])
def test_master_by_name_or_address(tmp_path: Path, master: str) -> None:
    assert load_inventory(write(tmp_path, master)).master.name == "n2"


def test_unknown_master_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "node9")
    with pytest.raises(InventoryError) as raised:
        load_inventory(path)
    assert str(raised.value).startswith(f"{path}:8: clusterkit.master: 'node9' is not a host")


@pytest.mark.parametrize("command", [["check", "--skip", "network"], ["bench"]])
def test_unknown_master_is_exit_2_before_any_connection(tmp_path: Path, command) -> None:
    done = run_cli([command[0], write(tmp_path, "10.9.9.9"), *command[1:]], timeout=60)
    assert done.status == 2, done.stderr
    assert done.stderr.startswith("clusterkit: error: ") and "clusterkit.master" in done.stderr
    assert not done.stdout
