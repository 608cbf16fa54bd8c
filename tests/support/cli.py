"""Run the clusterkit CLI in this process, as a user would run it, and capture what it says.

`run_cli(argv)` goes through the same entry point as the `clusterkit` script
(`clusterkit.__main__.main`: parsing, dispatch, the error-to-exit-status mapping) with an
`Environment` of its own: strings for stdin, stdout and stderr, a copy of this process's
variables (or `env`), and a working directory (`cwd`). Nothing of the test process is
patched, so tests may run it side by side. A test that needs the process boundary itself
(signals, Ctrl-C, the installed script, a closed or full stdout) starts a subprocess instead.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from clusterkit.environment import Environment


class CliTimeout(BaseException):
    """The run outlived the test's bound: a hang (not an Exception, so no handler in the test
    mistakes it for an ordinary failure)."""


class CliRun(NamedTuple):
    status: int
    stdout: str
    stderr: str


def cli_environment(
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    terminal: bool = False,
) -> Environment:
    """An environment with string streams: `env` for variables (default: a copy of this
    process's), `cwd` for the working directory (default: this process's); stdout counts as
    a terminal when `terminal` (its size from COLUMNS and LINES in `env`)."""
    return Environment(
        stdin=io.StringIO(),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
        environ=dict(os.environ if env is None else env),
        cwd=Path.cwd() if cwd is None else Path(cwd).absolute(),
        stdout_isatty=terminal,
    )


def _status(argv: list[str], environment: Environment) -> int:
    """main's exit status; --help and --version (argparse's own exit) give theirs too."""
    from clusterkit.__main__ import main

    try:
        return int(main(argv, environment))
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 2)


def run_cli(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 120.0,
    terminal: bool = False,
) -> CliRun:
    """(exit status, stdout, stderr) of `clusterkit ARGV` run in `cwd` with the variables
    `env` (default: this process's). A run past `timeout` raises CliTimeout, so a hang fails
    the test instead of stalling the suite: the run goes on in a thread of its own, which is
    left behind (a daemon) when it hangs. `terminal`: stdout counts as a terminal."""
    environment = cli_environment(cwd=cwd, env=env, terminal=terminal)
    words = [str(arg) for arg in argv]
    outcome: dict[str, int | BaseException] = {}

    def run() -> None:
        try:
            outcome["status"] = _status(words, environment)
        except BaseException as error:  # handed to the test's thread, raised there
            outcome["error"] = error

    thread = threading.Thread(target=run, name="clusterkit-cli", daemon=True)
    thread.start()
    thread.join(timeout or None)
    if thread.is_alive():
        raise CliTimeout(f"clusterkit did not return within {timeout:g} s")
    error = outcome.get("error")
    if isinstance(error, BaseException):
        raise error
    stdout, stderr = environment.stdout, environment.stderr
    assert isinstance(stdout, io.StringIO) and isinstance(stderr, io.StringIO)
    return CliRun(int(outcome["status"]), stdout.getvalue(), stderr.getvalue())
