"""Hardening against a real cluster: host keys as OpenSSH treats them, signals, blame."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clusterkit.errors import TransportError
from clusterkit.settings.loader import load_inventory
from clusterkit.transport import ssh
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from clusterkit.transport.pool import Cancellable, cancel_all, register_cancellable
from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster

STATIC_ONLY = ["--skip", "network,bench,image"]


def clusterkit(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`clusterkit ARGS` as a process of its own, with `env` over this process's variables:
    for a run that must not see this process's HOME, which paramiko's search for default
    keys and agent (SSH_AUTH_SOCK) read from the process, not from the run's Environment."""
    return subprocess.run(
        [sys.executable, "-m", "clusterkit", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def check_json(inventory: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli(["check", str(inventory), "--format", "json", *STATIC_ONLY, *args])
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert report["exit_status"] == done.status
    return done.status, report, done.stderr


def errors_by_host(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f["hosts"][0]: f
        for f in report["findings"]
        if f["id"] == "host.reachable" and f["status"] == "error"
    }


def forged_key(tmp_path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "forged")],
        capture_output=True, check=True, timeout=20,
    )  # fmt: skip
    return " ".join((tmp_path / "forged.pub").read_text().split()[:2])


def test_a_revoked_host_key_is_refused_naming_file_and_line(
    cluster: NetCluster, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    revoked = cluster.nodes[1].host_key_line().split(" ", 1)[1]
    known.write_text(
        cluster.known_hosts_path.read_text() + f"@revoked {cluster.nodes[1].address} {revoked}\n"
    )
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        extra_vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"},
    )
    for policy in ((), ("--host-key-policy", "off")):
        status, report, _ = check_json(inventory, *policy)
        assert status == 3
        refused = errors_by_host(report)
        assert list(refused) == ["node2"], report["findings"]
        assert refused["node2"]["found"] == "hostkey-revoked"
        assert f"{known}:{len(cluster.nodes) + 1}" in refused["node2"]["message"]
        assert report["hosts"]["node1"]["facts"]["hostname"]["hostname"] == "node1"


def test_a_cert_authority_line_is_refused_not_ignored(cluster: NetCluster, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    ca_key = forged_key(tmp_path)
    lines = cluster.known_hosts_path.read_text().splitlines()
    lines[0] = f"@cert-authority {cluster.nodes[0].address},*.cluster.example {ca_key}"
    known.write_text("\n".join(lines) + "\n")
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        extra_vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"},
    )
    for policy in ((), ("--host-key-policy", "accept-new")):
        status, report, _ = check_json(inventory, *policy)
        assert status == 3
        refused = errors_by_host(report)
        assert list(refused) == ["node1"] and refused["node1"]["found"] == "hostkey-unsupported"
        assert f"{known}:1: @cert-authority" in refused["node1"]["message"]
        assert "not supported" in refused["node1"]["message"]
    assert known.read_text().count("\n") == len(cluster.nodes)  # accept-new recorded nothing


def test_policy_off_still_reports_a_changed_key(cluster: NetCluster, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    lines = cluster.known_hosts_path.read_text().splitlines()
    lines[2] = f"{cluster.nodes[2].address} {forged_key(tmp_path)}"
    known.write_text("\n".join(lines) + "\n")
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        extra_vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"},
    )
    status, report, stderr = check_json(inventory, "--host-key-policy", "off")
    assert status == 0
    warned = [f for f in report["findings"] if f["id"] == "host.key"]
    assert [(f["status"], f["hosts"]) for f in warned] == [("warn", ["node3"])]
    assert f"{known}:3" in warned[0]["message"]
    assert "node3: host key for" in stderr and "differs" in stderr
    status, report, _ = check_json(inventory)  # and strict still refuses it
    assert status == 3 and errors_by_host(report)["node3"]["found"] == "hostkey-changed"


def wait_for(condition, seconds: float, what: str) -> None:
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up, what
        time.sleep(0.05)


def test_sigterm_during_a_hung_probe_exits_143_and_leaves_nothing(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    hung = cluster.nodes[2]
    hung.set_gpus(mode="hang")
    process = subprocess.Popen(
        [sys.executable, "-m", "clusterkit", "check", str(cluster_inventory), *STATIC_ONLY],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(
        lambda: any("fake_nvidia_smi" in p.command for p in hung.processes()),
        60,
        "the probe never reached the hanging nvidia-smi",
    )
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    took = time.monotonic() - signalled
    assert process.returncode == 143, stderr
    assert "terminated (SIGTERM)" in stderr and "Traceback" not in stderr
    assert not stdout  # no report from a run that was stopped
    assert took < 10, f"exit took {took:.1f} s"  # the kill is bounded to 5 s per node
    # sshd reaps its sessions asynchronously; a process left to its node-side timeout
    # (the 60 s probe deadline) would still be here long after this bound.
    wait_for(
        lambda: not any(node.processes() for node in cluster.nodes),
        10,
        f"left running: { {n.name: n.processes() for n in cluster.nodes} }",
    )


def test_ctrl_c_while_a_connect_hangs_exits_at_once(cluster: NetCluster, tmp_path: Path) -> None:
    """A dropped SYN used to hold the exit until the connect deadline (8 s of 10 measured)."""
    silent = cluster.nodes[1]
    silent.iptables("-I", "INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP")
    inventory = cluster.inventory(tmp_path / "inv.yaml")
    process = subprocess.Popen(
        [sys.executable, "-m", "clusterkit", "check", str(inventory), *STATIC_ONLY,
         "--connect-timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def syn_sent() -> bool:
        sockets = subprocess.run(
            ["ss", "-Htn", "state", "syn-sent", "dst", silent.address],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
        return bool(sockets.stdout.strip())

    wait_for(syn_sent, 60, "clusterkit never tried to connect")
    interrupted = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert time.monotonic() - interrupted < 5
    assert "Traceback" not in stderr and "Socket exception" not in stderr
    assert "protocol" not in stderr  # the abandoned connect is not blamed on the host


def test_bench_blames_the_node_whose_probe_hangs(cluster: NetCluster, tmp_path: Path) -> None:
    """node3's interpreter never answers: its probe runs into the probe deadline. The bench
    must then not start (the others would wait for node3 and node1 would be blamed)."""
    hung = cluster.nodes[2]
    stuck_python = hung.dir / "stuck-python"
    stuck_python.write_text("#!/bin/sh\nexec sleep 3600\n")
    stuck_python.chmod(0o755)
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        nodes=cluster.nodes[:3],
        host_vars={hung.name: {"ansible_python_interpreter": str(stuck_python)}},
    )
    done = run_cli(["bench", str(inventory), "--format", "json", "--timeout", "40"], timeout=120)
    report = json.loads(done.stdout)
    assert done.status == 3, done.stderr
    blamed = [f for f in report["findings"] if f["status"] in ("error", "fail")]
    assert [(f["id"], f["hosts"]) for f in blamed] == [("probe.ran", [hung.name])], blamed
    assert "deadline" in blamed[0]["message"]
    assert report["details"]["bench"]["nodes"] == []  # no rank was started anywhere
    wait_for(lambda: not any(n.processes() for n in cluster.nodes), 10, "processes left")


def test_env_python3_interpreter_runs_the_probe(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        host_vars={"node2": {"ansible_python_interpreter": "/usr/bin/env python3"}},
    )
    _, report, _ = check_json(inventory)
    assert not [f for f in report["findings"] if f["id"] == "probe.ran"], report["findings"]
    facts = report["hosts"]["node2"]["facts"]
    assert facts["hostname"]["hostname"] == "node2"
    assert facts["python"]["executable"] == "/usr/bin/python3"  # found on the node's PATH


PASSWORD_PORT = 2222
PASSWORD_USER = "ckpass"


def start_password_sshd(node, folder: Path, password: str) -> None:
    """A second sshd on the node that takes passwords only, for a user that exists only in
    its own mount namespace (private copies of /etc/passwd and /etc/shadow)."""
    hashed = subprocess.run(
        ["openssl", "passwd", "-6", "-stdin"], input=password, capture_output=True, text=True,
        check=True, timeout=20,
    ).stdout.strip()  # fmt: skip
    passwd, shadow, config = folder / "passwd", folder / "shadow", folder / "sshd_config"
    passwd.write_text(
        Path("/etc/passwd").read_text() + f"{PASSWORD_USER}:x:4242:4242::/tmp:/bin/sh\n"
    )
    shadow.write_text(Path("/etc/shadow").read_text() + f"{PASSWORD_USER}:{hashed}:19000::::::\n")
    shadow.chmod(0o600)
    config.write_text(
        f"ListenAddress {node.address}:{PASSWORD_PORT}\nHostKey {node.host_key_path}\n"
        "PasswordAuthentication yes\nPubkeyAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nPermitRootLogin no\nAllowUsers {PASSWORD_USER}\nStrictModes no\n"
        f"UseDNS no\nPidFile none\nSetEnv PATH={node.bin_dir}:/usr/local/bin:/usr/bin:/bin\n"
    )
    script = (
        'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/shadow && exec "$3" -D -e -f "$4"'
    )
    with open(folder / "sshd.log", "ab") as log:
        node.spawn(
            ["unshare", "--mount", "--", "sh", "-c", script, "sh",
             str(passwd), str(shadow), "/usr/sbin/sshd", str(config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )  # fmt: skip

    def answers() -> bool:
        import socket

        try:
            with socket.create_connection((node.address, PASSWORD_PORT), timeout=1) as sock:
                return sock.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    wait_for(answers, 20, f"password sshd never answered: {(folder / 'sshd.log').read_text()}")


def test_password_login_works_and_the_password_is_never_shown(
    cluster: NetCluster, tmp_path: Path
) -> None:
    node = cluster.nodes[0]
    password = "pw-" + os.urandom(8).hex()
    start_password_sshd(node, tmp_path, password)
    known = tmp_path / "known_hosts"
    known.write_text(f"[{node.address}]:{PASSWORD_PORT} {node.host_key_line().split(' ', 1)[1]}\n")
    home = tmp_path / "home"  # no ~/.ssh keys to fall back on: the password must do it
    home.mkdir()

    def inventory(secret: str) -> Path:
        path = tmp_path / "inv.yaml"
        host = {
            "ansible_host": node.address, "ansible_port": PASSWORD_PORT,
            "ansible_user": PASSWORD_USER, "ansible_ssh_pass": secret,
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}",
        }  # fmt: skip
        path.write_text(json.dumps({"all": {"hosts": {node.name: host}}}))
        return path

    report_file = tmp_path / "report.json"
    done = clusterkit(
        "check", str(inventory(password)), *STATIC_ONLY, "-vv", "--format", "json",
        "-o", str(report_file), env={"HOME": str(home)},
    )  # fmt: skip
    report = json.loads(report_file.read_text())
    assert not errors_by_host(report), report["findings"]
    assert report["hosts"][node.name]["facts"]["python"]["executable"] == "/usr/bin/python3"
    assert f"Accepted password for {PASSWORD_USER}" in (tmp_path / "sshd.log").read_text()
    for text in (done.stdout, done.stderr, report_file.read_text()):
        assert password not in text

    wrong = "pw-" + os.urandom(8).hex()
    done = clusterkit(
        "check", str(inventory(wrong)), *STATIC_ONLY, "-vv", "--format", "json",
        env={"HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 3
    assert errors_by_host(json.loads(done.stdout))[node.name]["found"] == "auth"
    assert wrong not in done.stdout and wrong not in done.stderr

    # That user's login shell is dash, whose kill takes no `--`: an interrupt must still
    # kill the command's process group there, not leave it to its node-side timeout.
    connections = connect_all(load_inventory(inventory(password)), ConnectOptions())
    try:
        transport = connections.transports[node.name]
        threading.Timer(1.0, transport.cancel).start()
        with pytest.raises(TransportError):
            transport.run(["sleep", "300"], deadline=Deadline.after(120))
        wait_for(
            lambda: not any("sleep 300" in p.command for p in node.processes()),
            3,
            "the interrupted command outlived the interrupt",
        )
    finally:
        connections.close()


def test_a_node_cannot_write_escape_sequences_into_the_text_report(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    cluster.nodes[1].set_gpus(model="NVIDIA H100\x1b[2J\x1b[1A")  # what a hostile node reports
    done = run_cli(["check", str(cluster_inventory), *STATIC_ONLY])  # plain text, no terminal
    assert done.status == 1, done.stderr  # the odd model is still a parity failure
    assert "\x1b" not in done.stdout and "\x1b" not in done.stderr
    assert "NVIDIA H100\\x1b[2J\\x1b[1A" in done.stdout


def test_sigterm_during_the_bench_exits_143_and_leaves_nothing(
    cluster: NetCluster, tmp_path: Path
) -> None:
    nodes = cluster.nodes[:3]
    inventory = cluster.inventory(tmp_path / "inv.yaml", nodes=nodes)
    before = set(Path("/tmp").glob("clusterkit-bench-*"))
    process = subprocess.Popen(
        [sys.executable, "-m", "clusterkit", "bench", str(inventory), "--timeout", "300",
         "-b", "64M", "-e", "64M", "-n", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(
        lambda: all(
            any("torch.distributed.run" in p.command for p in node.processes()) for node in nodes
        ),
        120,
        "torchrun never ran on every node",
    )
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr[-2000:]
    assert time.monotonic() - signalled < 20
    wait_for(
        lambda: not any(node.processes() for node in nodes),
        15,
        f"left running: { {n.name: n.processes() for n in nodes} }",
    )
    # Nodes share this machine's /tmp: the run folders must be gone as well.
    assert set(Path("/tmp").glob("clusterkit-bench-*")) <= before


def test_an_interrupt_leaves_every_connection_to_the_group_kill(
    cluster: NetCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C cancels everything registered. A connect attempt can outlive its connect (a
    reference cycle paramiko leaves when it caught an auth error keeps it until the garbage
    collector runs; here a list keeps them all): its cancel must not close the connection's
    socket, over which the remote process groups are then killed."""
    kept: list[object] = []

    def keep(item: Cancellable) -> None:
        kept.append(item)
        register_cancellable(item)

    monkeypatch.setattr(ssh, "register_cancellable", keep)
    inventory = load_inventory(cluster.inventory(tmp_path / "inv.yaml"))
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    try:
        cancel_all()
        assert [item for item in kept if type(item).__name__ == "_ConnectAttempt"]
        for name, transport in connections.transports.items():
            client = transport._client.get_transport()  # type: ignore[attr-defined]
            assert client is not None and client.sock.fileno() != -1, name
    finally:
        connections.close()
