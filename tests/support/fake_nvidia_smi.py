"""Stand-in for `nvidia-smi` on test nodes, which have no GPU.

It replays the real tool's output formats (see tests/fixtures/nvidia-smi/) from a per-node JSON
state file, so that probes parse exactly what they would parse on a GPU node:

    fake_nvidia_smi.py STATE_JSON [nvidia-smi arguments...]

State: {"mode": "normal"|"hang"|"fail"|"mismatch", "banner": "classic"|"r610",
"driver": "550.54.15", "cuda": "12.4", "gpus": [{<query field name>: value, ...}, ...],
"unknown_fields": [query field names this driver rejects, as an older one does],
"processes": [{"gpu": index, "pid": 4242, "name": "python", "used_memory": MiB}, ...]}.
A GPU's "nvlink" entry lists its links' speeds in GB/s (null: `<inactive>`); without one the
GPU has no NVLink. Processes appear in the summary's process table and in the query.
GPU values are raw numbers or strings; units are added here as nvidia-smi adds them. A value
written as "[Not Supported]" or "[N/A]" is printed verbatim; a field the GPU lacks prints "[N/A]".
`--query-remapped-rows` reads the same remapped_rows.* values: the pending and failure flags
are stored as the driver prints them in both queries, "Yes"/"No".

It runs on every node many times per test, under `python3 -S -E`: stdlib only, no work beyond
what the invocation needs, and Python 3.8 compatible syntax.
"""

# ruff: noqa: UP031  (printf-style widths mirror the C layouts being reproduced)
from __future__ import annotations

import json
import sys
import time

# Canonical query field -> unit shown in the CSV header ("" = none).
FIELD_UNITS = {
    "timestamp": "",
    "driver_version": "",
    "count": "",
    "name": "",
    "serial": "",
    "uuid": "",
    "pci.bus_id": "",
    "pci.domain": "",
    "pci.bus": "",
    "pci.device": "",
    "pci.device_id": "",
    "pci.sub_device_id": "",
    "pcie.link.gen.current": "",
    "pcie.link.gen.max": "",
    "pcie.link.width.current": "",
    "pcie.link.width.max": "",
    "index": "",
    "minor_number": "",
    "vbios_version": "",
    "inforom.img": "",
    "inforom.oem": "",
    "inforom.ecc": "",
    "inforom.pwr": "",
    "display_mode": "",
    "display_active": "",
    "persistence_mode": "",
    "compute_mode": "",
    "compute_cap": "",
    "pstate": "",
    "fan.speed": "%",
    "memory.total": "MiB",
    "memory.reserved": "MiB",
    "memory.used": "MiB",
    "memory.free": "MiB",
    "utilization.gpu": "%",
    "utilization.memory": "%",
    "temperature.gpu": "",
    "temperature.memory": "",
    "power.draw": "W",
    "power.limit": "W",
    "enforced.power.limit": "W",
    "power.default_limit": "W",
    "power.max_limit": "W",
    "clocks.sm": "MHz",
    "clocks.mem": "MHz",
    "clocks.max.sm": "MHz",
    "clocks.max.mem": "MHz",
    "ecc.mode.current": "",
    "ecc.mode.pending": "",
    "ecc.errors.corrected.volatile.total": "",
    "ecc.errors.uncorrected.volatile.total": "",
    "ecc.errors.corrected.aggregate.total": "",
    "ecc.errors.uncorrected.aggregate.total": "",
    "ecc.errors.corrected.volatile.sram": "",
    "ecc.errors.corrected.volatile.dram": "",
    "ecc.errors.uncorrected.volatile.sram": "",
    "ecc.errors.uncorrected.volatile.dram": "",
    "ecc.errors.corrected.aggregate.sram": "",
    "ecc.errors.corrected.aggregate.dram": "",
    "ecc.errors.uncorrected.aggregate.sram": "",
    "ecc.errors.uncorrected.aggregate.dram": "",
    "pcie.link.gen.gpumax": "",
    "pcie.link.gen.hostmax": "",
    "clocks_event_reasons.active": "",
    "temperature.gpu.tlimit": "",
    "retired_pages.single_bit_ecc.count": "",
    "retired_pages.double_bit.count": "",
    "retired_pages.pending": "",
    "remapped_rows.correctable": "",
    "remapped_rows.uncorrectable": "",
    "remapped_rows.pending": "",
    "remapped_rows.failure": "",
    "mig.mode.current": "",
    "mig.mode.pending": "",
    "reset_status.reset_required": "",
    "reset_status.drain_and_reset_recommended": "",
}

