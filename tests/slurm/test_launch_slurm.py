"""examples/slurm/resilient.sbatch on a real Slurm: a node crashes, the spare takes over.

A 3-node batch job runs `clusterkit launch --slurm` with the job on two nodes and the third
a spare, over srun steps. A node crashes (every process in it killed: slurmd, the job's
step, its ranks); srun cannot tell at once, so the node's silence (--node-timeout) names
it lost. The next steps leave it out, the spare passes the re-check and the job finishes
there from its checkpoint; the admin's drain command is printed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.cluster.test_launch_resilient import JOB, crash, hosts_of, reboot_cleans, training_job
from tests.slurm.test_check_slurm import _exit_code, job_env, settings_file
from tests.support.slurmcluster import SlurmCluster

RESILIENT = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "resilient.sbatch"


def wait_for_line(log: Path, pattern: str, seconds: float = 240.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if log.exists() and re.search(pattern, log.read_text(errors="replace"), re.M):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in the job's log:\n{log.read_text()[-3000:]}")


def submit(slurm: SlurmCluster, tmp_path: Path, clusterkit_args: str, *job: str) -> int:
    """The example batch script on 3 nodes (the job on two, a spare), logging to
    tmp_path/job.log: its job id."""
    env = {
        **job_env(slurm),
        "CLUSTERKIT_SETTINGS": str(settings_file(tmp_path)),
        "NNODES": "2",
        "CLUSTERKIT_ARGS": clusterkit_args,
    }
    log = tmp_path / "job.log"
    return int(
        slurm.run(
            ["sbatch", "--parsable", "-N3", f"--output={log}", f"--chdir={tmp_path}",
             str(RESILIENT), JOB, *job],
            env=env,
        ).stdout.strip()
    )  # fmt: skip


def test_a_crashed_node_is_left_out_of_the_next_steps_and_the_spare_finishes(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    checkpoint, log = tmp_path / "checkpoint.pt", tmp_path / "job.log"
    node2 = slurm.net.nodes[1]
    restarted = False
    try:
        job = submit(slurm, tmp_path, "--skip bench --node-timeout 15", *training_job(checkpoint))
        wait_for_line(log, r"^node2/1: step 3 ")
        crash(node2)
        wait_for_line(log, r"^clusterkit: exit status \d+$", seconds=300)
        # The node boots again: until its slurmd answers, Slurm cannot complete the job.
        slurm.restart_slurmd(node2)
        restarted = True
        slurm.wait_job(job, timeout=300)
        assert not [step for step in slurm.steps() if "clusterkit" in step]
        text = log.read_text()
        assert _exit_code(slurm, job) == "0", text[-4000:]
        assert re.search(r"node fault on node2: node2 was lost", text), text[-3000:]
        assert "spare node3 taken" in text
        assert "scontrol update nodename=node2 state=drain 'reason=clusterkit: launch:" in text
        assert hosts_of(text, "done rank=") == {"node1", "node3"}
        assert re.search(r"^node3/1: start step=([3-9]|\d\d+) restart=1", text, re.M), text[-3000:]
        trace = (tmp_path / f"restarts-{job}.trace").read_text()
        assert trace.splitlines()[-1].endswith(" node2")
        run_id = re.search(r"launching run ([0-9a-f]+) on", text)
        assert run_id
        reboot_cleans(run_id[1], 1)
    finally:
        if not restarted:
            slurm.restart_slurmd(node2)
        slurm.reset()


def test_a_job_printing_a_hardware_error_leaves_its_node_out_but_never_drains_it(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """A job that prints "uncorrectable ECC error" got its node drained for every user under
    --slurm-drain. Its words may leave the node out of this run; only the node's own evidence
    (kernel log, nvidia-smi, its checks after the stop) drains it."""
    log = tmp_path / "job.log"
    words = "CUDA error: uncorrectable ECC error encountered"
    try:
        failing = ("--steps", "5", "--fail-rank", "1", "--fail-text", words)
        job = submit(slurm, tmp_path, "--skip bench --slurm-drain", *failing)
        slurm.wait_job(job, timeout=300)
        text = log.read_text()
        assert re.search(r"node fault on node2: .*uncorrectable ECC error", text), text[-3000:]
        assert "spare node3 taken" in text
        for node in ("node2", "node3"):
            assert f"{node} not drained: only the job's output" in text, text[-3000:]
            assert f"clusterkit: {node} drained" not in text
        for node in slurm.node_names:
            assert "DRAIN" not in slurm.node_state(node)[0], node
    finally:
        slurm.reset()


def test_an_xid_mid_run_stops_the_step_drains_the_node_and_the_spare_finishes(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """The hardware watch inside the srun step: an Xid 79 in node2's own kernel log stops
    the job in seconds as a node fault on its own evidence, which --slurm-drain drains."""
    checkpoint, log = tmp_path / "checkpoint.pt", tmp_path / "job.log"
    xid_79 = "NVRM: Xid (PCI:0000:1a:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus."
    try:
        training = training_job(checkpoint, steps=80)
        job = submit(slurm, tmp_path, "--skip bench --slurm-drain", *training)
        wait_for_line(log, r"^node2/1: step 3 ")
        slurm.net.nodes[1].set_kernel_log([xid_79])
        start = time.monotonic()
        wait_for_line(log, r"node2: node fault during the run: Xid 79", seconds=30)
        assert time.monotonic() - start < 10.0
        slurm.wait_job(job, timeout=300)
        text = log.read_text()
        assert _exit_code(slurm, job) == "0", text[-4000:]
        assert re.search(r"node fault on node2: node2 during the run: Xid 79", text), text[-3000:]
        assert "spare node3 taken" in text
        assert re.search(r"^node3/1: start step=([3-9]|\d\d+) restart=1", text, re.M), text[-3000:]
        assert "DRAIN" in slurm.node_state("node2")[0]
        assert not [step for step in slurm.steps() if "clusterkit" in step]
    finally:
        slurm.reset()
