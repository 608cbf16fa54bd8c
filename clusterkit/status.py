"""Exit statuses: the contract with CI and job pipelines (documented in the README)."""

import signal
from enum import IntEnum


class ExitStatus(IntEnum):
    PASSED = 0  # every check passed (warnings allowed unless --strict)
    FAILED = 1  # at least one check failed: the job should not go ahead
    USAGE = 2  # bad input: malformed inventory, wrong flag, unreadable file, unwritable output
    INCOMPLETE = 3  # a host was unreachable or a stage could not run: never a pass
    # Stopped by a signal (128 + its number), handled alike: remote process groups killed.
    HANGUP = 128 + signal.SIGHUP  # 129: the terminal or session went away
    INTERRUPTED = 128 + signal.SIGINT  # 130: Ctrl-C
    TERMINATED = 128 + signal.SIGTERM  # 143: CI runners, Slurm, Kubernetes stopping us

    @classmethod
    def for_signal(cls, signum: int) -> "ExitStatus":
        by_signal: dict[int, ExitStatus] = {
            signal.SIGHUP: cls.HANGUP,
            signal.SIGTERM: cls.TERMINATED,
        }
        return by_signal.get(signum, cls.INTERRUPTED)


# The signal behind the KeyboardInterrupt being handled: Ctrl-C unless a handler noted another
# (the entry point's for SIGTERM and SIGHUP), so any layer that turns an interrupt into a status
# gives the same one.
_stopped_by: int = signal.SIGINT


def note_stop_signal(signum: int) -> None:
    global _stopped_by
    _stopped_by = signum


def stop_signal() -> int:
    return _stopped_by


def interrupted_status() -> ExitStatus:
    """The exit status for the interrupt being handled: 130, 143 or 129."""
    return ExitStatus.for_signal(_stopped_by)
