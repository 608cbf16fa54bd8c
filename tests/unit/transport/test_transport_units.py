"""Transport pieces that need no host: quoting, pgid marker, known_hosts, ssh_config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from clusterkit.errors import TransportError, UsageError
from clusterkit.inventory.model import Host
from clusterkit.transport.base import remote_command, split_pgid
from clusterkit.transport.connect import connect_host
from clusterkit.transport.endpoint import ConnectOptions, load_ssh_config, resolve_endpoint
from clusterkit.transport.hostkeys import HostKeyVerifier, known_hosts_key, load_known_hosts

NASTY = [
    "two words",
    "it's",
    '"double"',
    "$HOME",
    "$(touch /tmp/clusterkit-pwned)",
    "`id`",
    "a; rm -rf /nonexistent",
    "x && false",
    "*",
    "back\\slash",
    "new\nline",
    "",
    "-n",
]


def test_remote_command_round_trip_through_a_real_shell(tmp_path: Path) -> None:
    """What the node's login shell receives must reach argv byte for byte."""
    marker = tmp_path / "pwned"
    args = [*NASTY, f"$(touch {marker})"]
    line = remote_command(["printf", "%s\\0", *args], timeout=5)
    done = subprocess.run(
        ["sh", "-c", line], capture_output=True, timeout=10, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(b"\0")[:-1] == [a.encode() for a in args]
    assert not marker.exists()
    pgid, rest = split_pgid(done.stderr)
    assert pgid is not None and pgid > 1
    assert rest == b""


def test_remote_command_bounds_the_command_on_the_node() -> None:
    done = subprocess.run(
        ["sh", "-c", remote_command(["sleep", "30"], timeout=0.5)],
        capture_output=True, timeout=15, check=False,
    )  # fmt: skip
    assert done.returncode == 124  # GNU timeout killed it, not our 15 s guard


def test_remote_command_rounds_the_timeout_up() -> None:
    assert " 1 " in remote_command(["true"], timeout=0.1)
    assert " 3 " in remote_command(["true"], timeout=2.5)


def test_split_pgid() -> None:
    assert split_pgid(b"clusterkit-pgid 4242\nwarning: x\n") == (4242, b"warning: x\n")
    assert split_pgid(b"clusterkit-pgid 17\n") == (17, b"")
    assert split_pgid(b"Permission denied\n") == (None, b"Permission denied\n")
    assert split_pgid(b"clusterkit-pgid junk\nrest") == (None, b"rest")
    assert split_pgid(b"") == (None, b"")


# -- known_hosts -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys() -> tuple[paramiko.PKey, paramiko.PKey]:
    return paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()


def line(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def test_load_known_hosts_skips_markers_and_bad_lines(tmp_path: Path, keys) -> None:
    first, second = keys
    known = tmp_path / "known_hosts"
    known.write_text(
        "# comment\n\n"
        + f"@cert-authority *.example.com {first.get_name()} {first.get_base64()}\n"
        + f"@revoked bad.example.com {first.get_name()} {first.get_base64()}\n"
        + "garbage line without a key\n"
        + "host3 ssh-ed25519 not-base64!!\n"
        + line("node1,10.0.0.1", first)
        + line("[10.0.0.2]:2222", second)
    )
    loaded = load_known_hosts([known, tmp_path / "missing"])
    assert loaded.lookup("node1")[first.get_name()] == first
    assert loaded.lookup("10.0.0.1")[first.get_name()] == first
    assert loaded.lookup("[10.0.0.2]:2222")[second.get_name()] == second
    assert loaded.lookup("10.0.0.2") is None  # port 22 is a different entry
    assert loaded.lookup("bad.example.com") is None
    assert loaded.lookup("x.example.com") is None


def test_known_hosts_key_names_non_default_ports() -> None:
    assert known_hosts_key("10.0.0.1", 22) == "10.0.0.1"
    assert known_hosts_key("10.0.0.1", 2222) == "[10.0.0.1]:2222"


def test_strict_accepts_known_and_rejects_unknown(tmp_path: Path, keys) -> None:
    first, _ = keys
    known = tmp_path / "known_hosts"
    known.write_text(line("[10.0.0.2]:2222", first))
    verifier = HostKeyVerifier("strict", [str(known)])
    verifier.verify("node2", "10.0.0.2", 2222, first)
    with pytest.raises(TransportError) as raised:
        verifier.verify("node3", "10.0.0.3", 22, first)
    assert raised.value.kind == "hostkey-unknown"
    assert known.read_text() == line("[10.0.0.2]:2222", first)  # strict never writes


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_changed_key_is_refused(tmp_path: Path, keys, policy: str) -> None:
    first, second = keys
    known = tmp_path / "known_hosts"
    known.write_text(line("10.0.0.1", first))
    with pytest.raises(TransportError) as raised:
        HostKeyVerifier(policy, [str(known)]).verify("node1", "10.0.0.1", 22, second)
    assert raised.value.kind == "hostkey-changed"
    assert "CHANGED" in str(raised.value)


def test_accept_new_records_the_key_then_trusts_it(tmp_path: Path, keys) -> None:
    first, second = keys
    known = tmp_path / "ssh" / "known_hosts"  # the directory is created
    verifier = HostKeyVerifier("accept-new", [str(known)])
    verifier.verify("node5", "10.0.0.5", 2222, first)
    assert known.read_text() == line("[10.0.0.5]:2222", first)
    verifier.verify("node5", "10.0.0.5", 2222, first)  # now known: no second line
    assert known.read_text().count("\n") == 1
    with pytest.raises(TransportError):
        HostKeyVerifier("strict", [str(known)]).verify("node5", "10.0.0.5", 2222, second)


def test_off_accepts_anything_and_writes_nothing(tmp_path: Path, keys) -> None:
    first, second = keys
    known = tmp_path / "known_hosts"
    known.write_text(line("10.0.0.1", first))
    verifier = HostKeyVerifier("off", [str(known)])
    verifier.verify("node1", "10.0.0.1", 22, second)
    verifier.verify("node9", "10.0.0.9", 22, second)
    assert known.read_text() == line("10.0.0.1", first)


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError):
        HostKeyVerifier("ask", [])


# -- ssh_config ------------------------------------------------------------------------------

SSH_CONFIG = """\
Host gpu*
    HostName %h.cluster.internal
    User ubuntu
    Port 2222
    IdentityFile ~/.ssh/cluster_ed25519
    ProxyJump admin@bastion.example.com:2200
    StrictHostKeyChecking accept-new
    UserKnownHostsFile /etc/clusterkit/known_hosts
    ConnectTimeout 7

Host bastion.example.com
    HostName 203.0.113.7
    IdentityFile ~/.ssh/bastion_key
"""


@pytest.fixture
def config(tmp_path: Path) -> paramiko.SSHConfig:
    path = tmp_path / "ssh_config"
    path.write_text(SSH_CONFIG)
    return load_ssh_config(str(path))


def test_ssh_config_applies_when_the_inventory_is_silent(config) -> None:
    endpoint = resolve_endpoint(Host("gpu1", "gpu1"), ConnectOptions(), config)
    assert endpoint.address == "gpu1.cluster.internal"
    assert (endpoint.user, endpoint.port) == ("ubuntu", 2222)
    assert endpoint.key_files == (str(Path("~/.ssh/cluster_ed25519").expanduser()),)
    assert endpoint.policy == "accept-new"
    assert endpoint.known_hosts[0] == "/etc/clusterkit/known_hosts"
    assert endpoint.timeout == 7.0
    (jump,) = endpoint.jumps
    assert (jump.address, jump.port, jump.user) == ("203.0.113.7", 2200, "admin")
    assert jump.key_files == (str(Path("~/.ssh/bastion_key").expanduser()),)


def test_inventory_values_win_over_ssh_config(config) -> None:
    host = Host(
        "gpu1", "gpu1", port=22, user="root", key_file="/keys/id", proxy_jump="none",
        strict_host_key_checking="yes", user_known_hosts_file="/tmp/kh", ssh_timeout=3,
    )  # fmt: skip
    endpoint = resolve_endpoint(host, ConnectOptions(), config)
    assert (endpoint.user, endpoint.port, endpoint.key_files) == ("root", 22, ("/keys/id",))
    assert endpoint.jumps == ()
    assert endpoint.policy == "strict"
    assert endpoint.known_hosts[0] == "/tmp/kh"
    assert endpoint.timeout == 3


def test_command_line_wins_over_both(config) -> None:
    options = ConnectOptions(host_key_policy="off", known_hosts=("/x/kh",), connect_timeout=1.5)
    host = Host("gpu1", "gpu1", strict_host_key_checking="yes", ssh_timeout=3)
    endpoint = resolve_endpoint(host, options, config)
    assert endpoint.policy == "off"
    assert endpoint.timeout == 1.5
    assert "/x/kh" in endpoint.known_hosts


def test_hosts_the_config_does_not_match_get_defaults(config) -> None:
    endpoint = resolve_endpoint(Host("db1", "10.1.2.3", user="svc"), ConnectOptions(), config)
    assert (endpoint.address, endpoint.port, endpoint.user) == ("10.1.2.3", 22, "svc")
    assert endpoint.jumps == () and endpoint.policy == "strict"


def test_unreadable_ssh_config_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as raised:
        load_ssh_config(str(tmp_path / "nope"))
    assert raised.value.exit_status == 2
    assert "cannot read SSH config" in str(raised.value)


# -- known_hosts markers and wildcards (OpenSSH semantics) -------------------------------------


def test_revoked_key_is_refused_under_every_policy_naming_file_and_line(
    tmp_path: Path, keys
) -> None:
    first, _ = keys
    known = tmp_path / "known_hosts"
    known.write_text(
        line("10.0.0.1", first) + f"@revoked 10.0.0.* {first.get_name()} {first.get_base64()}\n"
    )
    for policy in ("strict", "accept-new", "off"):
        with pytest.raises(TransportError) as raised:
            HostKeyVerifier(policy, [str(known)]).verify("node1", "10.0.0.1", 22, first)
        assert raised.value.kind == "hostkey-revoked"
        assert f"{known}:2" in str(raised.value)


def test_revoked_line_applies_only_to_the_hosts_it_names(tmp_path: Path, keys) -> None:
    first, _ = keys
    known = tmp_path / "known_hosts"
    known.write_text(
        line("10.0.0.1,[10.0.0.2]:2222", first)
        + f"@revoked 10.0.0.*,!10.0.0.1 {first.get_name()} {first.get_base64()}\n"
    )
    verifier = HostKeyVerifier("strict", [str(known)])
    verifier.verify("node1", "10.0.0.1", 22, first)  # negated: the line does not apply
    verifier.verify("node2", "10.0.0.2", 2222, first)  # `[10.0.0.2]:2222` is not `10.0.0.*`


def test_cert_authority_host_is_refused_unless_its_own_key_is_listed(tmp_path: Path, keys) -> None:
    first, second = keys
    known = tmp_path / "known_hosts"
    known.write_text(
        "# CA for the cluster\n"
        + f"@cert-authority *.cluster.example {second.get_name()} {second.get_base64()}\n"
        + line("node2.cluster.example", first)
    )
    for policy in ("strict", "accept-new"):
        with pytest.raises(TransportError) as raised:
            HostKeyVerifier(policy, [str(known)]).verify("n1", "node1.cluster.example", 22, first)
        assert raised.value.kind == "hostkey-unsupported"
        assert f"{known}:2: @cert-authority" in str(raised.value)
        assert "not supported" in str(raised.value)
    assert known.read_text().count("\n") == 3  # accept-new recorded nothing
    HostKeyVerifier("strict", [str(known)]).verify("n2", "node2.cluster.example", 22, first)


def test_wildcard_and_hashed_known_hosts_lines_match_like_openssh(tmp_path: Path, keys) -> None:
    first, second = keys
    hashed = paramiko.HostKeys.hash_host("10.9.9.9")
    known = tmp_path / "known_hosts"
    known.write_text(line("node?.example,10.0.*", first) + line(hashed, second))
    verifier = HostKeyVerifier("strict", [str(known)])
    verifier.verify("a", "node7.example", 22, first)
    verifier.verify("b", "10.0.3.4", 22, first)
    verifier.verify("c", "10.9.9.9", 22, second)
    with pytest.raises(TransportError):
        verifier.verify("d", "node10.example", 22, first)


def test_off_still_reports_a_key_that_differs(tmp_path: Path, keys, capsys) -> None:
    first, second = keys
    known = tmp_path / "known_hosts"
    known.write_text(line("10.0.0.1", first))
    verifier = HostKeyVerifier("off", [str(known)])
    verifier.verify("node1", "10.0.0.1", 22, second)
    verifier.verify("node9", "10.0.0.9", 22, second)  # unknown: no notice, only the banner
    assert [host for host, _ in verifier.notices] == ["node1"]
    assert f"{known}:1" in verifier.notices[0][1]
    assert "node1: host key for 10.0.0.1 differs" in capsys.readouterr().err


def test_hosts_connecting_at_once_share_one_verifier(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second verifier would take the first one's place, and the notices (a changed key
    under policy off) of hosts that used the first would be lost from the report."""
    import threading
    import types

    from clusterkit.transport import connect

    made: list[object] = []

    class SlowVerifier:  # reading known_hosts takes a while: the window of the race
        def __init__(self, policy: str, files: list[str], warnings: object) -> None:
            made.append(self)
            threading.Event().wait(0.05)

    monkeypatch.setattr(connect, "HostKeyVerifier", SlowVerifier)
    monkeypatch.setattr(connect, "_verifiers", {})
    endpoint = types.SimpleNamespace(policy="off", known_hosts=("known_hosts",))
    start = threading.Barrier(8)
    got: list[object] = []

    def connect_one() -> None:
        start.wait(timeout=30)
        got.append(connect._verifier(endpoint, None))  # type: ignore[arg-type]

    threads = [threading.Thread(target=connect_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(made) == 1 and len(got) == 8
    assert all(verifier is made[0] for verifier in got)


def test_a_bastion_that_does_not_resolve_is_named_not_ansible_host() -> None:
    """The node's own address is fine; its ProxyJump host is not (.invalid never resolves):
    the hint said "check ansible_host"."""
    host = Host("gpu1", "10.0.0.5", user="root", proxy_jump="admin@bastion.invalid")
    with pytest.raises(TransportError) as caught:
        connect_host(host, ConnectOptions(connect_timeout=5), paramiko.SSHConfig())
    error = caught.value
    assert error.kind == "unreachable" and error.host == "gpu1 (via admin@bastion.invalid)"
    assert "cannot resolve admin@bastion.invalid:22" in error.detail
    assert error.hint is not None and "ProxyJump host bastion.invalid" in error.hint
    assert "ansible_host" not in error.hint
