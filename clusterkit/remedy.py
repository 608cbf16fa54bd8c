"""The provisioning command that fixes a finding: the same inventory, one playbook tag."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

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


def provision_command(inventory_path: str | None, tag: str, hosts: Sequence[str]) -> str | None:
    if inventory_path is None or tag not in TAGS:
        return None
    argv = ["clusterkit", "provision", inventory_path, "--tags", tag]
    if hosts:
        argv += ["--limit", ",".join(hosts)]
    return shlex.join(argv)
