"""The one transport contract every stage uses: run an argv on a host, bounded in time."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from clusterkit.errors import TransportError

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


class RemoteProcess(Protocol):
    """A started command that is talked to while it runs: stdin in, stdout read up to
    markers, each wait bounded by a deadline. Implementations: SSHProcess, LocalProcess,
    SrunProcess."""

    host: str

    def send(self, data: bytes) -> None:
        """Queue bytes for stdin; they are written while the next wait runs."""
        ...

    def expect(self, marker: bytes, deadline: Deadline) -> bytes | None:
        """Stdout up to and including the next `marker`; None when the command ended or
        the deadline passed first (`finish` then says which)."""
        ...

    def read_lines(self, deadline: Deadline) -> bytes:
        """The complete stdout lines that arrived since the last call, waiting until at
        least one has or the deadline passes or the command exits (b"" then). What is
        returned is dropped, so a command that prints for days holds only a partial line."""
        ...

    @property
    def exited(self) -> bool:
        """The command has exited (its last output may still be on the way)."""
        ...

    def finish(self, deadline: Deadline) -> CommandResult:
        """Close stdin and wait for the exit; at the deadline kill the process group and set
        `timed_out`. Idempotent. A cancel raises TransportError in whichever wait it
        interrupts; `finish` then returns the killed command's result (`timed_out`)."""
        ...


class PumpedProcess:
    """What SSHProcess, LocalProcess and SrunProcess share: stdin queued and written while a
    wait runs, stdout and stderr kept (up to the cap), stdout read up to markers, and the
    end of `finish`. A subclass moves the bytes in `_pump`, and makes the result in
    `_conclude` and frees its streams in `_release` (SrunProcess keeps its own `finish`)."""

    def __init__(self, host: str, cap: int) -> None:
        self.host, self._cap = host, cap
        self._started = time.monotonic()
        self._pending = b""
        self._closing = False  # close stdin once the pending bytes are written
        self._out, self._err = bytearray(), bytearray()
        self._truncated = False
        self._consumed = 0  # stdout before this offset went to an earlier expect
        self._exited_at: float | None = None
        self._result: CommandResult | None = None

    def send(self, data: bytes) -> None:
        self._pending += data

    def expect(self, marker: bytes, deadline: Deadline) -> bytes | None:
        if self._result is not None:
            return None
        if not self._pump(lambda: self._out.find(marker, self._consumed) >= 0, deadline):
            return None
        end = self._out.find(marker, self._consumed) + len(marker)
        chunk, self._consumed = bytes(self._out[self._consumed : end]), end
        return chunk

    def read_lines(self, deadline: Deadline) -> bytes:
        if self._result is not None:
            return b""
        self._pump(lambda: self._out.find(b"\n", self._consumed) >= 0, deadline)
        end = self._out.rfind(b"\n", self._consumed) + 1
        if end <= 0:
            return b""
        chunk = bytes(self._out[self._consumed : end])
        del self._out[:end]
        self._consumed = 0
        return chunk

    @property
    def exited(self) -> bool:
        return self._exited_at is not None

    def finish(self, deadline: Deadline) -> CommandResult:
        """Close stdin, wait for the exit until `deadline`, and keep the result; idempotent.
        The subclass makes the result (killing the group when the wait ran out) in
        `_conclude`, and frees the process's streams in `_release`, whatever happened."""
        if self._result is not None:
            return self._result
        self._closing = True
        try:
            self._result = self._conclude(exited=self._pump(lambda: False, deadline))
            return self._result
        finally:
            self._release()

    def _conclude(self, *, exited: bool) -> CommandResult:
        """The result once the wait is over: `exited`, or stopped at the deadline."""
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def _keep(self, buffer: bytearray, data: bytes) -> None:
        """Keep at most the cap; past it, note the loss (the rest is still drained)."""
        room = self._cap - len(buffer)
        buffer += data[: max(0, room)]
        self._truncated |= len(data) > room

    def _pump(self, done: Callable[[], bool], deadline: Deadline) -> bool:
        """Write stdin and drain both streams until `done()` (True), the exit (True when
        stdin is closing, as `finish` waits for that) or the deadline (False)."""
        raise NotImplementedError


class CannotRun(TransportError):
    """The program could not be executed here at all (`start` raises it). `run` reports it
    as a shell, the ssh wrapper and the srun relay do: exit 127, the reason on stderr."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(host, "protocol", message)


class Transport(Protocol):
    """Runs commands on one host: the contract every stage uses. A transport subclasses it
    and implements `start` and `close`; `run` is start, send, finish, written here once.
    Implementations: LocalTransport, SSHTransport, SrunTransport."""

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
        killed and `timed_out` is set (at once, starting nothing, when it has passed
        already). Raises TransportError when the host cannot be used."""
        if deadline.expired:
            return CommandResult(self.host, None, b"", b"", timed_out=True)
        try:
            process = self.start(argv, deadline=deadline, output_cap=output_cap)
        except CannotRun as error:
            return CommandResult(self.host, 127, b"", error.detail.encode())
        if stdin:
            process.send(stdin)
        return process.finish(deadline)

    def start(
        self,
        argv: Sequence[str],
        *,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        start_by: Deadline | None = None,
    ) -> RemoteProcess:
        """Start argv for a conversation (see RemoteProcess); `deadline` bounds its whole
        life on the node, `start_by` (default: deadline) how long we wait for the server to
        start it, and `finish` must be called to end it."""
        ...

    def cancel(self) -> None:
        """Ctrl-C: kill every running command's process group; waits raise TransportError
        ("interrupted") at once. `pool.register_cancellable` is how an interrupt finds it."""
        ...

    def close(self) -> None: ...


PGID_MARKER = b"clusterkit-pgid "

# Runs argv as the leader of its own process group (GNU timeout calls setpgid), bounded on the
# node itself, and reports the group id on stderr first so the control side can kill the whole
# group on a deadline or Ctrl-C even while the connection is still up.
_WRAPPER = (
    'printf "clusterkit-pgid %s\\n" "$$" >&2; '
    "if command -v timeout >/dev/null 2>&1; "
    'then exec timeout -k 2 "$0" "$@"; else exec "$@"; fi'
)


def remote_command(argv: Sequence[str], timeout: float) -> str:
    """The shell command line that runs argv on a node: every argument quoted, bounded by
    `timeout -k` on the node so it dies even if our connection is gone."""
    seconds = str(max(1, int(timeout + 0.999)))
    return shlex.join(["sh", "-c", _WRAPPER, seconds, *argv])


def split_pgid(stderr: bytes) -> tuple[int | None, bytes]:
    """Remove the wrapper's first stderr line and return (pgid, the rest of stderr)."""
    if not stderr.startswith(PGID_MARKER):
        return None, stderr
    line, _, rest = stderr.partition(b"\n")
    try:
        return int(line[len(PGID_MARKER) :]), rest
    except ValueError:
        return None, rest
