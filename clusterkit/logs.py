"""Logging, configured once by the entry point from -v / -vv.

Default: only clusterkit's own warnings, one line each. `-v` adds clusterkit's progress (info).
`-vv` shows every debug record on stderr, libraries included (paramiko's key exchange, its
tracebacks). Below -vv no library record and no traceback reaches the terminal: a host that
cannot be reached is one line in the report, not a paramiko stack dump from its thread.
"""

from __future__ import annotations

import logging
import threading
from typing import TextIO

from clusterkit.redact import redact_text

PREFIX = "clusterkit"
_OURS = "clusterkit"  # logger names under this prefix are clusterkit's own
_HANDLER = "clusterkit-stderr"  # the handler installed here; configuring again replaces it


def level_for(verbosity: int) -> int:
    return logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG


class _Formatter(logging.Formatter):
    """`clusterkit: warning: message` on one line; when debugging also the time since start,
    the thread and the logger, and the traceback."""

    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        level = record.levelname.lower()
        if not self.debug:
            return redact_text(f"{PREFIX}: {level}: {' '.join(message.split())}")
        elapsed = record.relativeCreated / 1000
        text = f"{PREFIX}: {level}: +{elapsed:.3f}s {record.threadName} {record.name}: {message}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return redact_text(text)  # records quote node output, commands and their errors


class _OwnRecords(logging.Filter):
    """Below -vv only clusterkit's records pass; libraries speak only when debugging."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == _OURS or record.name.startswith(_OURS + ".")


def configure(verbosity: int, stream: TextIO) -> None:
    """Install the one handler, on the run's stderr `stream` (replacing an earlier one from
    here, keeping others)."""
    debug = verbosity >= 2
    handler = logging.StreamHandler(stream)
    handler.set_name(_HANDLER)
    handler.setFormatter(_Formatter(debug))
    if not debug:
        handler.addFilter(_OwnRecords())
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:
        root.removeHandler(old)
    root.addHandler(handler)
    # Libraries log at their own levels when debugging; otherwise nothing below a warning is
    # even formatted (paramiko's debug records cost time in every transport thread).
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.getLogger(_OURS).setLevel(level_for(verbosity))
    threading.excepthook = _thread_exception


_log = logging.getLogger(__name__)


def _thread_exception(args: threading.ExceptHookArgs) -> None:
    """A thread that died of an exception: one warning line (its traceback at -vv); one of
    paramiko's own threads only at -vv, where its records are shown too."""
    if args.exc_type is SystemExit:
        return
    thread = args.thread
    name = thread.name if thread is not None else "a thread"
    library = thread is not None and type(thread).__module__.startswith("paramiko")
    error = args.exc_value  # carries its traceback
    if library:
        logging.getLogger("paramiko.transport").debug(
            "thread %s stopped: %r", name, error, exc_info=error
        )
        return
    what = str(error or "") or args.exc_type.__name__
    _log.warning("thread %s stopped: %s", name, what, exc_info=error)
