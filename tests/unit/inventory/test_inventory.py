"""Inventory structure: groups, children, host keys and ranges, order, variable precedence."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from clusterkit.inventory import Inventory
from clusterkit.inventory.hostpatterns import HostPatternError, expand_host_key
from clusterkit.settings.loader import load_inventory, local_inventory


def write(directory: Path, text: str, name: str = "inventory.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str) -> Inventory:
    return load_inventory(write(tmp_path, text))


def names(inventory: Inventory) -> list[str]:
    return [host.name for host in inventory.hosts]


@pytest.mark.parametrize(
    ("key", "expected_names", "expected_port"),
    [
        ("node[01:03]", ["node01", "node02", "node03"], None),
        ("node[1:3]", ["node1", "node2", "node3"], None),
        ("node[8:10]", ["node8", "node9", "node10"], None),
        ("rack[a:c]", ["racka", "rackb", "rackc"], None),
        ("n[01:10:4]", ["n01", "n05", "n09"], None),
        ("r[1:2]-[a:b]", ["r1-a", "r1-b", "r2-a", "r2-b"], None),
        ("gpu[1:2]:2201", ["gpu1", "gpu2"], 2201),
        ("host:2222", ["host"], 2222),
        ("10.0.0.[5:6]", ["10.0.0.5", "10.0.0.6"], None),
        ("[fe80::1]:2200", ["fe80::1"], 2200),
        ("fe80::2", ["fe80::2"], None),
        ("db.example.com:22", ["db.example.com"], 22),
    ],
)
def test_host_keys_expand_like_ansible(key, expected_names, expected_port) -> None:
    assert expand_host_key(key) == (expected_names, expected_port)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("node[1-3]", "unknown host range syntax [1-3]"),
        ("node[01:100]", "equal width"),
        ("node[1:]", "no end value"),
        ("node[c:a]", "begin after end"),
        ("node[5:1]", "begin after end"),
        ("node[1:4:x]", "step"),
        ("node[1:4:0]", "at least 1"),
        ("node[a:9]", "unknown host range syntax"),
        ("node[1:3", "unclosed host range"),
    ],
)
def test_bad_host_ranges_are_rejected(key: str, message: str) -> None:
    with pytest.raises(HostPatternError, match=message.replace("[", r"\[")):
        expand_host_key(key)


def test_groups_children_and_host_order_follow_the_file(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          children:
            gpu:
              children:
                gpu_b:
                  hosts:
                    b1:
                gpu_a:
                  hosts:
                    a1:
              hosts:
                g0:
                b1:
          hosts:
            solo:
        """,
    )
    assert names(inventory) == ["b1", "a1", "g0", "solo"]
    assert inventory.host("b1").groups == ("all", "gpu", "gpu_b")
    assert inventory.host("g0").groups == ("all", "gpu")
    assert inventory.host("solo").groups == ("all", "ungrouped")
    assert inventory.path == str(tmp_path / "inventory.yaml")


def test_bare_strings_null_sections_and_null_hosts(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          children:
            web:
              hosts: w1
              children: extra
            db:
              hosts:
              vars:
          hosts:
            n1:
        extra:
          hosts:
            x1:
        """,
    )
    assert names(inventory) == ["w1", "n1", "x1"]
    assert inventory.host("x1").groups == ("all", "web", "extra")
    assert inventory.host("n1").vars == {}


def test_explicit_ungrouped_is_dropped_when_the_host_has_a_group(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        ungrouped:
          hosts:
            a:
            b:
        gpu:
          hosts:
            b:
        """,
    )
    assert inventory.host("a").groups == ("all", "ungrouped")
    assert inventory.host("b").groups == ("all", "gpu")


def test_duplicate_hosts_are_kept_once_in_first_position(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          children:
            one:
              hosts: {n2: {color: red}, n1: null}
            two:
              hosts: {n1: null, n2: {color: blue}, n3: null}
        """,
    )
    assert names(inventory) == ["n2", "n1", "n3"]
    assert inventory.host("n2").vars["color"] == "blue"


def test_non_group_keys_are_skipped_with_warnings(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          hosts:
            n1:
          meta: [not, a, mapping]
          comment: {ignored: true}
        version: 3
        """,
    )
    assert names(inventory) == ["n1"]
    assert len(inventory.warnings) == 3
    assert any(":5: skipping key 'meta'" in warning for warning in inventory.warnings)
    assert any(":7: skipping 'version'" in warning for warning in inventory.warnings)


