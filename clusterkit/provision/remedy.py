"""The provisioning command that fixes a finding: the same inventory, one playbook tag."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # clusterkit.checks imports this module
    from clusterkit.checks.model import Finding

# Playbook tags (playbooks/site.yml) that `clusterkit provision --tags` accepts.
TAGS = (
    "base",
    "time",
    "docker",
    "nvidia",
    "container-toolkit",
    "limits",
    "shm",
    "firewall",
    "hosts",
    "image",
)
# Findings of the network and image stages that a playbook role fixes, by check id. (The
# static checks name their tag where they are built, see clusterkit/checks.)
STAGE_FIXES = {
    "net.mesh": "firewall",  # the firewall role accepts all TCP between cluster nodes
    "net.rendezvous": "firewall",
    "net.firewall": "firewall",
    "net.master-resolve": "hosts",  # the hosts role maps every node to its fabric address
    "net.master-address": "hosts",
    "net.hostname-loopback": "hosts",  # ... and drops 127.x lines naming the node
    "image.present": "image",  # the image role pulls clusterkit.image
    "image.driver": "nvidia",
}
BY_HAND = "; or by hand: "
NEEDS_FIX = ("fail", "warn", "error")  # Status values


def provision_command(inventory_path: str | None, tag: str, hosts: Sequence[str]) -> str | None:
    if inventory_path is None or tag not in TAGS:
        return None
    argv = ["clusterkit", "provision", inventory_path, "--tags", tag]
    if hosts:
        argv += ["--limit", ",".join(hosts)]
    return shlex.join(argv)


def command_of(remedy: str | None) -> str | None:
    """The provisioning command a remedy starts with, without the by-hand alternative."""
    if not remedy or not remedy.startswith("clusterkit provision "):
        return None
    return remedy.split(BY_HAND, 1)[0]


def with_stage_fixes(findings: Iterable[Finding], inventory_path: str | None) -> list[Finding]:
    """Stage findings a playbook fixes get its exact command first, for the hosts they name;
    what the stage said to do by hand follows."""
    fixed = []
    for finding in findings:
        tag = STAGE_FIXES.get(finding.id)
        command = provision_command(inventory_path, tag, finding.hosts) if tag else None
        if command and finding.status in NEEDS_FIX and not command_of(finding.remedy):
            remedy = command + (BY_HAND + finding.remedy if finding.remedy else "")
            finding = dataclasses.replace(finding, remedy=remedy)
        fixed.append(finding)
    return fixed
