"""Xid (GPU) and SXid (NVSwitch) events from each node's kernel log, classified with NVIDIA's
Xid catalog (clusterkit/data/xid_catalog.json): a GPU reset, a reboot or a support case fails
the node; an application fault or an informational code warns; an unknown code warns."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypedDict

from clusterkit.checks.model import Finding, Status, per_host
from clusterkit.checks.parity import Facts
from clusterkit.facts import GpuDevice, HostFacts, KernelEvent, collected

# What each action asks of a person, most drastic last: a node's worst decides its remedy.
ACTIONS = ("app", "update", "reset", "reboot", "replace")
NEEDS = {
    "app": "no node action",
    "update": "needs driver update",
    "reset": "needs GPU reset",
    "reboot": "needs reboot",
    "replace": "needs service/RMA",
}
# Xid 154 names the recovery action the driver wants in its text.
RECOVERY_ACTIONS = (("reset", re.compile(r"reset", re.I)), ("reboot", re.compile(r"reboot", re.I)))
UNKNOWN_BUCKET = "UNKNOWN"
BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}")


@dataclass(frozen=True)
class Verdict:
    mnemonic: str
    bucket: str  # the catalog's immediate action, or UNKNOWN
    severity: Status
    action: str  # one of ACTIONS


@cache
def catalog() -> dict[str, Any]:
    text = resources.files("clusterkit.data").joinpath("xid_catalog.json").read_text()
    table: dict[str, Any] = json.loads(text)
    return table


def classify(kind: str, code: int, text: str = "") -> Verdict:
    """What NVIDIA's catalog says about one event (kind: xid or sxid)."""
    table = catalog()
    row = table[kind].get(str(code))
    if row is None:
        return Verdict("not in the catalog", UNKNOWN_BUCKET, Status.WARN, "app")
    bucket = table["buckets"][row["immediate"]]
    if kind == "xid" and code == 154:
        for action, pattern in RECOVERY_ACTIONS:
            if pattern.search(text):
                return Verdict(row["mnemonic"], row["immediate"], Status.FAIL, action)
    severity = Status.FAIL if bucket["severity"] == "fail" else Status.WARN
    return Verdict(row["mnemonic"], row["immediate"], severity, bucket["action"])


def normal_bus_id(bus_id: str | None) -> str | None:
    """nvidia-smi's `00000000:38:00.0` as the kernel log's `0000:38:00`."""
    parts = (bus_id or "").lower().split(":")
    if len(parts) != 3:
        return None
    return f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2].split('.')[0]}"


class EventGroup(TypedDict):
    """The events of one (device, code), as a finding's `found` shows them."""

    pci: str
    code: int
    count: int
    last: str | None
    text: str | None
    index: str | None  # the GPU's, where nvidia-smi lists the bus id
    uuid: str | None
    mnemonic: str
    bucket: str
    status: str
    action: str


def _gpus_by_bus(facts: HostFacts) -> dict[str, GpuDevice]:
    devices = collected(facts.get("gpus")).get("devices") or []
    return {bus: device for device in devices if (bus := normal_bus_id(device.get("pci.bus_id")))}


def _events_of(facts: HostFacts, kind: str) -> list[KernelEvent]:
    events = collected(facts.get("kernel_log")).get("events") or []
    return [e for e in events if e.get("kind") == kind]


def group_events(facts: HostFacts, kind: str) -> list[EventGroup]:
    """One entry per (device, code): count, last time and text, the GPU's index and UUID
    where nvidia-smi lists the bus id, and the catalog's verdict; worst first."""
    gpus = _gpus_by_bus(facts)
    events: dict[tuple[str, int], list[KernelEvent]] = {}
    for event in _events_of(facts, kind):
        events.setdefault((str(event.get("pci")), event.get("code", 0)), []).append(event)
    groups = []
    for (pci, code), seen in events.items():
        text = seen[-1].get("text")
        verdict = classify(kind, code, text or "")
        gpu = gpus.get(pci, {})
        groups.append(
            EventGroup(
                pci=pci,
                code=code,
                count=len(seen),
                last=seen[-1].get("time"),
                text=text,
                index=gpu.get("index"),
                uuid=gpu.get("uuid"),
                mnemonic=verdict.mnemonic,
                bucket=verdict.bucket,
                status=verdict.severity.value,
                action=verdict.action,
            )
        )
    return sorted(
        groups,
        key=lambda g: (g["status"] != "fail", -ACTIONS.index(g["action"]), g["pci"], g["code"]),
    )


