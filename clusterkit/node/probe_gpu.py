"""GPU facts from nvidia-smi: the device query (with the health fields, and their older
names on older drivers), the banner, PCIe AER counters, compute processes and NVLink.
"""

import os
import re
import time

from clusterkit.node.nvlink import parse_nvlink_errors, parse_nvlink_status
from clusterkit.node.prelude import ToolError, find_tool, read_text, run_tool
from clusterkit.node.probe_common import TOOL_TIMEOUT, run_parallel

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
