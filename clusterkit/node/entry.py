"""Runs ON a node (run_node_script: one JSON argument {"path": ..., "workdir": ..., "limit":
N}; stdlib only, Python 3.8+): the launch's pre-flight of the job's entry script, opened where
torchrun will open it (relative to the login folder, or to the launch's --workdir), so a
node without the script, or with another copy of it, is named before any rank starts.

One JSON frame out: {"path": the path as opened, "sha256": of its first `limit` bytes,
"size": bytes} for a regular file; {"path": ..., "missing": true} when there is none;
{"path": ..., "error": why} when it cannot be read. The read is bounded by `limit`, and a
FIFO or device never blocks it (O_NONBLOCK, and only a regular file is read).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys

from clusterkit.node.prelude import emit

CHUNK = 1 << 20


def digest(fd: int, limit: int) -> str:
    """The sha256 of the file's first `limit` bytes."""
    hashed = hashlib.sha256()
    left = limit
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            break
        hashed.update(chunk)
        left -= len(chunk)
    return hashed.hexdigest()


def look(path: str, workdir: str, limit: int) -> dict:
    """What the node finds at `path`, relative to `workdir` (itself relative to the login
    folder) when it is not absolute."""
    full = os.path.join(os.getcwd(), workdir or "", path)
    answer: dict = {"path": full}
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            answer["missing"] = True
        else:
            answer["error"] = error.strerror or str(error)
        return answer
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            answer["error"] = "not a regular file"
            return answer
        answer["sha256"] = digest(fd, limit)
        answer["size"] = info.st_size
    except OSError as error:
        answer["error"] = error.strerror or str(error)
    finally:
        os.close(fd)
    return answer


def main(argv: list) -> None:
    request = json.loads(argv[1])
    emit(look(request["path"], request.get("workdir") or "", int(request["limit"])))


if __name__ == "__main__":
    main(sys.argv)
