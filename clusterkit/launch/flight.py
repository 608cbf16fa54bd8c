"""Where a hung job's ranks parted: read the flight records every rank kept. Pure.

Each rank's flight recorder lists its last collectives per process group, numbered
(`collective_seq_id`) in the order the rank called them. Ranks of one group call the same
collectives in the same order; a hang is where they stopped agreeing:

- some ranks called collective #N of a group and wait in it, while others never called it
  (their last is below N): "ranks 0,2 wait in all_reduce #31 of process group 0; rank 1
  (node2) never entered it: its last was #30";
- ranks called different operations, or the same one with other sizes, under the same
  number: "collective #31 of process group 0 differs: ranks 0,2 called all_reduce [[4]];
  rank 1 (node2) called broadcast [[4]]".

The records are the ranks' own (they arrive checked, launch/messages.py): they explain the
job's hang, and blame no node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clusterkit.launch.messages import FlightEntry
from clusterkit.launch.stacks import rank_ranges

RankKey = tuple[str, int]  # (host, rank)


def divergence(records: Mapping[RankKey, Sequence[FlightEntry]]) -> list[str]:
    """One line per process group where the ranks' records disagree, first the groups where
    ranks wait for others; [] when they agree (or there is nothing to compare)."""
    groups = sorted({entry["pg"] for entries in records.values() for entry in entries})
    lines: list[str] = []
    for group in groups:
        mine = {key: [e for e in entries if e["pg"] == group] for key, entries in records.items()}
        mine = {key: entries for key, entries in mine.items() if entries}
        if len(mine) < 2:
            continue
        lines += _missing(group, mine) or _mismatched(group, mine)
    return lines


def _last(entries: Sequence[FlightEntry]) -> FlightEntry:
    return max(entries, key=lambda e: e["seq"])


def _who(keys: Sequence[RankKey]) -> str:
    ranks = sorted(rank for _, rank in keys)
    hosts = sorted({host for host, _ in keys})
    noun = "rank" if len(ranks) == 1 else "ranks"
    return f"{noun} {rank_ranges(ranks)} ({', '.join(hosts)})"


def _op(entry: FlightEntry) -> str:
    """`gloo:all_reduce` -> `all_reduce`: the backend is the same for the whole group."""
    return entry["op"].rsplit(":", 1)[-1]


def _missing(group: str, records: Mapping[RankKey, Sequence[FlightEntry]]) -> list[str]:
    lasts = {key: _last(entries) for key, entries in records.items()}
    top = max(entry["seq"] for entry in lasts.values())
    ahead = sorted(key for key, entry in lasts.items() if entry["seq"] == top)
    behind = sorted(key for key, entry in lasts.items() if entry["seq"] < top)
    if not behind:
        return []
    op = _op(lasts[ahead[0]])
    verb = "waits" if len(ahead) == 1 else "wait"
    parts = [f"{_who(ahead)} {verb} in {op} #{top} of process group {group}"]
    by_last: dict[int, list[RankKey]] = {}
    for key in behind:
        by_last.setdefault(lasts[key]["seq"], []).append(key)
    for seq, keys in sorted(by_last.items()):
        whose = "its" if len(keys) == 1 else "their"
        parts.append(f"{_who(keys)} never entered it: {whose} last was #{seq}")
    return ["; ".join(parts)]


def _mismatched(group: str, records: Mapping[RankKey, Sequence[FlightEntry]]) -> list[str]:
    """The first collective number the ranks all recorded where they called different
    operations or sizes."""
    by_seq: dict[int, dict[RankKey, FlightEntry]] = {}
    for key, entries in records.items():
        for entry in entries:
            by_seq.setdefault(entry["seq"], {})[key] = entry
    for seq in sorted(by_seq):
        seen = by_seq[seq]
        if len(seen) < len(records):
            continue  # a number some ranks' records have rotated out
        calls: dict[str, list[RankKey]] = {}
        for key, entry in seen.items():
            calls.setdefault(f"{_op(entry)} {entry['sizes']}".strip(), []).append(key)
        if len(calls) > 1:
            described = "; ".join(
                f"{_who(sorted(keys))} called {call}"
                for call, keys in sorted(calls.items(), key=lambda item: -len(item[1]))
            )
            return [f"collective #{seq} of process group {group} differs: {described}"]
    return []
