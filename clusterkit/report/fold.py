"""Folding what repeats in the text report, as ClusterShell's `clubak -c` folds output: the
same finding on many hosts is one line with the hosts folded (`node[1-4]`, `all 4`), the
same evidence on several GPUs of a host is one (`GPUs 0-7: ...`), and a remedy is printed
once. Pure functions over findings; JSON, JUnit and the metrics keep every finding as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clusterkit.checks.model import Finding, Status, per_host
from clusterkit.hostlist import NODE_NAME, fold_hostlist, fold_numbers

OK_HOSTS_SHOWN = 40  # characters of an OK line's hosts cell; problems name every host
_MARK = "\x00"  # where a finding's own host stood in its message (never in printable text)
_ADDRESS = "\x01"  # and where its address stood
# One GPU's part of a host's evidence, as checks/gpu_health.py writes it: `GPU 3 (bus id,
# serial): what`, parts joined by "; " (a part's own text may hold "; " too).
_GPU_SPLIT = re.compile(r"; (?=GPU \d+[ :])")
_GPU_PART = re.compile(r"GPU (\d+)(?: \([^()]*\))?: (.*)", re.DOTALL)
# A name or address stands whole: not inside a longer one (node1 in node10, 10.0.0.1 in
# 10.0.0.12), though a sentence's colon or full stop may follow it.
_WHOLE_BEFORE = r"(?<![\w.-])"
_WHOLE_AFTER = r"(?![\w-]|\.\w)"
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


@dataclass(frozen=True)
class Line:
    """One line of the report: a finding, or findings folded into one. `remedy` is None
    where there is none to show, or the same one was shown above."""

    id: str
    status: Status
    hosts: str
    message: str
    remedy: str | None
    stage: str
    count: int = 1  # how many findings it stands for


def _all_of(hosts: Sequence[str], everyone: Sequence[str]) -> str | None:
    """`all 4` when `hosts` are every host of the report (and there are several), else None."""
    if len(everyone) > 1 and set(hosts) == set(everyone):
        return f"all {len(everyone)}"
    return None


def hosts_cell(hosts: Sequence[str], everyone: Sequence[str], status: Status) -> str:
    """`all 4` for every host of the report, else the folded hostlist; an OK line's is cut
    (the hosts it passed on), a problem's names every host."""
    if every := _all_of(hosts, everyone):
        return every
    folded = fold_hostlist(list(hosts)) or "-"
    if status in (Status.OK, Status.SKIP) and len(folded) > OK_HOSTS_SHOWN:
        return folded[: OK_HOSTS_SHOWN - 3] + "..."
    return folded


def hosts_in_prose(hosts: Sequence[str], everyone: Sequence[str]) -> str:
    """Hosts as a message names them: `all 4 hosts`, or the folded hostlist."""
    every = _all_of(hosts, everyone)
    return f"{every} hosts" if every else fold_hostlist(list(hosts))


def fold_lines(
    findings: Sequence[Finding], everyone: Sequence[str], addresses: Mapping[str, str] | None = None
) -> list[Line]:
    """The findings as report lines, in order: findings that differ only in their host (and
    its address, from `addresses`) merged, each message's repeats folded, each remedy once."""
    lines = []
    shown_remedies: set[str] = set()
    addresses = addresses or {}
    for group in _merged(findings, addresses):
        first = group[0]
        hosts = list(dict.fromkeys(h for f in group for h in f.hosts))
        joined = first if len(group) == 1 else _joined(group, hosts, addresses)
        message = fold_message(joined, everyone)
        remedy = joined.remedy
        if first.status in (Status.OK, Status.SKIP) or remedy in shown_remedies:
            remedy = None
        if remedy is not None:
            shown_remedies.add(remedy)
            remedy = fold_gpu_remedy(remedy)
        lines.append(
            Line(first.id, first.status, hosts_cell(hosts, everyone, first.status), message,
                 remedy, first.stage, len(group))
        )  # fmt: skip
    return lines


def _masked(text: str | None, hosts: Sequence[str], addresses: Mapping[str, str]) -> str | None:
    """`text` with each of `hosts` and their addresses (whole, not part of a longer name)
    marked."""
    if text is None:
        return None
    marks = [(host, _MARK) for host in hosts]
    marks += [(addresses[h], _ADDRESS) for h in hosts if addresses.get(h) not in (None, "", h)]
    for value, mark in sorted(marks, key=lambda pair: len(pair[0]), reverse=True):
        text = re.sub(rf"{_WHOLE_BEFORE}{re.escape(value)}{_WHOLE_AFTER}", mark, text)
    return text


