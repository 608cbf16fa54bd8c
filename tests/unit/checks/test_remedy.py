"""Remedies name playbook tags that exist, every playbook tag is one provision accepts, and
`--fix-plan` lists the findings' fixes, never text that merely reads like a command."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from clusterkit.checks import static_findings
from clusterkit.checks.model import BY_HAND, Finding, Fix, Status
from clusterkit.checks.parity import PARITY
from clusterkit.checks.stack import PINS
from clusterkit.commands.check import fix_plan
from clusterkit.facts import HostEntry
from clusterkit.inventory.model import Expectations
from clusterkit.provision.remedy import STAGE_FIXES, TAGS, with_stage_fixes
from clusterkit.report import Report
from tests.support.cli import run_cli
from tests.unit.checks.test_checks import healthy

ROOT = Path(__file__).resolve().parents[3]
SITE = ROOT / "playbooks" / "site.yml"


def playbook_tags() -> set[str]:
    plays = yaml.safe_load(SITE.read_text())
    return {tag for play in plays for role in play.get("roles", []) for tag in role["tags"]}


def remedy_tags() -> set[str]:
    """Every tag a remedy can name: the check tables, the stage map, and each literal
    fix_tag="tag" / Fix(("tag", ...) / "(playbook tag: X)" in the source."""
    tags = {tag for *_, tag in PARITY if tag} | {tag for *_, tag in PINS if tag}
    tags |= set(STAGE_FIXES.values())
    for path in (ROOT / "clusterkit").rglob("*.py"):
        text = path.read_text()
        tags |= set(re.findall(r"\bfix_tag=\"([\w-]+)\"", text))
        tags |= set(re.findall(r"\bFix\(\(\"([\w-]+)\"", text))
        tags |= set(re.findall(r"playbook tag: ([\w-]+)", text))
    return tags


def test_provision_accepts_exactly_the_playbooks_tags() -> None:
    assert set(TAGS) == playbook_tags()


def test_every_remedy_tag_is_a_playbook_tag() -> None:
    used = remedy_tags()
    assert used <= playbook_tags(), used - playbook_tags()
    assert {"nvidia", "firewall", "hosts", "shm", "limits", "time", "image"} <= used


def _firewall(status: Status = Status.FAIL) -> Finding:
    return Finding(
        "net.firewall",
        status,
        "node3: REJECT blocks node1 -> node3:40000",
        hosts=["node3"],
        remedy="on node3: iptables -I INPUT -i eth0 -s 10.0.0.0/24 -p tcp -j ACCEPT",
        stage="network",
    )


def test_stage_findings_get_the_exact_command_and_keep_the_manual_way() -> None:
    (fixed,) = with_stage_fixes([_firewall()], "/srv/my inventory.yaml")
    assert fixed.remedy.startswith(
        "clusterkit provision '/srv/my inventory.yaml' --tags firewall --limit node3" + BY_HAND
    )
    assert "iptables -I INPUT" in fixed.remedy
    assert fixed.fix == Fix(("firewall",), ("node3",))


def test_image_driver_names_the_nvidia_role() -> None:
    finding = Finding("image.driver", Status.FAIL, "x", hosts=["a", "b"], stage="image",
                      remedy="upgrade the NVIDIA driver (playbook tag: nvidia)")  # fmt: skip
    (fixed,) = with_stage_fixes([finding], "inv.yaml")
    command = "clusterkit provision inv.yaml --tags nvidia --limit a,b"
    assert fixed.fix is not None and fixed.fix.command("inv.yaml") == command
    assert fixed.remedy.startswith(command + BY_HAND)


def test_no_command_without_an_inventory_or_for_passing_findings() -> None:
    assert with_stage_fixes([_firewall()], None)[0].remedy.startswith("on node3")
    passing = with_stage_fixes([_firewall(Status.OK)], "inv.yaml")[0]
    assert passing.fix is None and passing.remedy.startswith("on node3")
    mtu = Finding("net.mtu", Status.WARN, "x", hosts=["a"], remedy="ip link set ...")
    assert with_stage_fixes([mtu], "inv.yaml")[0].remedy == "ip link set ..."  # no role for it


def _report(*findings: Finding) -> Report:
    return Report("check", "inv.yaml", list(findings), {})


def test_fix_plan_lists_the_fixes_not_remedy_text_that_reads_like_a_command() -> None:
    """A remedy is free text (a stage may quote what a node said): one that starts like a
    provisioning command must not become a line of the plan; a fix always does."""
    lookalike = Finding("net.mtu", Status.WARN, "x", hosts=["a"],
                        remedy="clusterkit provision /tmp/evil.yaml --tags base")  # fmt: skip
    fixed = Finding("gpu.persistence", Status.WARN, "x", hosts=["a"], remedy="by hand",
                    fix=Fix(("nvidia",), ("a",)))  # fmt: skip
    passing = Finding("env.shm", Status.OK, "x", fix=Fix(("shm",), ("b",)))
    plan = fix_plan(_report(lookalike, fixed, passing, fixed))
    assert plan == ["clusterkit provision inv.yaml --tags nvidia --limit a"]


def test_fix_plan_is_empty_without_an_inventory_to_name() -> None:
    fixed = Finding("env.shm", Status.WARN, "x", hosts=["a"], fix=Fix(("shm",), ("a",)))
    assert fix_plan(Report("check", None, [fixed], {})) == []


def test_static_remedies_are_their_fixes_commands() -> None:
    """What users read and what --fix-plan runs come from the same Fix."""
    findings = static_findings(healthy(1, node2="env-bad"), Expectations(), "inv.yaml")
    fixes = {f.id: (f, f.fix) for f in findings if f.fix}
    assert {"env.shm", "env.memlock"} <= set(fixes)
    for finding, fix in fixes.values():
        assert finding.remedy == fix.command("inv.yaml")
        assert fix.hosts == tuple(finding.hosts) == ("node2",)


def _on(*hosts: str) -> dict[str, HostEntry]:
    return {host: HostEntry(address=host, reachable=True) for host in hosts}


def test_fix_plan_is_the_fewest_commands_each_once_in_the_playbooks_order() -> None:
    """One firewall fault seen from two stages (`--limit node1` and all four) is one command;
    tags on the same hosts share one; base runs before the roles that need it."""
    findings = [
        Finding("net.firewall", Status.FAIL, "x", hosts=["node1"],
                fix=Fix(("firewall",), ("node1",))),
        Finding("net.rendezvous", Status.FAIL, "x", hosts=["node1", "node2", "node3", "node4"],
                fix=Fix(("firewall",), ("node1", "node2", "node3", "node4"))),
        Finding("env.shm", Status.WARN, "x", hosts=["node3"], fix=Fix(("shm",), ("node3",))),
        Finding("env.memlock", Status.WARN, "x", hosts=["node3"], fix=Fix(("limits",), ("node3",))),
        Finding("env.clock", Status.WARN, "x", hosts=["node2"], fix=Fix(("time",), ("node2",))),
        Finding("env.base", Status.FAIL, "x", hosts=["node2"], fix=Fix(("base",), ("node2",))),
    ]  # fmt: skip
    report = Report("check", "inv.yaml", findings, _on("node1", "node2", "node3", "node4"))
    assert fix_plan(report) == [
        "clusterkit provision inv.yaml --tags base,time --limit node2",
        "clusterkit provision inv.yaml --tags limits,shm --limit node3",
        "clusterkit provision inv.yaml --tags firewall --limit node1,node2,node3,node4",
    ]


def test_check_fix_plan_prints_the_plan_and_nothing_else(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    done = run_cli(["check", str(inventory), "--skip", "network,bench,image", "--fix-plan"])
    assert done.status in (0, 1), done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith(f"clusterkit provision {inventory} --tags ") for line in lines)
    assert len(lines) == len(set(lines)) and "verdict:" not in done.stdout
    assert "clusterkit: fix plan: " in done.stderr
