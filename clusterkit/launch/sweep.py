"""The backstop that ends a run on a node whose node process cannot do it any more (killed,
wedged, or never confirming its stop): every process carrying the job's marker is killed
and the run's folders are removed, each only where it is this user's own."""

from __future__ import annotations

import contextlib

from clusterkit.errors import TransportError
from clusterkit.rundir import EACH_OWN_FOLDER
from clusterkit.transport.base import Deadline, Transport

SWEEP_SECONDS = 10.0  # the sweep of a node that never confirmed its stop answers by then

SWEEP_SCRIPT = (
    r"""
marker=$1
for d in /proc/[0-9]*; do
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF "$marker"; then
    kill -KILL "${d#/proc/}" 2>/dev/null
  fi
done
"""
    + EACH_OWN_FOLDER
    + """each_own_folder "$2" rm -rf --\ntrue\n"""
)


def sweep(transport: Transport, marker: str, run_name: str) -> None:
    """Run the sweep for `marker` (VARIABLE=VALUE) on the node; a node that cannot be
    reached is left to stop its own share once it finds its connection gone."""
    with contextlib.suppress(TransportError):
        transport.run(
            ["sh", "-c", SWEEP_SCRIPT, "clusterkit-sweep", marker, run_name],
            deadline=Deadline.after(SWEEP_SECONDS),
        )
