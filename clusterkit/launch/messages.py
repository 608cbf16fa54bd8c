"""What clusterkit/node/launch.py tells the supervisor, typed: its control messages.

The node process prints each as a "<token> <json>" line. A node is not trusted (it holds the
token: it is the node process), so every message is checked against these types where it
arrives (`parse_control`, called by launch/supervise.py), and the supervisor reads typed
messages: a renamed key is a mypy error, not a message it silently ignores. A message of
another shape, an unknown key included, is dropped like a line that is not JSON, with the
path of the first bad value. A dump always counts as the node's answer: each rank's entry
is checked alone, and one of another shape is dropped and named, never the others with it.

The node program ships with the control side, so there is no version to skew; change its
messages and these types change with it (tests/unit/launch/test_launch_messages.py runs the real
program's messages through them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypedDict, TypeVar, cast

from clusterkit.shape import shape_problem

LARGEST_ID = 2**31  # ranks and pids are below it: they name files and processes
# A dump names the ranks of one node: more entries than any node runs are not read (a
# hostile node's 20,000 entries once became 20,000 files).
MAX_DUMP_ENTRIES = 1024
MAX_WATCH_EVENTS = 64  # a node's hardware report holds fewer (the runner sends 32 at most)
StacksMethod = Literal["py-spy", "faulthandler"]


class MalformedControl(ValueError):
    """A control message of another shape; the message names where."""


class Started(TypedDict):
    event: Literal["started"]
    pid: int  # torchrun's (or `docker run`'s)
    hostname: str
    stacks: StacksMethod  # how this node reads its ranks' stacks


class Alive(TypedDict):
    """The heartbeat: a silent job is told from a lost node."""

    event: Literal["alive"]


class _RankEntry(TypedDict):
    rank: int
    local_rank: str | None  # as the rank's environment says it
    pid: int
    sources: dict[str, str]  # "file:line" -> that line of source, read on the node


class FlightEntry(TypedDict):
    """One collective of a rank's flight record (torch's entry, reduced on the node)."""

    pg: str  # the process group's id
    seq: int  # collective_seq_id: counts the group's collectives, from 1
    op: str  # profiling_name, e.g. gloo:all_reduce
    sizes: str  # input_sizes, as JSON text
    state: str
    created_ns: int  # time_created_ns, the node's clock


class RankDump(_RankEntry, total=False):
    """One rank's stacks, as the node read them (launch/stacks.py parses `raw`)."""

    method: StacksMethod
    raw: str  # py-spy's `dump --json` output, or faulthandler's text
    error: str  # why there is no stack, or only part of one
    flight: list[FlightEntry]  # its flight record's last collectives (launch/flight.py)


class RankProgress(TypedDict):
    """What one rank did lately, sampled on its node every few seconds."""

    rank: int
    pid: int
    cpu: float  # seconds of CPU time (utime + stime) since it started
    # process group -> [last collective enqueued, last completed]; None before it has one
    groups: dict[str, list[int]] | None
    ticks: int  # the rank's own samples (ten a second) since it started, with a group
    busy: int  # ... of which it was computing: outside any collective, its CPU time moving


class Progress(TypedDict):
    event: Literal["progress"]
    ranks: list[RankProgress]


class Dump(TypedDict):
    event: Literal["dump"]
    ranks: list[RankDump]


WatchKind = Literal["xid", "sxid", "gpu", "gpu-gone", "nvlink-down", "ib-port", "ib-flap", "oom"]
WATCH_DEVICE_CHARS = 64
WATCH_TEXT_CHARS = 300
WATCH_FIELDS = ("remapped_rows.pending", "remapped_rows.failure", "clocks_event_reasons.active")


class WatchEvent(TypedDict):
    """One fact the node's hardware watch saw appear while the job ran."""

    kind: WatchKind
    device: str  # a GPU's bus id as the kernel log writes it (0000:18:00), an RDMA port
    # (mlx5_0/1), or "" for an OOM kill
    code: int  # the Xid/SXid code; the OOM-killed pid; link_downed's rise; the NVLink
    # link's number; else 0
    fatal: bool | None  # the severity the kernel's line names, where it names one
    text: str  # the kernel's words (after the pid and name), or what changed
    fields: dict[str, str]  # `gpu`: nvidia-smi's values of WATCH_FIELDS


class Hardware(TypedDict):
    event: Literal["hardware"]
    events: list[WatchEvent]


class _Exit(TypedDict):
    event: Literal["exit"]
    code: int | None  # torchrun's exit status; None: it did not end even after SIGKILL


class Exit(_Exit, total=False):
    stopped: bool  # the job was stopped (asked to, or its control side went away)
    leftovers: int  # processes of the job still there when torchrun had ended
    error: str  # why it could not start, or could not be ended


ControlMessage = Started | Alive | Dump | Progress | Hardware | Exit
_SHAPES: dict[str, type[Started] | type[Alive] | type[Exit]] = {
    "started": Started,
    "alive": Alive,
    "exit": Exit,
}


