"""Slurm's hostlist syntax (`gpu[001-004,007],login1`), expanded in-process by our own parser,
which follows Slurm 22.05's rules (tests/slurm compares it with `scontrol show hostnames`),
and the one-node names that Slurm passes on its own (SLURMD_NODENAME). A base module,
not part of slurm/: the srun transport checks node names with it, and slurm/ is built on
the transports."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from clusterkit.errors import UsageError

MAX_HOSTS = 65536  # a typo like n[1-99999999] must not eat the memory of a login node
MAX_DIGITS = 18  # a number in brackets; longer ones are typos (and past int()'s comfort)
SHOWN = 60  # characters of a bad hostlist quoted in an error
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
# One node: what Slurm and DNS accept, and nothing that is hostlist syntax (brackets, commas),
# a path (`/`), blank or control character, or an option (a leading `-`).
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class HostlistError(UsageError):
    """A hostlist Slurm would reject; the message names the offending part."""


def _shown(text: str) -> str:
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")


def check_node_name(name: str, source: str) -> str:
    """`name` when it names one node; a one-line UsageError naming `source` otherwise (a
    hostlist like `gpu[01-64]` handed to scontrol would act on every node of the range)."""
    if not NODE_NAME.fullmatch(name):
        raise UsageError(
            f"{source}: {_shown(name)} is not a single node name",
            hint="letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return name


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
            raise HostlistError(f"hostlist {_shown(text)} names more than {MAX_HOSTS} hosts")
    return hosts


def _entries(text: str) -> list[str]:
    entries, current, depth = [], "", 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth < 0 or depth > 1:
            raise HostlistError(f"hostlist {_shown(text)}: unbalanced or nested brackets")
        if depth == 0 and (char == "," or char.isspace()):
            entries.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise HostlistError(f"hostlist {_shown(text)}: a bracket is not closed")
    return [entry for entry in [*entries, current] if entry]


def _expand(entry: str) -> list[str]:
    if "[" not in entry:
        if "]" in entry:
            raise HostlistError(f"hostlist entry {_shown(entry)}: ']' without '['")
        return [entry]
    if not entry.endswith("]"):
        raise HostlistError(
            f"hostlist entry {_shown(entry)}: text after the last bracket is not valid Slurm syntax"
        )
    parts: list[list[str]] = []
    for literal, inside in re.findall(r"([^\[\]]*)\[([^\[\]]*)\]", entry):
        parts.append([literal])
        parts.append(_numbers(entry, inside))
    total = 1
    for part in parts:
        total *= len(part)
    if total > MAX_HOSTS:
        raise HostlistError(f"hostlist entry {_shown(entry)} names more than {MAX_HOSTS} hosts")
    return ["".join(pieces) for pieces in itertools.product(*parts)]


def _numbers(entry: str, inside: str) -> list[str]:
    numbers: list[str] = []
    for item in inside.split(","):
        match = _RANGE.fullmatch(item.strip())
        if not match:
            raise HostlistError(
                f"hostlist entry {_shown(entry)}: {_shown(item)} is not a number or lo-hi"
            )
        low, high = match.group(1), match.group(2) or match.group(1)
        if max(len(low), len(high)) > MAX_DIGITS:
            raise HostlistError(
                f"hostlist entry {_shown(entry)}: a number has more than {MAX_DIGITS} digits"
            )
        if int(high) < int(low):
            raise HostlistError(f"hostlist entry {_shown(entry)}: range {item!r} goes backwards")
        if len(numbers) + int(high) - int(low) >= MAX_HOSTS:
            raise HostlistError(f"hostlist entry {_shown(entry)} names more than {MAX_HOSTS} hosts")
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def expand_hostlist(text: str) -> list[str]:
    """Host names of a hostlist, expanded here: no argv of Slurm's grows with the range.
    Raises HostlistError on bad syntax, an empty list, or more than MAX_HOSTS names."""
    hosts = parse_hostlist(text)
    if not hosts:
        raise HostlistError("the hostlist is empty")
    return hosts


_NUMBERED = re.compile(rf"(.*?)(\d{{1,{MAX_DIGITS}}})")


def fold_hostlist(names: list[str]) -> str:
    """`names` as one hostlist (`node[1-4,7],login1`), the inverse of parse_hostlist up to
    order and duplicates: so a line about many hosts stays short and still names each one.
    Names that end in a number fold by what comes before it and by zero-padded width
    (`n[08-10]`); any other name is written as it is, each kind where it first appears."""
    groups: dict[tuple[str, int], set[int]] = {}
    padded = {
        (m.group(1), len(m.group(2)))
        for m in map(_NUMBERED.fullmatch, names)
        if m and m.group(2).startswith("0") and len(m.group(2)) > 1
    }
    for name in names:
        match = _NUMBERED.fullmatch(name) if "[" not in name and "," not in name else None
        if match is None:
            groups.setdefault((name, -1), set())
            continue
        prefix, digits = match.groups()
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    return ",".join(_folded(prefix, width, numbers) for (prefix, width), numbers in groups.items())


def number_runs(numbers: Iterable[int]) -> list[list[int]]:
    """Sorted distinct numbers cut into runs of consecutive ones: [[0, 1, 2, 3], [5], [7]]."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return runs


def fold_numbers(numbers: Iterable[int]) -> str:
    """'0-3, 5, 7': numbers in prose (GPU indexes), each run of consecutive ones first-last."""
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in number_runs(numbers))


def _folded(prefix: str, width: int, numbers: set[int]) -> str:
    if width < 0:
        return prefix
    runs = number_runs(numbers)
    cells = [
        str(run[0]).zfill(width) + (f"-{str(run[-1]).zfill(width)}" if len(run) > 1 else "")
        for run in runs
    ]
    if len(cells) == 1 and len(runs[0]) == 1:
        return prefix + cells[0]
    return f"{prefix}[{','.join(cells)}]"
