"""Exit statuses: the contract with CI and job pipelines (documented in the README)."""

from enum import IntEnum


class ExitStatus(IntEnum):
    PASSED = 0  # every check passed (warnings allowed unless --strict)
    FAILED = 1  # at least one check failed: the job should not go ahead
    USAGE = 2  # bad input: malformed inventory, wrong flag, unreadable file
    INCOMPLETE = 3  # a host was unreachable or a stage could not run: never a pass
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), remote processes were killed
