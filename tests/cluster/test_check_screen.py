"""A passing 4-node check on an 80-column terminal fits one screen, `-v` lists every check,
and a failing one names every failing host (issue 37 item 11), on the real cluster."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from clusterkit.hostlist import parse_hostlist
from tests.support.cli import CliRun, run_cli
from tests.support.netcluster import NetCluster

# The test cluster's three warnings (torch.cpu-build, env.memlock, env.clock: conditions the
# namespace nodes share with the machine) are at most two lines each at a glance, and what is
# not a warning stays within 16 lines: the whole report fits an 80 x 24 terminal.
SCREEN = 24
FIXED = 16
TERMINAL = {**os.environ, "COLUMNS": "80", "LINES": "24", "NO_COLOR": "1"}
FAST = ["--skip", "network,bench,image"]


def on_terminal(inventory: Path, *args: str) -> CliRun:
    return run_cli(["check", str(inventory), *args], env=TERMINAL, terminal=True, timeout=400)


def test_a_passing_4_node_check_fits_one_80_column_screen(cluster_inventory: Path) -> None:
    done = on_terminal(cluster_inventory)
    assert done.status == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= SCREEN, done.stdout
    assert max(len(line.rstrip()) for line in lines) <= 80, done.stdout
    assert len([line for line in lines if not line.startswith(" ")]) <= FIXED, done.stdout
    text = "\n".join(line.rstrip() for line in lines)
    assert re.search(r"^hosts\s+node\[1-4\] ok: GPUs 8, driver 550\.54\.15", text, re.MULTILINE)
    for stage in ("connect", "static", "network", "bench"):
        assert re.search(rf"^{stage}\s+\d+ ok\b", text, re.MULTILINE), stage
    assert "(-q shows each warning whole, -v every check and host)" in text
    warned = re.findall(r"^  warn  ([^\s:]+)", text, re.MULTILINE)
    assert warned and len(lines) - len(warned) * 2 <= FIXED, done.stdout
    whole = on_terminal(cluster_inventory, "-q", *FAST)
    shown = r"^  warn  {}\b.*\n(\s+.*\n)*?\s+remedy: "
    for check_id in warned:
        found = re.search(shown.format(re.escape(check_id)), whole.stdout, re.MULTILINE)
        assert found, (check_id, whole.stdout)


def test_verbose_lists_every_check_the_json_report_holds(cluster_inventory: Path) -> None:
    data = run_cli(["check", str(cluster_inventory), "--format", "json", *FAST], timeout=400)
    findings = json.loads(data.stdout)["findings"]
    done = on_terminal(cluster_inventory, "-v", *FAST)
    assert done.status == 0, done.stdout + done.stderr
    for finding in findings:
        pattern = rf"^\s+{finding['status']}\s+{re.escape(finding['id'])}\b"
        assert re.search(pattern, done.stdout, re.MULTILINE), (finding["id"], done.stdout)
    assert all(re.search(rf"^node{i}\s", done.stdout, re.MULTILINE) for i in range(1, 5))


def test_a_failing_check_on_the_terminal_names_every_failing_host(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    for node in cluster.nodes[1:3]:
        node.stop_sshd()
    done = on_terminal(cluster_inventory, "--connect-timeout", "3", *FAST)
    assert done.status == 3, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    (named,) = re.findall(r"error host\.reachable: (\S+): ", text)
    assert parse_hostlist(named) == ["node2", "node3"], done.stdout
    assert re.search(r"^hosts\s+node\[2-3\] refused", done.stdout, re.MULTILINE), done.stdout
