"""`clusterkit.slurm.srun_args` reach every real srun step of a check's session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from clusterkit.slurm.allocation import open_srun_session
from clusterkit.slurm.target import SlurmRequest, slurm_target
from clusterkit.transport.base import Deadline
from clusterkit.transport.pool import parallel
from tests.support.slurmcluster import SlurmCluster

# "--comment=pre flight" must reach srun as one argument: split, "flight" would be the program.
SRUN_ARGS = ["--job-name=ck-preflight", "--cpus-per-task=1", "--comment=pre flight"]


def test_srun_args_from_the_settings_reach_every_step(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "clusterkit.yaml"
    settings.write_text(yaml.safe_dump({"clusterkit": {"slurm": {"srun_args": SRUN_ARGS}}}))
    with slurm.allocation(3) as job:
        monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
        env = {**os.environ, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node[1-3]"}
        request = SlurmRequest(allocation=True, settings=str(settings))
        target = slurm_target(request, None, env)
        assert target.inventory.settings.slurm.srun_args == tuple(SRUN_ARGS)

        session = open_srun_session(target.inventory, target.job_id, env)
        transports = session.transports()
        script = 'echo "$SLURM_JOB_NAME|$SLURM_CPUS_PER_TASK|$SLURM_STEP_ID"'
        try:
            with session.phase("probe"):
                results = parallel(
                    lambda host: transports[host].run(
                        ["sh", "-c", script], deadline=Deadline.after(30)
                    ),
                    slurm.node_names,
                )
                steps = slurm.steps()
        finally:
            session.close()
    for host, result in zip(slurm.node_names, results, strict=True):
        assert not isinstance(result, BaseException), result
        name, cpus, step = result.stdout.decode().strip().split("|")
        assert (name, cpus) == ("ck-preflight", "1"), host  # set by those srun arguments
        assert step.isdigit()
    assert len(steps) == 1 and steps[0].endswith(" ck-preflight"), steps  # as squeue -s names it
