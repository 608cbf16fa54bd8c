"""Storage, node side: write, read back or remove a token file in each shared path.

Started by the storage stage (clusterkit/storage/stage.py) with one JSON argument,
{"action": "write" | "read" | "remove", "paths": [...], "token": "..."}, composed with the
node-side prelude (stdlib only, Python 3.8+). One JSON frame out: for each path, what the
action did or why it failed, and the space free there.
"""

from __future__ import annotations

import json
import os
import sys

from clusterkit.node.prelude import emit


def act(action: str, path: str, token: str) -> dict:
    """One path's entry: the action's outcome (or its error) and the filesystem's space."""
    name = os.path.join(path, ".clusterkit-shared-" + token)
    entry: dict = {}
    try:
        if action == "write":
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, token.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            entry["written"] = True
        elif action == "read":
            with open(name) as handle:
                entry["token"] = handle.read(200)
        else:
            os.unlink(name)
    except OSError as error:
        entry["error"] = "%s: %s" % (type(error).__name__, error.strerror or error)
    try:
        stat = os.statvfs(path)
        entry["free_bytes"] = stat.f_bavail * stat.f_frsize
        entry["total_bytes"] = stat.f_blocks * stat.f_frsize
    except OSError:
        pass
    return entry


def main(argv: list) -> None:
    args = json.loads(argv[1])
    emit({path: act(args["action"], path, args["token"]) for path in args["paths"]})


if __name__ == "__main__":
    main(sys.argv)
