"""clusterkit node probe: runs ON each node, sent over stdin (clusterkit/transport/nodescript.py).

Stdlib only, Python 3.8+, and cheap to start: it runs once per node per check, so modules
that cost milliseconds to import (shutil, platform, ctypes.util, importlib.metadata) are
replaced by the few lines the probe needs from them. Every collector runs in its own thread
with its own timeout, so a wedged tool (nvidia-smi on a hung driver, a stuck docker daemon)
costs its timeout and an error entry, never the whole probe. Tools, result frame and file
and interface readers come from the node-side prelude, whose text replaces the import below
before the probe is sent (clusterkit/transport/nodescript.py).
"""

import ctypes
import json
import os
import re
import resource
import socket
import sys
import threading
import time

from clusterkit.node.kernellog import parse_kernel_log, read_kernel_log
from clusterkit.node.nvlink import parse_nvlink_errors, parse_nvlink_status
from clusterkit.node.prelude import (
    ToolError,
    emit,
    find_tool,
    read_interfaces,
    read_text,
    run_tool,
    stop_tools_on_signals,
)

PROBE_VERSION = 2
TOOL_TIMEOUT = 10.0
MAX_ROUTES = 256  # a node's own routes, not a router's full table
BASE_GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "memory.total",
    "memory.used",
    "pci.bus_id",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "compute_cap",
)
# Health fields (checks/gpu_health.py), in the same one call: unsupported ones print [N/A].
# A driver that does not know a name fails the whole query; then that name is replaced by
# its older spelling (HEALTH_FIELD_OLD_NAMES) or left out, and the query asked again.
HEALTH_GPU_FIELDS = (
    "serial",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
    "temperature.gpu",
    "temperature.memory",
    # the driver's margin to the slowdown temperature (R520+; [N/A] on some GPUs)
    "temperature.gpu.tlimit",
    # SRAM (on-chip) ECC: lifetime and since-reset corrected, lifetime uncorrected
    "ecc.errors.corrected.volatile.sram",
    "ecc.errors.corrected.aggregate.sram",
    "ecc.errors.uncorrected.aggregate.sram",
    # firmware, compared across nodes (parity.vbios, parity.inforom)
    "vbios_version",
    "inforom.img",
    # the driver's own verdict after an unrecoverable error (checks/recovery.py): Yes/No
    "reset_status.reset_required",
    "reset_status.drain_and_reset_recommended",
)
GPU_FIELDS = BASE_GPU_FIELDS + HEALTH_GPU_FIELDS
# Renamed in driver 535 (clocks_throttle_reasons -> clocks_event_reasons).
HEALTH_FIELD_OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
OLD_NAME_OF = {old: new for new, old in HEALTH_FIELD_OLD_NAMES.items()}
UNKNOWN_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


# -- collectors ------------------------------------------------------------------------------


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


def _csv_value(text):
    text = text.strip()
    if text in ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]"):
        return None
    return text


def parse_gpu_csv(text, fields=GPU_FIELDS):
    """Parse `--query-gpu=FIELDS --format=csv,noheader,nounits` output; every GPU_FIELDS
    key is present (None where the field was not asked: the driver did not know it)."""
    gpus = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        values = [_csv_value(v) for v in line.split(",")]
        if len(values) != len(fields):
            raise ToolError("unexpected nvidia-smi CSV line: %r" % line[:200])
        gpu = dict.fromkeys(GPU_FIELDS)  # type: dict[str, str | None]
        gpu.update(zip(fields, values))
        gpus.append(gpu)
    return gpus


def query_gpu_fields(run, health=True):
    """(CSV text, the GPU_FIELDS names as asked) from `run(names)`: a name the driver
    rejects is asked by its older spelling, else left out (health fields only). Without
    `health`, only the base fields are asked."""
    asked = list(GPU_FIELDS if health else BASE_GPU_FIELDS)
    for _ in range(len(HEALTH_GPU_FIELDS) + 1):
        try:
            return run(asked), asked
        except ToolError as error:
            match = UNKNOWN_FIELD.search(str(error))
            if match is None or match.group(1) not in asked:
                raise
            position = asked.index(match.group(1))
            if asked[position] in BASE_GPU_FIELDS:
                raise
            older = HEALTH_FIELD_OLD_NAMES.get(asked[position])
            if older:
                asked[position] = older
            else:
                del asked[position]
    raise ToolError("nvidia-smi rejected every health field")


