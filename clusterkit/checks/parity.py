"""Parity across nodes: every rank of a job must see the same stack. Pure functions."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Literal

from clusterkit.checks.model import Finding, Fix, Status, over_hosts
from clusterkit.checks.registry import CheckId
from clusterkit.facts import FactsByHost, HostFacts, collected
from clusterkit.words import counted

Facts = FactsByHost
Extractor = Callable[[HostFacts], object]
FirmwareField = Literal["vbios_version", "inforom.img"]


def _gpu_models(f: HostFacts) -> str | None:
    names = sorted({d.get("name") or "?" for d in collected(f.get("gpus")).get("devices", [])})
    return ", ".join(names) or None


def nccl_version(f: HostFacts) -> str | None:
    """The NCCL torch actually loads when it was imported, else the installed NCCL wheel."""
    torch = collected(f.get("torch"))
    return torch.get("nccl") or torch.get("nccl_wheel")


def torch_cuda(f: HostFacts) -> str | None:
    torch = collected(f.get("torch"))
    if not torch.get("present"):
        return None
    hip = torch.get("hip")
    return torch.get("cuda") or (f"rocm {hip}" if hip else "cpu")


def _gpu_count(f: HostFacts) -> int | None:
    gpus = collected(f.get("gpus"))
    return gpus.get("count") if gpus else None


# (check id, what, extractor, playbook tag that fixes a mismatch or None)
PARITY: tuple[tuple[CheckId, str, Extractor, str | None], ...] = (
    ("parity.driver", "NVIDIA driver", lambda f: collected(f.get("gpus")).get("driver"), "nvidia"),
    (
        "parity.cuda-driver",
        "CUDA version the driver supports",
        lambda f: collected(f.get("gpus")).get("cuda_driver"),
        "nvidia",
    ),
    ("parity.gpu-model", "GPU model", _gpu_models, None),
    ("parity.gpu-count", "GPU count", _gpu_count, None),
    ("parity.torch", "torch", lambda f: collected(f.get("torch")).get("version"), None),
    ("parity.torch-cuda", "torch CUDA build", torch_cuda, None),
    ("parity.nccl", "NCCL", nccl_version, None),
    ("parity.python", "Python", lambda f: collected(f.get("python")).get("version"), None),
    ("parity.kernel", "kernel", lambda f: collected(f.get("system")).get("kernel"), None),
)


def sole_majority(values: Mapping[str, Any]) -> tuple[bool, Any]:
    """(True, the value) when one value is more common than every other: only then are the
    hosts that differ from it odd. A tie (1 against 1, 2 against 2) has no majority, and
    inventory order must not decide which node is blamed. The one majority rule: the
    checks and the network stage's findings all compare with it."""
    counts = Counter(values.values()).most_common(2)
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return False, None
    return True, counts[0][0]


def parity_finding(
    check_id: CheckId,
    what: str,
    values: Mapping[str, Any],
    remedy: str | None = None,
) -> Finding:
    """Compare one value across hosts; name the odd hosts against the majority. With no
    majority the hosts disagree and none is named: a problem of the whole set."""
    if not values:
        return Finding(check_id, Status.SKIP, f"{what}: no host reports it")
    found, expected = sole_majority(values)
    if not found:
        return Finding(
            check_id,
            Status.FAIL,
            f"{what} differs and no value has a majority: "
            + "; ".join(f"{host} has {value}" for host, value in values.items()),
            found=dict(values),
            remedy=remedy or "make every node the same (the image or provisioning pins it)",
        )
    odd = {host: value for host, value in values.items() if value != expected}
    described = ", ".join(f"{host} has {value}" for host, value in odd.items())
    everyone, same = counted(len(values), "host"), len(values) - len(odd)
    return over_hosts(
        check_id,
        odd,
        list(values),
        ok=f"{what}: {expected} on {'all ' if len(values) > 1 else ''}{everyone}",
        failed=f"{what} differs: {counted(same, 'host')} {'has' if same == 1 else 'have'} "
        f"{expected}; {described}",
        expected=expected,
        remedy=remedy,
    )


def parity_findings(facts: Facts) -> list[Finding]:
    findings = []
    for check_id, what, extract, tag in PARITY:
        values = {host: extract(f) for host, f in facts.items()}
        values = {host: value for host, value in values.items() if value is not None}
        finding = parity_finding(check_id, what, values)
        if finding.status is Status.FAIL and tag:
            finding.fix = Fix((tag,), tuple(finding.hosts or values))
        findings.append(finding)
    return findings


# -- GPU firmware -----------------------------------------------------------------------------
# Differences warn (a failure under --strict): a job runs across them, but a fleet is flashed
# to one image, and azurehpc-health-checks' check_vbios_version fails a node whose VBIOS is not
# the expected one (FaultCode NHC2001).
FIRMWARE: tuple[tuple[CheckId, str, FirmwareField], ...] = (
    ("parity.vbios", "GPU VBIOS", "vbios_version"),
    ("parity.inforom", "GPU InfoROM image", "inforom.img"),
)
FIRMWARE_REMEDY = (
    "flash the odd nodes' GPUs to the fleet's firmware with the vendor's update tool "
    "(`nvidia-smi -q | grep -e 'VBIOS Version' -e 'Image Version'` shows each GPU's), or "
    "leave them out of the job"
)


def gpu_firmware(f: HostFacts, field: FirmwareField) -> str | None:
    """The node's GPU firmware versions of one kind, sorted and comma-joined (GPUs of one node
    that differ show as both); None where no GPU reports it (an older probe, `[N/A]`)."""
    devices = collected(f.get("gpus")).get("devices", [])
    return ", ".join(sorted({str(v) for d in devices if (v := d.get(field))})) or None


def firmware_parity_findings(facts: Facts) -> list[Finding]:
    """parity.vbios, parity.inforom: as every parity check, but a difference warns; no
    finding where no node reports the version (no GPU, an older probe)."""
    findings = []
    for check_id, what, field in FIRMWARE:
        values = {host: v for host, f in facts.items() if (v := gpu_firmware(f, field))}
        if not values:
            continue
        finding = parity_finding(check_id, what, values, FIRMWARE_REMEDY)
        if finding.status is Status.FAIL:
            finding = dataclasses.replace(finding, status=Status.WARN)
        findings.append(finding)
    return findings
