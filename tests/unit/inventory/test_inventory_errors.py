"""Every malformed inventory is one InventoryError line: file, line, key. Never a traceback."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from clusterkit.errors import ConfigError, InventoryError, SpecError
from clusterkit.inventory import viaansible
from clusterkit.settings.loader import load_inventory
from clusterkit.status import ExitStatus
from tests.support.cli import run_cli


def error_for(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "inventory.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text))
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert caught.value.exit_status == ExitStatus.USAGE
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    return message[len(str(path)) :]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ": the inventory defines no hosts"),
        ("# only a comment\n", ": the inventory defines no hosts"),
        ("- a\n- b\n", ":1: not a YAML inventory: the top level is a list"),
        ("just text\n", ":1: not a YAML inventory: the top level is a str"),
        ("all:\n  hosts:\n    123:\n", ":3: host name 123 must be a string; quote it"),
        ("all:\n  hosts:\n    1.5:\n", ":3: host name 1.5 must be a string; quote it"),
        ("all:\n  hosts:\n    yes:\n", ":3: host name True must be a string; quote it"),
        ("all:\n  children:\n    7:\n", ":3: group name 7 must be a string; quote it"),
        ("all:\n  hosts:\n    n[1-4]:\n", ":3: n[1-4]: unknown host range syntax [1-4]"),
        ("all:\n  hosts:\n    n[01:100]:\n", ":3: n[01:100]: host range [01:100]"),
        ("all:\n  hosts: [a, b]\n", ":2: hosts: hosts of group 'all' must be a mapping, got list"),
        ("all:\n  vars: 5\n", ":2: vars: vars of group 'all' must be a mapping, got int"),
        ("all:\n  hosts:\n    a: text\n", ":3: a: host variables must be a mapping, got str"),
        ("all:\n  children:\n    g: [a]\n", ":3: g: child group 'g' must be a mapping"),
        ("all:\n  hosts:\n    a:\n      1: x\n", ":3: a: variable name 1 must be a string"),
        ("g:\n  vars:\n    ansible_group_priority: high\n", ":3: ansible_group_priority: must"),
        ("g:\n  children:\n    g:\n", ":3: g: group 'g' lists itself as a child"),
        ("all:\n  hosts:\n    a: b: 1\n", ":3: invalid YAML: mapping values are not allowed"),
        ("all:\n  hosts: {a: [}\n", ":2: invalid YAML:"),
        ("all:\n  hosts:\n    ? [a, b]\n    : x\n", ":3: invalid YAML: found an unhashable key"),
        ("all:\n  vars: {x: 1}\n", ": the inventory defines no hosts"),
        (b"all:\n  hosts:\n    \xff\xfe:\n", ": not UTF-8 text"),
    ],
)
def test_malformed_inventories(tmp_path: Path, text: str | bytes, expected: str) -> None:
    assert error_for(tmp_path, text).startswith(expected)


def test_cycle_names_the_groups_and_the_line(tmp_path: Path) -> None:
    message = error_for(
        tmp_path,
        """
        a:
          children:
            b:
        b:
          children:
            c:
        c:
          children:
            a:
        """,
    )
    assert message.startswith(":10: a: child-group cycle: 'a' is already an ancestor of 'c'")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InventoryError, match=f"^{missing}: no such file"):
        load_inventory(missing)


def test_plugin_config_without_ansible_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(viaansible.sys, "executable", str(tmp_path / "empty" / "python"))
    path = tmp_path / "aws_ec2.yml"
    path.write_text("# aws\nplugin: aws_ec2\nregions: [x]\n")
    with pytest.raises(InventoryError) as caught:  # as provision, which runs Ansible
        load_inventory(path, for_ansible=True, environ={"PATH": str(tmp_path / "empty")})
    message = str(caught.value)[len(str(path)) :]
    assert message.startswith(":2: an inventory plugin configuration: resolving it needs")
    assert "ansible-inventory, which is not installed" in message
    assert "pip install ansible-core" in message


def test_a_directory_without_inventory_files_defines_no_hosts(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("all:\n  hosts:\n    a:\n")  # skipped, as by Ansible
    with pytest.raises(InventoryError, match="defines no hosts"):
        load_inventory(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    a:\n")
    path.chmod(0)
    with pytest.raises(InventoryError, match="permission denied"):
        load_inventory(path)


def test_file_that_fails_to_read() -> None:
    """Works as root too: reading /proc/self/mem fails with EIO."""
    with pytest.raises(InventoryError, match=r"^/proc/self/mem: cannot read: "):
        load_inventory("/proc/self/mem")


def test_bad_yaml_in_a_group_vars_directory_names_that_file(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("gpu:\n  hosts:\n    a:\n")
    (tmp_path / "group_vars" / "gpu").mkdir(parents=True)
    (tmp_path / "group_vars" / "gpu" / "vars.yml").mkdir()  # a directory with an extension
    (tmp_path / "group_vars" / "gpu" / "real.yml").write_text("x: [unclosed\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value).startswith(f"{tmp_path / 'group_vars' / 'gpu' / 'real.yml'}:2:")


def test_vars_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    a:\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "a.yml").write_text("- one\n- two\n")
    with pytest.raises(InventoryError, match=r"host_vars/a\.yml: a vars file must hold a mapping"):
        load_inventory(path)


def test_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """Through the real entry point: an InventoryError becomes one line, status 2."""
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    123:\n")
    result = run_cli(["check", str(path)])
    assert result.status == 2
    assert result.stderr.strip().count("\n") == 0
    assert "Traceback" not in result.stderr
    assert f"{path}:3: host name 123 must be a string; quote it" in result.stderr


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("inventory.yaml", "just text\n", ":1: not a YAML inventory: the top level is a str"),
        ("inventory.yaml", "[web]\nweb1 x\n", ":2: expected key=value after the host name"),
        ("hosts", "all:\n  hosts:\n    a: b: 1\n", ":3: invalid YAML: mapping values are not"),
        ("hosts.ini", "[web]\nweb1\n[web:vars]\nnovalue\n", ":4: expected key=value in [web:vars]"),
        ("hosts.ini", "[web]\n  node[3:1]\n", ":2: node[3:1]: host range [3:1]"),
    ],
)
def test_neither_yaml_nor_ini_names_the_likelier_reading(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{expected}"), message
    assert "\n" not in message
    if name != "hosts.ini":
        assert "(nor is it" in message


def test_an_unreadable_vars_directory_is_a_warning_not_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group_vars = tmp_path / "group_vars"
    group_vars.mkdir()
    (group_vars / "all.yml").write_text("x: 1\n")
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    a:\n")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: p != str(group_vars) and real_access(p, mode)
    )  # as root every directory is readable: pretend this one is not
    inventory = load_inventory(path)
    assert "x" not in inventory.host("a").vars  # skipped, as Ansible skips it
    assert f"{group_vars}: directory not readable: its variables are skipped" in (
        inventory.warnings
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_vars_file_is_an_error_as_in_ansible(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    vars_file = tmp_path / "group_vars" / "all.yml"
    vars_file.write_text("x: 1\n")
    vars_file.chmod(0)
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hosts:\n    a:\n")
    with pytest.raises(InventoryError, match=f"{vars_file}: permission denied"):
        load_inventory(path)


@pytest.mark.parametrize("kind", [InventoryError, SpecError])
def test_located_errors_share_one_shape(kind: type[InventoryError] | type[SpecError]) -> None:
    """Both name file, line and key the same way, and keep a hostile name on one line."""
    error = kind("inv\nentory.yaml", "bad\rvalue", line=3, key="host\tname", hint="fix it")
    assert str(error) == "inv\\nentory.yaml:3: host\\tname: bad\\rvalue (fix it)"
    assert (error.path, error.line, error.key) == ("inv\nentory.yaml", 3, "host\tname")
    assert str(kind("f.yaml", "no line")) == "f.yaml: no line"
    assert isinstance(error, ConfigError) == (kind is SpecError)  # spec errors stay config errors


def test_no_hosts_because_of_a_misspelt_key_says_which_key(tmp_path: Path) -> None:
    """`hostz:` under all: the error names the skipped key, not only "no hosts"."""
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  hostz:\n    node1:\n")
    done = run_cli(["check", str(path)])
    assert done.status == 2
    assert done.stderr.count("\n") == 1
    assert "defines no hosts" in done.stderr and "unexpected key 'hostz'" in done.stderr
