"""env.clock against the real cluster: a node whose chrony says it is 7200 s fast, leap
status Normal, once passed as OK."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_hardening_transport import check_json
from tests.support.netcluster import NetCluster

CHRONYC = Path(__file__).parent.parent / "fixtures" / "chronyc"


def test_a_node_7200_s_fast_fails_env_clock(cluster: NetCluster, cluster_inventory: Path) -> None:
    node = cluster.nodes[1]
    tool = node.bin_dir / "chronyc"  # first on the node's PATH
    tool.write_text(f"#!/bin/sh\ncat '{CHRONYC / 'tracking-7200s-fast.txt'}'\n")
    tool.chmod(0o755)
    try:
        status, report, stderr = check_json(cluster_inventory)
    finally:
        tool.unlink()
    clock = next(f for f in report["findings"] if f["id"] == "env.clock")
    assert clock["status"] == "fail", clock
    # (the others share this machine's kernel clock, which may be unsynchronised: a warning)
    assert clock["found"][node.name] == "offset +7200.000 s, more than 5 s"
    assert all(why == "not synchronised" for host, why in clock["found"].items()
               if host != node.name)  # fmt: skip
    assert report["hosts"][node.name]["facts"]["clock"]["offset_seconds"] == 7200.0
    assert status == 1, stderr
