"""The kernel log, read and parsed on a node: the GPU (Xid), NVSwitch (SXid) and host faults
it holds, the driver's last load and the OOM killer's kills.

A node library, not a program: the probe (collector.py) reads it once per check, and the
launch runner (launch_watch.py) reads it again every few seconds while a job runs, so both judge
the same lines the same way. A program imports it like the prelude; the node-script composer
(clusterkit/transport/nodescript.py) inserts its text after the prelude's. Stdlib only,
Python 3.8+, no `from __future__` (it is inserted mid-file).
"""

import re

from clusterkit.node.prelude import ToolError, run_tool

# The NVIDIA driver reports GPU faults (Xid) and NVSwitch faults (SXid) in the kernel log,
# which holds them until reboot; the kernel reports machine checks, memory and filesystem
# errors there too, so one read serves every check. A node's log can be large: the tool's
# output is cut to its last KERNEL_LOG_BYTES, journalctl to its last KERNEL_LOG_LINES lines,
# and only the last MAX_KERNEL_EVENTS records of each kind are kept (the total is counted).
KERNEL_LOG_BYTES = 8 * 1024 * 1024
KERNEL_LOG_LINES = 50000
MAX_KERNEL_EVENTS = 200
KERNEL_LOG_TOOLS = (
    ("dmesg", ["dmesg", "--time-format", "iso"]),
    ("journalctl", ["journalctl", "-k", "-b", "-o", "short-iso", "--no-pager",
                    "-n", str(KERNEL_LOG_LINES)]),
)  # fmt: skip
# Each record's first line is the tool's prefix, then the message: dmesg's time (`[ 12.5]`,
# ISO, or -T's ctime), journalctl's `TIME HOST kernel: `. A record's further lines are
# indented. Every shape below is matched from the start of the message only: text any user
# can put into a kernel message (the path in "process 'x' launched '<path>' with NULL argv",
# a mount option) comes after the kernel's own words, never at the start.
_TIME = (
    r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)|\[\s*(?P<uptime>\d+\.\d+)\]|"
    r"\[(?P<ctime>[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ [\d:]+ \d{4})\]"
)
MESSAGE_START = {
    "journalctl": re.compile(r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) \S+ kernel: "),
    "dmesg": re.compile(r"(?:(?:%s) )?(?=\S)" % _TIME),
}
PCI = r"(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
XID_MARK = "Xid (PCI:"  # on every Xid and SXid line
XID_MESSAGE = re.compile(
    r"(?:NVRM: (?P<xid>Xid)|nvidia-nvswitch\d{0,3}: (?P<sxid>SXid)) \(PCI:"
    + PCI
    + r"[.0-9A-Fa-f]*\): (?P<code>\d{1,6}), (?P<rest>.*)$"
)
XID_PID = re.compile(r"pid=(?P<pid>'[^']*'|[^,\s]*), (?:name=(?P<name>[^,]*), )?(?P<text>.*)$")
# NVLink5 Xids (144-150) name their severity: `RLW_SRC_TRACK Fatal XC0 i1 Link 00 (...)`. The
# last such words count: the process name before them (name=...) is the user's own text.
NVLINK5_XIDS = range(144, 151)
NVLINK5_SEVERITY = re.compile(r"\b(?P<severity>Fatal|Nonfatal) +XC\d{1,3} ")
# An SXid record: the header (`12028, Non-fatal, Link 32 ...`), then `Severity N Engine
# instance ...` (1: fatal, the driver's NVSWITCH_ERROR_SEVERITY_FATAL) and `Data {...}`,
# each a line of its own with the same code.
SXID_CONTINUATION = ("Severity ", "Data {")
SXID_SEVERITY = re.compile(r"Severity (?P<severity>\d) ")
# Newer drivers may report a lost GPU only as "NVRM: The NVIDIA GPU 0000:b3:00.0 / (PCI ID:
# 10de:26b5) installed in this system has / fallen off the bus ..." (one record over three
# lines), older ones as "NVRM: GPU at 0000:01:00.0 has fallen off the bus.", and some beside
# (or instead of) the Xid line as "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.".
FALLEN_WORDS = "fallen off the bus"
FALLEN_HEAD = re.compile(
    r"NVRM: (?:The NVIDIA GPU|GPU at|GPU) " + PCI + r"\.[0-7](?P<rest>(?:[: ].*)?)$"
)
# The driver's load banner, and the line its module init prints before probing the GPUs:
# events before the last load were seen by a driver that is gone (reloaded to recover).
LOAD_MARK = "NVRM: loading NVIDIA UNIX "
NVLINK_INIT_MARK = "nvidia-nvlink: Nvlink Core is being initialized"
OOM_MARK = "Killed process "  # the kernel's OOM killer, global or a memory cgroup's
OOM_KILL = re.compile(
    r"(?:Out of memory(?: \([^)]*\))?: |Memory cgroup out of memory: )?"
    r"Killed process (?P<pid>\d{1,9}) \((?P<name>[^)]*)\)"
)
# The host's own faults (kernel sources: arch/x86/kernel/cpu/mce/core.c, drivers/edac/
# edac_mc.c, mm/memory-failure.c, fs/ext4/super.c, fs/xfs/xfs_fsops.c, fs/btrfs).
DEVICE = r"(?P<device>[^)\s]{1,64})"
HOST_SHAPES = (
    # (marks found with str.find, kind, what, the message's shape); what None: from MCi_STATUS.
    # Few marks, each long enough to skip fast and absent from healthy lines (a node can log
    # thousands of "mounted filesystem"): "ardware " is in "[Hardware Error]" and
    # "Uncorrected hardware memory error"; XFS's "xfs_do_force_shutdown(" line comes with
    # "Shutting down filesystem".
    (("ardware ",), "mce", None, re.compile(
        r"mce: \[Hardware Error\]: CPU \d{1,5}: Machine Check(?: Exception)?: [0-9a-fA-F]{1,16}"
        r" Bank (?P<device>\d{1,4}): (?P<status>[0-9a-fA-F]{16})")),
    (("ardware ",), "mce", "logged", re.compile(
        r"mce: \[Hardware Error\]: Machine check events logged")),
    (("ardware ",), "mce", "uncorrected", re.compile(
        r"mce: Uncorrected hardware memory error")),
    (("Memory failure: ",), "mce", "uncorrected", re.compile(
        r"Memory failure: 0x[0-9a-f]{1,16}: ")),
    (("EDAC MC",), "edac", "uncorrected", re.compile(
        r"EDAC (?P<device>MC\d{1,3}): (?P<count>[1-9]\d{0,8}) UE ")),
    (("-fs error (device ",), "fs", "error", re.compile(
        r"EXT[234]-fs error \(device " + DEVICE + r"\)")),
    (("Remounting filesystem read-only",), "fs", "read-only", re.compile(
        r"EXT[234]-fs \(" + DEVICE + r"\): Remounting filesystem read-only")),
    (("forced readonly",), "fs", "read-only", re.compile(
        r"BTRFS \w{1,8} \(device " + DEVICE + r"(?: state \S{1,16})?\): forced readonly")),
    (("Shutting down filesystem", "Filesystem has been shut down"), "fs", "shutdown", re.compile(
        r"XFS \(" + DEVICE + r"\): (?:.*Shutting down filesystem|xfs_do_force_shutdown\(|"
        r"Filesystem has been shut down)")),
)  # fmt: skip
# Each mark once, with the shapes its lines may have: one str.find pass per mark.
HOST_MARKS = {}  # type: dict
for _shape in HOST_SHAPES:
    for _mark in _shape[0]:
        HOST_MARKS.setdefault(_mark, []).append(_shape)


