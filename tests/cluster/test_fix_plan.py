"""`clusterkit check --fix-plan` on real hosts: each broken thing a playbook can fix gets the
exact provisioning command, limited to the hosts it concerns."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

from clusterkit.provision.remedy import TAGS
from tests.support.cli import CliRun, run_cli
from tests.support.netcluster import NetCluster


def check(inventory: Path, *flags: str) -> CliRun:
    return run_cli(["check", str(inventory), "--skip", "bench,image", *flags], timeout=300)


def test_fix_plan_names_the_firewall_and_nvidia_commands(
    cluster: NetCluster, tmp_path: Path
) -> None:
    node1, node2, node3 = cluster.nodes[:3]
    node3.iptables(
        "-I", "INPUT", "-p", "tcp", "-s", node1.address, "--dport", "1024:65535", "-j", "REJECT",
    )  # fmt: skip
    node2.set_gpus(persistence=False)
    inventory = cluster.inventory(tmp_path / "inv.yaml", nodes=[node1, node2, node3])
    done = check(inventory, "--fix-plan")
    assert done.status == 1, done.stdout + done.stderr
    # The plan and nothing else: each command once, one line each.
    plan = done.stdout.strip().splitlines()
    assert "verdict:" not in done.stdout and len(plan) == len(set(plan)), done.stdout
    commands = [shlex.split(line) for line in plan]
    by_tag = {tag: argv for argv in commands for tag in argv[argv.index("--tags") + 1].split(",")}
    assert {"firewall", "nvidia"} <= set(by_tag), plan
    assert len(plan) == len({tuple(argv) for argv in by_tag.values()})  # a tag in one command
    for tag, argv in by_tag.items():
        assert argv[:3] == ["clusterkit", "provision", str(inventory)] and tag in TAGS
    assert by_tag["nvidia"][-2:] == ["--limit", "node2"]
    firewall = by_tag["firewall"]
    assert "--limit" not in firewall or "node3" in firewall[-1].split(","), plan
    # the JSON carries the same command as the finding's remedy, the by-hand way after it,
    # and the plan itself inside the document: stdout stays one JSON document
    as_json = check(inventory, "--format", "json", "--fix-plan")
    report = json.loads(as_json.stdout)
    assert report["fix_plan"] == [line.strip() for line in plan]
    # JUnit on stdout stays one XML document; the plan goes to stderr
    as_junit = check(inventory, "--format", "junit", "--fix-plan")
    ET.fromstring(as_junit.stdout)
    assert "fix plan:" in as_junit.stderr and "fix plan" not in as_junit.stdout
    blocked = [f for f in report["findings"] if f["id"] == "net.firewall"]
    assert blocked and blocked[0]["remedy"].startswith(
        f"clusterkit provision {inventory} --tags firewall --limit node3"
    )
    assert "or by hand: " in blocked[0]["remedy"] and "iptables" in blocked[0]["remedy"]