BANNER_PATTERNS = (
    # classic: | NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |
    re.compile(r"Driver Version:\s*(?P<driver>[\d.]+)\s+CUDA Version:\s*(?P<cuda>[\d.]+|N/A)"),
    # R610+: | NVIDIA-SMI 610.xx   KMD Version: 610.xx   CUDA UMD Version: 13.2 |
    re.compile(r"KMD Version:\s*(?P<driver>[\d.]+)\s+CUDA UMD Version:\s*(?P<cuda>[\d.]+|N/A)"),
)


def parse_banner(text):
    """The driver version and the highest CUDA version it supports, from plain `nvidia-smi`."""
    for pattern in BANNER_PATTERNS:
        match = pattern.search(text)
        if match:
            cuda = match.group("cuda")
            return {"driver": match.group("driver"), "cuda": None if cuda == "N/A" else cuda}
    raise ToolError("no driver/CUDA version in the nvidia-smi banner")


def collect_gpus(options):
    if find_tool("nvidia-smi") is None:
        return {"present": False, "count": 0, "devices": [], "reason": "nvidia-smi not found"}
    results = {}

    def run_query(names):
        argv = ["nvidia-smi", "--query-gpu=" + ",".join(names), "--format=csv,noheader,nounits"]
        return run_tool(argv, TOOL_TIMEOUT)

    def query_devices():
        health = options.get("gpu_health", True)
        results["csv"], results["fields"] = query_gpu_fields(run_query, health)

    def query_banner():
        results["banner"] = run_tool(["nvidia-smi"], TOOL_TIMEOUT)

    errors = run_parallel({"csv": query_devices, "banner": query_banner}, TOOL_TIMEOUT + 2)
    if errors:
        return {"present": True, "error": "; ".join(sorted(set(errors.values())))}
    asked = results["fields"]
    names = [OLD_NAME_OF.get(name, name) for name in asked]
    devices = parse_gpu_csv(results["csv"], names)
    if options.get("gpu_health", True):
        for device in devices:
            device["pcie.aer_correctable"] = read_aer_counters(options, device["pci.bus_id"])
    versions = parse_banner(results["banner"])
    return {
        "present": True,
        "count": len(devices),
        "devices": devices,
        "fields_unknown": [name for name in GPU_FIELDS if name not in names],
        "driver": versions["driver"],
        "cuda_driver": versions["cuda"],
        "nvlink": None,
    }


# nvidia-smi's `00000000:4B:00.0`; sysfs names the device `0000:4b:00.0`.
PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")


def parse_aer_counters(text):
    """`/sys/bus/pci/devices/<dev>/aer_dev_correctable` -> {name: count}, names as the kernel
    prints them (`BadTLP 3`; the ABI document's older sample: `Bad TLP 3`)."""
    counters = {}
    for line in text.splitlines():
        name, _, count = line.strip().rpartition(" ")
        if name and count.isdigit():
            counters[name.strip()] = int(count)
    return counters


def read_aer_counters(options, bus_id):
    """The GPU's correctable PCIe error counts since boot, from sysfs (no nvidia-smi call);
    None when the kernel keeps none for it (no AER, or firmware-first error handling)."""
    match = PCI_BUS_ID.match(bus_id or "")
    if match is None:
        return None
    device = "%s:%s:%s.%s" % (bus_id.split(":")[0][-4:].rjust(4, "0"), *match.groups())
    path = os.path.join(options.get("sysfs", "/sys"), "bus", "pci", "devices", device.lower(),
                        "aer_dev_correctable")  # fmt: skip
    text = read_text(path)
    return parse_aer_counters(text) if text else None


# Compute processes on the GPUs (a previous job left running). The name goes last: it may
# hold commas, so each line splits into at most four fields.
COMPUTE_APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,used_memory,process_name"


