"""The software stack on each node: pins from `expect:`, torch present, driver vs CUDA."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from clusterkit.checks.model import Finding, Fix, Status, over_hosts, per_host
from clusterkit.checks.parity import Facts, nccl_version
from clusterkit.checks.registry import CheckId
from clusterkit.facts import HostFacts, TorchFacts, collected, error_of
from clusterkit.inventory.model import Expectations
from clusterkit.versions import (
    Constraint,
    DriverRequirement,
    compare,
    driver_requirement,
    parse_version,
)

# (the Expectations field, its check, what it pins, how a host reports it, the fix's tag)
PINS: tuple[tuple[str, CheckId, str, Callable[[HostFacts], str | None], str | None], ...] = (
    (
        "driver",
        "expect.driver",
        "NVIDIA driver",
        lambda f: collected(f.get("gpus")).get("driver"),
        "nvidia",
    ),
    ("torch", "expect.torch", "torch", lambda f: collected(f.get("torch")).get("version"), None),
    ("nccl", "expect.nccl", "NCCL", nccl_version, None),
    (
        "python",
        "expect.python",
        "Python",
        lambda f: collected(f.get("python")).get("version"),
        None,
    ),
)


def expectation_findings(facts: Facts, expect: Expectations) -> list[Finding]:
    """One finding per pin that is set; a host that cannot report the value fails the pin."""
    findings = []
    if expect.gpus_per_node is not None:
        counts = {h: collected(f.get("gpus")).get("count") for h, f in facts.items()}
        findings.append(
            _pin(
                "expect.gpus_per_node",
                "GPUs per node",
                str(expect.gpus_per_node),
                counts,
                lambda v: v == expect.gpus_per_node,
                None,
            )
        )
    for key, check_id, what, extract, tag in PINS:
        wanted = getattr(expect, key)
        if wanted is None:
            continue
        constraint = Constraint(str(wanted))
        values = {h: extract(f) for h, f in facts.items()}
        findings.append(_pin(check_id, what, str(wanted), values, constraint.matches, tag))
    if expect.cuda is not None:
        findings.append(_cuda_pin(facts, str(expect.cuda)))
    return findings


def _pin(
    check_id: CheckId,
    what: str,
    wanted: str,
    values: Mapping[str, Any],
    ok: Callable[[Any], bool],
    tag: str | None,
) -> Finding:
    bad = {h: v for h, v in values.items() if not ok(v)}
    described = ", ".join(f"{h} has {v if v is not None else 'none'}" for h, v in bad.items())
    return over_hosts(
        check_id,
        bad,
        list(values),
        ok=f"{what} matches {wanted} on every host",
        failed=f"{what} does not match {wanted}: {described}",
        expected=wanted,
        fix_tag=tag,
    )


def _cuda_pin(facts: Facts, wanted: str) -> Finding:
    """The pin names the CUDA version of torch's build (torch.version.cuda). A host passes
    when its torch is a CUDA build matching the pin and its driver can run that build as
    compat.driver-cuda judges: minor-version and forward compatibility count as running
    (compat.driver-cuda warns about them); a driver that cannot run it fails the pin too."""
    constraint = Constraint(wanted)
    bad: dict[str, str] = {}
    for host, f in facts.items():
        torch = collected(f.get("torch"))
        torch_cuda = torch.get("cuda")
        driver = collected(f.get("gpus")).get("driver")
        if torch_cuda is not None and not constraint.matches(torch_cuda):
            bad[host] = f"torch built for CUDA {torch_cuda}"
        elif torch_cuda is None:
            bad[host] = "torch is a CPU build" if torch.get("present") else "no torch"
        elif driver:
            status, why = driver_verdict(
                driver, driver_requirement(torch_cuda), torch.get("cuda_available")
            )
            if status is Status.FAIL:
                bad[host] = why
    return over_hosts(
        "expect.cuda",
        bad,
        list(facts),
        ok=f"torch's CUDA build matches {wanted} and the driver runs it on every host",
        failed=f"CUDA {wanted} expected: {per_host(bad)}",
        expected=wanted,
    )


def torch_findings(facts: Facts, *, machine_only: bool = False) -> list[Finding]:
    """torch for the job's Python on every host. `machine_only`: the check of this machine
    alone, where a missing torch says what the machine can run (a warning)."""
    if not facts:
        return [Finding("torch.present", Status.SKIP, "not checked: no host reported facts")]
    missing: dict[str, str] = {}
    broken: dict[str, str] = {}
    for host, f in facts.items():
        torch = f.get("torch") or TorchFacts()
        if (error := error_of(torch)) is not None:
            broken[host] = error
        elif not torch.get("present"):
            missing[host] = torch.get("interpreter", "python")
        elif import_error := torch.get("import_error"):
            broken[host] = import_error
    findings = []
    if missing and machine_only:
        findings.append(_machine_without_torch(missing))
    elif missing:
        where = ", ".join(f"{h} ({interp})" for h, interp in missing.items())
        findings.append(
            _torch_missing(
                missing,
                Status.FAIL,
                f"torch is not installed for the job's Python on {where}",
                remedy="install the same torch on every node, or run the job in the cluster image; "
                "set ansible_python_interpreter (or --python) to the Python the job uses",
            )
        )
    else:
        findings.append(
            Finding(
                "torch.present", Status.OK, "torch is installed on every host", hosts=list(facts)
            )
        )
    findings.extend(_numpy_missing(facts))
    if broken:
        findings.append(
            Finding(
                "torch.import",
                Status.FAIL,
                "torch fails to load: " + per_host(broken),
                hosts=list(broken),
                found=broken,
            )
        )
    return findings


def _numpy_missing(facts: Facts) -> list[Finding]:
    """torch.numpy: torch without numpy runs, until the job moves objects between ranks."""
    no_numpy = [
        host
        for host, f in facts.items()
        if (torch := f.get("torch") or TorchFacts()).get("present") and torch.get("numpy") is False
    ]
    if not no_numpy:
        return []
    return [
        Finding(
            "torch.numpy",
            Status.WARN,
            "numpy is missing for the job's Python on " + ", ".join(no_numpy) + ": "
            "torch.distributed's all_gather_object / broadcast_object_list and "
            "tensor.numpy() fail there with 'Numpy is not available'",
            hosts=no_numpy,
            expected="numpy importable",
            found="missing",
            remedy="install numpy beside torch on every node (or in the cluster image)",
        )
    ]


def _machine_without_torch(missing: Mapping[str, str]) -> Finding:
    interpreters = ", ".join(dict.fromkeys(missing.values()))
    return _torch_missing(
        missing,
        Status.WARN,
        f"torch missing for {interpreters}: install torch to run jobs here",
        remedy="install torch for that Python, or name the job's Python with --python PATH",
    )


def _torch_missing(
    missing: Mapping[str, str], status: Status, message: str, *, remedy: str
) -> Finding:
    """torch.present on the hosts where the job's Python (host -> interpreter) has no torch."""
    return Finding(
        "torch.present",
        status,
        message,
        hosts=list(missing),
        expected="torch importable",
        found="missing",
        remedy=remedy,
    )


