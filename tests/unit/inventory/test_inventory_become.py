"""What an inventory may not make clusterkit do: become another user (refused, not ignored),
or run the inventory's own code (plugins, scripts) through ansible-inventory unasked.

Attacks and faults reproduced: `ansible_become: true` was silently ignored, so checks ran
unprivileged while the user believed them root; a `constructed` plugin's `compose` ran
`lookup('pipe', ...)` on the control machine through ansible-inventory, and an executable
file dropped into an inventory directory was run the same way, with no flag asked for.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from clusterkit.errors import InventoryError
from clusterkit.inventory.viaansible import find_ansible_inventory
from clusterkit.settings.loader import load_inventory
from clusterkit.status import ExitStatus
from tests.support.cli import run_cli

REFUSED = "clusterkit does not use become: it runs everything as the SSH user"
BECOME_VARIABLES = [
    "ansible_become", "ansible_become_user", "ansible_become_method", "ansible_become_pass",
    "ansible_become_password", "ansible_become_exe", "ansible_become_flags", "ansible_sudo",
    "ansible_sudo_user", "ansible_sudo_pass", "ansible_su", "ansible_su_user", "ansible_su_pass",
    "become", "become_user", "become_method",
]  # fmt: skip


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def refusal(source: Path, **kwargs: bool) -> str:
    with pytest.raises(InventoryError) as caught:
        load_inventory(source, **kwargs)
    assert caught.value.exit_status == ExitStatus.USAGE
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("variable", BECOME_VARIABLES)
def test_every_become_variable_is_refused_naming_host_variable_and_file(
    tmp_path: Path, variable: str
) -> None:
    inventory = write(
        tmp_path / "inventory.yaml",
        f"""\
        all:
          hosts:
            n1:
            n2:
              {variable}: "hunter2-not-shown"
        """,
    )
    message = refusal(inventory)
    assert message.startswith(f"{inventory}:5: {variable}: {REFUSED} (host n2)"), message
    assert "connect as the user the checks need" in message
    assert "hunter2" not in message  # a become password is never echoed


def test_become_in_ini_and_in_group_vars_is_refused_where_it_is_set(tmp_path: Path) -> None:
    hosts = write(tmp_path / "ini" / "hosts", "[gpu]\nn1 ansible_become_pass=s3cret\nn2\n")
    message = refusal(hosts)
    assert message.startswith(f"{hosts}:2: ansible_become_pass: {REFUSED} (host n1)")
    assert "s3cret" not in message
    inventory = write(tmp_path / "yaml" / "inventory.yml", "all:\n  hosts:\n    n1:\n")
    group_vars = write(tmp_path / "yaml" / "group_vars" / "all.yml", "become: yes\n")
    assert refusal(inventory).startswith(f"{group_vars}:1: become: {REFUSED} (host n1)")


def test_the_kolla_style_host_line_with_become_is_refused(tmp_path: Path) -> None:
    """kolla-ansible's sample inventory asks for become on its first host."""
    hosts = write(
        tmp_path / "multinode",
        "[control]\ncontrol01 ansible_ssh_user=kolla ansible_become=True\ncontrol02\n",
    )
    assert f"ansible_become: {REFUSED} (host control01)" in refusal(hosts)


@pytest.mark.parametrize("off", ["false", "no", "'False'", "0"])
def test_become_switched_off_explicitly_is_accepted_with_its_settings(
    tmp_path: Path, off: str
) -> None:
    inventory = write(
        tmp_path / "inventory.yaml",
        f"""\
        all:
          vars:
            ansible_become: {off}
            ansible_become_user: root
          hosts:
            n1:
        """,
    )
    assert [host.name for host in load_inventory(inventory).hosts] == ["n1"]


def test_switched_off_in_one_place_but_on_in_another_is_refused(tmp_path: Path) -> None:
    inventory = write(
        tmp_path / "inventory.yaml",
        """\
        all:
          vars:
            ansible_become: false
          hosts:
            n1:
              ansible_sudo: true
        """,
    )
    assert f"ansible_sudo: {REFUSED} (host n1)" in refusal(inventory)


