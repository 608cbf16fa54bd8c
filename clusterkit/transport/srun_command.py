"""srun's command line and environment for one step of clusterkit's.

The options that fix the layout and the labels come after the settings' srun_args, so that
none of those can change them (srun keeps the last), and the variables that would change
them behind our back are dropped: a line is credited to a node by that layout alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# Variables that would change the layout or the labelling of the step behind our back.
_LAYOUT_ENV = ("SLURM_HOSTFILE", "SLURM_UNBUFFEREDIO", "SLURM_DISTRIBUTION", "SLURM_LABELIO")


def step_argv(
    srun: Sequence[str],
    extra_args: Sequence[str],
    hosts: Sequence[str],
    job_name: str,
    minutes: int,
    program: Sequence[str],
) -> list[str]:
    """`srun` (with its --jobid), then one task on each of `hosts`, task i on the i-th."""
    return [
        *srun,
        "--overlap",
        "--kill-on-bad-exit=0",
        f"--time={minutes}",
        job_name,
        "--quiet",
        *extra_args,
        f"--nodes={len(hosts)}",
        f"--ntasks={len(hosts)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(hosts)}",
        "--distribution=arbitrary",  # task i on the i-th node of --nodelist
        "--label",
        *program,
    ]


def step_env(env: Mapping[str, str]) -> dict[str, str]:
    """The run's variables, less those that would change the step's layout."""
    return {name: value for name, value in env.items() if name not in _LAYOUT_ENV}
