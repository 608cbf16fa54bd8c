"""The folders a launch writes into: --log-dir (rank logs, stacks, the outcome) and --print-dir
(each node's env file and script), each checked before a byte is written."""

from __future__ import annotations

from typing import TextIO

from clusterkit.errors import UsageError
from clusterkit.escape import printable
from clusterkit.launch.plan import NodeLaunch
from clusterkit.launch.plan import render_print as render_plan
from clusterkit.safefiles import PrivateFolder, UnsafePathError


def open_folder(flag: str, directory: str) -> PrivateFolder:
    """The folder of --log-dir or --print-dir, made private when new; refused when another
    user could plant or swap what clusterkit writes there."""
    try:
        return PrivateFolder.open(directory)
    except OSError as error:
        raise UsageError(folder_error(flag, directory, error)) from None


def folder_error(flag: str, directory: str, error: OSError) -> str:
    detail = str(error) if isinstance(error, UnsafePathError) else error.strerror or str(error)
    return printable(f"{flag} {directory}: {detail}")


def print_plan(plan: list[NodeLaunch], directory: str | None, stdout: TextIO) -> None:
    if directory:
        with open_folder("--print-dir", directory) as folder:
            try:
                for node in plan:  # host names are checked file names (inventory loading)
                    env_name = f"{node.host}.env"
                    folder.write(env_name, node.env_file(), 0o600)
                    script = node.script(str(folder.child(env_name)))
                    folder.write(f"{node.host}.sh", script, 0o700)
            except OSError as error:
                raise UsageError(folder_error("--print-dir", directory, error)) from None
    stdout.write(render_plan(plan, directory or "."))
