"""The host's own devices and processes, read in the probe's round trip: NVMe drives' SMART
health (nvme-cli) and processes stuck in uninterruptible sleep. A node whose local disk is
failing loses checkpoints and datasets staged on it; a process stuck in the kernel (a hung
NFS mount, a dying disk, a driver waiting on a device) holds its memory and GPU, cannot be
killed, and usually means the next job hangs the same way. Pure functions over the facts."""

from __future__ import annotations

import re

from clusterkit.checks.model import Finding, HostProblem, Status, graded
from clusterkit.checks.parity import Facts
from clusterkit.escape import printable
from clusterkit.facts import HostFacts, NvmeDevice, StuckProcess, collected, error_of

# NVMe SMART/Health log, Critical Warning bits (NVM Express Base Specification, "SMART /
# Health Information (Log Page Identifier 02h)"), as nvme-cli's -H output names them.
CRITICAL_WARNING_BITS = {
    0x01: "available spare below its threshold",
    0x02: "temperature outside its thresholds",
    0x04: "reliability degraded (media or internal errors)",
    0x08: "media placed in read-only mode",
    0x10: "volatile memory backup failed",
    0x20: "persistent memory region read-only",
}
# Temperature alone passes once the drive cools: a warning, not a drain.
WARN_ONLY_BITS = 0x02
# `percent_used` is the vendor's estimate of the rated endurance used (100 = all of it; the
# specification lets it exceed 100): from 90 on, plan the replacement.
NVME_WEAR_WARN = 90
NVME_NAME = re.compile(r"nvme\d{1,4}")
TEXT_LIMIT = 80  # characters of one node-given value (model, serial, wait channel, error)
REPLACE_DRIVE = (
    "copy off what the node keeps on it, then replace the drive (`nvme smart-log /dev/{name}` "
    "and `nvme error-log /dev/{name}` for the vendor's RMA)"
)


def _text(value: object) -> str:
    """A node's value as one printable, bounded piece of a message."""
    line = printable(value)
    return line if len(line) <= TEXT_LIMIT else line[: TEXT_LIMIT - 3] + "..."


def _drive(device: NvmeDevice) -> str:
    """'nvme1 (SAMSUNG MZQL23T8HCLS, serial S64HNE0R...)': the name and what identifies it."""
    model, serial = device.get("model"), device.get("serial")
    parts = [_text(model)] if model else []
    parts += [f"serial {_text(serial)}"] if serial else []
    return _text(device.get("name")) + (f" ({', '.join(parts)})" if parts else "")


def nvme_problems(device: NvmeDevice) -> list[tuple[Status, str, str]]:
    """(status, evidence, action) for one NVMe controller's SMART log."""
    name = str(device.get("name"))
    name = name if NVME_NAME.fullmatch(name) else "nvmeN"
    replace = REPLACE_DRIVE.format(name=name)
    if device.get("error"):
        return [(Status.WARN, f"SMART log unreadable: {_text(device.get('error'))}",
                 f"run `nvme smart-log /dev/{name}` by hand")]  # fmt: skip
    problems = []
    warning = device.get("critical_warning") or 0
    if warning:
        named = [text for bit, text in CRITICAL_WARNING_BITS.items() if warning & bit]
        evidence = f"critical warning 0x{warning:02x}: {', '.join(named) or 'reserved bits'}"
        if warning & ~WARN_ONLY_BITS:
            problems.append((Status.FAIL, evidence, replace))
        else:
            cool = (
                f"check the drive's cooling (airflow, a blocked slot; `nvme smart-log /dev/{name}`)"
            )
            problems.append((Status.WARN, evidence, cool))
    media = device.get("media_errors") or 0
    if media:
        evidence = f"{media} media and data integrity errors (unrecovered reads or writes)"
        problems.append((Status.FAIL, evidence, replace))
    used = device.get("percent_used")
    if used is not None and used >= NVME_WEAR_WARN:
        evidence = f"{used}% of its rated endurance used"
        problems.append((Status.WARN, evidence, "plan the drive's replacement: " + replace))
    return problems


