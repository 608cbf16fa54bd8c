"""Host-key verification that mirrors OpenSSH's StrictHostKeyChecking.

paramiko consults known_hosts only when told to, and its own loader gives up on a whole file
at the first `@cert-authority` line; we read the files line by line and verify ourselves.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import paramiko

from clusterkit.errors import TransportError

POLICIES = ("strict", "accept-new", "off")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"

# OpenSSH spellings of StrictHostKeyChecking, as found in ansible_ssh_common_args.
_OPENSSH_POLICY = {"yes": "strict", "accept-new": "accept-new", "no": "off", "off": "off"}


def policy_from_openssh(value: str | None) -> str | None:
    """Map a StrictHostKeyChecking value (yes/accept-new/no/ask) to our policy name."""
    if value is None:
        return None
    return _OPENSSH_POLICY.get(value.strip().lower(), "strict")


def known_hosts_key(address: str, port: int) -> str:
    """The name OpenSSH files a key under: `host` for port 22, `[host]:port` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


def load_known_hosts(paths: Iterable[str | os.PathLike[str]]) -> paramiko.HostKeys:
    """Merge known_hosts files, skipping lines paramiko cannot use (markers, bad keys)."""
    keys = paramiko.HostKeys()
    for path in paths:
        try:
            lines = Path(path).expanduser().read_text().splitlines()
        except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
            continue
        for number, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith(("#", "@")):  # @cert-authority, @revoked
                continue
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
            except Exception:  # one bad line must not drop the file
                continue
            if entry is not None and entry.key is not None:
                keys._entries.append(entry)
    return keys


_append_lock = threading.Lock()
_warned_off = False


class HostKeyVerifier:
    """Checks a server's key against known_hosts according to the policy."""

    def __init__(self, policy: str, known_hosts_files: list[str]) -> None:
        if policy not in POLICIES:
            raise ValueError(policy)
        self.policy = policy
        self.files = [str(Path(f).expanduser()) for f in known_hosts_files]
        self.keys = load_known_hosts(self.files)

    def verify(self, host: str, address: str, port: int, key: paramiko.PKey) -> None:
        """Return when the key is acceptable; raise TransportError otherwise."""
        name = known_hosts_key(address, port)
        known = self.keys.lookup(name)
        if known is not None and key.get_name() in known:
            if known[key.get_name()] == key:
                return
            if self.policy != "off":
                raise TransportError(
                    host,
                    "hostkey-changed",
                    f"host key for {name} has CHANGED ({key.get_name()} "
                    f"{key.fingerprint}); possible man-in-the-middle",
                    hint=f"if the node was reinstalled, remove the old key: ssh-keygen -R '{name}'",
                )
        if known is not None and self.policy == "strict":
            # Known under other key types only: OpenSSH treats this like a changed key.
            raise TransportError(
                host,
                "hostkey-changed",
                f"{name} offered a {key.get_name()} key but known_hosts has only "
                f"{', '.join(known.keys())}",
                hint=f"check the node, then: ssh-keyscan -p {port} {address} >> ~/.ssh/known_hosts",
            )
        if self.policy == "strict":
            raise TransportError(
                host,
                "hostkey-unknown",
                f"host key for {name} is not in known_hosts ({key.get_name()} {key.fingerprint})",
                hint="verify it, then add it (ssh-keyscan -p "
                f"{port} {address} >> ~/.ssh/known_hosts) or use --host-key-policy accept-new",
            )
        if self.policy == "accept-new":
            self._record(name, key)
            return
        self._warn_off()

    def _record(self, name: str, key: paramiko.PKey) -> None:
        target = Path(self.files[0] if self.files else DEFAULT_KNOWN_HOSTS).expanduser()
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with _append_lock:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(target, "a", encoding="ascii") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                handle.write(line)
                fcntl.flock(handle, fcntl.LOCK_UN)
            self.keys.add(name, key.get_name(), key)

    @staticmethod
    def _warn_off() -> None:
        global _warned_off
        with _append_lock:
            if _warned_off:
                return
            _warned_off = True
        print(
            "clusterkit: WARNING: host key checking is OFF: any machine can impersonate "
            "these nodes",
            file=sys.stderr,
        )
