"""examples/slurm/train.sbatch on a real Slurm: the check gates a real 3-node gloo torchrun."""

from __future__ import annotations

import re
from pathlib import Path

from tests.slurm.test_check_slurm import _exit_code, job_env, settings_file
from tests.support.slurmcluster import SlurmCluster

GATE = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "train.sbatch"
TRAIN = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(value)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.uname().nodename}:"
      f" sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""


def submit(slurm: SlurmCluster, tmp_path: Path) -> tuple[int, str]:
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    log = tmp_path / "job.log"
    env = {
        **job_env(slurm),
        "CLUSTERKIT_SETTINGS": str(settings_file(tmp_path)),
        "CLUSTERKIT_ARGS": "--skip bench",  # the bench over srun is covered by test_check_slurm
        "GLOO_SOCKET_IFNAME": "eth0",
        "GPUS_PER_NODE": "1",  # CPU nodes: the default, a rank per GPU, needs CUDA
    }
    job = slurm.run(
        ["sbatch", "--parsable", f"--output={log}", str(GATE), str(train)],
        env=env,
    ).stdout.strip()
    slurm.wait_job(int(job), timeout=300)
    return int(_exit_code(slurm, int(job))), log.read_text()


def test_gate_launches_torchrun_on_every_node_of_a_healthy_allocation(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    status, log = submit(slurm, tmp_path)
    assert status == 0, log
    ranks = re.findall(r"rank (\d) of 3 on (node\d): sum 6", log)
    assert sorted(rank for rank, _ in ranks) == ["0", "1", "2"], log
    assert sorted(node for _, node in ranks) == ["node1", "node2", "node3"], log
    assert slurm.steps() == []


def test_gate_refuses_a_broken_allocation_and_names_the_nodes(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    slurm.net["node3"].set_gpus(driver="535.129.03", cuda="12.2")
    status, log = submit(slurm, tmp_path)
    assert status == 1, log
    assert "pre-flight failed (exit 1): not launching" in log
    # Paste-ready: the script as submitted and its arguments, not a literal "...".
    assert (
        f"resubmit without the failing nodes: sbatch --exclude=node3 {GATE} {tmp_path}/train.py\n"
        in log
    )
    assert "rank " not in log  # torchrun never started
    assert slurm.steps() == []