def parse_compute_apps(text):
    """`--query-compute-apps=gpu_uuid,pid,used_memory,process_name --format=csv,noheader,
    nounits` -> [{gpu_uuid, pid, used_memory_mib, name}]; no process prints nothing."""
    apps = []
    for line in text.strip().splitlines():
        fields = [part.strip() for part in line.split(",", 3)]
        if len(fields) != 4 or not fields[1].isdigit():
            raise ToolError("unexpected nvidia-smi compute-apps line: %r" % line[:200])
        memory = _csv_value(fields[2])
        apps.append(
            {
                "gpu_uuid": fields[0],
                "pid": int(fields[1]),
                "used_memory_mib": int(memory) if memory and memory.isdigit() else None,
                "name": _csv_value(fields[3]),
            }
        )
    return apps


def collect_gpu_processes(options):
    if find_tool("nvidia-smi") is None:
        return {"processes": [], "reason": "nvidia-smi not found"}
    text = run_tool(
        ["nvidia-smi", COMPUTE_APPS_QUERY, "--format=csv,noheader,nounits"], TOOL_TIMEOUT
    )
    return {"processes": parse_compute_apps(text)}


def collect_nvlink(options):
    """Link status, and the error counters only where a link is up: one more nvidia-smi
    call on NVLink nodes, none elsewhere."""
    if find_tool("nvidia-smi") is None:
        return {"gpus": [], "reason": "nvidia-smi not found"}
    end = time.monotonic() + TOOL_TIMEOUT + 4  # both calls within the collector's deadline
    gpus = parse_nvlink_status(run_tool(["nvidia-smi", "nvlink", "--status"], TOOL_TIMEOUT))
    active = [sum(1 for speed in gpu["links"] if speed) for gpu in gpus]
    facts = {
        "gpus": gpus,
        "active_links": active,
        "present": bool(gpus) and all(count > 0 for count in active),
    }
    if any(active):
        try:
            argv = ["nvidia-smi", "nvlink", "--errorcounters"]
            left = min(TOOL_TIMEOUT, max(1.0, end - time.monotonic()))
            facts["errors"] = parse_nvlink_errors(run_tool(argv, left))
        except ToolError as error:
            facts["errors_error"] = str(error)[:300]
    return facts


TORCH_SNIPPET = r"""
import json, torch
info = {"version": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "device_count": 0, "nccl": None,
        "arch_list": []}
if info["cuda_available"]:
    info["device_count"] = torch.cuda.device_count()
    info["arch_list"] = torch.cuda.get_arch_list()
    info["capabilities"] = sorted({"%d.%d" % torch.cuda.get_device_capability(i)
                                   for i in range(info["device_count"])})
try:
    info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as error:
    info["nccl_error"] = str(error)[:200]
print(json.dumps(info))
"""


def add_site_packages():
    """The probe starts with `python -S` (processing every .pth file costs ~0.2 s of CPU per
    start on a well-stocked interpreter); the site-packages folders are all we need. Under -S
    a virtualenv's interpreter still has the base install's prefix, so its pyvenv.cfg is read
    here as site.py would: the facts must be what the job's interpreter imports."""
    import site

    prefixes, user_site = _venv_prefixes()
    folders = list(site.getsitepackages(prefixes) if prefixes else site.getsitepackages())
    if user_site and getattr(site, "ENABLE_USER_SITE", True) is not False:
        folders.append(site.getusersitepackages())
    for folder in folders:
        if folder not in sys.path and os.path.isdir(folder):
            sys.path.append(folder)


def _venv_prefixes():
    """(site prefixes, whether the user site applies) of the virtualenv this interpreter runs
    in, found as site.venv() finds it; (None, True) outside a virtualenv."""
    executable = os.path.dirname(os.path.abspath(sys.executable))
    for folder in (executable, os.path.dirname(executable)):
        config = read_text(os.path.join(folder, "pyvenv.cfg"))
        if config is None:
            continue
        system_site = re.search(
            r"^\s*include-system-site-packages\s*=\s*(\S+)", config, re.M | re.I
        )
        prefixes = [folder]
        if system_site and system_site.group(1).lower() == "true":
            prefixes += [sys.base_prefix, sys.base_exec_prefix]
        return prefixes, False
    return None, True


