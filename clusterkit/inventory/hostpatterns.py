"""Host keys of an Ansible YAML inventory: `name`, `name:port`, `[v6addr]:port`, and ranges.

A host key expands to one or more host names plus an optional port, with the same rules as
Ansible: `node[01:16]` (zero padding needs equal widths), `[a:f]`, `[01:10:2]`, several ranges
in one key. A key that is not a recognisable address is kept verbatim, as Ansible does.
"""

from __future__ import annotations

import ipaddress
import re
import string

_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_NUMERIC_RANGE = r"\[[0-9]+:[0-9]+(?::[0-9]+)?\]"
_LABEL = rf"(?:\w|{_RANGE})(?:[\w-]|{_RANGE})*(?<![_-])"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$", re.I)
_IPV4_PART = rf"(?:[01]?[0-9]{{1,2}}|2[0-4][0-9]|25[0-5]|{_NUMERIC_RANGE})"
_IPV4 = re.compile(rf"^(?:{_IPV4_PART}\.){{3}}{_IPV4_PART}$")
_BRACKETED_PORT = re.compile(r"^\[(.+)\]:([0-9]+)$")
_HOST_PORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")


class HostPatternError(ValueError):
    """A host key whose range cannot be expanded; the message says what is wrong."""


def _is_address(text: str) -> bool:
    if _IPV4.match(text) or _HOSTNAME.match(text):
        return True
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def split_port(key: str) -> tuple[str, int | None]:
    """(host part, port): the port only when the rest is a valid address, like Ansible."""
    host, port = key, None
    for pattern in (_BRACKETED_PORT, _HOST_PORT):
        match = pattern.match(host)
        if match:
            host, port = match.group(1), int(match.group(2))
    if not _is_address(host):
        return key, None
    return host, port


def expand_ranges(name: str) -> list[str]:
    """Every host name a key with `[begin:end(:step)]` ranges stands for, in order."""
    start = name.find("[")
    if start < 0:
        return [name]
    end = name.find("]", start)
    if end < 0:
        raise HostPatternError(f"unclosed host range in {name!r}")
    head, body, tail = name[:start], name[start + 1 : end], name[end + 1 :]
    values = _range_values(body, name)
    names: list[str] = []
    for value in values:
        names.extend(expand_ranges(head + value + tail))
    return names


def _range_values(body: str, name: str) -> list[str]:
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise HostPatternError(
            f"unknown host range syntax [{body}] in {name!r}: use [begin:end] or [begin:end:step]"
        )
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise HostPatternError(f"host range [{body}] in {name!r} has no end value")
    try:
        step = int(bounds[2]) if len(bounds) == 3 else 1
    except ValueError:
        raise HostPatternError(f"host range step in [{body}] of {name!r} is not a number") from None
    if step < 1:
        raise HostPatternError(f"host range step in [{body}] of {name!r} must be at least 1")
    letters = string.ascii_letters
    if len(begin) == 1 and len(end) == 1 and begin in letters and end in letters:
        first, last = letters.index(begin), letters.index(end)
        if first > last:
            raise HostPatternError(f"host range [{body}] in {name!r} has begin after end")
        return list(letters[first : last + 1 : step])
    if not (begin.isdigit() and end.isdigit()):
        raise HostPatternError(
            f"unknown host range syntax [{body}] in {name!r}: "
            "bounds must be two numbers or two single letters"
        )
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise HostPatternError(
            f"host range [{body}] in {name!r}: zero-padded bounds must have equal width"
        )
    values = [str(number).zfill(width) for number in range(int(begin), int(end) + 1, step)]
    if not values:
        raise HostPatternError(f"host range [{body}] in {name!r} has begin after end")
    return values


def expand_host_key(key: str) -> tuple[list[str], int | None]:
    """The host names and the port (or None) a YAML inventory host key stands for."""
    host, port = split_port(key)
    return expand_ranges(host), port
