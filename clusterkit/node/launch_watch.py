"""The launch runner's hardware watch: what a fault shows first on this node (new Xid/SXid
kernel lines, InfiniBand ports going down, nvidia-smi's remapping and throttle fields),
sampled while the job runs.
"""

import os
import threading
import time

from clusterkit.node.kernellog import parse_kernel_log, read_kernel_log
from clusterkit.node.nvlink import links_up, parse_nvlink_status
from clusterkit.node.prelude import ToolError, find_tool, read_text, run_bounded

# The hardware watch: the kernel log and the InfiniBand ports are read again every
# WATCH_SECONDS (one dmesg call, a few sysfs files), nvidia-smi every SMI_SECONDS.
WATCH_SECONDS = 2.0
SMI_SECONDS = 20.0
WATCH_TOOL_SECONDS = 10.0  # one dmesg or nvidia-smi call answers by then
WATCH_ANCHOR = 4096  # the last bytes of the previous read: where the new lines start
WATCH_EVENTS = 32  # at most this many events in one report
WATCH_SAID = 4096  # at most this many events remembered as told
SMI_QUERY = ("pci.bus_id", "remapped_rows.pending", "remapped_rows.failure",
             "clocks_event_reasons.active")  # fmt: skip
SMI_OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}


# --- the hardware watch --------------------------------------------------------------------


