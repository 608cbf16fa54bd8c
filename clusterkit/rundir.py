"""Run folders on nodes: made by the node itself, private, and named in plans by a stand-in.

A folder whose name the control side chose could be made first by another user of the node,
who would then own what clusterkit writes, runs or signals from it (a sitecustomize the
ranks import, a worker script, the pid files a kill reads). So the node makes each run's
folder when the run starts: a random suffix, mode 0700, never one that existed (mkdtemp).
Commands and variables planned on the control side say RUN_DIR where the folder goes; the
node puts the folder's path in its place, and a shell line says "$VARIABLE" there.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping, Sequence

RUN_DIR = "{clusterkit_run_dir}"
# The folder name's start; the node adds "." and a random suffix (mkdtemp, mktemp -d).
_NAME = re.compile(r"^clusterkit-[a-z]+-[A-Za-z0-9-]{1,64}$")
# A shell line that makes the folder under the node's TMPDIR and names it in VARIABLE.
MAKE_FOLDER = '{variable}=$(mktemp -d "${{TMPDIR:-/tmp}}/{name}.XXXXXXXXXX")'
# A sh function: `each_own_folder NAME COMMAND...` runs COMMAND FOLDER for every folder of
# the run NAME on this node that is really ours: a directory, not a link, owned by this
# user. Another user may make decoys with the same start, but never anything inside ours.
EACH_OWN_FOLDER = r"""
each_own_folder() {
  ck_run=$1; shift
  for d in "${TMPDIR:-/tmp}/$ck_run".*; do
    if [ -d "$d" ] && [ ! -h "$d" ] && [ -O "$d" ]; then "$@" "$d"; fi
  done
  return 0
}
"""


def folder_name(name: str) -> str:
    """`name` if it can start a run folder's name (no path, nothing a shell would expand)."""
    if not _NAME.match(name):
        raise ValueError(f"not a run folder name: {name!r}")
    return name


def shell_word(value: str, variables: Mapping[str, str]) -> str:
    """`value` quoted for sh, with each placeholder in it (a key of `variables`, RUN_DIR
    for one) left to the shell as "$NAME" (its value in `variables`)."""
    parts = re.split("(" + "|".join(map(re.escape, variables)) + ")", value)
    if len(parts) == 1:
        return shlex.quote(value)
    return "".join(
        f'"${variables[part]}"' if odd else shlex.quote(part) if part else ""
        for odd, part in zip(itertools.cycle((False, True)), parts)
    )


def shell_line(argv: Sequence[str], variables: Mapping[str, str]) -> str:
    """argv as one sh command line (see shell_word)."""
    return " ".join(shell_word(part, variables) for part in argv)


def make_folder_line(name: str, variable: str) -> str:
    """The sh line that makes the run folder `name`.XXXXXXXXXX and sets `variable` to it."""
    return MAKE_FOLDER.format(variable=variable, name=folder_name(name))
