"""`launch --lint` behind the real check: the script is judged for the nodes the check
passed, and `--lint strict` refuses a script whose MASTER_ADDR is localhost before any rank
starts (three namespace nodes; a localhost master is harmless on one node, a hang on three)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster

JOB = Path(__file__).resolve().parents[1] / "support" / "ddp_job.py"


def test_lint_strict_refuses_a_localhost_master_on_three_nodes(
    cluster: NetCluster, tmp_path: Path
) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml", nodes=cluster.nodes[:3])
    script = tmp_path / "train.py"
    script.write_text('import os\nos.environ["MASTER_ADDR"] = "localhost"\n' + JOB.read_text())
    argv = [
        "launch",
        inventory,
        "--skip",
        "bench",
        "--lint",
        "strict",
        "--",
        script,
        "--steps",
        "1",
    ]
    done = run_cli(argv, timeout=300)
    assert done.status == 1, done.stderr[-3000:]
    assert re.search(r"train\.py:2: fail lint\.master-localhost", done.stderr), done.stderr
    assert "(judged for 3 nodes x 1 rank): nothing was started (--lint strict)" in done.stderr
    assert "check passed" in done.stderr and "launching run" not in done.stderr
    assert done.stdout == ""  # no rank ever printed
    assert all(node.processes() == [] for node in cluster.nodes)