def message_start(line, source=None):
    """(where the message starts in `line`, its time as the tool printed it), or None for a
    record's further line (indented) and a line without the tool's prefix. Time: ISO (dmesg
    --time-format iso, journalctl short-iso), `uptime 1234.567890 s` (plain dmesg) or dmesg
    -T's ctime; None if the line has none. `source` None: either tool's shape."""
    for tool in (source,) if source else ("journalctl", "dmesg"):
        match = MESSAGE_START[tool].match(line)
        if match is not None:
            break
    else:
        return None
    found = match.groupdict()
    if found.get("iso"):
        return match.end(), found["iso"]
    if found.get("uptime"):
        return match.end(), "uptime %s s" % found["uptime"]
    return match.end(), found.get("ctime")


def _message(line, source=None):
    """(message, time) of a record's first line, or None."""
    start = message_start(line, source)
    return None if start is None else (line[start[0] :], start[1])


def _lines_with(text, mark):
    """(offset, line) of every line of `text` holding `mark`, as splitlines() cuts them: a
    healthy log of megabytes has none, and one scan in C finds that without splitting it."""
    start = text.find(mark)
    while start >= 0:
        begin = text.rfind("\n", 0, start) + 1
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        offset = begin
        for line in text[begin:end].splitlines(True):
            if mark in line:
                yield offset, line.rstrip("\r\n")
            offset += len(line)
        start = text.find(mark, end)