# Alternative spellings nvidia-smi accepts; the header shows the canonical name.
FIELD_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "persistence-mode": "persistence_mode",
    "compute-mode": "compute_mode",
    "compute-cap": "compute_cap",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
    "clocks.max.memory": "clocks.max.mem",
    "clocks.max.sm": "clocks.max.sm",
    "power.limit": "power.limit",
    "pcie.link.gen.gpucurrent": "pcie.link.gen.current",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "inforom.image": "inforom.img",
    "inforom.power": "inforom.pwr",
    # the name before driver 535; a driver whose state lists the new name as unknown
    # prints this one in the header
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
}

FAILED_TO_COMMUNICATE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
NVML_MISMATCH = (
    "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {}\n"
)
INVALID_COMBINATION = (
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
)
UNKNOWN_OPTION = "ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n\n"
EXIT_INVALID_ARGUMENT = 2
EXIT_DRIVER_NOT_LOADED = 9
EXIT_LIB_RM_VERSION_MISMATCH = 18

WIDE_RULE = "+" + "-" * 89 + "+"
COLUMN_RULE = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
HEADER_ROWS = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
)
# The driver 550 layout; R580+ widened the PID column by six characters.
PROCESS_HEADER_CLASSIC = (
    "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |"
)
PROCESS_HEADER_R610 = (
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |"
)


def is_marker(value: object) -> bool:
    """True for the bracketed placeholders nvidia-smi prints instead of a value."""
    return isinstance(value, str) and value.startswith("[")


def field_value(state: dict, gpu: dict, field: str, units: bool) -> str:
    """One CSV cell, formatted like nvidia-smi (units appended unless `nounits`)."""
    if field == "count":
        return str(len(state.get("gpus", [])))
    if field == "driver_version":
        return str(state.get("driver", "[N/A]"))
    if field == "timestamp":
        now = time.time()
        return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + ".%03d" % (
            int(now * 1000) % 1000
        )
    value = gpu.get(field)
    if value is None and field == "memory.free" and "memory.total" in gpu:
        value = gpu["memory.total"] - gpu.get("memory.used", 0) - gpu.get("memory.reserved", 0)
    if value is None:
        return "[N/A]"
    if is_marker(value):
        return str(value)
    unit = FIELD_UNITS[field]
    if unit == "W":
        text = "%.2f" % float(value)
    elif isinstance(value, bool):
        text = "Enabled" if value else "Disabled"
    else:
        text = str(value)
    return text + " " + unit if (unit and units) else text


def header_name(field: str) -> str:
    unit = FIELD_UNITS[field]
    return field + (" [" + unit + "]" if unit else "")


def query_gpu(state: dict, gpus: list, fields_arg: str, format_arg: str) -> int:
    """`--query-gpu=FIELDS --format=csv[,noheader][,nounits]`."""
    fields = []
    unknown = set(state.get("unknown_fields", ()))  # names an older driver does not know
    for requested in fields_arg.split(","):
        requested = requested.strip()
        if not requested:
            continue
        canonical = FIELD_ALIASES.get(requested, requested)
        if canonical not in FIELD_UNITS or requested in unknown:
            sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % requested)
            return EXIT_INVALID_ARGUMENT
        fields.append(canonical)
    options = [option.strip() for option in format_arg.split(",")]
    if "csv" not in options or not fields:
        sys.stdout.write(INVALID_COMBINATION)
        return EXIT_INVALID_ARGUMENT
    units = "nounits" not in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(header_name(field) for field in fields))
    for gpu in gpus:
        lines.append(", ".join(field_value(state, gpu, field, units) for field in fields))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


# `--query-compute-apps` fields: canonical name -> unit (aliases below).
APP_FIELDS = {
    "timestamp": "",
    "gpu_name": "",
    "gpu_bus_id": "",
    "gpu_serial": "",
    "gpu_uuid": "",
    "pid": "",
    "process_name": "",
    "used_gpu_memory": "MiB",
}
APP_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}


