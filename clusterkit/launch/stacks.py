"""Where hung ranks wait: parse each rank's stack dump and group ranks by their wait point.

Pure. A dump is py-spy's `dump --json` output or faulthandler's text; both list frames
innermost first. A rank's wait point is taken from its main thread: the innermost frame in
the job's own code (not the standard library, not an installed package) and, when that code
is inside a library call, the innermost library function (e.g. `all_reduce`). Ranks at the
same point form a group; the biggest group is what the job was doing, the rest are the odd
ones out, usually the cause.

A node's answer is checked where it arrives (launch/messages.py): rank and pid are integers
in range, since they name files and processes; an entry that is not well formed is dropped
and said so there, never turned into a path or a crash. What is in `raw` is the rank's own
(py-spy's JSON or faulthandler's text), read here and reported on the rank when unreadable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from clusterkit.launch.messages import RankDump

_FAULTHANDLER_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)", re.M)
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$', re.M)
_LIBRARY = re.compile(r"(/site-packages/|/dist-packages/|/lib/python\d[\d.]*/|^<frozen )")
# What a malformed dump may raise while it is read: reported on the rank, never raised.
_UNREADABLE = (ValueError, TypeError, AttributeError, ArithmeticError, RecursionError)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int
    code: str = ""  # the source line, when the node could read it

    @property
    def short_file(self) -> str:
        return self.file.rsplit("/", 1)[-1]

    @property
    def library(self) -> bool:
        return bool(_LIBRARY.search(self.file))

    def render(self) -> str:
        code = f"  # {self.code}" if self.code else ""
        return f"    {self.function} ({self.file}:{self.line}){code}"


@dataclass(frozen=True)
class Thread:
    name: str
    frames: tuple[Frame, ...]  # innermost first
    main: bool = False


@dataclass
class RankStack:
    """One rank's dump as it came back from its node."""

    host: str
    rank: int
    pid: int | None
    method: str  # "py-spy" or "faulthandler"
    threads: list[Thread] = field(default_factory=list)
    error: str | None = None

    @property
    def main_thread(self) -> Thread | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)

    def where(self) -> str:
        """'in all_reduce at train.py:88' or 'at train.py:41 in main `time.sleep(60)`'."""
        thread = self.main_thread
        if self.error and (thread is None or not thread.frames):
            return "no stack (" + self.error + ")"
        if thread is None or not thread.frames:
            return "no Python frame"
        return wait_point(thread.frames)

    def render(self) -> str:
        """The dump as py-spy prints it, for the log folder."""
        lines = [f"rank {self.rank} on {self.host} (pid {self.pid}, {self.method})"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for thread in self.threads:
            lines.append(f"  thread {thread.name}{' (main)' if thread.main else ''}:")
            lines += [frame.render() for frame in thread.frames]
        return "\n".join(lines) + "\n"


def wait_point(frames: Sequence[Frame]) -> str:
    own = next((frame for frame in frames if not frame.library), None)
    if own is None:
        inner = frames[0]
        return f"in {inner.function} at {inner.short_file}:{inner.line}"
    place = f"{own.short_file}:{own.line}"
    inner = frames[0]
    if inner is not own:
        return f"in {inner.function} at {place}"
    code = f" `{own.code}`" if own.code else ""
    return f"at {place} in {own.function}{code}"


def parse_dump(host: str, entry: RankDump) -> RankStack:
    """A RankStack from one rank's entry of a node's dump answer."""
    raw = entry.get("raw", "")
    method = entry.get("method", "unknown")
    pid = entry["pid"]
    stack = RankStack(host, entry["rank"], pid, method, error=entry.get("error"))
    try:
        if method == "py-spy":
            stack.threads = parse_py_spy(raw, pid, entry["sources"])
        elif raw:
            stack.threads = parse_faulthandler(raw, entry["sources"])
    except _UNREADABLE as error:
        stack.error = stack.error or f"unreadable dump: {type(error).__name__}: {error}"[:200]
    return stack


def parse_py_spy(raw: str, pid: int | None, sources: Mapping[str, str]) -> list[Thread]:
    if not raw.strip():
        return []
    data = json.loads(raw)
    if not isinstance(data, list):
        raise ValueError("py-spy JSON is not a list of threads")
    threads = []
    for item in data:
        frames = tuple(
            _frame(str(f.get("name")), str(f.get("filename")), int(f.get("line") or 0), sources)
            for f in item.get("frames") or []
        )
        name = item.get("thread_name") or f"{item.get('os_thread_id') or item.get('thread_id')}"
        main = pid is not None and item.get("os_thread_id") == pid
        threads.append(Thread(str(name), frames, main))
    if threads and not any(t.main for t in threads):
        threads[0] = Thread(threads[0].name, threads[0].frames, True)
    return threads


def parse_faulthandler(raw: str, sources: Mapping[str, str]) -> list[Thread]:
    """faulthandler lists the newest thread first: the main thread is the last one."""
    heads = list(_FAULTHANDLER_THREAD.finditer(raw))
    threads = []
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(raw)
        frames = tuple(
            _frame(m[3].strip(), m[1], int(m[2]), sources)
            for m in _FAULTHANDLER_FRAME.finditer(raw, head.end(), end)
        )
        threads.append(Thread(head[2], frames, index == len(heads) - 1))
    return threads


def _frame(function: str, file: str, line: int, sources: Mapping[str, str]) -> Frame:
    return Frame(function, file, line, sources.get(f"{file}:{line}", ""))


@dataclass(frozen=True)
class Group:
    where: str
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]  # the hosts of these ranks, in rank order, deduplicated


def group_ranks(stacks: Iterable[RankStack]) -> list[Group]:
    """Ranks by wait point, the biggest group first (ties: lowest rank first)."""
    by_place: dict[str, list[RankStack]] = {}
    for stack in sorted(stacks, key=lambda s: s.rank):
        by_place.setdefault(stack.where(), []).append(stack)
    groups = [
        Group(
            place,
            tuple(s.rank for s in members),
            tuple(dict.fromkeys(s.host for s in members)),
        )
        for place, members in by_place.items()
    ]
    return sorted(groups, key=lambda g: (-len(g.ranks), g.ranks[0]))


def rank_ranges(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    parts: list[str] = []
    ordered = sorted(set(ranks))
    start = previous = None
    for rank in [*ordered, None]:
        if rank is not None and previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    return ",".join(parts)


def describe_group(group: Group) -> str:
    noun = "rank" if len(group.ranks) == 1 else "ranks"
    return f"{noun} {rank_ranges(group.ranks)} {group.where}"


def summary(groups: Sequence[Group]) -> str:
    """'ranks 0-1,3 in all_reduce at train.py:88; rank 2 at train.py:41 in main ...'."""
    return "; ".join(describe_group(group) for group in groups)


def odd_ones_out(groups: Sequence[Group]) -> list[str]:
    """Each rank outside the biggest group, with its host: where the trouble usually is.
    With every rank in one place there is no odd one out."""
    if len(groups) < 2:
        return []
    named = []
    for group in groups[1:]:
        hosts = ", ".join(group.hosts)
        noun = "rank" if len(group.ranks) == 1 else "ranks"
        named.append(f"{noun} {rank_ranges(group.ranks)} on {hosts} {group.where}")
    return named