def _marked_lines(text, mark=XID_MARK):
    """The lines of `text` holding `mark` (see _lines_with)."""
    for _, line in _lines_with(text, mark):
        yield line


def _severity(kind, code, rest):
    """True/False where the line names its severity (NVLink5 Xids, SXid headers)."""
    if kind == "xid" and code in NVLINK5_XIDS:
        words = NVLINK5_SEVERITY.findall(rest)
        return words[-1] == "Fatal" if words else None
    if kind == "sxid":
        if rest.startswith(("Fatal,", "Non-fatal,")):
            return rest.startswith("Fatal,")
        found = SXID_SEVERITY.match(rest)
        return None if found is None else found.group("severity") == "1"
    return None


def parse_kernel_event(line, source=None):
    """One kernel log line -> {kind: xid|sxid, pci, code, pid, name, text, time, fatal,
    part (SXid only)}, or None when the line is no Xid/SXid line. pci is `DDDD:BB:DD`, lower
    case, so it compares with nvidia-smi's pci.bus_id; fatal: the severity the line names,
    else None; part: True for an SXid record's Severity/Data line."""
    if XID_MARK not in line:
        return None
    found = _message(line, source)
    match = found and XID_MESSAGE.match(found[0])
    if not match:
        return None
    domain, bus, device = match.group("pci").lower().split(":")
    rest = match.group("rest").strip()
    kind = "xid" if match.group("xid") else "sxid"
    code = int(match.group("code"))
    pid = name = None
    fields = XID_PID.match(rest) if kind == "xid" else None
    if fields:
        pid = fields.group("pid").strip("'")
        name = fields.group("name")
        rest = fields.group("text")
    event = {
        "kind": kind,
        "pci": "%s:%s:%s" % (domain[-4:].rjust(4, "0"), bus, device),
        "code": code,
        "pid": int(pid) if pid and pid.isdigit() else pid or None,
        "name": name.strip() if name and name.strip() != "<unknown>" else None,
        "text": rest[:300],
        "time": found[1],
        "fatal": _severity(kind, code, rest),
    }
    if kind == "sxid":
        event["part"] = rest.startswith(SXID_CONTINUATION)
    return event


def _record_lines(text, offset, limit=4):
    """A record's first line at `offset` and the indented lines that continue it."""
    lines = []  # type: list[str]
    for line in text[offset : offset + 2000].splitlines()[:limit]:
        if lines and not line[:1].isspace():
            break
        lines.append(line.strip())
    return lines