def _device(group: EventGroup, kind: str) -> str:
    if kind == "sxid":
        return f"NVSwitch {group['pci']}"
    if group.get("index") is None:
        return f"GPU {group['pci']} (not listed by nvidia-smi)"
    uuid = f", {group['uuid']}" if group.get("uuid") else ""
    return f"GPU {group['index']} ({group['pci']}{uuid})"


def describe_group(group: EventGroup, kind: str) -> str:
    label = "SXid" if kind == "sxid" else "Xid"
    last = f", last {group['last']}" if group.get("last") else ""
    return (
        f"{_device(group, kind)}: {label} {group['code']} {group['mnemonic']} "
        f"x{group['count']}{last} ({group['bucket']})"
    )


def remedy_for(group: EventGroup, kind: str) -> str:
    """What to do about one device, by the catalog's action."""
    action = group["action"]
    gpu = f"-i {group['index']}" if group.get("index") is not None else f"-i {group['pci']}"
    if action == "reset" and kind == "xid":
        return (
            f"drain the node, stop what uses the GPU, reset it: nvidia-smi -r {gpu} "
            "(reboot if the reset fails); replace the GPU if the Xid returns"
        )
    if action in ("reset", "reboot"):
        return "drain the node and reboot it; replace the part if the event returns"
    if action == "replace":
        return (
            "drain the node and open a support case / RMA with the GPU's serial and UUID "
            "(nvidia-smi -q) and this log line"
        )
    if action == "update":
        return "update the NVIDIA driver and firmware (provision --tags nvidia)"
    return "check the application that faulted; no node action unless it repeats"


def _host_finding(check_id: str, host: str, groups: list[EventGroup], kind: str) -> Finding:
    worst = groups[0]
    status = Status.FAIL if worst["status"] == "fail" else Status.WARN
    lines = "; ".join(describe_group(g, kind) for g in groups)
    summary = NEEDS[worst["action"]] if status is Status.FAIL else "application-level or unknown"
    return Finding(
        check_id,
        status,
        f"{host}: {summary}: {lines}",
        hosts=[host],
        found={host: groups},
        remedy=remedy_for(worst, kind),
    )


def _events_findings(facts: Facts, kind: str, check_id: str, ok: str) -> list[Finding]:
    findings: list[Finding] = []
    clean: list[str] = []
    blind: dict[str, str] = {}
    for host, host_facts in facts.items():
        log = host_facts.get("kernel_log")
        if log is None:
            continue
        if "error" in log:
            if kind == "xid" and collected(host_facts.get("gpus")).get("count"):
                blind[host] = str(log["error"])
            continue
        groups = group_events(host_facts, kind)
        if groups:
            findings.append(_host_finding(check_id, host, groups, kind))
        else:
            clean.append(host)
    if blind:
        findings.append(
            Finding(
                check_id,
                Status.WARN,
                "kernel log unreadable, GPU faults not checked: " + per_host(blind),
                hosts=list(blind),
                found=blind,
                remedy="run as root, or let the user read the kernel log "
                "(sysctl kernel.dmesg_restrict=0, or the systemd-journal group for journalctl)",
            )
        )
    if clean and not findings:
        findings.append(Finding(check_id, Status.OK, ok, hosts=clean))
    if not findings:
        findings.append(Finding(check_id, Status.SKIP, "not checked: no host read its kernel log"))
    return findings


def xid_findings(facts: Facts) -> list[Finding]:
    """gpu.xid and nvswitch.sxid over every host whose kernel log was read."""
    return _events_findings(
        facts, "xid", "gpu.xid", "no Xid in the kernel log since boot"
    ) + _events_findings(facts, "sxid", "nvswitch.sxid", "no SXid in the kernel log since boot")


def drain_notes(findings: list[Finding]) -> list[str]:
    """Short words for a Slurm drain reason: `GPU 1 0000:38:00 Xid 79 needs reboot` for each
    failing device. Only catalog-made text and validated ids: node log text never reaches it."""
    notes = []
    for finding in findings:
        if finding.id not in ("gpu.xid", "nvswitch.sxid") or finding.status is not Status.FAIL:
            continue
        kind = "sxid" if finding.id == "nvswitch.sxid" else "xid"
        for groups in (finding.found or {}).values():
            for group in groups:
                if group.get("status") != "fail" or group.get("action") not in NEEDS:
                    continue
                pci = str(group.get("pci"))
                index = str(group.get("index"))
                where = "NVSwitch" if kind == "sxid" else f"GPU {index if index.isdigit() else '?'}"
                label = "SXid" if kind == "sxid" else "Xid"
                bus = pci if BUS_ID.fullmatch(pci) else "?"
                code = int(group.get("code") or 0)
                notes.append(f"{where} {bus} {label} {code} {NEEDS[group['action']]}")
    return notes
