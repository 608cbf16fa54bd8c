"""Private key files, read by clusterkit rather than by paramiko.

paramiko opens a key path itself and reads it to the end: a key path naming a FIFO waited
forever for a writer (Ctrl-C and SIGTERM could not end the run), `/dev/zero` was read to 2 GB.
Here a key file is opened without blocking, must be a regular file (fstat on what was opened,
so a swap after the check changes nothing) of at most MAX_KEY_BYTES, and is read with that
bound; paramiko then gets the text, never the path (clusterkit/transport/keys.py). The
inventory refuses a key file that cannot be one when it loads (`file_problem`).
"""

from __future__ import annotations

import os
import stat

# The largest private key file read. An OpenSSH RSA-16384 key is about 12 KiB; every real key
# and its certificate fit many times over, and a bound this size costs nothing to read.
MAX_KEY_BYTES = 64 * 1024
FILE_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
}  # what a path that is no regular file is, in words (safefiles too)


class KeyFileProblem(Exception):
    """Why a path cannot be read as a key file."""


def file_problem(path: str) -> str | None:
    """Why the file at `path`, if there is one, cannot be a key file (a stat: never blocks)."""
    try:
        info = os.stat(path)
    except OSError:
        return None  # a missing or unreadable file is the connection's to report
    return _problem(info)


def _problem(
    info: os.stat_result, limit: int = MAX_KEY_BYTES, whose: str = "a key file's"
) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        kind = FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a plain file")
        return f"not a regular file ({kind})"
    if info.st_size > limit:
        return f"{info.st_size} bytes, more than {whose} {limit}"
    return None


def read_key_file(path: str) -> str:
    """The text of a key file, or KeyFileProblem."""
    return read_small_file(path, MAX_KEY_BYTES, "a key file's")


def read_small_file(path: str, limit: int, whose: str) -> str:
    """The text of the regular file at `path`, of at most `limit` bytes (`whose` names the
    bound in the message), opened without blocking; KeyFileProblem saying why not."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        raise KeyFileProblem(error.strerror or str(error)) from None
    try:
        problem = _problem(os.fstat(descriptor), limit, whose)
        if problem:
            raise KeyFileProblem(problem)
        data = b""
        while len(data) <= limit:
            chunk = os.read(descriptor, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as error:
        raise KeyFileProblem(error.strerror or str(error)) from None
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise KeyFileProblem(f"more than {whose} {limit} bytes")
    return data.decode("utf-8", "replace")