class HardwareWatch:
    """What a fault shows first on this node, sampled while the job runs: new Xid/SXid lines
    in the kernel log since the job started (read with the probe's own parser), OOM kills of
    the job's ranks, InfiniBand ports going down or `link_downed` rising (sysfs), and, where
    nvidia-smi exists, a row remap pending or failed, a slowdown reason, a GPU gone, an NVLink
    link that was up at the start gone down (the probe's parser, clusterkit/node/nvlink.py).
    Each new fact is told once; the control side grades it with `check`'s own rules. Only this
    node's devices are named: it speaks for itself."""

    def __init__(self, rank_pids, sysfs="/sys"):
        self.rank_pids = rank_pids  # pids of this job's ranks, kept by the progress sampler
        self.sysfs = sysfs
        self.tail = None  # type: str | None  # the end of the last kernel log read
        self.seen = set()  # type: set[tuple]  # keys of the kernel events read so far
        self.ports = {}  # (hca, port) -> (state, link_downed) at the last read
        self.smi = find_tool("nvidia-smi")
        self.gpus = None  # bus ids nvidia-smi listed at the start
        self.nvlinks = None  # {GPU index: links up} at the start; None: no NVLink is up
        self.buses = {}  # GPU index -> bus id as the kernel log writes it
        self.fields = list(SMI_QUERY)
        self.smi_at = 0.0
        self.said = set()  # type: set[tuple]
        self.lock = threading.Lock()

    def start(self):
        """The state at the job's start: what is already there is `check`'s, not news."""
        self.kernel_events()
        self.ports = ib_ports(self.sysfs)
        rows = self.smi_rows()
        self.gpus = None if rows is None else [row.get("pci.bus_id") for row in rows]
        self.start_nvlinks()
        self.smi_at = time.monotonic()

    def start_nvlinks(self):
        """The NVLink links up at the start, and each GPU's bus id to name it by: two calls,
        once; a node with no link up is not asked again."""
        up = self.nvlink_state()
        if not self.smi or not up or not any(up.values()):
            return
        argv = [self.smi, "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
        try:
            code, out, _ = run_bounded(argv, WATCH_TOOL_SECONDS)
        except ToolError:
            return
        for line in out.decode("utf-8", "replace").splitlines()[:64]:
            index, _, bus = line.partition(",")
            if code == 0 and index.strip().isdigit():
                self.buses[int(index)] = bus_id(bus.strip())
        self.nvlinks = up

    def nvlink_state(self):
        """{GPU index: links up} from `nvidia-smi nvlink --status` (the probe's parser), or
        None: no answer, or no GPU listed (never read as every link down)."""
        if not self.smi:
            return None
        try:
            code, out, _ = run_bounded([self.smi, "nvlink", "--status"], WATCH_TOOL_SECONDS)
        except ToolError:
            return None
        gpus = parse_nvlink_status(out.decode("utf-8", "replace")) if code == 0 else []
        return links_up(gpus[:64]) or None

    def sample(self):
        """The new events since the last sample, each told once: the kernel log and the
        ports, and nvidia-smi when SMI_SECONDS have passed."""
        return self.sample_log() + (self.sample_gpus() if self.smi_due() else [])

    def sample_log(self):
        """The kernel log's and the ports' new events (cheap: every WATCH_SECONDS)."""
        return self.told(self.kernel_events() + self.port_events())

    def smi_due(self):
        return bool(self.smi) and time.monotonic() - self.smi_at >= SMI_SECONDS

    def sample_gpus(self):
        """nvidia-smi's new events: one call, up to WATCH_TOOL_SECONDS (a wedged driver
        makes it slow, so the runner asks it in a thread of its own)."""
        self.smi_at = time.monotonic()
        return self.told(self.gpu_events() + self.nvlink_events())

    def told(self, found):
        """The events not told before (at most WATCH_EVENTS), now remembered as told."""
        fresh = []
        with self.lock:
            for event in found:
                key = (event["kind"], event["device"], event["code"], event["text"],
                       tuple(sorted(event["fields"].items())))  # fmt: skip
                if key not in self.said and len(self.said) < WATCH_SAID:
                    self.said.add(key)
                    fresh.append(event)
        return fresh[:WATCH_EVENTS]

    def kernel_events(self):
        """Xid/SXid events and OOM kills of the job's ranks logged since the last read."""
        try:
            text, source = read_kernel_log(WATCH_TOOL_SECONDS)
        except ToolError:
            return []
        previous, self.tail = self.tail, text[-WATCH_ANCHOR:]
        at = text.rfind(previous) if previous else -1
        fresh = text[at + len(previous or "") :] if at >= 0 else text  # rotated: known skipped
        parsed = parse_kernel_log(fresh, source)
        events = []
        for item in parsed["events"]:
            key = (item["kind"], item["pci"], item["code"], item["time"], item["text"])
            if key not in self.seen and previous is not None:
                events.append(watch_event(item["kind"], item["pci"], item["code"],
                                          item["text"], item.get("fatal")))  # fmt: skip
            self.seen.add(key)
        for kill in parsed["oom_kills"]:
            key = ("oom", kill["pid"], kill["time"], "", "")
            if key not in self.seen and previous is not None and kill["pid"] in self.rank_pids:
                text = "the kernel's OOM killer killed rank process %d (%s)" % (
                    kill["pid"], kill["name"])  # fmt: skip
                events.append(watch_event("oom", "", kill["pid"], text))
            self.seen.add(key)
        return events

    def port_events(self):
        """A port that was ACTIVE and is not now; a link_downed count that rose."""
        now = ib_ports(self.sysfs)
        events = []
        for key, (state, downed) in sorted(now.items()):
            before = self.ports.get(key)
            device = "%s/%s" % key
            if before and before[0] == "ACTIVE" and state != "ACTIVE":
                events.append(watch_event("ib-port", device, 0, "port %s" % state))
            if before and downed > before[1]:
                text = "link_downed rose from %d to %d" % (before[1], downed)
                events.append(watch_event("ib-flap", device, downed - before[1], text))
        self.ports = now
        return events

    def smi_rows(self):
        """nvidia-smi's rows for SMI_QUERY, one bounded call; None when it gave none. A GPU
        the driver lost is missing from the rows while nvidia-smi lists the others and exits
        non-zero ("Unable to determine the device handle for GPU ..."): those rows count.
        Nothing listed at all (the driver unloaded, NVML mismatched) is no answer."""
        if not self.smi:
            return None
        for _ in range(2):
            argv = [self.smi, "--query-gpu=" + ",".join(self.fields), "--format=csv,noheader"]
            try:
                code, out, err = run_bounded(argv, WATCH_TOOL_SECONDS)
            except ToolError:
                return None
            said = (out + err).decode("utf-8", "replace")
            older = [SMI_OLD_NAMES.get(f, f) for f in self.fields]
            if code and "is not a valid field" in said and older != self.fields:
                self.fields = older  # an older driver's spelling, asked once more
                continue
            rows = [[v.strip() for v in line.split(",")] for line in said.splitlines()]
            found = [dict(zip(SMI_QUERY, row)) for row in rows
                     if len(row) == len(SMI_QUERY) and row[0].count(":") == 2]  # fmt: skip
            return found[:64] if code is not None and (found or code == 0) else None
        return None

    def gpu_events(self):
        """A GPU listed at the start and not now; a remap pending or failed, a slowdown."""
        rows = self.smi_rows()
        if rows is None or self.gpus is None:
            return []
        listed = {row.get("pci.bus_id") for row in rows}
        events = [watch_event("gpu-gone", bus_id(gpu), 0, "no longer listed by nvidia-smi")
                  for gpu in self.gpus if gpu not in listed]  # fmt: skip
        for row in rows:
            fields = {k: v[:32] for k, v in row.items() if k != "pci.bus_id"}
            if gpu_row_of_note(fields):
                events.append(
                    watch_event("gpu", bus_id(row.get("pci.bus_id")), 0, "", None, fields)
                )
        return events

    def nvlink_events(self):
        """A link up at the job's start and down now; one down from the start is not news.
        A GPU nvidia-smi no longer lists is told as gone, not as its links."""
        start = self.nvlinks
        now = self.nvlink_state() if start else None
        if not start or now is None:
            return []
        events = []
        for index, before in sorted(start.items()):
            for link in sorted(before - now.get(index, before)):
                text = "GPU %d link %d: up at the job's start, down now" % (index, link)
                events.append(watch_event("nvlink-down", self.buses.get(index, ""), link, text))
        return events


def watch_event(kind, device, code, text, fatal=None, fields=None):
    """One event as it travels (launch/messages.py WatchEvent): bounded here too."""
    return {"kind": kind, "device": str(device)[:64], "code": int(code), "fatal": fatal,
            "text": str(text)[:300], "fields": fields or {}}  # fmt: skip


def bus_id(value):
    """nvidia-smi's `00000000:18:00.0` as the kernel log's `0000:18:00`."""
    parts = str(value or "").lower().split(":")
    if len(parts) != 3:
        return str(value)[:64]
    return "%s:%s:%s" % (parts[0][-4:].rjust(4, "0"), parts[1], parts[2].split(".")[0])


def gpu_row_of_note(fields):
    """A remap pending or failed, or a slowdown reason other than idle and the usual caps."""
    flags = [fields.get("remapped_rows.pending"), fields.get("remapped_rows.failure")]
    if any(flag in ("Yes", "1") for flag in flags):
        return True
    try:
        return bool(int(fields.get("clocks_event_reasons.active") or "0", 16) & 0xE8)
    except ValueError:
        return False


def ib_ports(sysfs):
    """(hca, port) -> (state, link_downed) of every RDMA port, from sysfs."""
    base = os.path.join(sysfs, "class", "infiniband")
    found = {}  # type: dict[tuple[str, str], tuple[str, int]]
    try:
        hcas = sorted(os.listdir(base))[:64]
    except OSError:
        return found
    for hca in hcas:
        folder = os.path.join(base, hca, "ports")
        try:
            ports = sorted(os.listdir(folder))[:16]
        except OSError:
            continue
        for port in ports:
            state = (read_text(os.path.join(folder, port, "state")) or "").split(":")[-1].strip()
            downed = read_text(os.path.join(folder, port, "counters", "link_downed")) or "0"
            found[(hca[:32], port[:8])] = (state[:16], int(downed) if downed.isdigit() else 0)
    return found