def _nvme_findings(facts: Facts) -> list[Finding]:
    """host.nvme: none when no node has nvme-cli (or no NVMe drive); a node whose collector
    failed warns."""
    checked = [h for h, f in facts.items()
               if collected(f.get("nvme")).get("devices") or error_of(f.get("nvme"))]  # fmt: skip
    if not checked:
        return []
    problems: list[HostProblem] = []
    for host in checked:
        error = error_of(facts[host].get("nvme"))
        if error:
            problems.append((Status.WARN, host, f"nvme-cli failed: {_text(error)}",
                             "run `nvme list` and `nvme smart-log` by hand"))  # fmt: skip
        for device in collected(facts[host].get("nvme")).get("devices", []):
            for status, evidence, action in nvme_problems(device):
                problems.append((status, host, f"{_drive(device)}: {evidence}", action))
    return graded(
        "host.nvme",
        checked,
        problems,
        what="NVMe drive health (SMART)",
        ok="every NVMe drive reports no critical warning and no media error",
    )


def _process(stuck: StuckProcess) -> str:
    """'pid 4242 (python3) in nfs_wait_bit_killable, alive 3600 s'."""
    where = f" in {_text(stuck.get('wchan'))}" if stuck.get("wchan") else ""
    name, age = _text(stuck.get("name")), stuck.get("age_seconds")
    return f"pid {stuck.get('pid')} ({name}){where}, alive {age} s"


def _dstate_findings(facts: Facts) -> list[Finding]:
    """host.dstate: over every node that scanned its processes. A warning (a drain only under
    --strict): one probe sees a process blocked for a second without progress, which a job
    writing a checkpoint to a slow filesystem also is, and node-check runs beside jobs; the
    kernel's own hung-task report (120 s blocked) is the proof, in the kernel log."""
    checked = [h for h, f in facts.items() if collected(f.get("dstate")).get("scanned")]
    if not checked:
        return []
    problems: list[HostProblem] = []
    for host in checked:
        dstate = collected(facts[host].get("dstate"))
        stuck = dstate.get("processes") or []
        if not stuck:
            continue
        count = dstate.get("count") or len(stuck)
        more = f" and {count - len(stuck)} more" if count > len(stuck) else ""
        evidence = f"{count} stuck in D state: {'; '.join(map(_process, stuck))}{more}"
        action = (
            "find what they wait for (`cat /proc/PID/stack` as root, `dmesg | grep -i "
            "'blocked for more than'`): a hung NFS or Lustre mount, a failing disk or a driver; "
            "drain the node and reboot it if they do not clear"
        )
        problems.append((Status.WARN, host, evidence, action))
    return graded(
        "host.dstate",
        checked,
        problems,
        what="processes stuck in uninterruptible sleep (unkillable; the node's I/O or a "
        "driver hangs)",
        ok="no process stuck in uninterruptible sleep",
    )


def host_health_findings(facts: Facts) -> list[Finding]:
    """host.nvme, host.dstate."""
    return [*_nvme_findings(facts), *_dstate_findings(facts)]


def drain_notes(host_facts: HostFacts) -> list[str]:
    """Short words for a Slurm drain reason: `NVMe nvme1 media errors needs replacement`,
    `2 processes stuck in D state needs reboot`. Node text never reaches it: a drive name
    must be nvmeN, counts are clusterkit's own."""
    notes = []
    for device in collected(host_facts.get("nvme")).get("devices", []):
        name = str(device.get("name"))
        name = name if NVME_NAME.fullmatch(name) else "?"
        if (device.get("critical_warning") or 0) & ~WARN_ONLY_BITS:
            notes.append(f"NVMe {name} critical warning needs replacement")
        if device.get("media_errors"):
            notes.append(f"NVMe {name} media errors needs replacement")
    dstate = collected(host_facts.get("dstate"))
    count = dstate.get("count") or len(dstate.get("processes") or [])
    if dstate.get("processes"):
        notes.append(f"{count} processes stuck in D state needs reboot")
    return notes