def query_apps(state: dict, gpus: list, fields_arg: str, format_arg: str) -> int:
    """`--query-compute-apps=FIELDS --format=csv[,noheader][,nounits]`: one line per process
    (nothing at all when none runs)."""
    fields = []
    for requested in fields_arg.split(","):
        requested = requested.strip()
        canonical = APP_ALIASES.get(requested, requested)
        if canonical not in APP_FIELDS:
            sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % requested)
            return EXIT_INVALID_ARGUMENT
        fields.append(canonical)
    options = [option.strip() for option in format_arg.split(",")]
    units = "nounits" not in options
    by_index = {gpu.get("index"): gpu for gpu in gpus}
    lines = []
    if "noheader" not in options:
        lines.append(
            ", ".join(f + (" [%s]" % APP_FIELDS[f] if APP_FIELDS[f] else "") for f in fields)
        )
    for app in state.get("processes", []):
        gpu = by_index.get(app.get("gpu"))
        if gpu is None:
            continue
        values = {
            "timestamp": field_value(state, gpu, "timestamp", units),
            "gpu_name": str(gpu.get("name")),
            "gpu_bus_id": str(gpu.get("pci.bus_id")),
            "gpu_serial": str(gpu.get("serial")),
            "gpu_uuid": str(gpu.get("uuid")),
            "pid": str(app.get("pid")),
            "process_name": str(app.get("name", "[Not Found]")),
            "used_gpu_memory": str(app.get("used_memory")) + (" MiB" if units else ""),
        }
        lines.append(", ".join(values[field] for field in fields))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


# `--query-remapped-rows` fields: the name asked -> the GPU record's key. The header repeats
# each name as asked and no field has a unit (recorded:
# tests/fixtures/nvidia-smi/query-remapped-rows-after-reset-x4.txt).
REMAP_FIELDS = {
    "timestamp": "timestamp",
    "gpu_bus_id": "pci.bus_id",
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "remapped_rows.correctable": "remapped_rows.correctable",
    "remapped_rows.uncorrectable": "remapped_rows.uncorrectable",
    "remapped_rows.pending": "remapped_rows.pending",
    "remapped_rows.failure": "remapped_rows.failure",
}


def query_remapped_rows(state: dict, gpus: list, fields_arg: str, format_arg: str) -> int:
    """`--query-remapped-rows=FIELDS --format=csv[,noheader][,nounits]`: one line per GPU,
    the counts as numbers and the pending/failure flags as Yes/No."""
    fields = []
    for requested in fields_arg.split(","):
        requested = requested.strip()
        if requested not in REMAP_FIELDS:
            sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % requested)
            return EXIT_INVALID_ARGUMENT
        fields.append(requested)
    options = [option.strip() for option in format_arg.split(",")]
    if "csv" not in options:
        sys.stdout.write(INVALID_COMBINATION)
        return EXIT_INVALID_ARGUMENT
    lines = [] if "noheader" in options else [", ".join(fields)]
    for gpu in gpus:
        cells = [field_value(state, gpu, REMAP_FIELDS[field], False) for field in fields]
        lines.append(", ".join(cells))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def nvlink_status(gpus: list) -> int:
    """`nvidia-smi nvlink --status`: each GPU, then one line per link (speed or inactive)."""
    lines = []
    for gpu in gpus:
        lines.append("GPU %s: %s (UUID: %s)" % (gpu.get("index"), gpu.get("name"), gpu.get("uuid")))
        for number, speed in enumerate(gpu.get("nvlink") or []):
            state = "<inactive>" if speed is None else "%.3f GB/s" % speed
            lines.append("\t Link %d: %s" % (number, state))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def nvlink_errors(gpus: list) -> int:
    """`nvidia-smi nvlink --errorcounters`: per GPU and link, Replay, Recovery and CRC lines
    and a blank line; counts from the GPU's "nvlink_errors" {link: {"replay": n, ...}}."""
    lines = []
    for gpu in gpus:
        lines.append("GPU %s: %s (UUID: %s)" % (gpu.get("index"), gpu.get("name"), gpu.get("uuid")))
        counts = gpu.get("nvlink_errors") or {}
        for number in range(len(gpu.get("nvlink") or [])):
            link = counts.get(str(number)) or {}
            for label in ("Replay", "Recovery", "CRC"):
                lines.append(
                    "\t Link %d: %s Errors: %d" % (number, label, link.get(label.lower(), 0))
                )
            lines.append("")
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def list_gpus(gpus: list) -> int:
    """`-L`: one line per GPU with its UUID."""
    for gpu in gpus:
        sys.stdout.write(
            "GPU %s: %s (UUID: %s)\n" % (gpu.get("index"), gpu.get("name"), gpu.get("uuid"))
        )
    return 0


