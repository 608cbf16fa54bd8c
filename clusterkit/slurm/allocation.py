"""An srun session for a check: in the caller's allocation, or in one of our own.

Inside `sbatch`/`salloc` the steps run in SLURM_JOB_ID's allocation (with --overlap, beside
the job's own steps). Outside one, `--transport srun` first asks for an allocation of
exactly the named nodes (`salloc --no-shell --immediate`, so a busy node is an error, not a
wait), and cancels it when the check ends, whatever happened.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from clusterkit.errors import TransportError, UsageError
from clusterkit.inventory.model import Inventory
from clusterkit.slurm.target import slurm_tool
from clusterkit.transport.srun import SrunSession

ALLOCATE_SECONDS = 30
_GRANTED = re.compile(r"Granted job allocation (\d+)")


def interpreter_of(inventory: Inventory) -> str:
    return inventory.hosts[0].python_interpreter or "python3"


def open_srun_session(
    inventory: Inventory, job_id: str | None, environ: Mapping[str, str]
) -> SrunSession:
    """A session over the inventory's nodes (their Slurm names), in `job_id`'s allocation or
    one of our own; closing it ends its steps and cancels our own allocation. The Slurm
    tools are found on, and run with, the run's `environ`."""
    for tool in ("srun", "scancel"):
        if slurm_tool(tool, environ) is None:
            raise UsageError(f"--transport srun: {tool} not found (install the Slurm client)")
    names = [host.name for host in inventory.hosts]
    own = None if job_id else allocate(names, environ)

    def release() -> None:
        if own:
            subprocess.run(
                ["scancel", own], capture_output=True, timeout=15, env=dict(environ), check=False
            )

    return SrunSession(
        names,
        job_id=job_id or own,
        interpreter=interpreter_of(inventory),
        extra_args=inventory.settings.slurm.srun_args,
        env=environ,
        on_close=release,
    )


def allocate(names: list[str], environ: Mapping[str, str]) -> str:
    """A job allocation of exactly these nodes, granted now or refused; its job id. salloc
    runs in the run's `environ` (its PATH finds it, its SLURM_* variables apply)."""
    argv = [
        "salloc",
        "--no-shell",
        f"--immediate={ALLOCATE_SECONDS}",
        f"--nodes={len(names)}",
        f"--nodelist={','.join(names)}",
        "--job-name=clusterkit-check",
    ]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=ALLOCATE_SECONDS + 15,
            env=dict(environ),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise TransportError(names[0], "timeout", f"salloc did not answer: {error}") from None
    match = _GRANTED.search(done.stderr + done.stdout)
    if done.returncode != 0 or not match:
        detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise TransportError(
            names[0],
            "unreachable",
            f"no allocation of {','.join(names)}: {detail}",
            hint="the nodes are busy or down; use --transport ssh to check them without one",
        )
    return match.group(1)
