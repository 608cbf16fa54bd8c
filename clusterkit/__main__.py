"""Entry point: parse, run, and map the outcome to a documented exit status."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import IO, Any, TextIO, cast

from clusterkit.environment import Environment
from clusterkit.status import ExitStatus, interrupted_status, note_stop_signal, stop_signal

# SIGTERM (CI runners, Slurm, Kubernetes) and SIGHUP (a closed terminal) stop a run exactly
# like Ctrl-C: KeyboardInterrupt unwinds every stage, which kills its remote process groups.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_STOPPED_BY: dict[int, str] = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP)",
}


def _stop(signum: int, frame: object) -> None:
    # The first signal starts the (bounded) clean-up; repeats must not cut it short.
    for other in STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    note_stop_signal(signum)
    raise KeyboardInterrupt


@contextmanager
def _stop_signals_like_ctrl_c() -> Iterator[None]:
    note_stop_signal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        yield  # run in-process from another thread (a test): signals are the host's to handle
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        if previous[signum] is not signal.SIG_IGN:  # a nohup'ed run keeps ignoring SIGHUP
            signal.signal(signum, _stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _print_error(message: str, stderr: TextIO | None) -> None:
    """One line on stderr (a stderr that is gone too is not worth a traceback)."""
    from clusterkit.escape import printable

    # One line, whatever a node or a file put in the message.
    message = printable(message.removeprefix("clusterkit: ").removeprefix("error: "))
    if stderr is not None:
        with suppress(OSError, ValueError):
            print(f"clusterkit: error: {message}", file=stderr)


class _StdoutGone(Exception):
    """stdout refused a write: closed (`| head -0`) or full (`> /dev/full`)."""


class _GuardedStdout:
    """stdout whose write errors are told apart from any other OSError of the run."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise _StdoutGone(error.strerror or str(error)) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise _StdoutGone(error.strerror or str(error)) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    """Run `clusterkit ARGV` (default: sys.argv) in `env` (default: this process's streams,
    variables and folder); the exit status."""
    if env is None:
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            _print_error(
                "standard output is closed; redirect it, or write the report with -o FILE",
                sys.stderr,
            )
            return int(ExitStatus.USAGE)
        env = Environment.from_process()
    return _run(argv, env)


def _run(argv: Sequence[str] | None, env: Environment) -> int:
    from clusterkit import cli, logs
    from clusterkit.errors import ClusterkitError

    stdout = env.stdout
    env = dataclasses.replace(env, stdout=cast(TextIO, _GuardedStdout(stdout)))
    try:
        with _stop_signals_like_ctrl_c():
            args = cli.parse(argv, env)
            logs.configure(args.verbose, env.stderr)  # the only place logging is set up
            status = int(cli.dispatch(args, env))
            env.stdout.flush()  # a full or closed stdout is an error of this run
            return status
    except ClusterkitError as error:
        _print_error(error.shown(), env.stderr)
        return int(error.exit_status)
    except KeyboardInterrupt:
        print(
            f"clusterkit: {_STOPPED_BY[stop_signal()]}; remote commands were stopped",
            file=env.stderr,
        )
        return int(interrupted_status())
    except _StdoutGone as error:
        _print_error(f"cannot write to standard output: {error}", env.stderr)
        # The interpreter flushes stdout once more at exit: let that go nowhere, quietly.
        with suppress(OSError, ValueError):
            fileno = stdout.fileno()
            os.dup2(os.open(os.devnull, os.O_WRONLY), fileno)
        return int(ExitStatus.USAGE)


if __name__ == "__main__":
    sys.exit(main())