def version(state: dict) -> int:
    """`--version`, in the layout of the state's banner style."""
    driver = str(state.get("driver", ""))
    cuda = str(state.get("cuda", ""))
    nvml = ".".join(driver.split(".")[:2])
    lines = ["NVIDIA-SMI version  : " + driver, "NVML version        : " + nvml]
    if state.get("banner") == "r610":
        lines += [
            'DRIVER version      : Deprecated, see "KMD version" instead',
            'CUDA version        : Deprecated, see "CUDA UMD version" instead',
            "KMD version         : " + driver,
            "CUDA UMD version    : " + cuda,
        ]
    else:
        lines += ["DRIVER version      : " + driver, "CUDA Version        : " + cuda]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def short(value: object, unknown: str = "N/A") -> str:
    """A value as the summary table shows it: placeholders become plain N/A."""
    if value is None or is_marker(value):
        return unknown
    return str(value)


def gpu_rows(gpu: dict) -> list:
    """The three table rows of one GPU, column widths as in the 550+ layout."""
    name = str(gpu.get("name", ""))
    if len(name) > 27:
        name = name[:24] + "..."
    persistence = "On" if gpu.get("persistence_mode") in ("Enabled", True) else "Off"
    display = "On" if gpu.get("display_active") in ("Enabled", True) else "Off"
    ecc_mode = gpu.get("ecc.mode.current")
    if ecc_mode in ("Enabled", True):
        ecc = short(gpu.get("ecc.errors.uncorrected.volatile.total"))
    elif ecc_mode in ("Disabled", False):
        ecc = "Off"
    else:
        ecc = "N/A"
    fan = gpu.get("fan.speed")
    fan_text = "N/A" if fan is None or is_marker(fan) else "%s%%" % fan
    temp = gpu.get("temperature.gpu")
    temp_text = "N/A" if temp is None or is_marker(temp) else "%sC" % temp

    def watts(value: object) -> str:
        return "N/A" if value is None or is_marker(value) else "%dW" % round(float(value))

    power = "%s / %5s" % (watts(gpu.get("power.draw")), watts(gpu.get("power.limit")))
    memory = "%sMiB / %6sMiB" % (gpu.get("memory.used", 0), gpu.get("memory.total", 0))
    util = gpu.get("utilization.gpu")
    util_text = "N/A" if util is None or is_marker(util) else "%s%%" % util
    left = "%4s   %3s    %-2s" % (fan_text, temp_text, short(gpu.get("pstate")))
    return [
        "|%4s  %-31s%-4s|   %s %3s | %20s |"
        % (gpu.get("index"), name, persistence, gpu.get("pci.bus_id", ""), display, ecc),
        "|%s%s |%23s |%8s %12s |"
        % (left, power.rjust(40 - len(left)), memory, util_text, short(gpu.get("compute_mode"))),
        "|%41s|%24s| %20s |" % ("", "", short(gpu.get("mig.mode.current"))),
    ]


def summary(state: dict, gpus: list) -> int:
    """Plain `nvidia-smi`: banner, GPU table and the (empty) process table."""
    driver = str(state.get("driver", ""))
    cuda = str(state.get("cuda", ""))
    r610 = state.get("banner") == "r610"
    if r610:
        banner = "| NVIDIA-SMI %-22s KMD Version: %-13s CUDA UMD Version: %-9s|" % (
            driver,
            driver,
            cuda,
        )
    else:
        banner = "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (
            driver,
            driver,
            cuda,
        )
    lines = [time.strftime("%a %b %e %H:%M:%S %Y") + "       ", WIDE_RULE, banner]
    lines.append(COLUMN_RULE if r610 else "|" + COLUMN_RULE[1:])
    lines.extend(HEADER_ROWS)
    for gpu in gpus:
        lines.extend(gpu_rows(gpu))
        lines.append(COLUMN_RULE)
    lines.append("" if r610 else " " * 89)
    lines.append(WIDE_RULE)
    lines.append("| Processes:".ljust(90) + "|")
    lines.append(PROCESS_HEADER_R610 if r610 else PROCESS_HEADER_CLASSIC)
    lines.append("|        ID   ID".ljust(79) + "Usage      |")
    lines.append("|" + "=" * 89 + "|")
    rows = process_rows(state, gpus, r610)
    lines.extend(rows or ["|  No running processes found".ljust(90) + "|"])
    lines.append(WIDE_RULE)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def process_rows(state: dict, gpus: list, r610: bool) -> list:
    """Rows of the summary's process table; R580+ widened the PID column by six characters
    and narrowed the name, which is cut from the left behind "..." when too long."""
    pid_width, name_width = (15, 32) if r610 else (9, 38)
    shown = {gpu.get("index") for gpu in gpus}
    rows = []
    for app in state.get("processes", []):
        if app.get("gpu") not in shown:
            continue
        name = str(app.get("name", ""))
        if len(name) > name_width:
            name = "..." + name[-(name_width - 3) :]
        memory = "%sMiB" % app.get("used_memory")
        rows.append(
            "|%5s   N/A  N/A %*s %6s   %-*s %13s |"
            % (app.get("gpu"), pid_width, app.get("pid"), "C", name_width, name, memory)
        )
    return rows


