"""Remedies name playbook tags that exist, and every playbook tag is one provision accepts."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import PARITY
from clusterkit.checks.stack import PINS
from clusterkit.provision.remedy import BY_HAND, STAGE_FIXES, TAGS, command_of, with_stage_fixes

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "playbooks" / "site.yml"


def playbook_tags() -> set[str]:
    plays = yaml.safe_load(SITE.read_text())
    return {tag for play in plays for role in play.get("roles", []) for tag in role["tags"]}


def remedy_tags() -> set[str]:
    """Every tag a remedy can name: the check tables, the stage map, and each literal
    remedy("tag", ...) / "(playbook tag: X)" in the source."""
    tags = {tag for *_, tag in PARITY if tag} | {tag for *_, tag in PINS if tag}
    tags |= set(STAGE_FIXES.values())
    for path in (ROOT / "clusterkit").rglob("*.py"):
        text = path.read_text()
        tags |= set(re.findall(r"\bremedy\(\s*\"([\w-]+)\"", text))
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
    assert command_of(fixed.remedy) == (
        "clusterkit provision '/srv/my inventory.yaml' --tags firewall --limit node3"
    )


def test_image_driver_names_the_nvidia_role() -> None:
    finding = Finding("image.driver", Status.FAIL, "x", hosts=["a", "b"], stage="image",
                      remedy="upgrade the NVIDIA driver (playbook tag: nvidia)")  # fmt: skip
    (fixed,) = with_stage_fixes([finding], "inv.yaml")
    assert command_of(fixed.remedy) == "clusterkit provision inv.yaml --tags nvidia --limit a,b"


def test_no_command_without_an_inventory_or_for_passing_findings() -> None:
    assert with_stage_fixes([_firewall()], None)[0].remedy.startswith("on node3")
    assert command_of(with_stage_fixes([_firewall(Status.OK)], "inv.yaml")[0].remedy) is None
    mtu = Finding("net.mtu", Status.WARN, "x", hosts=["a"], remedy="ip link set ...")
    assert with_stage_fixes([mtu], "inv.yaml")[0].remedy == "ip link set ..."  # no role for it