def _key(finding: Finding, addresses: Mapping[str, str]) -> tuple[object, ...]:
    """What two findings share when they differ only in their host. A remedy with a host in
    it merges only for plain node names, so a joined `--limit a,b` stays a valid command."""
    if any(mark in (finding.message + (finding.remedy or "")) for mark in (_MARK, _ADDRESS)):
        return (id(finding),)  # text that holds a mark already is never merged
    plain = all(NODE_NAME.fullmatch(h) for h in finding.hosts)
    remedy = _masked(finding.remedy, finding.hosts, addresses) if plain else finding.remedy
    message = _masked(finding.message, finding.hosts, addresses)
    return (finding.stage, finding.id, finding.status, message, remedy)


def _merged(findings: Sequence[Finding], addresses: Mapping[str, str]) -> list[list[Finding]]:
    """Findings of one host each that say the same apart from the host, grouped in order."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for index, finding in enumerate(findings):
        key = _key(finding, addresses) if len(finding.hosts) == 1 else (index,)
        groups.setdefault(key, []).append(finding)
    return list(groups.values())


def _joined(group: Sequence[Finding], hosts: list[str], addresses: Mapping[str, str]) -> Finding:
    """One finding for a group: its message names the folded hosts (and addresses) where
    each named its own, its remedy the hosts comma-joined (a `--limit` takes that)."""
    first = group[0]
    where = [addresses[h] for h in hosts if h in addresses]
    message = (_masked(first.message, first.hosts, addresses) or "").replace(
        _MARK, fold_hostlist(hosts)
    )
    remedy = _masked(first.remedy, first.hosts, addresses)
    if remedy is not None:
        remedy = remedy.replace(_MARK, ",".join(hosts)).replace(_ADDRESS, ",".join(where))
    message = message.replace(_ADDRESS, fold_hostlist(where))
    return Finding(first.id, first.status, message, hosts, remedy=remedy, stage=first.stage)


def fold_message(finding: Finding, everyone: Sequence[str]) -> str:
    """The message with what repeats folded: `what: host: x; host: x` (found by host) as
    `what: node[1-4]: x`, each host's GPUs with the same evidence as `GPUs 0-7: ...`, and a
    run of host names (`node1, node2, node3`) as one hostlist."""
    message = finding.message
    found = finding.found
    if isinstance(found, Mapping) and found and all(isinstance(v, str) for v in found.values()):
        tail = ": " + per_host(found)
        if message.endswith(tail) and set(found) <= set(everyone):
            message = message[: -len(tail)] + ": " + _by_value(found, everyone)
    return fold_host_runs(message, everyone)


def _by_value(found: Mapping[str, str], everyone: Sequence[str]) -> str:
    """`hosts: what` for each distinct (GPU-folded) value, hosts folded, in order."""
    groups: dict[str, list[str]] = {}
    for host, value in found.items():
        groups.setdefault(fold_gpus(value), []).append(host)
    return "; ".join(
        f"{hosts_in_prose(hosts, everyone)}: {value}" for value, hosts in groups.items()
    )


def fold_host_runs(text: str, everyone: Sequence[str]) -> str:
    """Each run of two or more of the report's host names joined by ", " as one hostlist
    (a full stop or colon after the last one stays after it). Linear in the text whatever
    the number of hosts: a run is found by its shape, then its names looked up."""
    names = set(everyone)
    return _LIST.sub(lambda match: _folded_run(match.group(0), names, everyone), text)


_LIST = re.compile(r"[^\s,;()]+(?:, [^\s,;()]+)+")


def _folded_run(listed: str, names: set[str], everyone: Sequence[str]) -> str:
    items = listed.split(", ")
    last = items[-1].rstrip(".:")
    tail = items[-1][len(last) :]
    items[-1] = last
    out: list[str] = []
    run: list[str] = []
    for item in [*items, ""]:
        if item in names:
            run.append(item)
            continue
        out += [hosts_in_prose(run, everyone)] if len(run) > 1 else run
        run = []
        out.append(item)
    return ", ".join(out[:-1]) + tail


def fold_gpus(evidence: str) -> str:
    """One host's evidence with GPUs that say the same (numbers apart) as one part:
    `GPU 0 (...): slowed, GPU 88 C; GPU 1 (...): slowed, GPU 87 C` -> `GPUs 0-1: slowed,
    GPU 87-88 C`. A GPU alone keeps its bus id and serial; text in any other shape is
    returned as it is."""
    return _fold_parts(
        evidence, _GPU_SPLIT, _GPU_PART, lambda parts: _NUMBER.sub("#", parts[1]), _gpu_group
    )


def _gpu_group(members: list[tuple[str, ...]]) -> str:
    """`(part, index, text)` of GPUs that say the same: `GPUs 0-1: slowed, GPU 87-88 C`."""
    if len(members) == 1:
        return members[0][0]
    return f"{_gpus([i for _, i, _ in members])}: {_ranged([t for _, _, t in members])}"


def _ranged(texts: list[str]) -> str:
    """The first text with each number that differs among them as `low-high`."""
    columns = list(zip(*(_NUMBER.findall(t) for t in texts)))
    spans = iter(
        v[0] if len(set(v)) == 1 else f"{min(v, key=float)}-{max(v, key=float)}" for v in columns
    )
    return _NUMBER.sub(lambda _: next(spans), texts[0])


_REMEDY_SPLIT = re.compile(r"; (?=\S+ GPU \d+[ :])")
_REMEDY_PART = re.compile(r"(\S+) GPU (\d+)(?: \([^()]*\))?: (.*)", re.DOTALL)


def fold_gpu_remedy(remedy: str) -> str:
    """`node2 GPU 0 (...): act; node2 GPU 1 (...): act` -> `node2 GPUs 0-1: act`: the same
    action on several GPUs once. Any other remedy is returned as it is."""
    return _fold_parts(remedy, _REMEDY_SPLIT, _REMEDY_PART, lambda parts: parts[2], _remedy_group)


def _remedy_group(members: list[tuple[str, ...]]) -> str:
    """`(part, host, index, action)` of one action: `node2 GPUs 0-1, node3 GPU 2: act`."""
    if len(members) == 1:
        return members[0][0]
    by_host: dict[str, list[str]] = {}
    for _, host, index, _ in members:
        by_host.setdefault(host, []).append(index)
    action = members[0][3]
    return ", ".join(f"{host} {_gpus(indices)}" for host, indices in by_host.items()) + (
        f": {action}"
    )


def _fold_parts(
    text: str,
    split: re.Pattern[str],
    part: re.Pattern[str],
    key: Callable[[tuple[str, ...]], str],
    joined: Callable[[list[tuple[str, ...]]], str],
) -> str:
    """`text` cut by `split` into parts that each fully match `part`, the parts with the
    same `key` (of their groups) written once by `joined` (given `(part, *groups)` each),
    in order. Text of any other shape, or with nothing to fold, is returned as it is."""
    parts = split.split(text)
    matches = [part.fullmatch(p) for p in parts]
    if len(parts) < 2 or None in matches:
        return text
    groups: dict[str, list[tuple[str, ...]]] = {}
    for whole, match in zip(parts, matches):
        assert match is not None
        groups.setdefault(key(match.groups()), []).append((whole, *match.groups()))
    if len(groups) == len(parts):
        return text
    return "; ".join(joined(members) for members in groups.values())


def _gpus(indices: list[str]) -> str:
    """`GPU 3`, `GPUs 0-3, 5` (as checks/gpu_health.py names GPUs it folds itself)."""
    if not all(index.isdigit() for index in indices):
        return "GPUs " + ", ".join(indices)
    folded = fold_numbers(int(index) for index in indices)
    return f"GPU {folded}" if len(indices) == 1 else f"GPUs {folded}"


def stage_counts(findings: Sequence[Finding]) -> str:
    """`35 ok, 7 skip, 3 warn`: a stage's findings by status, in the report's order."""
    order = (Status.OK, Status.SKIP, Status.WARN, Status.ERROR, Status.FAIL)
    counts = {s: sum(1 for f in findings if f.status is s) for s in order}
    return ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)


def fold_host_rows(rows: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Rows of (host, address, state, facts...) that differ only in the host and its address
    (in the state too: `refused by root@10.0.0.12:22`) as one: `node[1-4]`, `10.0.0.[11-14]`.
    A row that is not ok names every host; an ok row's hosts are cut."""
    groups: dict[tuple[object, ...], tuple[str, list[tuple[str, ...]]]] = {}
    for index, row in enumerate(rows):
        state = _masked(row[2], [row[0]], {row[0]: row[1]}) or ""
        key: tuple[object, ...] = (state, *row[3:])
        if _MARK in row[2] or _ADDRESS in row[2]:  # never merged: its own row, as it is
            key, state = (index,), row[2]
        groups.setdefault(key, (state, []))[1].append(row)
    folded = []
    for state, members in groups.values():
        names = [row[0] for row in members]
        where = [row[1] for row in members if row[1]]
        status = Status.OK if members[0][2] == "ok" else Status.FAIL
        shown = state
        if len(members) > 1 or state != members[0][2]:
            shown = state.replace(_MARK, fold_hostlist(names))
            shown = shown.replace(_ADDRESS, fold_hostlist(where))
        cells = (hosts_cell(names, [], status), hosts_cell(where, [], status), shown)
        folded.append((*cells, *members[0][3:]))
    return folded