def driver_verdict(
    driver: str, need: DriverRequirement, cuda_available: bool | None
) -> tuple[Status, str]:
    """Whether `driver` runs the CUDA build `need` describes, by NVIDIA's rules. What torch
    saw decides below the floor: a data-center driver with the cuda-compat package (NGC
    images) runs a newer CUDA through forward compatibility, and torch then reports CUDA
    available. The image stage and the expect.cuda pin use the same rules."""
    cuda = need.cuda
    if need.floor and compare(driver, need.floor) < 0:
        if cuda_available:
            return Status.WARN, (
                f"driver {driver} < {need.floor}: CUDA {cuda} runs only through forward "
                "compatibility (cuda-compat package; data-center GPUs only)"
            )
        seen = " (torch: CUDA not available)" if cuda_available is False else ""
        return Status.FAIL, f"driver {driver} < {need.floor} (CUDA {cuda} cannot run){seen}"
    if need.full and compare(driver, need.full) < 0:
        return Status.WARN, (f"driver {driver} < {need.full} (minor-version compatibility only)")
    if need.unknown:
        return Status.WARN, need.unknown + ": the driver's support is not known"
    return Status.OK, ""


def driver_cuda_findings(facts: Facts) -> list[Finding]:
    """Each node's driver against the CUDA its torch was built for (NVIDIA's table)."""
    verdicts: dict[Status, dict[str, str]] = {Status.FAIL: {}, Status.WARN: {}}
    checked: list[str] = []
    for host, f in facts.items():
        driver = collected(f.get("gpus")).get("driver")
        torch = collected(f.get("torch"))
        cuda = torch.get("cuda")
        if not driver or not cuda or not parse_version(cuda):
            continue
        checked.append(host)
        status, why = driver_verdict(driver, driver_requirement(cuda), torch.get("cuda_available"))
        if status in verdicts:
            verdicts[status][host] = why
    if not checked:
        return [
            Finding(
                "compat.driver-cuda",
                Status.SKIP,
                "no host has both an NVIDIA driver and a CUDA build of torch",
            )
        ]
    for status, lead in (
        (Status.FAIL, "driver too old for torch's CUDA"),
        (Status.WARN, "driver below full compatibility"),
    ):
        if bad := verdicts[status]:
            return [
                Finding(
                    "compat.driver-cuda",
                    status,
                    f"{lead}: {per_host(bad)}",
                    hosts=list(bad),
                    found=bad,
                    fix=Fix(("nvidia",), tuple(bad)),
                )
            ]
    return [
        Finding(
            "compat.driver-cuda",
            Status.OK,
            "every driver supports the CUDA build of torch",
            hosts=checked,
        )
    ]
