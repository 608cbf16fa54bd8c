"""Which rank failed first, and the exit status that says so. Pure.

Every node reports when its torchrun ended; a failing node's torchrun prints a summary
naming each failed rank with its exit code or signal. When one rank dies, its peers
usually fail a moment later with a connection error; those are consequences, not causes.
So the first failure is chosen by kind before time: a rank killed from outside (SIGKILL
from the OOM killer, SIGTERM), then a rank that failed on its own (an exception, a crash),
then ranks whose last words are a lost peer; within a kind, the earliest.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_FAILURE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n[^\n]*?exitcode\s*:\s*(-?\d+)"
    r"(?:\s*\(pid:\s*(\d{1,9})\))?",
    re.M,
)
_EXTERNAL_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGKILL, signal.SIGTERM}
_CONSEQUENCE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|DistNetworkError|"
    r"DistBackendError|communicator was aborted|recvValue failed|failed to recv|"
    r"Socket Timeout|Connection refused|ProcessGroupNCCL.*(?:Watchdog|timed? ?out)",
    re.I,
)


@dataclass(frozen=True)
class RankExit:
    """A rank torchrun reported as failed: exit code, or the signal that ended it."""

    rank: int
    local_rank: int
    exit_code: int  # torchrun's: negative for a signal
    pid: int | None = None  # the rank's process on its node (what a kernel log names)

    @property
    def signal_name(self) -> str | None:
        if self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"


def torchrun_failures(text: str) -> list[RankExit]:
    """Every failed rank in torchrun's error summary (each once, in the order printed)."""
    seen: dict[int, RankExit] = {}
    for match in _FAILURE.finditer(text):
        rank = int(match[1])
        pid = int(match[4]) if match[4] else None
        seen.setdefault(rank, RankExit(rank, int(match[2]), int(match[3]), pid))
    return list(seen.values())


@dataclass(frozen=True)
class Failure:
    """A failure seen from here: a rank (or a whole node when the rank is unknown)."""

    host: str
    rank: int | None
    exit_code: int | None  # the rank's (negative: signal), or the node's torchrun's
    at: float  # when we learned of it (monotonic)
    last_lines: tuple[str, ...] = ()
    lost: bool = False  # the node itself was lost: no exit status at all
    pid: int | None = None  # the rank's process on its node, when torchrun named it

    @property
    def signal_name(self) -> str | None:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        return RankExit(0, 0, self.exit_code).signal_name

    @property
    def consequence(self) -> bool:
        """Its last words say a peer went away: more likely an effect than the cause."""
        return any(_CONSEQUENCE.search(line) for line in self.last_lines)

    @property
    def kind(self) -> int:
        if self.lost:
            return 1
        if self.exit_code is not None and -self.exit_code in _EXTERNAL_SIGNALS:
            return 0
        return 2 if self.consequence else 1

    @property
    def who(self) -> str:
        return f"rank {self.rank} on {self.host}" if self.rank is not None else self.host

    def describe(self) -> str:
        who = self.who
        if self.lost:
            return f"{self.host} was lost (no answer from its node process)"
        if self.signal_name:
            return f"{who} was killed by {self.signal_name}"
        return f"{who} exited with status {self.exit_code}"


def first_failure(failures: Iterable[Failure]) -> Failure | None:
    ordered = sorted(failures, key=lambda f: (f.kind, f.at, f.rank if f.rank is not None else -1))
    return ordered[0] if ordered else None


def exit_status(failure: Failure) -> int:
    """The job's exit status from its first failure: the rank's own status, 128 + N for a
    signal (as a shell reports it), 3 for a lost node, 1 when unknown."""
    if failure.lost:
        return 3
    code = failure.exit_code
    if code is None or code == 0:
        return 1
    if code < 0:
        return min(255, 128 - code)
    return min(255, code)


def node_failures(
    host: str,
    torchrun_code: int,
    agent_text: str,
    last_lines: Mapping[int, Sequence[str]],
    at: float,
) -> list[Failure]:
    """What one node's failed torchrun says about its ranks."""
    exits = torchrun_failures(agent_text)
    if not exits:
        tail = tuple(last_lines.get(-1, ()))
        return [Failure(host, None, torchrun_code, at, tail)]
    return [
        Failure(
            host,
            item.rank,
            item.exit_code,
            at,
            tuple(last_lines.get(item.rank, ())),
            pid=item.pid,
        )
        for item in exits
    ]