def option_value(args: list, position: int, name: str) -> tuple:
    """Value of `--name=V`, `--name V` or `-x V` at args[position]; (value, next position)."""
    arg = args[position]
    if "=" in arg:
        return arg.split("=", 1)[1], position + 1
    if position + 1 >= len(args):
        return None, position + 1
    return args[position + 1], position + 2


def selected(gpus: list, ids: str | None) -> list:
    """GPUs named by `-i`/`--id` (indexes, UUIDs or bus ids), or all."""
    if ids is None:
        return gpus
    wanted = {item.strip() for item in ids.split(",")}
    return [
        gpu
        for gpu in gpus
        if str(gpu.get("index")) in wanted
        or gpu.get("uuid") in wanted
        or gpu.get("pci.bus_id") in wanted
    ]


def run(state: dict, args: list) -> int:
    mode = state.get("mode", "normal")
    if mode == "hang":
        while True:  # a wedged driver: never answers, only a signal ends it
            time.sleep(3600)
    if mode == "fail":
        sys.stdout.write(FAILED_TO_COMMUNICATE)
        return EXIT_DRIVER_NOT_LOADED
    if mode == "mismatch":
        sys.stdout.write(NVML_MISMATCH.format(state.get("nvml_library", "535.161")))
        return EXIT_LIB_RM_VERSION_MISMATCH

    query = fmt = ids = None
    action = "summary"
    position = 0
    while position < len(args):
        arg = args[position]
        if arg in ("-L", "--list-gpus"):
            action, position = "list", position + 1
        elif arg == "--version":
            action, position = "version", position + 1
        elif arg.startswith("--query-gpu"):
            query, position = option_value(args, position, "query-gpu")
            action = "query"
        elif arg.startswith("--query-compute-apps"):
            query, position = option_value(args, position, "query-compute-apps")
            action = "apps"
        elif arg.startswith("--query-remapped-rows"):
            query, position = option_value(args, position, "query-remapped-rows")
            action = "remapped-rows"
        elif arg == "nvlink" and position == 0:
            action, position = "nvlink", position + 1
        elif action == "nvlink" and arg in ("-s", "--status"):
            position += 1
        elif action == "nvlink" and arg in ("-e", "--errorcounters"):
            action, position = "nvlink-errors", position + 1
        elif arg.startswith("--format"):
            fmt, position = option_value(args, position, "format")
        elif arg in ("-i",) or arg.startswith("--id"):
            ids, position = option_value(args, position, "id")
        else:
            sys.stdout.write(UNKNOWN_OPTION % arg)
            return EXIT_INVALID_ARGUMENT

    gpus = selected(state.get("gpus", []), ids)
    if action == "query":
        if query is None or fmt is None:
            sys.stdout.write(INVALID_COMBINATION)
            return EXIT_INVALID_ARGUMENT
        return query_gpu(state, gpus, query, fmt)
    if action in ("apps", "remapped-rows"):
        if query is None or fmt is None:
            sys.stdout.write(INVALID_COMBINATION)
            return EXIT_INVALID_ARGUMENT
        answer = query_apps if action == "apps" else query_remapped_rows
        return answer(state, gpus, query, fmt)
    if action == "nvlink":
        return nvlink_status(gpus)
    if action == "nvlink-errors":
        return nvlink_errors(gpus)
    if action == "list":
        return list_gpus(gpus)
    if action == "version":
        return version(state)
    return summary(state, gpus)


def main() -> int:
    with open(sys.argv[1]) as handle:
        state = json.load(handle)
    try:
        return run(state, sys.argv[2:])
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