def _torch_files():
    """torch's version facts read from its files, without paying for `import torch`."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None and not sys.flags.no_site:
        return None
    if spec is None:  # maybe installed through a .pth file (editable builds): full site now
        import site

        site.main()
        spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    text = read_text(os.path.join(os.path.dirname(spec.origin), "version.py")) or ""
    facts = {"path": os.path.dirname(spec.origin)}  # type: dict[str, str | None]
    for key, name in (("version", "__version__"), ("cuda", "cuda"), ("hip", "hip")):
        match = re.search(r"^%s\s*(?::\s*[^=]+)?=\s*(.+)$" % re.escape(name), text, re.M)
        value = match.group(1).strip() if match else None
        facts[key] = None if value in (None, "None") else value.strip("'\"")
    return facts


NCCL_WHEEL = re.compile(r"^nvidia[-_]nccl(?:[-_](cu\d+))?-([^-]+)\.dist-info$", re.I)


def _nccl_wheel(folders):
    """The nvidia-nccl-cuXX wheel's version, from its dist-info folder name (importlib.metadata
    would cost more to import than the whole rest of the probe)."""
    found = {}  # type: dict[str, str]
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            match = NCCL_WHEEL.match(name)
            if match:
                found.setdefault((match.group(1) or "").lower(), match.group(2))
    for flavour in ("cu13", "cu12", "cu11", ""):
        if flavour in found:
            return found[flavour]
    return None


def collect_torch(options):
    facts = _torch_files()
    if facts is None:
        return {"present": False, "interpreter": sys.executable, "reason": "torch not importable"}
    # torch's own folder first (it is usually on sys.path too: each folder is read once).
    folders = dict.fromkeys([os.path.dirname(facts["path"]), *filter(None, sys.path)])
    facts.update(
        {"present": True, "interpreter": sys.executable, "nccl_wheel": _nccl_wheel(folders)}
    )
    # torch.distributed's *_object collectives decode through numpy: jobs using them die
    # on a node without it ("Numpy is not available"), although torch itself loads.
    import importlib.util

    facts["numpy"] = importlib.util.find_spec("numpy") is not None
    # Importing torch costs seconds; do it only where it can tell us more than its files:
    # a CUDA build on a node with GPUs (the NCCL actually loaded, devices, arch list), or
    # when the inventory asks for it (clusterkit.probe.import_torch).
    cuda_build = bool(facts.get("cuda") or facts.get("hip"))
    # (never for node-check: a health check must answer in well under a second).
    wanted = cuda_build and options.get("gpus_present") and not options.get("no_torch_import")
    if options.get("import_torch") or wanted:
        try:
            facts.update(json.loads(run_tool([sys.executable, "-c", TORCH_SNIPPET], 60)))
            facts["imported"] = True
        except (ToolError, ValueError) as error:
            facts["import_error"] = str(error)
    return facts


def collect_python(options):
    return {
        "version": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(
            sys.implementation.name, sys.implementation.name
        ),
    }


def collect_env(options):
    """Only the variables the control side names (`env_names`: the checks read them, see
    EnvFacts in clusterkit/facts.py): anything else may hold a secret, so collecting by
    prefix would copy tokens such as NVIDIA_API_KEY into reports."""
    names = options.get("env_names") or ()
    return {key: os.environ[key] for key in names if key in os.environ and key != "error"}


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


def collect_network(options):
    """Per interface: MTU, operstate, kind, ip's flags and addresses as "address/prefixlen";
    the main table's IPv4 routes (destination, interface), so the checks can tell which
    interface carries the traffic to the master."""
    interfaces = {}  # type: dict[str, dict]
    listed, error = read_interfaces(5)
    for entry in listed:
        iface = interfaces[entry["name"]] = {
            "mtu": entry["mtu"],
            "state": entry["operstate"],
            "kind": entry.get("kind"),
            "addresses": ["%s/%s" % (a["address"], a["prefixlen"]) for a in entry["addresses"]],
        }
        if entry["flags"] is not None:
            iface["flags"] = entry["flags"]
    facts = {"interfaces": interfaces, "routes": read_routes()}  # type: dict[str, object]
    if error:
        facts["error"] = error
    return facts


def read_routes():
    # type: () -> list[dict] | None
    """The first MAX_ROUTES IPv4 routes of the main table as {dst, dev}; None if unreadable."""
    try:
        listed = json.loads(run_tool(["ip", "-j", "-4", "route", "show"], 5) or "[]")
        return [
            {"dst": str(item.get("dst")), "dev": str(item.get("dev"))}
            for item in listed[:MAX_ROUTES]
            if isinstance(item, dict) and item.get("dst") and item.get("dev")
        ]
    except (ToolError, ValueError, TypeError):
        return None


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


IB_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery")


def _sysfs_label(text):
    """`5: LinkUp` -> `LinkUp`; None for a missing file."""
    return text.split(":")[-1].strip() if text else None


def _ib_counters(directory):
    """The port's error counters (since the driver loaded or they were cleared)."""
    counters = {}
    for name in IB_COUNTERS:
        value = (read_text(os.path.join(directory, name)) or "").strip()
        if value.isdigit():
            counters[name] = int(value)
    return counters


