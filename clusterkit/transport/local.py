"""Local transport: the same contract, run on this machine (`ansible_connection: local`)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from clusterkit.errors import TransportError
from clusterkit.transport.base import (
    DEFAULT_OUTPUT_CAP,
    CannotRun,
    CommandResult,
    Deadline,
    PumpedProcess,
    Transport,
)
from clusterkit.transport.pool import register_cancellable

_CHUNK = 65536


class LocalTransport(Transport):
    def __init__(self, host: str = "localhost", env: dict[str, str] | None = None) -> None:
        self.host = host
        self._env = env
        self._cancelled = threading.Event()
        register_cancellable(self)

    def cancel(self) -> None:
        self._cancelled.set()

    def start(
        self,
        argv: Sequence[str],
        *,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        start_by: Deadline | None = None,
    ) -> LocalProcess:
        del deadline, start_by  # nothing to wait for before the process runs
        try:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, killed as a whole
                env=self._env,
            )
        except OSError as error:
            raise CannotRun(self.host, f"cannot run {argv[0]}: {error}") from None
        return LocalProcess(self, popen, output_cap)

    def close(self) -> None:
        pass


class LocalProcess(PumpedProcess):
    """A local command (see RemoteProcess); its process group is killed at a deadline."""

    def __init__(self, transport: LocalTransport, popen: subprocess.Popen[bytes], cap: int) -> None:
        super().__init__(transport.host, cap)
        self._transport, self._popen = transport, popen
        self._buffers: dict[int, bytearray] = {}
        self._selector = selectors.DefaultSelector()
        for stream, buffer in ((popen.stdout, self._out), (popen.stderr, self._err)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream, selectors.EVENT_READ)
            self._buffers[stream.fileno()] = buffer
        assert popen.stdin is not None
        os.set_blocking(popen.stdin.fileno(), False)

    def _conclude(self, *, exited: bool) -> CommandResult:
        if not exited:
            _kill_group(self._popen)
        return self._outcome(timed_out=not exited)

    def _pump(self, done: Callable[[], bool], deadline: Deadline) -> bool:
        while not done():
            if self._transport._cancelled.is_set():
                _kill_group(self._popen)
                self._result = self._outcome(timed_out=True)
                self._release()
                raise TransportError(self.host, "interrupted", "interrupted; command killed")
            remaining = deadline.remaining()
            if remaining <= 0:
                return False
            self._feed()
            wait = 0.005 if self._pending else min(remaining, 0.25)
            if self._selector.get_map():
                for key, _events in self._selector.select(wait):
                    self._drain(key.fd)
            else:
                time.sleep(min(wait, 0.02))
            if self._popen.poll() is not None:
                self._exited_at = self._exited_at or time.monotonic()
                # A background child may hold the pipes open after exit: not for long.
                if not self._selector.get_map() or time.monotonic() - self._exited_at > 0.5:
                    return self._closing or done()
        return True

    def _feed(self) -> None:
        stdin = self._popen.stdin
        if stdin is None or stdin.closed:
            return
        if self._pending:
            try:
                sent = os.write(stdin.fileno(), self._pending[:_CHUNK])
            except BlockingIOError:
                sent = 0
            except (BrokenPipeError, ConnectionResetError):
                sent = len(self._pending)  # the command stopped reading: nothing more to say
            self._pending = self._pending[sent:]
        if self._closing and not self._pending:
            stdin.close()

    def _drain(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        if not data:
            self._selector.unregister(fd)
            return
        self._keep(self._buffers[fd], data)

    def _outcome(self, *, timed_out: bool) -> CommandResult:
        return CommandResult(
            self.host,
            None if timed_out else self._popen.returncode,
            bytes(self._out),
            bytes(self._err),
            timed_out=timed_out,
            truncated=self._truncated,
            duration=time.monotonic() - self._started,
        )

    def _release(self) -> None:
        self._selector.close()
        for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        if self._popen.returncode is None:
            _kill_group(self._popen)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            continue
