"""What one run of the CLI may use of the process around it: the standard streams, the
environment variables, the working directory, and whether each stream is a terminal.

`main(argv, env)` takes one and hands it (or the piece a step needs) down, so the control
side reads nothing of the process behind the caller's back: a test runs the CLI in-process
with strings for streams and an environment of its own, and gets what a shell would see.
Node-side scripts are not run through it: they run in the node's own process.
"""

from __future__ import annotations

import io
import os
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def _process_cwd() -> Path:
    try:
        return Path.cwd()
    except OSError:  # the folder was removed under us: relative paths still mean "here"
        return Path(".")


@dataclass(frozen=True)
class Environment:
    """The streams, variables and folder a run works with (see the module docstring)."""

    stdin: TextIO = field(default_factory=io.StringIO)
    stdout: TextIO = field(default_factory=io.StringIO)
    stderr: TextIO = field(default_factory=io.StringIO)
    environ: Mapping[str, str] = field(default_factory=dict)
    cwd: Path = field(default_factory=_process_cwd)
    stdin_isatty: bool = False
    stdout_isatty: bool = False
    stderr_isatty: bool = False

    @classmethod
    def from_process(cls) -> Environment:
        """This process's: its streams (one that is closed reads empty, or swallows what is
        written to it), a snapshot of its variables, its working directory."""
        stdin = sys.stdin if sys.stdin is not None else io.StringIO()
        stdout = sys.stdout if sys.stdout is not None else io.StringIO()
        stderr = sys.stderr if sys.stderr is not None else io.StringIO()
        return cls(
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            environ=types.MappingProxyType(dict(os.environ)),
            cwd=_process_cwd(),
            stdin_isatty=_isatty(stdin),
            stdout_isatty=_isatty(stdout),
            stderr_isatty=_isatty(stderr),
        )

    def path(self, name: str | os.PathLike[str]) -> Path:
        """`name` as this run means it: a relative path is taken from `cwd`, and left as
        written when `cwd` is this process's own folder (messages name it as the user did)."""
        path = Path(name)
        if path.is_absolute() or self.cwd == _process_cwd():
            return path
        return self.cwd / path
