"""Run the clusterkit CLI in this process, as a user would run it, and capture what it says.

`run_cli(argv)` goes through the same entry point as the `clusterkit` script
(`clusterkit.__main__.main`: parsing, dispatch, the error-to-exit-status mapping), with
stdout and stderr captured and, for the call only, another working directory or environment.
A test that needs the process boundary itself (signals, Ctrl-C, the installed script,
packaging) starts a subprocess instead.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple


class CliTimeout(BaseException):
    """The run outlived the test's bound: a hang (not an Exception, so no handler in the code
    under test mistakes it for a host's failure)."""


class CliRun(NamedTuple):
    status: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _bounded(seconds: float | None) -> Iterator[None]:
    """Raise CliTimeout in this (the main) thread after `seconds`, wherever the run waits."""
    if not seconds:
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise CliTimeout(f"clusterkit did not return within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _environment(cwd: Path | str | None, env: Mapping[str, str] | None) -> Iterator[None]:
    before_cwd = os.getcwd()
    before_env = dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        yield
    finally:
        os.chdir(before_cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(before_env)


def run_cli(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 120.0,
) -> CliRun:
    """(exit status, stdout, stderr) of `clusterkit ARGV`. `env` replaces the environment
    for the call; --help and --version (argparse's own exit) give their status too. A run
    past `timeout` raises CliTimeout: a hang fails the test instead of stalling the suite."""
    from clusterkit.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with (
        _bounded(timeout),
        _environment(cwd, env),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            status = main([str(arg) for arg in argv])
        except SystemExit as done:
            code = done.code
            status = code if isinstance(code, int) else (0 if code is None else 2)
    return CliRun(int(status), out.getvalue(), err.getvalue())