def test_the_cli_refuses_become_in_one_line_with_status_2(tmp_path: Path) -> None:
    inventory = write(tmp_path / "inventory.yaml", "all:\n  hosts:\n    n1:\n      become: true\n")
    done = run_cli(["check", str(inventory)], timeout=60)
    assert done.status == ExitStatus.USAGE
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{inventory}:4: become: {REFUSED} (host n1)" in done.stderr


def hostile_sources(tmp_path: Path) -> tuple[Path, Path]:
    """A `constructed` plugin whose compose runs a shell command, and an executable
    inventory script, each leaving a marker file when its code runs."""
    marker = tmp_path / "ran"
    plugin = write(
        tmp_path / "plugin" / "constructed.yml",
        f"""\
        plugin: ansible.builtin.constructed
        compose:
          pwned: lookup('pipe', 'touch {marker}/plugin')
        """,
    )
    write(tmp_path / "plugin" / "00-hosts.yml", "all:\n  hosts:\n    n1:\n")
    script = write(
        tmp_path / "scripts" / "inventory.py",
        f"""\
        #!/bin/sh
        touch {marker}/script
        echo '{{"all": {{"hosts": ["n1"]}}, "_meta": {{"hostvars": {{}}}}}}'
        """,
    )
    script.chmod(0o755)
    write(tmp_path / "scripts" / "hosts.yml", "all:\n  hosts:\n    n2:\n")
    marker.mkdir()
    return plugin.parent, script.parent


def test_plugins_and_scripts_are_refused_and_never_run_unless_asked(tmp_path: Path) -> None:
    """A directory holding a plugin configuration or an executable script: without
    --inventory-via-ansible neither is run, and the error says why and how to allow it."""
    plugin_dir, script_dir = hostile_sources(tmp_path)
    for source, what in (
        (plugin_dir, "constructed.yml is an inventory plugin configuration"),
        (script_dir, "inventory.py is an executable inventory script"),
        (plugin_dir / "constructed.yml", "an inventory plugin configuration"),
    ):
        message = refusal(source)
        assert what in message, message
        assert "resolving it runs code on this machine through ansible-inventory" in message
        assert "--inventory-via-ansible" in message
    assert "a host list" in refusal(Path("n1,n2,"))
    assert os.listdir(tmp_path / "ran") == []
    done = run_cli(["check", str(plugin_dir)], timeout=60)
    assert done.status == ExitStatus.USAGE and "--inventory-via-ansible" in done.stderr
    assert os.listdir(tmp_path / "ran") == []


@pytest.mark.skipif(
    find_ansible_inventory(os.environ) is None, reason="ansible-inventory not installed"
)
def test_with_the_flag_ansible_inventory_runs_them_which_is_why_it_is_asked(
    tmp_path: Path,
) -> None:
    plugin_dir, script_dir = hostile_sources(tmp_path)
    assert [h.name for h in load_inventory(plugin_dir, via_ansible=True).hosts] == ["n1"]
    assert {h.name for h in load_inventory(script_dir, via_ansible=True).hosts} == {"n1", "n2"}
    assert sorted(os.listdir(tmp_path / "ran")) == ["plugin", "script"]


def test_provision_leaves_become_to_ansible_which_connects_there(tmp_path: Path) -> None:
    """`provision` hands the inventory to ansible-playbook, which honours become itself: the
    same inventory that `check` refuses is accepted there."""
    from clusterkit import cli
    from clusterkit.cli import provision
    from clusterkit.commands.provision import plan
    from clusterkit.environment import Environment

    inventory = write(tmp_path / "inventory.yaml", "all:\n  hosts:\n    n1:\n      become: true\n")
    assert f"become: {REFUSED}" in refusal(inventory)
    args = cli.parse(["provision", str(inventory)])
    assert plan(provision.request(args), Environment()).inventory == str(inventory)