def test_group_vars_merge_by_depth_priority_and_name(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars: {level: all, from_all: yes}
          children:
            outer:
              children:
                inner:
                  vars: {level: inner}
            inner:
              vars: {level: inner-again}
              hosts: {n1: null}
            aaa:
              vars: {level: aaa}
              hosts: {n1: null, n2: null}
            zzz:
              vars: {level: zzz}
              hosts: {n2: null, n3: null}
            low:
              vars: {level: low, ansible_group_priority: 5}
              hosts: {n3: null}
            n4group:
              vars: {level: group}
              hosts:
                n4: {level: host}
        """,
    )
    # n1: inner is two deep (under outer), so it beats aaa; later group vars of a group win.
    assert inventory.host("n1").vars["level"] == "inner-again"
    # n2: aaa and zzz are both depth 1, priority 1: name order, so zzz is merged last.
    assert inventory.host("n2").vars["level"] == "zzz"
    # n3: priority 5 sorts after priority 1 despite the name.
    assert inventory.host("n3").vars["level"] == "low"
    assert inventory.host("n4").vars["level"] == "host"
    assert inventory.host("n1").vars["from_all"] is True
    assert "ansible_group_priority" not in inventory.host("n3").vars


def test_host_port_in_key_is_ansible_port_until_a_host_var_says_otherwise(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          hosts:
            a:2222:
            b:2222:
              ansible_port: 2300
            a:2400:
        """,
    )
    assert inventory.host("a").port == 2222
    assert inventory.host("b").port == 2300


def test_group_vars_and_host_vars_files_beside_the_inventory(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        all:
          vars: {src: inventory, ansible_user: inv}
          children:
            gpu:
              vars: {src: inventory-gpu}
              hosts:
                n1:
                n2: {src: inventory-host}
                n3:
        """,
    )
    write(tmp_path, "ansible_user: deploy\nsrc: group_vars-all\n", "group_vars/all.yml")
    write(tmp_path, "src: group_vars-gpu-a\nlayer: a\n", "group_vars/gpu/a.yml")
    write(tmp_path, "layer: b\n", "group_vars/gpu/sub/b.yaml")
    write(tmp_path, "layer: ignored\n", "group_vars/gpu/.hidden.yml")
    write(tmp_path, "layer: ignored\n", "group_vars/gpu/backup.yml~")
    write(tmp_path, '{"src": "host_vars-n2"}', "host_vars/n2.json")
    write(tmp_path, "ansible_host: 10.0.0.3\n", "host_vars/n3")
    write(tmp_path, "", "host_vars/n1.yaml")  # empty files are fine
    inventory = load_inventory(path)
    n1, n2, n3 = inventory.hosts
    assert n1.vars["src"] == "group_vars-gpu-a"  # group_vars/ beat the inventory's group vars
    assert n1.vars["layer"] == "b"  # a directory is read recursively in sorted order
    assert n1.user == "deploy"
    assert n2.vars["src"] == "host_vars-n2"
    assert n3.address == "10.0.0.3"


def test_group_vars_name_without_extension_wins_over_yml(tmp_path: Path) -> None:
    path = write(tmp_path, "all:\n  hosts:\n    n1:\n")
    write(tmp_path, "pick: bare\n", "group_vars/all")
    write(tmp_path, "pick: yml\n", "group_vars/all.yml")
    assert load_inventory(path).host("n1").vars["pick"] == "bare"


def test_vault_and_templates_are_fine_in_ordinary_vars(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          hosts:
            n1:
              secret: !vault |
                $ANSIBLE_VAULT;1.1;AES256
                6133
              motd: "{{ inventory_hostname }} says hi"
              literal: !unsafe "{{ not a template }}"
        """,
    )
    host = inventory.host("n1")
    assert "vault" in repr(host.vars["secret"])
    assert host.vars["motd"].startswith("{{")


def test_local_inventory_runs_this_machine_locally() -> None:
    inventory = local_inventory()
    assert inventory.path is None
    (host,) = inventory.hosts
    assert (host.name, host.connection, host.is_local) == ("localhost", "local", True)
    assert host.python_interpreter == sys.executable
    assert inventory.settings.master_port == 29500
    assert inventory.master is host


def test_example_inventory_loads() -> None:
    example = Path(__file__).resolve().parents[3] / "inventory.example.yaml"
    inventory = load_inventory(example)
    assert names(inventory) == ["gpu-a01", "gpu-a02", "gpu-b01", "gpu-b02"]
    assert inventory.master.name == "gpu-a01"
    assert {host.proxy_jump for host in inventory.hosts} == {"ops@bastion.example.com"}
    assert inventory.settings.expect.gpus_per_node == 8
    assert inventory.host("gpu-b02").port == 2222
    # Its comment says templates are rendered: one is, as Ansible would.
    assert inventory.host("gpu-a02").address == "gpu-a02.fabric.example.com"


def test_a_thousand_hosts_load_well_under_a_second(tmp_path: Path) -> None:
    lines = ["all:", "  vars: {ansible_user: ml, clusterkit: {master_port: 29500}}", "  children:"]
    for rack in range(10):
        lines += [f"    rack{rack}:", f"      vars: {{rack_id: {rack}}}", "      hosts:"]
        lines += [
            f"        r{rack}n{node:03d}: {{ansible_host: 10.{rack}.0.{node}}}"
            for node in range(100)
        ]
    path = write(tmp_path, "\n".join(lines) + "\n")
    started = time.perf_counter()
    inventory = load_inventory(path)
    elapsed = time.perf_counter() - started
    assert len(inventory.hosts) == 1000
    assert elapsed < 0.5, f"{elapsed:.2f}s"
