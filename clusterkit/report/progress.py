"""Progress on stderr while hosts answer: a live bar on a terminal; when stderr is piped (a CI
log), one line per phase as it finishes, so a long run is never silent until its end."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import TaskID

    from clusterkit.environment import Environment

from clusterkit.escape import printable
from clusterkit.redact import redact_text
from clusterkit.words import counted


class PhaseLog:
    """The piped form: `clusterkit: probe: 31 of 32 hosts ok in 1.2 s (node7: timeout)`."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.name: str | None = None
        self.total = self.answered = 0
        self.problems: list[tuple[str, str]] = []  # (host, problem) as they answered
        self.order: Sequence[str] = ()
        self.started = 0.0

    def start(self, name: str, total: int, order: Sequence[str] = ()) -> None:
        self.finish()
        self.name, self.total, self.answered, self.problems = name, total, 0, []
        self.order = order
        self.started = time.monotonic()

    def done(self, host: str, problem: str | None) -> None:
        self.answered += 1
        if problem:
            self.problems.append((host, problem))

    def _problems_in_order(self) -> list[str]:
        """Hosts in inventory order, not in the order they happened to answer: the same
        failure reads the same on every run."""
        rank = {host: index for index, host in enumerate(self.order)}
        ordered = sorted(self.problems, key=lambda item: rank.get(item[0], len(rank)))
        return [f"{host}: {problem}" for host, problem in ordered]

    def finish(self) -> None:
        if self.name is None:
            return
        seconds = f"{time.monotonic() - self.started:.1f} s"
        if self.answered or self.total > 1:  # a per-host phase
            ok = self.answered - len(self.problems)
            hosts = counted(self.total, "host")
            line = f"clusterkit: {self.name}: {ok} of {hosts} ok in {seconds}"
        else:  # a stage that acts on the cluster as a whole
            line = f"clusterkit: {self.name}: finished in {seconds}"
        if self.problems:
            shown = "; ".join(self._problems_in_order()[:3])
            more = len(self.problems) - 3
            line += f" ({shown}{f'; +{more} more' if more > 0 else ''})"
        self.name = None
        # stderr closed: progress is not worth failing for
        with contextlib.suppress(OSError, ValueError):
            print(printable(redact_text(line)), file=self.stream, flush=True)


class Progress:
    """A live bar (`enabled`) on `log` (None: this process's stderr), or phase lines on `log`;
    `environ` (None: this process's) describes the terminal to rich."""

    def __init__(
        self,
        enabled: bool,
        log: IO[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._bar = None
        self._task: TaskID | None = None
        self._log = PhaseLog(log) if log is not None and not enabled else None
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
                console=Console(file=log or sys.stderr, _environ=environ),
                transient=True,
            )

    def phase(self, name: str, total: int, order: Sequence[str] = ()) -> None:
        """A new phase of `total` steps; `order` (the inventory's host names) orders the
        hosts its summary line names."""
        if self._log is not None:
            with self._lock:
                self._log.start(name, total, order)
        if self._bar is None:
            return
        with self._lock:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(name, total=total, last="")

    def done(self, host: str, problem: str | None = None) -> None:
        if self._log is not None:
            with self._lock:
                self._log.done(host, problem)
        if self._bar is None or self._task is None:
            return
        with self._lock:
            from rich.markup import escape

            label = printable(redact_text(f"{host}: {problem}" if problem else host))
            self._bar.update(self._task, advance=1, last=escape(label[:60]))

    def finish(self) -> None:
        if self._log is not None:
            with self._lock:
                self._log.finish()


@contextmanager
def progress(env: Environment) -> Iterator[Progress]:
    """A live bar when `env`'s stderr is a terminal, else phase lines on it."""
    bar = Progress(env.stderr_isatty, log=env.stderr, environ=env.environ)
    try:
        if bar._bar is None:
            yield bar
        else:
            with bar._bar:
                yield bar
    finally:
        bar.finish()
