"""Which sources `check` and `bench` read: the positional one, then every -i, in order."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from clusterkit.cli import parse
from clusterkit.cli.requests import target
from clusterkit.commands.common import load_targets
from clusterkit.environment import Environment
from clusterkit.errors import InventoryError
from clusterkit.inventory.model import Inventory


def load_target(args: argparse.Namespace, env: Environment) -> Inventory:
    """The hosts the command line names (limited), or this machine."""
    return load_targets(target(args), env)[0]


def test_positional_and_repeated_i_merge_in_order(tmp_path: Path) -> None:
    first = tmp_path / "a" / "inventory.yaml"
    first.parent.mkdir()
    first.write_text("all:\n  hosts:\n    n1: {ansible_user: first}\n    n2:\n")
    second = tmp_path / "b" / "hosts.ini"
    second.parent.mkdir()
    second.write_text("[gpu]\nn2 ansible_user=second\nn3\n[gpu:vars]\nrack=r1\n")
    (second.parent / "host_vars").mkdir()
    (second.parent / "host_vars" / "n1.yml").write_text("ansible_user: from_b_host_vars\n")
    for command in ("check", "bench"):
        inventory = load_target(parse([command, str(first), "-i", str(second)]), Environment())
        assert [h.name for h in inventory.hosts] == ["n1", "n2", "n3"]
        users = {h.name: h.user for h in inventory.hosts}
        assert users == {"n1": "from_b_host_vars", "n2": "second", "n3": None}
        assert inventory.host("n2").vars["rack"] == "r1"
        assert inventory.host("n1").groups == ("all", "ungrouped")


def test_i_alone_is_an_inventory_and_none_is_this_machine(tmp_path: Path) -> None:
    only = tmp_path / "hosts"
    only.write_text("solo ansible_connection=local\n")
    assert [
        h.name for h in load_target(parse(["check", "-i", str(only)]), Environment()).hosts
    ] == ["solo"]
    assert [h.name for h in load_target(parse(["check"]), Environment()).hosts] == ["localhost"]


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    present = tmp_path / "hosts"
    present.write_text("solo\n")
    with pytest.raises(InventoryError, match=f"{tmp_path / 'absent'}: no such file"):
        load_target(parse(["check", str(present), "-i", str(tmp_path / "absent")]), Environment())


def test_inventory_via_ansible_is_parsed_for_check_and_bench() -> None:
    assert parse(["check", "x", "--inventory-via-ansible"]).inventory_via_ansible is True
    assert parse(["bench", "-i", "x"]).inventory_via_ansible is False


def test_deepops_bastion_idiom_gives_a_proxycommand() -> None:
    from clusterkit.settings.loader import load_inventory

    fixture = Path(__file__).parents[2] / "fixtures" / "inventories" / "styles" / "deepops"
    host = load_inventory(fixture / "inventory").host("gpu01")
    assert host.proxy_command == "ssh -W %h:%p -q ubuntu@10.0.0.1"
    assert (host.address, host.user) == ("10.0.2.1", "ubuntu")


def test_a_pipe_is_refused_not_read(tmp_path: Path) -> None:
    import os

    pipe = tmp_path / "inventory"
    os.mkfifo(pipe)
    with pytest.raises(InventoryError, match="not a regular file"):
        load_target(parse(["check", str(pipe)]), Environment())
    inventory = tmp_path / "hosts"
    inventory.write_text("solo\n")
    (tmp_path / "group_vars").mkdir()
    os.mkfifo(tmp_path / "group_vars" / "all")
    assert load_target(parse(["check", str(inventory)]), Environment()).host("solo").vars == {}


def test_a_host_named_like_a_group_is_warned_about(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts"
    inventory.write_text("[gpu]\nn1\n[web]\ngpu\n")
    loaded = load_target(parse(["check", str(inventory)]), Environment())
    assert f"{inventory}:4: found both a group and a host named 'gpu'" in loaded.warnings


def test_a_symlink_loop_in_a_directory_is_refused_shortly(tmp_path: Path) -> None:
    (tmp_path / "inv" / "sub").mkdir(parents=True)
    (tmp_path / "inv" / "hosts").write_text("n1\n")
    (tmp_path / "inv" / "sub" / "up").symlink_to("..")
    with pytest.raises(InventoryError) as caught:
        load_target(parse(["check", str(tmp_path / "inv")]), Environment())
    assert str(caught.value).startswith(f"{tmp_path / 'inv' / 'sub' / 'up'}: directory loop")
