"""Host keys of an Ansible YAML inventory: `name`, `name:port`, `[v6addr]:port`, and ranges.

A host key expands to one or more host names plus an optional port, with the same rules as
Ansible: `node[01:16]` (zero padding needs equal widths), `[a:f]`, `[01:10:2]`, several ranges
in one key. A key that is not a recognisable address is kept verbatim, as Ansible does.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Mapping

MAX_RANGE_VARIABLE = "CLUSTERKIT_MAX_RANGE_HOSTS"
DEFAULT_MAX_RANGE_HOSTS = 100_000

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
    if ":" not in key:
        return key, None  # no port to split off (the common case, kept cheap)
    host, port = key, None
    for pattern in (_BRACKETED_PORT, _HOST_PORT):
        match = pattern.match(host)
        if match:
            host, port = match.group(1), int(match.group(2))
    if not _is_address(host):
        return key, None
    return host, port


def max_range_hosts(environ: Mapping[str, str]) -> int:
    """The most host names one key may expand to (the run's CLUSTERKIT_MAX_RANGE_HOSTS
    overrides the default)."""
    text = environ.get(MAX_RANGE_VARIABLE, "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    return DEFAULT_MAX_RANGE_HOSTS


def expand_ranges(name: str, limit: int = DEFAULT_MAX_RANGE_HOSTS) -> list[str]:
    """Every host name a key with `[begin:end(:step)]` ranges stands for, in order; a key
    that would expand past `limit` names is refused before anything is built."""
    if "[" not in name:
        return [name]
    pieces: list[str | list[str]] = []  # literal text and range values, alternating
    total, rest = 1, name
    while (start := rest.find("[")) >= 0:
        end = rest.find("]", start)
        if end < 0:
            raise HostPatternError(f"unclosed host range in {name!r}")
        body = rest[start + 1 : end]
        values = _range_values(body, name, limit // total, limit)
        total *= len(values)
        pieces += [rest[:start], values]
        rest = rest[end + 1 :]
    if total == 1 and not any(isinstance(piece, list) for piece in pieces):
        return [name]
    names = [""]
    for piece in [*pieces, rest]:
        if isinstance(piece, str):
            names = [prefix + piece for prefix in names]
        else:
            names = [prefix + value for prefix in names for value in piece]
    return names


def _range_values(body: str, name: str, room: int, limit: int) -> list[str]:
    """The values of one `[begin:end(:step)]`; more than `room` of them is an error."""
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
        _check_room(body, name, len(range(first, last + 1, step)), room, limit)
        return list(letters[first : last + 1 : step])
    if not (begin.isdigit() and end.isdigit() and begin.isascii() and end.isascii()):
        raise HostPatternError(
            f"unknown host range syntax [{body}] in {name!r}: "
            "bounds must be two numbers or two single letters"
        )
    if max(len(begin), len(end)) > 18:
        raise HostPatternError(f"host range [{body}] in {name!r} has a bound of over 18 digits")
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise HostPatternError(
            f"host range [{body}] in {name!r}: zero-padded bounds must have equal width"
        )
    numbers = range(int(begin), int(end) + 1, step)
    if not numbers:
        raise HostPatternError(f"host range [{body}] in {name!r} has begin after end")
    _check_room(body, name, len(numbers), room, limit)
    return [str(number).zfill(width) for number in numbers]


def _check_room(body: str, name: str, count: int, room: int, limit: int) -> None:
    if count > room:
        raise HostPatternError(
            f"host range [{body}] in {name!r} expands to more than {limit} hosts "
            f"(the limit; set {MAX_RANGE_VARIABLE} to raise it)"
        )


def expand_host_key(key: str, limit: int = DEFAULT_MAX_RANGE_HOSTS) -> tuple[list[str], int | None]:
    """The host names (at most `limit` of them) and the port (or None) a host key stands for."""
    host, port = split_port(key)
    return expand_ranges(host, limit), port
