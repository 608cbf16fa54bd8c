"""A progress bar on stderr while hosts answer; silent when stderr is not a terminal."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from clusterkit.report.escape import printable


class Progress:
    def __init__(self, enabled: bool) -> None:
        self._lock = threading.Lock()
        self._bar = None
        self._task = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description:<10}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[last]}", style="dim"),
                TimeElapsedColumn(),
                console=Console(file=sys.stderr),
                transient=True,
            )

    def phase(self, name: str, total: int) -> None:
        if self._bar is None:
            return
        with self._lock:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(name, total=total, last="")

    def done(self, host: str, problem: str | None = None) -> None:
        if self._bar is None or self._task is None:
            return
        with self._lock:
            from rich.markup import escape

            label = printable(f"{host}: {problem}" if problem else host)
            self._bar.update(self._task, advance=1, last=escape(label[:60]))


@contextmanager
def progress(enabled: bool | None = None) -> Iterator[Progress]:
    if enabled is None:
        enabled = sys.stderr.isatty()
    bar = Progress(enabled)
    if bar._bar is None:
        yield bar
        return
    with bar._bar:
        yield bar
