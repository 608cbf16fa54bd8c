"""Slurm's hostlist syntax (`gpu[001-004,007],login1`): expanded by `scontrol show hostnames`
when it works here, else by our own parser, which follows Slurm 22.05's rules."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from collections.abc import Mapping

from clusterkit.errors import UsageError

MAX_HOSTS = 65536  # a typo like n[1-99999999] must not eat the memory of a login node
SCONTROL_SECONDS = 10.0
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


class HostlistError(UsageError):
    """A hostlist Slurm would reject; the message names the offending part."""


def parse_hostlist(text: str) -> list[str]:
    """Every host name of `text`, in Slurm's order, duplicates kept.

    Entries are split at commas (and blanks) outside brackets. A bracket holds comma-separated
    numbers or `lo-hi` ranges; numbers are zero-padded to the width of `lo` (`[08-10]` ->
    08, 09, 10). Several brackets multiply, the leftmost varying slowest
    (`r[1-2]-n[1-2]` -> r1-n1, r1-n2, r2-n1, r2-n2). As in Slurm 22.05, a name may not go on
    after its last bracket (`n[1-2]x` is rejected) and brackets do not nest.
    """
    hosts: list[str] = []
    for entry in _entries(text):
        hosts.extend(_expand(entry))
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"hostlist {text!r} names more than {MAX_HOSTS} hosts")
    return hosts


def _entries(text: str) -> list[str]:
    entries, current, depth = [], "", 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth < 0 or depth > 1:
            raise HostlistError(f"hostlist {text!r}: unbalanced or nested brackets")
        if depth == 0 and (char == "," or char.isspace()):
            entries.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise HostlistError(f"hostlist {text!r}: a bracket is not closed")
    return [entry for entry in [*entries, current] if entry]


def _expand(entry: str) -> list[str]:
    if "[" not in entry:
        if "]" in entry:
            raise HostlistError(f"hostlist entry {entry!r}: ']' without '['")
        return [entry]
    if not entry.endswith("]"):
        raise HostlistError(
            f"hostlist entry {entry!r}: text after the last bracket is not valid Slurm syntax"
        )
    parts: list[list[str]] = []
    for literal, inside in re.findall(r"([^\[\]]*)\[([^\[\]]*)\]", entry):
        parts.append([literal])
        parts.append(_numbers(entry, inside))
    total = 1
    for part in parts:
        total *= len(part)
    if total > MAX_HOSTS:
        raise HostlistError(f"hostlist entry {entry!r} names more than {MAX_HOSTS} hosts")
    return ["".join(pieces) for pieces in itertools.product(*parts)]


def _numbers(entry: str, inside: str) -> list[str]:
    numbers: list[str] = []
    for item in inside.split(","):
        match = _RANGE.fullmatch(item.strip())
        if not match:
            raise HostlistError(f"hostlist entry {entry!r}: {item!r} is not a number or lo-hi")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise HostlistError(f"hostlist entry {entry!r}: range {item!r} goes backwards")
        if int(high) - int(low) >= MAX_HOSTS:
            raise HostlistError(f"hostlist entry {entry!r} names more than {MAX_HOSTS} hosts")
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def expand_hostlist(text: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Host names of a hostlist: Slurm's own answer (`scontrol show hostnames`) when scontrol
    is here and configured, our parser's otherwise. Raises HostlistError on bad syntax."""
    ours = parse_hostlist(text)  # validates first: a clear error whatever scontrol says
    if not ours:
        raise HostlistError("the hostlist is empty")
    theirs = scontrol_hostnames(text, env)
    return theirs if theirs else ours


def scontrol_hostnames(text: str, env: Mapping[str, str] | None = None) -> list[str] | None:
    """`scontrol show hostnames TEXT`, or None when scontrol is absent, unconfigured or
    rejects it (22.05 prints "Invalid hostlist" and still exits 0)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        done = subprocess.run(
            [scontrol, "show", "hostnames", text],
            capture_output=True,
            text=True,
            timeout=SCONTROL_SECONDS,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = done.stdout.split()
    if done.returncode != 0 or "Invalid hostlist" in done.stdout + done.stderr or not names:
        return None
    return names
