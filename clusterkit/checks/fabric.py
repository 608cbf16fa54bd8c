"""The fabric inside and between nodes: NVLink links and InfiniBand ports, and the container
toolkit a GPU image needs. Pure functions over the probe's facts."""

from __future__ import annotations

from collections import Counter

from clusterkit.checks.links import (
    ib_port_findings,
    inactive_links,
    nvlink_down_evidence,
    nvlink_error_findings,
)
from clusterkit.checks.model import Finding, Fix, Status, over_hosts, per_host, with_command
from clusterkit.checks.parity import Facts, parity_finding, sole_majority
from clusterkit.facts import HostFacts, collected


def nvlink_value(f: HostFacts) -> str | None:
    """'8 GPUs x 18 links' (active links per GPU, the weakest GPU's), 'none', or None when
    nvidia-smi did not answer or the node has no GPU."""
    active = collected(f.get("nvlink")).get("active_links")
    if not active:
        return None
    return f"{len(active)} GPUs x {min(active)} links" if min(active) else "none"


def infiniband_value(f: HostFacts) -> str | None:
    """The node's RDMA ports by state and rate, e.g. '4x ACTIVE 400 Gb/s'; None without any."""
    ports = Counter(
        (str(port.get("state") or "?").upper(), port.get("rate_gbps"))
        for device in collected(f.get("infiniband")).get("devices") or []
        for port in device.get("ports") or []
    )
    if not ports:
        return None
    return ", ".join(
        f"{count}x {state} {rate:g} Gb/s" if rate else f"{count}x {state}"
        for (state, rate), count in sorted(ports.items(), key=lambda item: str(item[0]))
    )


def fabric_findings(facts: Facts, image: str | None, inventory_path: str | None) -> list[Finding]:
    """Links and ports on every node; with a cluster image, its container toolkit (a fix
    shows its provisioning command for `inventory_path`)."""
    findings = [
        parity_finding(
            "parity.nvlink",
            "NVLink (active links per GPU)",
            {h: v for h, f in facts.items() if (v := nvlink_value(f)) is not None},
        ),
        parity_finding(
            "parity.infiniband",
            "InfiniBand/RoCE ports",
            {h: v for h, f in facts.items() if (v := infiniband_value(f)) is not None},
        ),
        _links_down(facts),
        *nvlink_error_findings(facts),
        *ib_port_findings(facts),
    ]
    if image:
        findings.append(with_command(_container_toolkit(facts), inventory_path))
    return findings


def node_fabric_findings(facts: Facts) -> list[Finding]:
    """The fabric checks one node can judge alone (node-check): NVLink links down where its
    other GPUs have them up, NVLink error counters, its RDMA ports. No parity: that needs
    peers."""
    return [_links_down(facts), *nvlink_error_findings(facts), *ib_port_findings(facts, alone=True)]


def _links_down(facts: Facts) -> Finding:
    """fabric.nvlink-down: a link `<inactive>` where a peer has it up (links.inactive_links)."""
    checked = [
        h for h, f in facts.items() if max(collected(f.get("nvlink")).get("active_links") or [0])
    ]
    if not checked:
        return Finding("fabric.nvlink-down", Status.SKIP, "not checked: no node reports NVLink")
    down = {host: nvlink_down_evidence(facts, host, links)
            for host, links in inactive_links(facts).items()}  # fmt: skip
    return over_hosts(
        "fabric.nvlink-down",
        down,
        sorted(set(checked) | set(down), key=list(facts).index),
        ok="every NVLink link that is up on its peers is up on every GPU",
        failed="NVLink links down (traffic takes the remaining links or PCIe: slower "
        "all-reduce, NCCL may hang on some topologies): " + per_host(down),
        remedy="nvidia-smi nvlink -e for error counters; check the fabric manager "
        "(`systemctl status nvidia-fabricmanager`) when every link of a node is down; reset the "
        "GPUs or drain the node (a reseat or an NVSwitch fault)",
    )


def _container_toolkit(facts: Facts) -> Finding:
    """docker.container-toolkit: a GPU node that runs the cluster image needs the NVIDIA
    container runtime, or `docker run --gpus` fails."""
    missing: dict[str, str] = {}
    checked = []
    for host, f in facts.items():
        docker = collected(f.get("docker"))
        if not collected(f.get("gpus")).get("count") or not docker:
            continue
        checked.append(host)
        runtime = docker.get("nvidia_container_runtime") or docker.get("nvidia_ctk")
        if not docker.get("docker"):
            missing[host] = "docker not found"
        elif not runtime and "nvidia" not in (docker.get("runtimes") or []):
            missing[host] = "no nvidia-container-runtime / nvidia-ctk"
    if not checked:
        return Finding(
            "docker.container-toolkit", Status.SKIP, "not checked: no GPU node reported docker"
        )
    versions = {
        host: version
        for host in checked
        if host not in missing
        and (version := collected(facts[host].get("docker")).get("nvidia_ctk_version"))
    }
    if not missing and len(set(versions.values())) > 1:
        agreed, common = sole_majority(versions)
        if not agreed:  # 1 against 1: no node is the odd one
            return Finding(
                "docker.container-toolkit",
                Status.WARN,
                "NVIDIA container toolkit differs across GPU nodes and no version has a "
                "majority: " + per_host(versions),
                found=versions,
                remedy="install the same nvidia-container-toolkit version on every GPU node",
            )
        odd = {host: version for host, version in versions.items() if version != common}
        return Finding(
            "docker.container-toolkit",
            Status.WARN,
            f"NVIDIA container toolkit differs across GPU nodes (most run {common}): "
            + per_host(odd),
            hosts=list(odd),
            expected=common,
            found=odd,
            remedy=f"install nvidia-container-toolkit {common} on {', '.join(odd)}",
            fix=Fix(("container-toolkit",), tuple(odd)),
        )
    return over_hosts(
        "docker.container-toolkit",
        missing,
        checked,
        ok="the NVIDIA container toolkit is installed on every GPU node",
        failed="the cluster image cannot get GPUs (docker run --gpus fails): " + per_host(missing),
        remedy="install the NVIDIA container toolkit (nvidia-ctk runtime configure)",
        fix_tag="container-toolkit",
    )
