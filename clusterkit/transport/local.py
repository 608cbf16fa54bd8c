"""Local transport: the same contract, run on this machine (`ansible_connection: local`)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from clusterkit.errors import TransportError
from clusterkit.transport.base import DEFAULT_OUTPUT_CAP, CommandResult, Deadline
from clusterkit.transport.pool import register_cancellable


class LocalTransport:
    def __init__(self, host: str = "localhost", env: dict[str, str] | None = None) -> None:
        self.host = host
        self._env = env
        self._cancelled = threading.Event()
        register_cancellable(self)

    def cancel(self) -> None:
        self._cancelled.set()

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> CommandResult:
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, killed as a whole
                env=self._env,
            )
        except OSError as error:
            return CommandResult(self.host, 127, b"", str(error).encode(), duration=0.0)
        feed: bytes | None = stdin or b""
        while True:
            try:
                out, err = process.communicate(feed, timeout=min(0.25, deadline.remaining()))
                break
            except subprocess.TimeoutExpired:
                feed = None
                if self._cancelled.is_set() or deadline.expired:
                    _kill_group(process)
                    out, err = process.communicate()
                    if self._cancelled.is_set():
                        raise TransportError(
                            self.host, "interrupted", "interrupted; command killed"
                        ) from None
                    return CommandResult(
                        self.host,
                        None,
                        out[:output_cap],
                        err[:output_cap],
                        timed_out=True,
                        truncated=max(len(out), len(err)) > output_cap,
                        duration=time.monotonic() - started,
                    )
        return CommandResult(
            self.host,
            process.returncode,
            out[:output_cap],
            err[:output_cap],
            truncated=max(len(out), len(err)) > output_cap,
            duration=time.monotonic() - started,
        )

    def close(self) -> None:
        pass


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
