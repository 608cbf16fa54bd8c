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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple


class CliRun(NamedTuple):
    status: int
    stdout: str
    stderr: str


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
) -> CliRun:
    """(exit status, stdout, stderr) of `clusterkit ARGV`. `env` replaces the environment
    for the call; --help and --version (argparse's own exit) give their status too."""
    from clusterkit.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with (
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
