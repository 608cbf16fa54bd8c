"""Xid (GPU) and SXid (NVSwitch) events from each node's kernel log, classified with NVIDIA's
Xid catalog (clusterkit/data/xid_catalog.json): a GPU reset, a reboot or a support case fails
the node; an application fault or an informational code warns; an unknown code warns.
Severity named in the line (NVLink5 Xids, SXid records) and the cause of an Xid 45 refine the
catalog's verdict; an event from before the driver's last load (a reload done to recover the
GPU) no longer counts, and the finding says so."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypedDict

from clusterkit.checks.model import Finding, Status, per_host
from clusterkit.checks.parity import Facts
from clusterkit.checks.registry import CheckId
from clusterkit.escape import printable
from clusterkit.facts import DriverLoad, GpuDevice, HostFacts, KernelEvent, collected

# What each action asks of a person, most drastic last: a node's worst decides its remedy.
ACTIONS = ("app", "update", "reset", "reboot", "replace")
NEEDS = {
    "app": "no node action",
    "update": "needs driver update",
    "reset": "needs GPU reset",
    "reboot": "needs reboot",
    "replace": "needs service/RMA",
}
# Xid 154 names the recovery action the driver now wants: "GPU recovery action changed from
# 0x0 (None) to 0x1 (GPU Reset Required)", by NVML's nvmlDeviceGpuRecoveryAction_t code (the
# names differ between drivers: "PF FLR" and "OS Reboot" are 1 and 2 too). None: no action.
RECOVERY_TARGET = re.compile(r"\bto 0x(?P<code>[0-9a-fA-F]{1,2})\b")
RECOVERY_CODES = {1: "reset", 2: "reboot", 3: "reset", 4: "reset", 5: "reboot", 6: "reset"}
RECOVERY_CODES[7] = "reboot"
RECOVERY_ACTIONS = (("reset", re.compile(r"reset", re.I)), ("reboot", re.compile(r"reboot", re.I)))
UNKNOWN_BUCKET = "UNKNOWN"
NVLINK5_XIDS = range(144, 151)
CLEANUP_XID = 45  # "preemptive cleanup, due to previous errors": the cause is the Xid before
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


def classify(kind: str, code: int, text: str = "", fatal: bool | None = None) -> Verdict:
    """What NVIDIA's catalog says about one event (kind: xid or sxid), graded by the severity
    the line names where it names one (`fatal`)."""
    verdict = _catalog_verdict(kind, code, text)
    if fatal is None:
        return verdict
    if kind == "xid" and code in NVLINK5_XIDS:
        # The catalog's notes on Xid 144-150: a Nonfatal one needs no action unless it repeats.
        if fatal:
            return Verdict(verdict.mnemonic, verdict.bucket, Status.FAIL, "reset")
        return Verdict(verdict.mnemonic + " (Nonfatal)", "IGNORE", Status.WARN, "app")
    if kind == "sxid" and fatal and verdict.severity is not Status.FAIL:
        return Verdict(verdict.mnemonic + " (Fatal)", "RESET_FABRIC", Status.FAIL, "reboot")
    return verdict


def _catalog_verdict(kind: str, code: int, text: str) -> Verdict:
    table = catalog()
    row = table[kind].get(str(code))
    if row is None:
        return Verdict("not in the catalog", UNKNOWN_BUCKET, Status.WARN, "app")
    bucket = table["buckets"][row["immediate"]]
    if kind == "xid" and code == 154:
        action = recovery_action(text)
        if action == "none":
            return Verdict(row["mnemonic"] + " (to None)", "IGNORE", Status.WARN, "app")
        if action:
            return Verdict(row["mnemonic"], row["immediate"], Status.FAIL, action)
    severity = Status.FAIL if bucket["severity"] == "fail" else Status.WARN
    return Verdict(row["mnemonic"], row["immediate"], severity, bucket["action"])


def recovery_action(text: str) -> str | None:
    """The action an Xid 154 line changes to: reset, reboot, none, or None if unreadable."""
    target = RECOVERY_TARGET.search(text)
    if target is not None:
        code = int(target.group("code"), 16)
        return "none" if code == 0 else RECOVERY_CODES.get(code, "reset")  # a new one: act
    for action, pattern in RECOVERY_ACTIONS:
        if pattern.search(text):
            return action
    return None


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
    cause: int | None  # the hardware Xid an Xid 45 cleaned up after
    counted: bool  # False: seen before the driver's last load (status ok)


def _gpus_by_bus(facts: HostFacts) -> dict[str, GpuDevice]:
    devices = collected(facts.get("gpus")).get("devices") or []
    return {bus: device for device in devices if (bus := normal_bus_id(device.get("pci.bus_id")))}


def _events_of(facts: HostFacts, kind: str) -> list[KernelEvent]:
    events = collected(facts.get("kernel_log")).get("events") or []
    return sorted((e for e in events if e.get("kind") == kind), key=lambda e: e.get("at", 0))


def load_horizon(facts: HostFacts) -> DriverLoad | None:
    """The driver's last load, where the kernel log says one: what came before it no longer
    counts. A GPU's recovery (reset, driver reload) is judged from here on."""
    return collected(facts.get("kernel_log")).get("driver_load")


