"""Host-key verification that mirrors OpenSSH's StrictHostKeyChecking.

paramiko consults known_hosts only when told to, matches host names exactly (no wildcards)
and its own loader gives up on a whole file at the first `@cert-authority` line; we read the
files line by line, keep where each key came from, and verify ourselves:

- a key on a matching `@revoked` line is refused under every policy, as OpenSSH does;
- a matching `@cert-authority` line cannot be honoured (paramiko does not validate host
  certificates), so a host it covers is refused unless its own key is listed too;
- with policy `off`, a key that differs from known_hosts is still reported (`notices`).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import os
import re
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TextIO

import paramiko

from clusterkit.errors import TransportError

POLICIES = ("strict", "accept-new", "off")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
REVOKED, CERT_AUTHORITY = "revoked", "cert-authority"

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


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """OpenSSH host patterns know only `*` and `?` (so `[h]:2222` is literal, unlike fnmatch)."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class KnownKey:
    """One usable known_hosts line: its host patterns, key, marker and file:line."""

    patterns: tuple[str, ...]
    key: paramiko.PKey
    where: str
    marker: str | None = None  # None, REVOKED or CERT_AUTHORITY

    @cached_property
    def _compiled(self) -> tuple[tuple[bool, re.Pattern[str] | str], ...]:
        compiled: list[tuple[bool, re.Pattern[str] | str]] = []
        for pattern in self.patterns:
            negated = pattern.startswith("!")
            text = pattern[1:] if negated else pattern
            compiled.append((negated, text if text.startswith("|1|") else _pattern_regex(text)))
        return tuple(compiled)

    def matches(self, name: str) -> bool:
        """OpenSSH's match_hostname: a negated pattern that matches rules the line out."""
        found = False
        for negated, pattern in self._compiled:
            if isinstance(pattern, str):  # hashed: |1|salt|hash
                hit = paramiko.HostKeys.hash_host(name, pattern) == pattern
            else:
                hit = pattern.fullmatch(name) is not None
            if hit and negated:
                return False
            found = found or hit
        return found


def _parse_line(line: str, where: str) -> KnownKey | None:
    """A known_hosts line -> KnownKey, or None for lines OpenSSH would also skip."""
    marker = None
    if line.startswith("@"):
        head, _, line = line.partition(" ")
        marker = {"@revoked": REVOKED, "@cert-authority": CERT_AUTHORITY}.get(head)
        if marker is None:
            return None
    fields = line.split()
    if len(fields) < 3:
        return None
    hosts, key_type, blob = fields[:3]
    try:
        key = paramiko.PKey.from_type_string(key_type, base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError, paramiko.SSHException, TypeError, IndexError):
        return None
    return KnownKey(tuple(p for p in hosts.split(",") if p), key, where, marker)


class KnownHosts:
    """Every usable line of the known_hosts files, in file order."""

    def __init__(self, entries: Iterable[KnownKey] = ()) -> None:
        self.entries = list(entries)

    def matching(self, name: str, marker: str | None = None) -> list[KnownKey]:
        return [e for e in self.entries if e.marker == marker and e.matches(name)]

    def lookup(self, name: str) -> dict[str, paramiko.PKey] | None:
        """Plain keys for a name by type (the first line of each type), or None."""
        found: dict[str, paramiko.PKey] = {}
        for entry in self.matching(name):
            found.setdefault(entry.key.get_name(), entry.key)
        return found or None

    def add(self, name: str, key: paramiko.PKey, where: str) -> None:
        self.entries.append(KnownKey((name,), key, where))


def load_known_hosts(paths: Iterable[str | os.PathLike[str]]) -> KnownHosts:
    """Merge known_hosts files; a line paramiko cannot use is skipped, never the whole file."""
    known = KnownHosts()
    for path in paths:
        expanded = Path(path).expanduser()
        try:
            lines = expanded.read_text(errors="replace").splitlines()
        except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
            continue
        for number, raw in enumerate(lines, 1):
            line = raw.strip()
            if line and not line.startswith("#"):
                entry = _parse_line(line, f"{expanded}:{number}")
                if entry is not None:
                    known.entries.append(entry)
    return known


