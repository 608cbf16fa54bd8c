"""Host names, addresses and user names checked as OpenSSH checks them, before anything uses them.

paramiko's SSHConfig runs `Match exec` lines through a shell with `%h`/`%r` expanded, and a
ProxyCommand receives the same tokens, so a host named `x$(touch /tmp/p)` would run a command
on the control machine. OpenSSH refuses such names ("hostname contains invalid characters");
clusterkit refuses them at load time with the same rules (ssh.c valid_hostname/valid_ruser):
no shell metacharacters, whitespace or control characters, no leading '-'. IPv6 literals
(`fe80::1`, `fe80::1%eth0`) pass.

An inventory host's own name (not its address) is stricter still: it becomes a file name
(`--log-dir`, `--print-dir`) and an item of comma-separated lists (`--exclude-file`), so it must
be one plain path component (host_name_problem).
"""

from __future__ import annotations

import re

_HOST_METACHARACTERS = frozenset("'`\"$\\;&<>|(){}")
_PLAIN = re.compile(r"[A-Za-z0-9._:%@+=,/-]+")  # common names: no need to look at each char
_USER_METACHARACTERS = frozenset("'`\";&<>|(){}")
_NAME_PUNCTUATION = frozenset("._-:%")  # ':' and '%' for IPv6 literals such as fe80::1%eth0
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:%-]*|:[A-Za-z0-9._:%-]*")
MAX_HOST_NAME_BYTES = 200  # with a prefix and a suffix it still fits a file name (255 bytes)


def hostname_problem(name: str) -> str | None:
    """Why OpenSSH would refuse `name` as a host name, or None when it is acceptable."""
    if not name:
        return "is empty"
    if name.startswith("-"):
        return "starts with '-' (it would read as an option)"
    if _PLAIN.fullmatch(name):
        return None
    for char in name:
        if char in _HOST_METACHARACTERS:
            return f"contains {char!r}, a shell metacharacter"
        if char.isspace() or not char.isprintable():
            return f"contains the control or blank character {char!r}"
    return None


def username_problem(user: str) -> str | None:
    """Why OpenSSH would refuse `user` as a remote user name, or None."""
    if user.startswith("-"):
        return "starts with '-' (it would read as an option)"
    if _PLAIN.fullmatch(user):
        return None
    for index, char in enumerate(user):
        if char in _USER_METACHARACTERS:
            return f"contains {char!r}, a shell metacharacter"
        if not char.isprintable() and not char.isspace():
            return f"contains the control character {char!r}"
        if char.isspace() and user[index + 1 : index + 2] == "-":
            return "has a '-' after a blank (it would read as an option)"
    if user.endswith("\\"):
        return "ends in '\\'"
    return None


def host_name_problem(name: str) -> str | None:
    """Why `name` cannot name an inventory host, or None. Besides what OpenSSH refuses, a host
    name must be one plain path component: letters, digits, '.', '_', '-', ':' and '%', not
    starting with '.' or '-', so that no file named after it leaves its folder and no list of
    names reads it as two."""
    if len(name.encode("utf-8", "surrogatepass")) > MAX_HOST_NAME_BYTES:
        return f"is longer than {MAX_HOST_NAME_BYTES} bytes"
    if _PLAIN_NAME.fullmatch(name):
        return None
    problem = hostname_problem(name)
    if problem is not None:
        return problem
    if name.startswith("."):
        return "starts with '.' (as a file name it is hidden, or a folder: '.', '..')"
    for char in name:
        if char == "/":
            return "contains '/' (as a file name it would lead into another folder)"
        if char == ",":
            return "contains ',' (lists of host names are separated by commas)"
        if not char.isalnum() and char not in _NAME_PUNCTUATION:
            return f"contains {char!r} (allowed: letters, digits, '.', '_', '-', ':', '%')"
    return None
