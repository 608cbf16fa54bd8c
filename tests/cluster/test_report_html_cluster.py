"""The HTML report of a real check on the namespace cluster: the mesh drawn from the network
stage's own details, a real iptables fault on one pair shown red with the rule that blocks
it, every other pair with its measured connect time, the GPU grid from the probed facts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster

pytestmark = pytest.mark.cluster


def test_a_real_check_draws_the_blocked_pair_and_its_rule(
    cluster: NetCluster, cluster_inventory: Path, tmp_path: Path
) -> None:
    node2, node4 = cluster["node2"], cluster["node4"]
    node4.reject_high_ports_from(node2)
    out = tmp_path / "report.html"
    argv = ["check", str(cluster_inventory), "--skip", "bench,image", "--format", "html"]
    done = run_cli([*argv, "-o", str(out)], timeout=240)
    assert done.status == 1, done.stderr
    page = out.read_text()
    mesh = page[page.index('id="mesh"') : page.index("</section>", page.index('id="mesh"'))]
    rule = (
        f"node4: INPUT rule -A INPUT -s {node2.address}/32 -p tcp -m tcp --dport 1024:65535 "
        "-j REJECT --reject-with icmp-port-unreachable"
    )
    assert re.findall(r'<td class="x" title="([^"]*)"', mesh) == [
        f"node2→node4: refused, blocked by {rule}"
    ]
    assert '<th class="bad" title="node4">node4</th>' in mesh
    timed = re.findall(r'<td class="o2?" title="node\d→node\d (\d+\.\d\d) ms">', mesh)
    assert len(timed) == 4 * 3 - 1  # every other pair, with its own connect time
    gpus = page[page.index('id="gpus"') :]
    assert len(re.findall(r'<td class="g o" title="node\d GPU \d: healthy">', gpus)) == 4 * 8