class _Event(TypedDict):
    event: Literal["started", "alive", "dump", "progress", "hardware", "exit"]


def parse_control(raw: object) -> tuple[ControlMessage, list[str]]:
    """A decoded control message, checked, and a line for each part of it that was dropped
    (a dump's entries of another shape). MalformedControl names the first bad value of a
    message that cannot be used at all."""
    event = raw.get("event") if isinstance(raw, dict) else None
    if event == "dump":
        return _dump(cast(dict[str, object], raw))
    if event == "progress":
        return _progress(cast(dict[str, object], raw))
    if event == "hardware":
        return _hardware(cast(dict[str, object], raw))
    shape = _SHAPES.get(event) if isinstance(event, str) else None
    if shape is None:
        envelope = {"event": event} if isinstance(raw, dict) else raw
        raise MalformedControl(shape_problem(envelope, _Event, "control"))
    problem = shape_problem(raw, shape, str(event))
    if problem is not None:
        raise MalformedControl(problem)
    return cast(ControlMessage, raw), []


def _dump(raw: dict[str, object]) -> tuple[Dump, list[str]]:
    """The well-formed rank entries of a dump, and why each other part was dropped."""
    kept, dropped = _entries(raw, "dump", "ranks", RankDump, MAX_DUMP_ENTRIES, _ids_problem)
    return Dump(event="dump", ranks=kept), dropped


def _progress(raw: dict[str, object]) -> tuple[Progress, list[str]]:
    kept, dropped = _entries(raw, "progress", "ranks", RankProgress, MAX_DUMP_ENTRIES, _ids_problem)
    return Progress(event="progress", ranks=kept), dropped


def _hardware(raw: dict[str, object]) -> tuple[Hardware, list[str]]:
    """The well-formed events of a hardware report, each checked alone and bounded."""
    kept, dropped = _entries(
        raw, "hardware", "events", WatchEvent, MAX_WATCH_EVENTS, _watch_problem
    )
    return Hardware(event="hardware", events=kept), dropped


def _watch_problem(entry: WatchEvent, path: str) -> str | None:
    """An event longer than the node program sends, or with fields it never sends."""
    if len(entry["device"]) > WATCH_DEVICE_CHARS or len(entry["text"]) > WATCH_TEXT_CHARS:
        return f"{path}: longer than the watch sends"
    if not 0 <= entry["code"] < LARGEST_ID:
        return f"{path}.code: {entry['code']} is out of range"
    fields = entry["fields"]
    if any(key not in WATCH_FIELDS or len(value) > 32 for key, value in fields.items()):
        return f"{path}.fields: not nvidia-smi's {', '.join(WATCH_FIELDS)}"
    return None


def _entries(
    raw: dict[str, object],
    event: str,
    key: str,
    shape: Any,
    limit: int,
    problem_of: Callable[[Any, str], str | None],
) -> tuple[list[Any], list[str]]:
    """The well-formed entries of a message's list `key`, each checked alone (its shape, then
    `problem_of`), and why each other part was dropped; at most `limit` are read."""
    dropped = [f"{event}: unknown key {name!r:.40}" for name in raw if name not in ("event", key)]
    items = raw.get(key)
    if not isinstance(items, list):
        return [], [*dropped, str(shape_problem(items, list[shape], f"{event}.{key}"))]
    if len(items) > limit:
        dropped.append(f"{event}.{key}: {len(items)} entries, only the first {limit} read")
    kept = []
    for index, entry in enumerate(items[:limit]):
        path = f"{event}.{key}[{index}]"
        problem = shape_problem(entry, shape, path) or problem_of(entry, path)
        if problem is None:
            kept.append(entry)
        else:
            dropped.append(problem)
    return kept, dropped


_Entry = TypeVar("_Entry", RankDump, RankProgress)


def own_ranks(
    entries: list[_Entry], ranks: range, event: str = "dump"
) -> tuple[list[_Entry], list[str]]:
    """The entries of a node's dump for the ranks that node runs (known from the plan, not
    from the node), each rank once: a node speaks only for its own ranks, never for another
    node's. The others are dropped and named."""
    kept: dict[int, _Entry] = {}
    dropped: list[str] = []
    for entry in entries:
        rank = entry["rank"]
        if rank not in ranks:
            dropped.append(f"{event}: rank {rank} is not one of this node's ({_span(ranks)})")
        elif rank in kept:
            dropped.append(f"{event}: rank {rank} answered twice, the first kept")
        else:
            kept[rank] = entry
    return list(kept.values()), dropped


def _span(ranks: range) -> str:
    return f"{ranks.start}-{ranks.stop - 1}" if len(ranks) > 1 else str(ranks.start)


def _ids_problem(entry: RankDump | RankProgress, path: str) -> str | None:
    """A rank below 0 or a pid below 1, or either too large to name a file or process."""
    for key, value, lowest in (("rank", entry["rank"], 0), ("pid", entry["pid"], 1)):
        if not lowest <= value < LARGEST_ID:
            return f"{path}.{key}: {value} is out of range ({lowest} to {LARGEST_ID - 1})"
    return None
