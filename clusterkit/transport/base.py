"""The one transport contract every stage uses: run an argv on a host, bounded in time."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Output beyond this is dropped (and `truncated` set): a runaway command must not eat memory.
DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock; every remote step gets `remaining()` of it, not more."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at


@dataclass(frozen=True)
class CommandResult:
    host: str
    exit_code: int | None  # None when the command was killed at its deadline
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def stderr_tail(self, limit: int = 300) -> str:
        text = self.stderr.decode("utf-8", "replace").strip()
        return text[-limit:]


class Transport(Protocol):
    """Runs commands on one host. Implementations: LocalTransport, SSHTransport."""

    host: str  # inventory name, used in every message

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> CommandResult:
        """Run argv (quoted for the remote shell by the transport), feed stdin, and return
        when it exits or the deadline passes; on the deadline the remote process group is
        killed and `timed_out` is set. Raises TransportError when the host cannot be used."""
        ...

    def close(self) -> None: ...


def remote_command(argv: Sequence[str], timeout: float | None = None) -> str:
    """Quote argv for a POSIX shell, bounded by coreutils `timeout -k` on the node when given:
    the node kills its own process even if our connection is gone."""
    quoted = shlex.join(argv)
    if timeout is None:
        return quoted
    seconds = max(1, int(timeout + 0.999))
    return f"timeout -k 2 {seconds} {quoted}"
