"""Host device facts: NVMe health from nvme-cli, and processes stuck in D state."""

import json
import os
import re
import time

from clusterkit.node.prelude import ToolError, find_tool, read_text, run_tool
from clusterkit.node.probe_common import TOOL_TIMEOUT

# -- NVMe health (nvme-cli) -----------------------------------------------------------------
# Where `nvme` is installed: `nvme list -o json` names the namespaces, and one `nvme smart-log
# DEV -o json` per controller (the SMART log is the controller's) gives its health. Bounded:
# at most MAX_NVME controllers, each call its own timeout, all within the collector's.
MAX_NVME = 16
NVME_TIMEOUT = 5.0
NVME_PATH = re.compile(r"^/dev/(nvme\d{1,4})n\d{1,6}$")
NVME_FIELDS = ("critical_warning", "media_errors", "percent_used", "avail_spare",
               "spare_thresh", "num_err_log_entries")  # fmt: skip


def _bounded_text(value, limit=64):
    """Node text kept short, printable ASCII only (model and serial numbers)."""
    text = "".join(c if " " <= c <= "~" else "?" for c in str(value)).strip()
    return text[:limit] or None


def parse_nvme_list(text):
    """`nvme list -o json` -> [(controller, device path, model, serial)], one per controller
    (its first namespace), paths checked to be /dev/nvmeXnY."""
    try:
        listed = json.loads(text or "{}").get("Devices")
    except (ValueError, AttributeError):
        raise ToolError("nvme list printed no JSON document") from None
    seen = {}
    for item in listed if isinstance(listed, list) else []:
        path = item.get("DevicePath") if isinstance(item, dict) else None
        match = NVME_PATH.match(path) if isinstance(path, str) else None
        if match and match.group(1) not in seen:
            seen[match.group(1)] = (match.group(1), path, _bounded_text(item.get("ModelNumber")),
                                    _bounded_text(item.get("SerialNumber")))  # fmt: skip
    return list(seen.values())


def _smart_number(value):
    """A SMART count as nvme-cli prints it: a JSON number, a number in a string (128-bit
    counters), or (-H) an object whose "value" is the number; None for anything else."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 2**63 else None
    text = str(value).strip() if isinstance(value, str) else ""
    return int(text) if text.isdigit() and len(text) < 19 else None


def parse_smart_log(text):
    """`nvme smart-log DEV -o json` -> {critical_warning, media_errors, percent_used,
    avail_spare, spare_thresh, num_err_log_entries}: each a number or None."""
    try:
        log = json.loads(text)
    except ValueError:
        raise ToolError("nvme smart-log printed no JSON document") from None
    if not isinstance(log, dict):
        raise ToolError("nvme smart-log printed no JSON object")
    return {name: _smart_number(log.get(name)) for name in NVME_FIELDS}


def collect_nvme(options):
    """The SMART health of each NVMe controller, where nvme-cli is installed."""
    if find_tool("nvme") is None:
        return {"devices": [], "reason": "nvme not found"}
    end = time.monotonic() + TOOL_TIMEOUT
    controllers = parse_nvme_list(run_tool(["nvme", "list", "-o", "json"], NVME_TIMEOUT))
    devices = []
    for name, path, model, serial in controllers[:MAX_NVME]:
        device = {"name": name, "model": model, "serial": serial}
        left = min(NVME_TIMEOUT, end - time.monotonic())
        try:
            if left <= 0:
                raise ToolError("not asked: the collector's time ran out")
            device.update(
                parse_smart_log(run_tool(["nvme", "smart-log", path, "-o", "json"], left))
            )
        except ToolError as error:
            device["error"] = str(error)[:300]
        devices.append(device)
    return {"devices": devices, "count": len(controllers)}


# -- processes stuck in uninterruptible sleep (D state) ----------------------------------------
# One pass over /proc/PID/stat (a few microseconds a process). A process counts as stuck when it
# is in D, is no kernel thread, has lived DSTATE_MIN_AGE seconds, and a second look
# DSTATE_RECHECK seconds later finds it still in D without having used any CPU time; that
# second look is taken only when the first found a candidate.
DSTATE_MIN_AGE = 300.0
DSTATE_RECHECK = 1.0
MAX_PROCS = 100000
MAX_DSTATE = 20
PF_KTHREAD = 0x00200000


def parse_proc_stat(text):
    """/proc/PID/stat -> {comm, state, flags, cpu (utime+stime ticks), start (ticks after
    boot)}; None when it is not that shape. The name may hold spaces and parentheses: the
    fields start after the last ')'."""
    head, sep, rest = (text or "").rpartition(")")
    fields = rest.split()
    if not sep or "(" not in head or len(fields) < 20:
        return None
    try:
        return {"comm": head.partition("(")[2], "state": fields[0], "flags": int(fields[6]),
                "cpu": int(fields[11]) + int(fields[12]), "start": int(fields[19])}  # fmt: skip
    except ValueError:
        return None


def _in_d_state(path):
    """The stat text of a process in D state, else None: raw bytes, one read, the state byte
    looked at before anything is decoded (the pass over every process stays cheap)."""
    try:
        handle = os.open(path, os.O_RDONLY)
        try:
            raw = os.read(handle, 4096)
        finally:
            os.close(handle)
    except OSError:
        return None
    end = raw.rfind(b")")
    return raw.decode("utf-8", "replace") if raw[end + 2 : end + 3] == b"D" else None


def _dstate_candidates(proc, names, uptime, hz):
    found = {}
    for name in names:
        text = _in_d_state(os.path.join(proc, name, "stat"))
        stat = parse_proc_stat(text) if text else None
        if stat is None or stat["state"] != "D" or stat["flags"] & PF_KTHREAD:
            continue
        age = uptime - stat["start"] / float(hz)
        if age >= DSTATE_MIN_AGE:
            stat["age"] = age
            found[name] = stat
    return found


def collect_dstate(options):
    """Processes stuck in D state: pid, name, the kernel function they wait in (wchan, where
    readable), age; the first MAX_DSTATE and how many."""
    proc = options.get("procfs", "/proc")
    uptime = float((read_text(os.path.join(proc, "uptime")) or "0").split()[0])
    hz = os.sysconf("SC_CLK_TCK")
    names = [name for name in os.listdir(proc) if name.isdigit()][:MAX_PROCS]
    first = _dstate_candidates(proc, names, uptime, hz)
    stuck = []
    if first:
        time.sleep(DSTATE_RECHECK)
    for name, stat in sorted(first.items(), key=lambda item: int(item[0])):
        again = parse_proc_stat(read_text(os.path.join(proc, name, "stat")))
        if again is None or again["state"] != "D" or (again["cpu"], again["start"]) != (
            stat["cpu"], stat["start"]):  # fmt: skip
            continue
        wchan = read_text(os.path.join(proc, name, "wchan"))
        stuck.append({"pid": int(name), "name": _bounded_text(stat["comm"], 32) or "?",
                      "wchan": _bounded_text(wchan, 64) if wchan not in (None, "0") else None,
                      "age_seconds": int(stat["age"])})  # fmt: skip
    return {"processes": stuck[:MAX_DSTATE], "count": len(stuck), "scanned": len(names)}
