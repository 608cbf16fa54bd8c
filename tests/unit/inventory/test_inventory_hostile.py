"""Hostile and oversized inventories: names OpenSSH refuses, huge ranges, stalled ProxyCommands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from clusterkit.errors import InventoryError, TransportError
from clusterkit.inventory import Host
from clusterkit.inventory.names import hostname_problem, username_problem
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.connect import connect_host
from clusterkit.transport.endpoint import ConnectOptions, load_ssh_config, resolve_endpoint
from tests.support.cli import CliRun, run_cli


def clusterkit(*args: str) -> CliRun:
    return run_cli(args, timeout=60)


def clusterkit_process(*args: str) -> subprocess.CompletedProcess[str]:
    """A real process, where the test needs one: paramiko runs `Match exec` through invoke,
    which reads the process's own stdin (pytest's refuses that)."""
    return subprocess.run(
        [sys.executable, "-m", "clusterkit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    "name",
    ["x$(touch /tmp/p)", "a;b", "a b", "a\nb", "-oProxyCommand=x", "a`id`", "a|b", "a\x1b[2J", ""],
)
def test_names_openssh_refuses_are_refused(name: str) -> None:
    assert hostname_problem(name) is not None


@pytest.mark.parametrize(
    "name", ["node01", "gpu-1.example.com", "10.0.0.1", "fe80::1", "fe80::1%eth0", "n_1", "nœud"]
)
def test_ordinary_names_and_ipv6_literals_pass(name: str) -> None:
    assert hostname_problem(name) is None


def test_user_names_follow_openssh_rules() -> None:
    assert username_problem("ubuntu") is None
    assert username_problem("DOMAIN\\user") is None
    assert username_problem("-l") is not None
    assert username_problem("a;b") is not None
    assert username_problem("a -x") is not None


@pytest.mark.parametrize("form", ["yaml", "ini", "ansible_host"])
def test_match_exec_never_sees_a_hostile_name(tmp_path: Path, form: str) -> None:
    marker = tmp_path / "pwned"
    log = tmp_path / "match-exec.log"
    hostile = f"x$(touch {marker})"
    config = tmp_path / "ssh_config"
    config.write_text(f'Match exec "echo %h >> {log}"\n  User nobody\n')
    if form == "yaml":
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(f"all:\n  hosts:\n    ok1:\n    '{hostile}':\n")
        where = f"{inventory}:4:"
    elif form == "ini":
        inventory = tmp_path / "hosts.ini"
        inventory.write_text(f"[gpu]\nok1\n'{hostile}' rank=1\n")
        where = f"{inventory}:3:"
    else:
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            f"all:\n  hosts:\n    ok1:\n    n2:\n      ansible_host: '{hostile}'\n"
        )
        where = f"{inventory}:5:"
    done = clusterkit("check", str(inventory), "--ssh-config", str(config))
    assert done.status == 2, done.stderr
    assert where in done.stderr and repr(hostile) in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists() and not log.exists()  # nothing ran, not even for ok1


def test_the_same_config_does_run_for_a_plain_name(tmp_path: Path) -> None:
    """The control: Match exec really runs for an accepted name, so the test above could fail."""
    log = tmp_path / "match-exec.log"
    config = tmp_path / "ssh_config"
    config.write_text(f'Match exec "echo %h >> {log}"\n  User nobody\n')
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts:\n    ok1: {ansible_host: 127.0.0.1, ansible_port: 1}\n")
    done = clusterkit_process(
        "check", str(inventory), "--ssh-config", str(config), "--format", "json"
    )
    assert done.returncode == 3, done.stderr  # nothing listens on port 1
    assert set(log.read_text().split()) == {"127.0.0.1"}


def test_a_hostile_name_built_in_code_is_refused_before_the_config_lookup(tmp_path: Path) -> None:
    log = tmp_path / "match-exec.log"
    config = tmp_path / "ssh_config"
    config.write_text(f'Match exec "echo %h >> {log}"\n  User nobody\n')
    host = Host(name="n1", address="x;id")
    with pytest.raises(TransportError, match="OpenSSH refuses"):
        resolve_endpoint(host, ConnectOptions(), load_ssh_config(str(config)))
    assert not log.exists()


def test_a_huge_range_is_refused_with_the_range_and_the_limit(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\nn[1:999999999999]\n")
    started = time.monotonic()
    done = clusterkit("check", str(inventory))
    assert time.monotonic() - started < 30
    assert done.status == 2 and "Traceback" not in done.stderr
    assert f"{inventory}:2:" in done.stderr and "[1:999999999999]" in done.stderr
    assert "100000" in done.stderr and "CLUSTERKIT_MAX_RANGE_HOSTS" in done.stderr


def test_the_range_limit_can_be_raised_and_lowered(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts:\n    n[1:150000]:\n")
    with pytest.raises(InventoryError, match="more than 100000 hosts"):
        load_inventory(inventory)
    raised = {"CLUSTERKIT_MAX_RANGE_HOSTS": "150"}
    inventory.write_text("all:\n  hosts:\n    n[1:150]:\n")
    assert len(load_inventory(inventory, environ=raised).hosts) == 150
    inventory.write_text("all:\n  hosts:\n    n[1:151]:\n")
    with pytest.raises(InventoryError, match="more than 150 hosts"):
        load_inventory(inventory, environ=raised)
    inventory.write_text("all:\n  hosts:\n    n[a:c][1:4]:\n")
    with pytest.raises(InventoryError, match=r"\[1:4\].*more than 10 hosts"):
        load_inventory(inventory, environ={"CLUSTERKIT_MAX_RANGE_HOSTS": "10"})
    inventory.write_text("[gpu]\nn[1:11]\n")  # an INI file: the same limit
    with pytest.raises(InventoryError, match=r"\[1:11\].*more than 10 hosts"):
        load_inventory(inventory, environ={"CLUSTERKIT_MAX_RANGE_HOSTS": "10"})


def test_the_range_limit_is_the_runs_variable_not_the_process(tmp_path: Path) -> None:
    """The CLI run in-process with its own environment: the limit there decides, whatever
    this process's variables say (they once decided, behind the run's back)."""
    assert "CLUSTERKIT_MAX_RANGE_HOSTS" not in os.environ
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts:\n    n[1:20]:\n")
    env = {**os.environ, "CLUSTERKIT_MAX_RANGE_HOSTS": "10"}
    done = run_cli(["check", str(inventory), "--limit", "nosuch"], env=env, timeout=60)
    assert done.status == 2, done.stderr
    assert "n[1:20]" in done.stderr and "more than 10 hosts" in done.stderr


def test_a_large_inventory_loads_every_host_once_in_order(tmp_path: Path) -> None:
    lines = ["[gpu]"] + [
        f"node{i:05d} ansible_host=10.0.{i // 256}.{i % 256}" for i in range(10000)
    ]
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("\n".join(lines) + "\n[gpu:vars]\nansible_user=ops\n")
    hosts = load_inventory(inventory).hosts
    assert [h.name for h in hosts] == [f"node{i:05d}" for i in range(10000)]
    assert hosts[-1].address == "10.0.39.15" and hosts[-1].user == "ops"


def test_proxycommand_tokens_are_expanded_inside_each_word(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host 10.0.0.5\n  Port 22\n  User cfguser\n  ProxyCommand ssh -W %h:%p %r@b\n"
    )
    host = Host(name="n1", address="10.0.0.5", port=2222, user="ops")
    endpoint = resolve_endpoint(host, ConnectOptions(), load_ssh_config(str(config)))
    assert endpoint.proxy_command == ("ssh", "-W", "10.0.0.5:2222", "ops@b")  # inventory wins
    inline = Host(name="n1", address="h", proxy_command="nc '%h x' %p %%p")
    endpoint = resolve_endpoint(inline, ConnectOptions(), paramiko.SSHConfig())
    assert endpoint.proxy_command == ("nc", "h x", "22", "%p")


def test_a_stalled_proxycommand_is_killed_at_the_connect_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "proxy.pid"
    script = tmp_path / "stall.py"
    script.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                      "time.sleep(600)\n")  # fmt: skip
    host = Host(name="n1", address="10.0.0.5", proxy_command=f"{sys.executable} {script}")
    options = ConnectOptions(connect_timeout=1.5, host_key_policy="off")
    started = time.monotonic()
    with pytest.raises(TransportError) as caught:
        connect_host(host, options, paramiko.SSHConfig())
    assert time.monotonic() - started < 15
    assert caught.value.kind in ("timeout", "proxy")
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_missing_proxycommand_program_is_a_proxy_error() -> None:
    host = Host(name="n1", address="h", proxy_command="/nonexistent/proxy %h %p")
    with pytest.raises(TransportError) as caught:
        connect_host(host, ConnectOptions(connect_timeout=2), paramiko.SSHConfig())
    assert caught.value.kind == "proxy" and "/nonexistent/proxy h 22" in str(caught.value)


def test_a_host_with_an_unrenderable_template_fails_alone(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    good:\n      ansible_connection: local\n"
        "    bad:\n      ansible_user: '{{ vault_user }}'\n"
    )
    done = clusterkit("check", str(inventory), "--format", "json", "--skip", "network,bench,image")
    report = json.loads(done.stdout)
    assert report["hosts"]["good"]["reachable"] is True  # the rest of the inventory still runs
    assert report["hosts"]["bad"]["reachable"] is False
    assert "ansible_user cannot be rendered: variable 'vault_user' is not defined" in done.stdout
    assert f"{inventory}:6" in done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_the_inventorys_proxy_setting_beats_the_config_files(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host 10.0.0.5\n  ProxyJump jumper\n")
    options, loaded = ConnectOptions(), load_ssh_config(str(config))
    inventory_command = Host(name="n1", address="10.0.0.5", proxy_command="nc %h %p")
    endpoint = resolve_endpoint(inventory_command, options, loaded)
    assert endpoint.proxy_command == ("nc", "10.0.0.5", "22") and not endpoint.jumps
    plain = resolve_endpoint(Host(name="n1", address="10.0.0.5"), options, loaded)
    assert [hop.address for hop in plain.jumps] == ["jumper"] and not plain.proxy_command