_append_lock = threading.Lock()
_warned_off = False


class HostKeyVerifier:
    """Checks a server's key against known_hosts according to the policy."""

    def __init__(
        self, policy: str, known_hosts_files: list[str], warnings: TextIO | None = None
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(policy)
        self.policy = policy
        self.warnings = warnings  # where the run's warnings go; None: this process's stderr
        self.files = [str(Path(f).expanduser()) for f in known_hosts_files]
        self.keys = load_known_hosts(self.files)
        # (host, what) for keys accepted only because checking is off: reported, not hidden.
        self.notices: list[tuple[str, str]] = []

    def verify(self, host: str, address: str, port: int, key: paramiko.PKey) -> None:
        """Return when the key is acceptable; raise TransportError otherwise."""
        name = known_hosts_key(address, port)
        offered = f"{key.get_name()} {key.fingerprint}"
        for revoked in self.keys.matching(name, REVOKED):
            if revoked.key == key:
                raise TransportError(
                    host,
                    "hostkey-revoked",
                    f"host key for {name} ({offered}) is marked as revoked at {revoked.where}",
                    hint="a revoked key may be stolen: check the node before trusting any key",
                )
        plain = self.keys.matching(name)
        if any(entry.key == key for entry in plain):
            return
        same_type = [e for e in plain if e.key.get_name() == key.get_name()]
        if same_type:
            if self.policy != "off":
                raise TransportError(
                    host,
                    "hostkey-changed",
                    f"host key for {name} has CHANGED ({offered}; known_hosts has another "
                    f"at {same_type[0].where}); possible man-in-the-middle",
                    hint=f"if the node was reinstalled, remove the old key: ssh-keygen -R '{name}'",
                )
            self._notice(host, f"host key for {name} differs from {same_type[0].where} ({offered})")
        elif plain:
            types = ", ".join(dict.fromkeys(e.key.get_name() for e in plain))
            if self.policy == "strict":
                # Known under other key types only: OpenSSH treats this like a changed key.
                raise TransportError(
                    host,
                    "hostkey-changed",
                    f"{name} offered a {key.get_name()} key but known_hosts has only {types}",
                    hint=f"check the node, then: ssh-keyscan -p {port} {address} >> "
                    "~/.ssh/known_hosts",
                )
            if self.policy == "off":
                self._notice(host, f"{name} offered {offered}; known_hosts has only {types} for it")
        authorities = self.keys.matching(name, CERT_AUTHORITY)
        if authorities and not plain and self.policy != "off":
            raise TransportError(
                host,
                "hostkey-unsupported",
                f"{authorities[0].where}: @cert-authority covers {name}, but CA-signed host "
                "keys are not supported; refusing rather than trusting an unverified key",
                hint=f"list the node's own key: ssh-keyscan -p {port} {address} >> "
                "~/.ssh/known_hosts",
            )
        if self.policy == "strict" and not plain:
            raise TransportError(
                host,
                "hostkey-unknown",
                f"host key for {name} is not in known_hosts ({offered})",
                hint="verify it, then add it (ssh-keyscan -p "
                f"{port} {address} >> ~/.ssh/known_hosts) or use --host-key-policy accept-new",
            )
        if self.policy == "accept-new":
            self._record(name, key)
            return
        if authorities and not plain:
            self._notice(
                host,
                f"{name} is covered by @cert-authority at {authorities[0].where} (not verified)",
            )
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
            self.keys.add(name, key, f"{target} (recorded now)")

    def _notice(self, host: str, what: str) -> None:
        """Checking is off, but a key known_hosts disagrees with is still said out loud."""
        with _append_lock:
            self.notices.append((host, what))
        print(
            f"clusterkit: WARNING: {host}: {what}; accepted because host key checking is off",
            file=self.warnings or sys.stderr,
        )

    def _warn_off(self) -> None:
        global _warned_off
        with _append_lock:
            if _warned_off:
                return
            _warned_off = True
        print(
            "clusterkit: WARNING: host key checking is OFF: any machine can impersonate "
            "these nodes",
            file=self.warnings or sys.stderr,
        )