def _record_head(text, begin):
    """Where the record holding the line at `begin` starts: back over its indented lines."""
    for _ in range(4):
        if begin == 0 or not text[begin : begin + 1].isspace():
            break
        begin = text.rfind("\n", 0, begin - 1) + 1
    return begin


def _fallen_off_events(text, source):
    """Lost GPUs the driver reported without an Xid line, as Xid 79 events."""
    heads = set()
    for offset, _ in _lines_with(text, FALLEN_WORDS):
        head_at = _record_head(text, offset)
        lines = _record_lines(text, head_at)
        found = _message(lines[0], source) if lines and head_at not in heads else None
        if found is None:
            continue
        head = FALLEN_HEAD.match(found[0])
        if not head or FALLEN_WORDS not in " ".join([head.group("rest"), *lines[1:]]):
            continue
        heads.add(head_at)
        domain, bus, device = head.group("pci").lower().split(":")
        yield {
            "kind": "xid", "pci": "%s:%s:%s" % (domain[-4:].rjust(4, "0"), bus, device),
            "code": 79, "pid": None, "name": None, "fatal": None, "at": head_at,
            "text": "GPU has fallen off the bus (the driver's message, no Xid line)",
            "time": found[1],
        }  # fmt: skip


def _keep(items, item):
    items.append(item)
    if len(items) > 2 * MAX_KERNEL_EVENTS:
        del items[:-MAX_KERNEL_EVENTS]


def _sxid_record(event, open_records):
    """An SXid header opens a record; its Severity/Data lines join it (a fatal severity marks
    it). A Data or Severity line whose header rotated out of the buffer is kept as the
    record: a fatal SXid is never dropped for a lost first line. True: a new event."""
    key = (event["pci"], event["code"])
    if not event.pop("part"):
        open_records[key] = event
        return True
    record = open_records.get(key)
    if record is None:
        event["text"] = "(record's first line not in the log) " + event["text"]
        open_records[key] = event
        return True
    if event["fatal"] is not None and record.get("fatal") is None:
        record["fatal"] = event["fatal"]
    return False


def _gpu_events(text, source):
    """Xid and SXid events in log order, and how many lines matched."""
    events = []  # type: list[dict]
    matched = 0
    open_records = {}  # type: dict
    for offset, line in _lines_with(text, XID_MARK):
        event = parse_kernel_event(line, source)
        if event is None:
            continue
        matched += 1
        event["at"] = offset
        if event["kind"] == "sxid" and not _sxid_record(event, open_records):
            continue
        more = _record_lines(text, offset)[1:]  # a record the driver wrapped over lines
        if more:
            event["text"] = " ".join([event["text"], *more])[:300]
        _keep(events, event)
    xid79 = [(e["pci"], e["at"]) for e in events if e["kind"] == "xid" and e["code"] == 79]
    for event in _fallen_off_events(text, source):
        if not any(p == event["pci"] and abs(at - event["at"]) < 1024 for p, at in xid79):
            matched += 1  # not the same loss as an Xid 79 line beside it
            _keep(events, event)
    events.sort(key=lambda e: e["at"])
    return events[-MAX_KERNEL_EVENTS:], matched


def _last_line(text, mark, source, before=None):
    """Offset and time of the last line whose message starts with `mark`, or None."""
    end = len(text) if before is None else before
    while True:
        at = text.rfind(mark, 0, end)
        if at < 0:
            return None
        begin = text.rfind("\n", 0, at) + 1
        found = _message(text[begin : at + len(mark)], source)
        if found is not None and found[0] == mark:
            return begin, found[1]
        end = at


def _probe_block_start(text, banner, source):
    """Where the load's own probe messages (a GPU that fell off the bus as the driver
    probed it, "probe routine failed") begin: they come just before the banner."""
    start = banner
    for _ in range(20):
        if start == 0:
            break
        begin = text.rfind("\n", 0, start - 1) + 1
        line = text[begin:start].rstrip("\r\n")
        found = _message(line, source)
        probing = found is not None and found[0].startswith("NVRM: ") and XID_MARK not in found[0]
        if not (probing or (found is None and line[:1].isspace())):
            break
        start = begin
    return start


