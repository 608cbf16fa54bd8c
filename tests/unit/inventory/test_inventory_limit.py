"""select_hosts(): Ansible --limit patterns over an inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.errors import UsageError
from clusterkit.inventory import Inventory, select_hosts
from clusterkit.inventory.limit import split_terms
from clusterkit.settings.loader import load_inventory

INVENTORY = """\
all:
  vars:
    clusterkit: {master: a2}
  children:
    gpu:
      children:
        gpu_a:
          hosts: {a1: null, a2: null}
        gpu_b:
          hosts: {b1: null, b2: null}
    login:
      hosts: {head.example.com: null}
    spare:
      hosts: {b2: null}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return load_inventory(path)


def selected(inventory: Inventory, limit: str) -> list[str]:
    return [host.name for host in select_hosts(inventory, limit).hosts]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("a1", ["a1"]),
        ("b2,a1", ["a1", "b2"]),  # inventory order, not pattern order
        ("gpu_b", ["b1", "b2"]),
        ("gpu", ["a1", "a2", "b1", "b2"]),
        ("gpu_a:gpu_b", ["a1", "a2", "b1", "b2"]),
        ("gpu:!spare", ["a1", "a2", "b1"]),
        ("gpu,!b*", ["a1", "a2"]),
        ("gpu:&spare", ["b2"]),
        ("!gpu", ["head.example.com"]),
        ("*.example.com", ["head.example.com"]),
        ("head.example.com", ["head.example.com"]),
        ("a?", ["a1", "a2"]),
        ("gpu_*", ["a1", "a2", "b1", "b2"]),
        ("~b[12]", ["b1", "b2"]),
        ("all", ["a1", "a2", "b1", "b2", "head.example.com"]),
        (" a1 , a2 ", ["a1", "a2"]),
    ],
)
def test_limit_patterns(inventory: Inventory, limit: str, expected: list[str]) -> None:
    assert selected(inventory, limit) == expected


def test_subset_keeps_path_settings_and_hosts_unchanged(inventory: Inventory) -> None:
    subset = select_hosts(inventory, "gpu_a")
    assert subset.path == inventory.path
    assert subset.settings == inventory.settings
    assert subset.host("a2") is inventory.host("a2")
    assert subset.master.name == "a2"


@pytest.mark.parametrize(
    ("limit", "named"),
    [
        ("nod01", "'nod01'"),
        ("a1,typo", "'typo'"),
        ("gpu:&nothing", "'&nothing'"),
        ("gpu:!gpu", "'gpu:!gpu' leaves no hosts"),
        ("", "names no hosts"),
        ("~[", "bad regular expression"),
    ],
)
def test_limits_that_match_nothing_are_usage_errors(
    inventory: Inventory, limit: str, named: str
) -> None:
    with pytest.raises(UsageError) as caught:
        select_hosts(inventory, limit)
    assert named in str(caught.value)


def test_excluding_an_unknown_name_is_harmless(inventory: Inventory) -> None:
    assert selected(inventory, "gpu_a,!ghost") == ["a1", "a2"]


def test_split_terms_keeps_ipv6_and_brackets_whole() -> None:
    assert split_terms("fe80::1") == ["fe80::1"]
    assert split_terms("a:b:!c") == ["a", "b", "!c"]
    assert split_terms("a,b:c") == ["a", "b:c"]
    assert split_terms("n[1]:m") == ["n[1]", "m"]
