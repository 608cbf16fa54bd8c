"""The launch's entry-script pre-flight under `launch --slurm` (issue 37 item 9): the nodes
answer in one srun step of the batch job, and each node without the script is named with the
path as it would open it (the step's working folder), before any rank starts."""

from __future__ import annotations

import re
from pathlib import Path

from tests.slurm.test_check_slurm import _exit_code, job_env, settings_file
from tests.slurm.test_launch_slurm import RESILIENT
from tests.support.slurmcluster import SlurmCluster


def test_a_script_missing_on_the_nodes_is_named_from_a_job_step(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    log = tmp_path / "job.log"
    env = {
        **job_env(slurm),
        "CLUSTERKIT_SETTINGS": str(settings_file(tmp_path)),
        "NNODES": "2",
        "CLUSTERKIT_ARGS": "--skip bench",
    }
    try:
        job = int(
            slurm.run(
                ["sbatch", "--parsable", "-N3", f"--output={log}", f"--chdir={tmp_path}",
                 str(RESILIENT), "absent.py", "--steps", "2"],
                env=env,
            ).stdout.strip()
        )  # fmt: skip
        slurm.wait_job(job, timeout=300)
        text = log.read_text()
        assert _exit_code(slurm, job) == "1", text[-4000:]
        named = re.findall(r"^clusterkit: pre-flight: absent\.py not found on (\S+) \((.*)\)$",
                           text, re.M)  # fmt: skip
        assert sorted(named) == [("node1", f"{tmp_path}/absent.py"),
                                 ("node2", f"{tmp_path}/absent.py")], text[-4000:]  # fmt: skip
        assert "nothing was started" in text and "launching run" not in text
        assert not [step for step in slurm.steps() if "clusterkit" in step]
    finally:
        slurm.reset()
