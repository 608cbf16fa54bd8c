"""Host facts: the system and its names, Docker and the container toolkit, resource limits,
the clock's synchronisation, memory, and the kernel log's Xid and SXid events.
"""

import ctypes
import json
import os
import re
import resource
import socket

from clusterkit.node.kernellog import parse_kernel_log, read_kernel_log
from clusterkit.node.prelude import ToolError, find_tool, read_text, run_tool
from clusterkit.node.probe_common import TOOL_TIMEOUT


def collect_system(options):
    os_release = {}
    for line in (read_text("/etc/os-release") or "").splitlines():
        key, _, value = line.partition("=")
        os_release[key] = value.strip('"')
    meminfo = read_text("/proc/meminfo") or ""
    match = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
    cpu_model = re.search(r"model name\s*:\s*(.+)", read_text("/proc/cpuinfo") or "")
    uname = os.uname()
    return {
        "os": os_release.get("PRETTY_NAME") or "%s %s" % (uname.sysname, uname.release),
        "kernel": uname.release,
        "arch": uname.machine,
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model.group(1).strip() if cpu_model else None,
        "memory_bytes": int(match.group(1)) * 1024 if match else None,
        "boot_id": read_text("/proc/sys/kernel/random/boot_id"),
    }


def collect_hostname(options):
    name = socket.gethostname()
    fqdn = name
    try:
        # Bytes, so the idna codec is never imported; one forward lookup (AI_CANONNAME) gives
        # the canonical name too, where getfqdn would add a reverse lookup that can stall.
        infos = socket.getaddrinfo(
            name.encode(), None, 0, socket.SOCK_STREAM, 0, socket.AI_CANONNAME
        )
        addresses = sorted({info[4][0] for info in infos})
        fqdn = next((info[3] for info in infos if info[3]), name)
        error = None
    except (OSError, UnicodeError) as exc:
        addresses, error = [], str(exc)
    return {"hostname": name, "fqdn": fqdn, "addresses": addresses, "error": error}


CTK_VERSION = re.compile(r"NVIDIA Container Toolkit CLI version (\S+)")


def collect_docker(options):
    facts = {
        "docker": find_tool("docker"),
        "nvidia_container_runtime": find_tool("nvidia-container-runtime"),
        "nvidia_ctk": find_tool("nvidia-ctk"),
    }  # type: dict[str, object]
    if facts["nvidia_ctk"]:  # only where the toolkit is installed: GPU nodes
        # "NVIDIA Container Toolkit CLI version 1.14.6" (then a commit line)
        try:
            match = CTK_VERSION.search(run_tool(["nvidia-ctk", "--version"], 5))
            facts["nvidia_ctk_version"] = match.group(1) if match else None
        except ToolError as error:
            facts["nvidia_ctk_error"] = str(error)[:200]
    daemon = read_text("/etc/docker/daemon.json")
    if daemon:
        try:
            facts["runtimes"] = sorted(json.loads(daemon).get("runtimes", {}))
        except ValueError:
            facts["daemon_json_error"] = "invalid JSON in /etc/docker/daemon.json"
    return facts


def collect_limits(options):
    def limit(which):
        soft, hard = resource.getrlimit(which)
        unlimited = resource.RLIM_INFINITY
        return {
            "soft": None if soft == unlimited else soft,
            "hard": None if hard == unlimited else hard,
        }

    shm = None
    try:
        stat = os.statvfs("/dev/shm")
        shm = stat.f_frsize * stat.f_blocks
    except OSError:
        pass
    return {
        "memlock": limit(resource.RLIMIT_MEMLOCK),
        "nofile": limit(resource.RLIMIT_NOFILE),
        "shm_bytes": shm,
    }


class _Timex(ctypes.Structure):
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("padding", ctypes.c_int * 32),
    ]


def collect_clock(options):
    """The kernel's own view (adjtimex: TIME_ERROR = unsynchronised), then chrony's offset."""
    facts = {"synchronized": None, "source": None, "offset_seconds": None}  # type: dict[str, object]
    try:
        # The interpreter links libc: its own handle has adjtimex, no library search needed.
        libc = ctypes.CDLL(None, use_errno=True)
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))
        if state >= 0:
            facts.update({"synchronized": state != 5, "source": "adjtimex"})
            facts["max_error_seconds"] = timex.maxerror / 1e6
    except (OSError, AttributeError):
        pass
    try:
        text = run_tool(["chronyc", "-n", "tracking"], 3)
    except ToolError:
        return facts
    facts.update(parse_chronyc_tracking(text))
    return facts


_SYSTEM_TIME = re.compile(
    r"^System time\s*:\s*([+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?) (?:seconds|s) (fast|slow)", re.M
)


def parse_chronyc_tracking(text):
    """chronyc's `System time : 7200.000000000 seconds fast of NTP time` as a signed offset
    (+ when this clock is ahead), and whether its leap status is Normal."""
    facts = {"source": "chronyc"}  # type: dict[str, object]
    match = _SYSTEM_TIME.search(text)
    if match:
        offset = float(match.group(1))
        if offset - offset == 0:  # finite: no inf or nan in the facts
            facts["offset_seconds"] = offset if match.group(2) == "fast" else -offset
    leap = re.search(r"^Leap status\s*:\s*(.+)", text, re.M)
    facts["synchronized"] = leap is not None and leap.group(1).strip() == "Normal"
    return facts


def collect_memory(options):
    """Host memory: total and what new processes can still get (MemAvailable)."""
    values = {}
    for line in (read_text("/proc/meminfo") or "").splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable") and rest.split():
            values[name] = int(rest.split()[0]) * 1024
    return {"total_bytes": values.get("MemTotal"), "available_bytes": values.get("MemAvailable")}


# -- kernel log: clusterkit/node/kernellog.py reads and parses it ----------------------------


def collect_kernel_log(options):
    """Xid and SXid events since boot: dmesg, else journalctl (dmesg_restrict, no dmesg).
    None (not read) under `gpu_health: false`, the option that also drops the health fields."""
    if not options.get("gpu_health", True):
        return None
    try:
        text, source = read_kernel_log(TOOL_TIMEOUT)
    except ToolError as error:
        return {"error": str(error)}
    found = parse_kernel_log(text, source)
    found["source"] = source
    return found
