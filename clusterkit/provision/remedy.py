"""Which playbook fixes a stage's finding: the same inventory, one playbook tag."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from clusterkit.checks.model import NEEDS_FIX, Finding, Fix, with_command

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


def with_stage_fixes(findings: Iterable[Finding], inventory_path: str | None) -> list[Finding]:
    """Stage findings a playbook fixes get that fix, for the hosts they name, and its exact
    command first in the remedy; what the stage said to do by hand follows."""
    fixed = []
    for finding in findings:
        tag = STAGE_FIXES.get(finding.id)
        if tag and finding.fix is None and finding.status in NEEDS_FIX:
            finding = dataclasses.replace(finding, fix=Fix((tag,), tuple(finding.hosts)))
            finding = with_command(finding, inventory_path, then_by_hand=True)
        fixed.append(finding)
    return fixed
