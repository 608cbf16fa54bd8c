"""Inventories as users write them, against real hosts: a ProxyCommand bastion (in the
inventory's ssh arguments and in the ssh config file), INI and templated connection values."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.cluster.test_check_spine import check
from tests.support.netcluster import NetCluster


def _behind_bastion(cluster: NetCluster) -> None:
    """node2 and node3 refuse SSH from this machine: only node1 (the bastion) reaches them."""
    for node in cluster.nodes[1:3]:
        node.iptables(
            "-A", "INPUT", "-p", "tcp", "--dport", "22",
            "-s", cluster.bridge_address, "-j", "REJECT", "--reject-with", "tcp-reset",
        )  # fmt: skip


def _bastion_command(cluster: NetCluster) -> str:
    bastion = cluster.nodes[0]
    return shlex.join(
        [
            "ssh", "-F", "/dev/null", "-i", str(cluster.key_path),
            "-o", f"UserKnownHostsFile={cluster.known_hosts_path}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5", "-W", "%h:%p", f"root@{bastion.address}",
        ]
    )  # fmt: skip


def test_proxycommand_in_ssh_common_args_hops_through_the_bastion(
    cluster: NetCluster, tmp_path: Path
) -> None:
    _behind_bastion(cluster)
    direct = cluster.inventory(tmp_path / "direct.yaml", nodes=cluster.nodes[1:3])
    status, report, _ = check(direct, "--connect-timeout", "5")
    assert status == 3, "node2 was reachable directly: the bastion would prove nothing"
    assert not any(entry["reachable"] for entry in report["hosts"].values())

    common = f"-o UserKnownHostsFile={cluster.known_hosts_path}"
    proxy = shlex.quote(_bastion_command(cluster))
    proxied = cluster.inventory(
        tmp_path / "proxied.yaml",
        nodes=cluster.nodes[1:3],
        extra_vars={"ansible_ssh_common_args": f"{common} -o ProxyCommand={proxy}"},
    )
    status, report, _ = check(proxied, "--connect-timeout", "10")
    assert status == 0, report["findings"]
    assert report["hosts"]["node2"]["facts"]["hostname"]["hostname"] == "node2"
    assert report["hosts"]["node3"]["facts"]["hostname"]["hostname"] == "node3"


def test_proxycommand_in_the_ssh_config_file_is_used(cluster: NetCluster, tmp_path: Path) -> None:
    _behind_bastion(cluster)
    target = cluster.nodes[1]
    inventory = tmp_path / "hosts.ini"  # an INI inventory with a templated user, as users write
    inventory.write_text(
        "[gpu]\n"
        f"{target.name} ansible_host={target.address}\n"
        "[gpu:vars]\n"
        "lxc_user=root\n"
        "ansible_user={{ lxc_user }}\n"
        f"ansible_ssh_private_key_file={cluster.key_path}\n"
        f"ansible_python_interpreter={{{{ node_python | default('{_python()}') }}}}\n"
        f"ansible_ssh_common_args=-o UserKnownHostsFile={cluster.known_hosts_path}\n"
        "[all:vars]\n"
        "clusterkit={'master': 'node2', 'interface': 'eth0'}\n"
    )
    config = tmp_path / "ssh_config"
    config.write_text(f"Host {target.address}\n  ProxyCommand {_bastion_command(cluster)}\n")
    status, report, _ = check(inventory, "--ssh-config", str(config), "--connect-timeout", "10")
    assert status == 0, report["findings"]
    assert report["hosts"]["node2"]["facts"]["hostname"]["hostname"] == "node2"


def _python() -> str:
    from tests.support.netcluster import node_python

    return node_python()