def driver_load(text, source=None):
    """The driver's last load: {at: where its events begin, time, count}, or None. A reload
    (rmmod/modprobe, done with a GPU reset to recover) begins at its module's nvlink core
    init, else at the probe messages just before its banner."""
    banner = _last_line(text, LOAD_MARK, source)
    if banner is None:
        return None
    count = 1 + text.count(LOAD_MARK, 0, banner[0])
    previous = _last_line(text, LOAD_MARK, source, before=banner[0])
    init = _last_line(text, NVLINK_INIT_MARK, source, before=banner[0])
    if init is not None and (previous is None or init[0] > previous[0]):
        return {"at": init[0], "time": init[1], "count": count}
    return {"at": _probe_block_start(text, banner[0], source), "time": banner[1], "count": count}


def parse_oom_kill(line, source=None):
    """A kernel OOM kill (`Out of memory: Killed process 123 (python3) ...`, also from a
    memory cgroup) -> {pid, name, time}, or None. A launch matches the pid with the rank
    torchrun reported killed: the kernel, not the job, ended it."""
    found = _message(line, source)
    match = found and OOM_KILL.match(found[0])
    if not match:
        return None
    return {"pid": int(match.group("pid")), "name": match.group("name")[:64], "time": found[1]}


def _host_event(message, time, shape):
    _, kind, what, pattern = shape
    match = pattern.match(message)
    if match is None:
        return None
    found = match.groupdict()
    if what is None:  # a machine-check bank: bit 61 of MCi_STATUS is UC (uncorrected)
        what = "uncorrected" if int(found["status"], 16) >> 61 & 1 else "corrected"
    return {"kind": kind, "what": what, "device": found.get("device"),
            "count": int(found.get("count") or 1), "text": message[:300], "time": time}  # fmt: skip


def parse_host_events(text, source=None):
    """Machine checks, uncorrected memory errors and filesystem errors, in log order."""
    events = []  # type: list[dict]
    matched = 0
    seen = set()
    for mark, shapes in HOST_MARKS.items():
        for offset, line in _lines_with(text, mark):
            found = _message(line, source)
            event = found and next(
                (e for e in (_host_event(found[0], found[1], s) for s in shapes) if e), None
            )
            if not event or offset in seen:
                continue
            seen.add(offset)
            matched += 1
            event["at"] = offset
            _keep(events, event)
    events.sort(key=lambda e: e["at"])
    return events[-MAX_KERNEL_EVENTS:], matched


def parse_kernel_log(text, source=None):
    """The GPU and NVSwitch events of a kernel log (the last MAX_KERNEL_EVENTS, and how many),
    the driver's last load, the last OOM kills and the host's own faults."""
    events, matched = _gpu_events(text, source)
    kills = []  # type: list[dict]
    for line in _marked_lines(text, OOM_MARK):
        kill = parse_oom_kill(line, source)
        if kill is not None:
            _keep(kills, kill)
    host_events, host_matched = parse_host_events(text, source)
    return {"events": events, "matched": matched, "driver_load": driver_load(text, source),
            "oom_kills": kills[-MAX_KERNEL_EVENTS:], "host_events": host_events,
            "host_matched": host_matched}  # fmt: skip


def read_kernel_log(timeout):
    """(text, source) of the kernel log since boot, its last KERNEL_LOG_BYTES: dmesg, else
    journalctl (dmesg_restrict, no dmesg). ToolError when neither answers, naming both."""
    failures = []
    for source, argv in KERNEL_LOG_TOOLS:
        try:
            text = run_tool(argv, timeout)
        except ToolError as error:
            failures.append(str(error))
            continue
        return text[-KERNEL_LOG_BYTES:], source
    raise ToolError("kernel log unreadable: " + "; ".join(failures), "failed")
