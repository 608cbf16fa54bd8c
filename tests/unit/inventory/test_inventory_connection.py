"""Connection variables -> Host fields, and the errors for ones clusterkit cannot use."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit.errors import InventoryError
from clusterkit.inventory import Host
from clusterkit.settings.loader import load_inventory


def host_with(tmp_path: Path, host_vars: dict[str, Any]) -> Host:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"n1": host_vars}}}))
    return load_inventory(path).host("n1")


def error_for(tmp_path: Path, host_vars: dict[str, Any]) -> str:
    with pytest.raises(InventoryError) as caught:
        host_with(tmp_path, host_vars)
    return str(caught.value)


def test_defaults_without_connection_variables(tmp_path: Path) -> None:
    host = host_with(tmp_path, {})
    assert (host.address, host.port, host.user, host.key_file) == ("n1", None, None, None)
    assert (host.connection, host.python_interpreter, host.ssh_timeout) == ("ssh", None, None)
    assert host.proxy_jump is None and host.strict_host_key_checking is None


def test_plain_connection_variables(tmp_path: Path) -> None:
    host = host_with(
        tmp_path,
        {
            "ansible_host": "10.0.0.1",
            "ansible_port": "2222",
            "ansible_user": "ml",
            "ansible_ssh_private_key_file": "~/.ssh/id_cluster",
            "ansible_python_interpreter": "/opt/py/bin/python3",
            "ansible_ssh_timeout": 30,
            "ansible_connection": "paramiko",
        },
    )
    assert (host.address, host.port, host.user) == ("10.0.0.1", 2222, "ml")
    assert host.key_file == os.path.expanduser("~/.ssh/id_cluster")
    assert host.python_interpreter == "/opt/py/bin/python3"
    assert (host.ssh_timeout, host.connection) == (30.0, "ssh")


def test_ssh_aliases_win_over_the_short_names_like_ansible(tmp_path: Path) -> None:
    host = host_with(
        tmp_path,
        {
            "ansible_host": "short",
            "ansible_ssh_host": "long",
            "ansible_port": 1,
            "ansible_ssh_port": 2,
            "ansible_user": "a",
            "ansible_ssh_user": "b",
            "ansible_private_key_file": "/k1",
            "ansible_ssh_private_key_file": "/k2",
            "ansible_timeout": 5,
            "ansible_ssh_timeout": 7,
        },
    )
    assert (host.address, host.port, host.user, host.key_file) == ("long", 2, "b", "/k2")
    assert host.ssh_timeout == 7.0


def test_aliases_alone_are_used(tmp_path: Path) -> None:
    host = host_with(
        tmp_path,
        {"ansible_ssh_host": "h", "ansible_ssh_port": 22, "ansible_private_key_file": "/k"},
    )
    assert (host.address, host.port, host.key_file) == ("h", 22, "/k")


@pytest.mark.parametrize(
    ("common", "extra", "jump", "strict", "known"),
    [
        ("-J bastion", None, "bastion", None, None),
        ("-Jops@bastion:2200", None, "ops@bastion:2200", None, None),
        ("-o ProxyJump=jump1,jump2", None, "jump1,jump2", None, None),
        ("-oProxyJump=j", None, "j", None, None),
        ("-o 'ProxyJump j2'", None, "j2", None, None),
        ("-o ProxyJump j3 -o StrictHostKeyChecking=no", None, "j3", "no", None),
        (
            "-C -o ControlMaster=auto -o StrictHostKeyChecking=accept-new",
            "-o UserKnownHostsFile=/etc/ck/known",
            None,
            "accept-new",
            "/etc/ck/known",
        ),
        ("-J first", "-J second -o stricthostkeychecking=yes", "first", "yes", None),
        ("-p 2222 -i /key -o ServerAliveInterval=5", None, None, None, None),
    ],
)
def test_ssh_arguments(tmp_path: Path, common, extra, jump, strict, known) -> None:
    host_vars = {"ansible_ssh_common_args": common}
    if extra is not None:
        host_vars["ansible_ssh_extra_args"] = extra
    host = host_with(tmp_path, host_vars)
    assert (host.proxy_jump, host.strict_host_key_checking) == (jump, strict)
    assert host.user_known_hosts_file == known


def test_ssh_args_come_before_common_args(tmp_path: Path) -> None:
    host = host_with(
        tmp_path,
        {"ansible_ssh_args": "-o ProxyJump=early", "ansible_ssh_common_args": "-J late"},
    )
    assert host.proxy_jump == "early"


def test_known_hosts_file_expands_home(tmp_path: Path) -> None:
    host = host_with(tmp_path, {"ansible_ssh_extra_args": "-o UserKnownHostsFile=~/kh"})
    assert host.user_known_hosts_file == os.path.expanduser("~/kh")


def test_host_key_checking_false_means_strict_no(tmp_path: Path) -> None:
    assert host_with(tmp_path, {"ansible_host_key_checking": False}).strict_host_key_checking == (
        "no"
    )
    assert host_with(tmp_path, {"ansible_host_key_checking": True}).strict_host_key_checking is None


@pytest.mark.parametrize("value", ["local", "ansible.builtin.local"])
def test_local_connection(tmp_path: Path, value: str) -> None:
    host = host_with(tmp_path, {"ansible_connection": value})
    assert host.connection == "local" and host.is_local


@pytest.mark.parametrize("value", ["ssh", "smart", "paramiko", "ansible.builtin.ssh"])
def test_ssh_connections(tmp_path: Path, value: str) -> None:
    assert host_with(tmp_path, {"ansible_connection": value}).connection == "ssh"


@pytest.mark.parametrize("value", ["docker", "winrm", "community.docker.docker"])
def test_unsupported_connection_names_host_and_variable(tmp_path: Path, value: str) -> None:
    message = error_for(tmp_path, {"ansible_connection": value})
    assert "inventory.yaml:4: ansible_connection:" in message
    assert "host n1" in message and repr(value) in message


def test_playbook_python_idiom_means_this_interpreter(tmp_path: Path) -> None:
    host = host_with(
        tmp_path,
        {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        },
    )
    assert host.python_interpreter == sys.executable


def test_interpreter_discovery_leaves_the_default(tmp_path: Path) -> None:
    host = host_with(tmp_path, {"ansible_python_interpreter": "auto_silent"})
    assert host.python_interpreter is None


@pytest.mark.parametrize(
    ("var", "value", "problem"),
    [
        ("ansible_port", "ssh", "must be a port number 1..65535"),
        ("ansible_port", 70000, "must be a port number 1..65535"),
        ("ansible_port", True, "must be a port number"),
        ("ansible_ssh_timeout", "soon", "positive number of seconds"),
        ("ansible_ssh_timeout", 0, "positive number of seconds"),
        ("ansible_host", ["a", "b"], "must be a non-empty string"),
        ("ansible_user", "", "must be a non-empty string"),
        ("ansible_ssh_common_args", "-o 'ProxyJump=x", "cannot be split"),
        ("ansible_host_key_checking", "maybe", "must be a boolean"),
    ],
)
def test_bad_connection_values(tmp_path: Path, var: str, value: Any, problem: str) -> None:
    message = error_for(tmp_path, {var: value})
    assert f"inventory.yaml:4: {var}: " in message
    assert problem in message and "host n1" in message


def test_templates_over_the_hosts_own_variables_are_rendered(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "all:\n"
        "  vars:\n"
        "    ansible_host: '{{ inventory_hostname }}.example.com'\n"
        "    ansible_user: '{{ lxc_user }}'\n"
        "    ansible_port: '{{ ssh_port | default(22) }}'\n"
        "    ansible_ssh_private_key_file: \"{{ key_dir | d('/keys') }}/id_{{ lxc_user }}\"\n"
        "    lxc_user: '{{ base_user }}'\n"
        "    base_user: ops\n"
        "  hosts:\n"
        "    n1:\n"
        "    n2: {ssh_port: 2222, key_dir: /k2}\n"
    )
    inventory = load_inventory(path)
    n1, n2 = inventory.host("n1"), inventory.host("n2")
    assert (n1.address, n1.user, n1.port, n1.key_file) == (
        "n1.example.com",
        "ops",
        22,
        "/keys/id_ops",
    )
    assert (n2.port, n2.key_file) == (2222, "/k2/id_ops")
    assert n1.problem is None and n1.vars["ansible_user"] == "{{ lxc_user }}"  # vars stay raw


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("'{{ missing_user }}'", "variable 'missing_user' is not defined"),
        ("\"{{ lookup('env', 'USER') }}\"", "more than a variable reference"),
        ("'{{ a | upper }}'", "only the default filter"),
        ("'{% if x %}a{% endif %}'", "statement"),
        ("'{{ loop_a }}'", "more than 10 deep"),
    ],
)
def test_a_template_that_cannot_be_rendered_fails_that_host_only(
    tmp_path: Path, value: str, reason: str
) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "all:\n"
        "  hosts:\n"
        "    good:\n"
        "    bad:\n"
        f"      ansible_user: {value}\n"
        "      a: x\n"
        "      loop_a: '{{ loop_b }}'\n"
        "      loop_b: '{{ loop_a }}'\n"
    )
    inventory = load_inventory(path)
    assert inventory.host("good").problem is None
    problem = inventory.host("bad").problem
    assert problem is not None and problem.startswith("ansible_user cannot be rendered")
    assert reason in problem and f"{path}:5" in problem


def test_vault_in_a_connection_variable_fails_that_host(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "all:\n"
        "  hosts:\n"
        "    n1:\n"
        "      ansible_user: !vault |\n"
        "        $ANSIBLE_VAULT;1.1;AES256\n"
        "        3938\n"
        "    n2:\n"
    )
    inventory = load_inventory(path)
    assert inventory.host("n1").problem == (
        f"ansible_user is vault-encrypted; only Ansible can decrypt it ({path}:4)"
    )
    assert inventory.host("n2").problem is None


def test_proxycommand_in_ssh_args_is_kept_for_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "all:\n"
        "  hosts:\n"
        "    n1:\n"
        "      ansible_ssh_common_args: >-\n"
        '        -o StrictHostKeyChecking=no -o ProxyCommand="ssh -W %h:%p -q bastion"\n'
    )
    host = load_inventory(path).host("n1")
    assert host.proxy_command == "ssh -W %h:%p -q bastion"
    assert host.strict_host_key_checking == "no"


def test_error_points_at_the_vars_file_that_set_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("gpu:\n  hosts:\n    n1:\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("# rack A\nansible_port: high\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value).startswith(f"{tmp_path / 'group_vars' / 'gpu.yml'}:2: ansible_port:")


def test_unsafe_strings_are_literal(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "all:\n  hosts:\n    n1:\n      ansible_ssh_private_key_file: !unsafe '/k/{{x}}'\n"
    )
    assert load_inventory(path).host("n1").key_file == "/k/{{x}}"