def _rank(verdict: Verdict) -> tuple[bool, int]:
    return (verdict.severity is Status.FAIL, ACTIONS.index(verdict.action))


def event_verdicts(
    events: list[KernelEvent], kind: str, since: int = 0
) -> list[tuple[KernelEvent, Verdict, int | None]]:
    """Each event's verdict, in log order. An Xid 45 (processes cleaned up after an earlier
    error) takes the verdict of the failing Xid before it on the same GPU, with its code; a
    driver load (at `since`) ends what an earlier Xid can cause."""
    last_fault: dict[str, tuple[int, Verdict]] = {}
    verdicts: list[tuple[KernelEvent, Verdict, int | None]] = []
    loaded = False
    for event in events:
        if not loaded and event.get("at", 0) >= since:
            loaded = True  # the first event since the load: nothing before it is a cause
            last_fault.clear()
        pci, code = str(event.get("pci")), event.get("code", 0)
        verdict = classify(kind, code, event.get("text") or "", event.get("fatal"))
        cause = last_fault.get(pci) if kind == "xid" and code == CLEANUP_XID else None
        if cause is not None:
            verdict = Verdict(
                f"{verdict.mnemonic} after Xid {cause[0]}",
                cause[1].bucket,
                Status.FAIL,
                cause[1].action,
            )
        elif verdict.severity is Status.FAIL:
            last_fault[pci] = (code, verdict)
        verdicts.append((event, verdict, cause[0] if cause else None))
    return verdicts


def group_events(facts: HostFacts, kind: str) -> list[EventGroup]:
    """One entry per (device, code, counted or not): count, last time and text, the GPU's
    index and UUID where nvidia-smi lists the bus id, and the worst verdict; worst first.
    Events before the driver's last load are grouped apart, status ok."""
    horizon = load_horizon(facts)
    since = horizon.get("at", 0) if horizon else 0
    seen: dict[tuple[str, int, bool], list[tuple[KernelEvent, Verdict, int | None]]] = {}
    for item in event_verdicts(_events_of(facts, kind), kind, since):
        key = (str(item[0].get("pci")), item[0].get("code", 0), item[0].get("at", 0) >= since)
        seen.setdefault(key, []).append(item)
    gpus = _gpus_by_bus(facts)
    groups = [_group(key, items, gpus.get(key[0], {})) for key, items in seen.items()]
    return sorted(
        groups,
        key=lambda g: (
            not g["counted"],
            g["status"] != "fail",
            -ACTIONS.index(g["action"]),
            g["pci"],
            g["code"],
        ),
    )


def _group(
    key: tuple[str, int, bool],
    items: list[tuple[KernelEvent, Verdict, int | None]],
    gpu: GpuDevice,
) -> EventGroup:
    pci, code, counted = key
    last, worst = items[-1][0], max((i[1] for i in items), key=_rank)
    cause = next((c for _, v, c in items if v == worst and c is not None), None)
    return EventGroup(
        pci=pci,
        code=code,
        count=len(items),
        last=last.get("time"),
        text=last.get("text"),
        index=gpu.get("index"),
        uuid=gpu.get("uuid"),
        mnemonic=worst.mnemonic,
        bucket=worst.bucket,
        status=worst.severity.value if counted else Status.OK.value,
        action=worst.action,
        cause=cause,
        counted=counted,
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


def stale_note(groups: list[EventGroup], kind: str, horizon: DriverLoad | None) -> str:
    """Why the events before the driver's last load no longer count, naming them."""
    old = [g for g in groups if not g["counted"]]
    if not old:
        return ""
    when = f" at {printable(horizon.get('time'))[:64]}" if horizon and horizon.get("time") else ""
    return (
        f"no longer counted, seen before the NVIDIA driver was loaded again{when} "
        "(a reload or GPU reset recovered the device): "
        + "; ".join(describe_group(g, kind) for g in old)
    )


def _host_finding(
    check_id: CheckId, host: str, groups: list[EventGroup], kind: str, horizon: DriverLoad | None
) -> Finding:
    worst = groups[0]
    note = stale_note(groups, kind, horizon)
    if not worst["counted"]:
        return Finding(check_id, Status.OK, f"{host}: {note}", hosts=[host], found={host: groups})
    status = Status.FAIL if worst["status"] == "fail" else Status.WARN
    lines = "; ".join(describe_group(g, kind) for g in groups if g["counted"])
    summary = NEEDS[worst["action"]] if status is Status.FAIL else "application-level or unknown"
    return Finding(
        check_id,
        status,
        f"{host}: {summary}: {lines}" + (f"; {note}" if note else ""),
        hosts=[host],
        found={host: groups},
        remedy=remedy_for(worst, kind),
    )


def _events_findings(facts: Facts, kind: str, check_id: CheckId, ok: str) -> list[Finding]:
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
            findings.append(_host_finding(check_id, host, groups, kind, load_horizon(host_facts)))
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
    if clean and all(f.status is Status.OK for f in findings):
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
