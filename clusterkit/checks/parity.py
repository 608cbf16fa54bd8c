"""Parity across nodes: every rank of a job must see the same stack. Pure functions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from clusterkit.checks.model import Finding, Fix, Status, over_hosts
from clusterkit.facts import FactsByHost, HostFacts, collected
from clusterkit.words import counted

Facts = FactsByHost
Extractor = Callable[[HostFacts], object]


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
PARITY: tuple[tuple[str, str, Extractor, str | None], ...] = (
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


def majority(values: Mapping[str, Any]) -> Any:
    """The most common value; ties go to the value seen first in inventory order."""
    counts = Counter(values.values())
    best = max(counts.values())
    return next(v for v in values.values() if counts[v] == best)


def parity_finding(
    check_id: str,
    what: str,
    values: Mapping[str, Any],
    remedy: str | None = None,
) -> Finding:
    """Compare one value across hosts; name the odd hosts against the majority."""
    if not values:
        return Finding(check_id, Status.SKIP, f"{what}: no host reports it")
    expected = majority(values)
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
            finding.fix = Fix((tag,), tuple(finding.hosts))
        findings.append(finding)
    return findings