def collect_infiniband(options):
    """RDMA ports from sysfs (no tools): state, physical state, rate, error counters. The
    root is `options["sysfs"]` so tests read a tree laid out like /sys."""
    base = os.path.join(options.get("sysfs", "/sys"), "class", "infiniband")
    if not os.path.isdir(base):
        return {"devices": []}
    devices = []
    for name in sorted(os.listdir(base)):
        ports = []
        ports_dir = os.path.join(base, name, "ports")
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
            path = os.path.join(ports_dir, port)
            rate = read_text(os.path.join(path, "rate")) or ""
            match = re.match(r"([\d.]+) Gb/sec", rate)
            ports.append(
                {
                    "port": port,
                    "state": (read_text(os.path.join(path, "state")) or "").split(":")[-1].strip(),
                    "phys_state": _sysfs_label(read_text(os.path.join(path, "phys_state"))),
                    "rate_gbps": float(match.group(1)) if match else None,
                    "rate": rate.strip()[:40] or None,
                    "link_layer": read_text(os.path.join(path, "link_layer")),
                    "counters": _ib_counters(os.path.join(path, "counters")),
                }
            )
        devices.append({"name": name, "ports": ports})
    return {"devices": devices}


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


COLLECTORS = (
    ("system", collect_system),
    ("hostname", collect_hostname),
    ("gpus", collect_gpus),
    ("python", collect_python),
    ("env", collect_env),
    ("docker", collect_docker),
    ("network", collect_network),
    ("limits", collect_limits),
    ("clock", collect_clock),
    ("infiniband", collect_infiniband),
    ("gpu_processes", collect_gpu_processes),
    ("nvlink", collect_nvlink),
    ("memory", collect_memory),
    ("kernel_log", collect_kernel_log),
    ("nvme", collect_nvme),
    ("dstate", collect_dstate),
)


def run_parallel(jobs, timeout):
    """Run callables in daemon threads; return {name: error} for those that failed or hung."""
    errors = {}
    threads = {}
    for name, job in jobs.items():

        def target(name=name, job=job):
            try:
                job()
            except ToolError as error:
                errors[name] = str(error)
            except Exception as error:
                errors[name] = "%s: %s" % (type(error).__name__, error)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        threads[name] = thread
    end = time.monotonic() + timeout
    for name, thread in threads.items():
        thread.join(max(0.0, end - time.monotonic()))
        if thread.is_alive():
            errors[name] = "timeout: did not finish within %.0f s" % timeout
    return errors


def probe(options):
    started = time.monotonic()
    if sys.flags.no_site:
        add_site_packages()
    facts = {}

    def job(name, collector):
        def run():
            facts[name] = collector(options)

        return run

    # `host_devices: false` leaves NVMe and D state unread (benchmarks/bench_host_health.py)
    skipped = {"torch"} if options.get("host_devices", True) else {"torch", "nvme", "dstate"}
    jobs = {name: job(name, collector) for name, collector in COLLECTORS if name not in skipped}
    errors = run_parallel(jobs, options.get("timeout", TOOL_TIMEOUT + 5))
    for name, message in errors.items():
        facts[name] = {"error": message}
    # torch goes last: whether to import it depends on whether GPUs were found.
    options = dict(options, gpus_present=bool(facts.get("gpus", {}).get("count")))
    errors = run_parallel({"torch": job("torch", collect_torch)}, 70)
    if errors:
        facts["torch"] = {"error": errors["torch"]}
    return {"probe_version": PROBE_VERSION, "facts": facts, "seconds": time.monotonic() - started}


def main(argv):
    stop_tools_on_signals()
    options = json.loads(argv[1]) if len(argv) > 1 else {}
    emit(probe(options))
    # Daemon threads still blocked on a wedged tool must not keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
