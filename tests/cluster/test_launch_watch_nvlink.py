"""An NVLink link going down during a real run: three namespace nodes with 18 links per GPU
on the nvidia-smi stand-in (the real `nvidia-smi nvlink --status` format), DDP on gloo under
torchrun (tests/support/ddp_job.py). One of node3's links is turned `<inactive>` while the job
trains; the watch asks nvidia-smi every 20 s, so the job stops as a node fault on node3's own
evidence within that, naming the node, the GPU and the link."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cluster.test_launch_cluster import run_id_of, wait_until_clean
from tests.cluster.test_launch_resilient import Launch, training_job
from tests.cluster.test_launch_watch import NODE3_GPU, wait_stderr
from tests.support.netcluster import NetCluster

LINKS = [26.562] * 18  # an H100's links as the driver prints their speed, GB/s
SMI_SECONDS = 20.0  # clusterkit/node/launch_watch.py: how often the watch asks nvidia-smi


def test_a_link_up_at_the_start_and_down_mid_run_stops_the_job_as_that_nodes_fault(
    cluster: NetCluster, tmp_path: Path
) -> None:
    nodes = cluster.nodes[:3]
    for node in nodes:
        node.set_gpus(nvlink=LINKS)
    inventory = cluster.inventory(tmp_path / "inventory.yaml", nodes=nodes)
    report = tmp_path / "report.json"
    launch = Launch(
        inventory, "--check-output", str(report), "--format", "json",
        job=training_job(tmp_path / "checkpoint.pt", steps=400),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    down = [*LINKS[:7], None, *LINKS[8:]]
    nodes[2].set_gpus(nvlink=LINKS, overrides={0: {"nvlink": down}})
    seen = wait_stderr(launch, r"node3: node fault during the run: NVLink link 7 ", 60.0)
    assert seen < SMI_SECONDS + 10.0, seen
    code, stdout, stderr = launch.finish()
    assert code == 1, stderr[-4000:]
    line = f"node3: node fault during the run: NVLink link 7 of GPU {NODE3_GPU} went down"
    assert line in stderr, stderr[-3000:]
    assert "node1: node fault" not in stderr and "node2: node fault" not in stderr
    assert not re.search(r"^node\d/\d+: done rank=", stdout, re.M)  # stopped, not finished
    record = json.loads(report.read_text())["details"]["launch"]
    assert record["result"] == "node-fault", record
    (incident,) = record["incidents"]
    assert incident["fault"] == "node" and incident["hosts"] == ["node3"]
    assert "NVLink link 7" in incident["reason"]
    wait_until_clean(cluster, run_id_of(stderr))
