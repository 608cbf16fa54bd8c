"""The driver's own verdict on each GPU after an unrecoverable error: nvidia-smi's
`reset_status.reset_required` and `reset_status.drain_and_reset_recommended` (drivers R530 to
R565; "Either of these being 'Yes' indicates that an unrecoverable error has occurred",
`nvidia-smi --help-query-gpu`). It holds whether or not the kernel log still has the Xid
(rotated out, unreadable, or before a driver reload), and it clears when the GPU is reset."""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status, per_host
from clusterkit.checks.parity import Facts
from clusterkit.checks.xid import BUS_ID, normal_bus_id
from clusterkit.escape import printable
from clusterkit.facts import GpuDevice, HostFacts, collected


def _flags(device: GpuDevice) -> list[tuple[str, str]]:
    """(the driver's answer, lower case, or "" for none; our words) per field."""
    return [
        (device.get("reset_status.reset_required") or "", "reset required"),
        (
            device.get("reset_status.drain_and_reset_recommended") or "",
            "drain and reset recommended",
        ),
    ]


def verdicts(device: GpuDevice) -> list[str]:
    """What the driver asks for this GPU (empty: nothing, or no verdict from this driver)."""
    return [words for value, words in _flags(device) if value.lower() == "yes"]


def _answered(device: GpuDevice) -> bool:
    return any(value.lower() in ("yes", "no") for value, _ in _flags(device))


def _devices(facts: HostFacts) -> list[GpuDevice]:
    return collected(facts.get("gpus")).get("devices") or []


def _label(device: GpuDevice) -> str:
    """`GPU 1 (00000000:38:00.0, GPU-...)`, each part printable and at most 64 characters."""
    parts = (device.get("index"), device.get("pci.bus_id"), device.get("uuid"))
    index, bus, uuid = (printable(part)[:64] for part in parts)
    return f"GPU {index} ({bus}, {uuid})"


def recovery_findings(facts: Facts) -> list[Finding]:
    """gpu.reset-required: fail where the driver asks for a reset, ok where every GPU's
    driver answered No; no finding where no driver gives this verdict (older or R570+)."""
    asked: dict[str, str] = {}
    clean: list[str] = []
    for host, host_facts in facts.items():
        devices = [d for d in _devices(host_facts) if _answered(d)]
        wanted = [f"{_label(d)}: {', '.join(verdicts(d))}" for d in devices if verdicts(d)]
        if wanted:
            asked[host] = "; ".join(wanted)
        elif devices:
            clean.append(host)
    findings = []
    if asked:
        findings.append(
            Finding(
                "gpu.reset-required",
                Status.FAIL,
                "the NVIDIA driver asks for a GPU reset after an unrecoverable error: "
                + per_host(asked),
                hosts=list(asked),
                found=asked,
                remedy="drain the node, stop what uses the GPU and reset it (nvidia-smi -r -i N), "
                "or reboot; replace the GPU if the error returns",
            )
        )
    if clean:
        findings.append(
            Finding(
                "gpu.reset-required", Status.OK, "no GPU reset asked for by the driver", hosts=clean
            )
        )
    return findings


def drain_notes(facts: HostFacts) -> list[str]:
    """`GPU 1 0000:38:00 driver: reset required` per GPU the driver asks a reset for: the
    index and bus id only where they have their shape, the words our own."""
    notes = []
    for device in _devices(facts):
        if not verdicts(device):
            continue
        index = str(device.get("index"))
        bus = normal_bus_id(device.get("pci.bus_id")) or "?"
        where = f"GPU {index if index.isdigit() else '?'} {bus if BUS_ID.fullmatch(bus) else '?'}"
        notes.append(f"{where} driver: {verdicts(device)[0]}")
    return notes
