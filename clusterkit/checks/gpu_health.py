"""GPU hardware health from nvidia-smi's query fields: HBM memory repair (row remapping,
page retirement), on-chip SRAM ECC counts, temperature against the driver's own limit, PCIe
link width and clock event reasons, and the kernel's PCIe replay counts (AER, from sysfs).
Each problem names the host, the GPU (index, bus id, serial or UUID), what was read and what
to do about it.

What is normal stays quiet: `[N/A]` fields (a GPU generation without the feature), lifetime
corrected HBM (DRAM) ECC counts, the PCIe generation (it drops to gen 1 on an idle GPU to save
power) and the idle, application-clock, power-cap, sync-boost and display clock reasons."""

from __future__ import annotations

import re
from collections.abc import Callable

from clusterkit.checks.model import Finding, HostProblem, Status, graded
from clusterkit.checks.parity import Facts
from clusterkit.checks.registry import CheckId
from clusterkit.facts import GpuDevice, HostFacts, collected
from clusterkit.hostlist import fold_numbers

# More uncorrectable-error remaps than this warns: a bank has 8 spare rows (the "Max"
# bucket of nvidia-smi's Bank Remap Availability Histogram), so a GPU past it is using up
# its repairs and heading for a remapping failure.
REMAP_UNCORRECTABLE_WARN = 8
# More than this fails: azurehpc-health-checks' check_gpu_ecc fails a GPU whose
# remapped_rows.uncorrectable is above 512 ("Row remap uncorrectable error count is too
# high", FaultCode NHC2007) and has it replaced.
REMAP_UNCORRECTABLE_FAIL = 512
# Corrected SRAM (on-chip: register file, L1/L2) ECC errors above this warn, volatile or
# aggregate: azurehpc-health-checks' default configuration (`check_gpu_ecc 20000000 10000`)
# flags a GPU above 10000 ("High SRAM correctable ECC error count", NHC2019). SRAM has no
# repair like HBM's row remapping: a rising count is a chip on its way out.
SRAM_CORRECTED_WARN = 10000
# Temperature: nvidia-smi's `temperature.gpu.tlimit` is the driver's margin to the GPU's
# maximum operating temperature (`GPU T.Limit Temp`; a recorded H100 shows 53 C at 34 C, with
# slowdown at -2 C and shutdown at -8 C of that margin). At or below 0 the GPU is past its
# operating limit and about to slow down; a few degrees above it warns.
TLIMIT_FAIL = 0
TLIMIT_WARN = 5
# Where the driver gives no margin (Ampere and older print [N/A]): Meta GCM's gpu_temperature
# check goes CRITICAL above an operator threshold, 85 C in its documented example.
TEMPERATURE_WARN = 85
# Volta and older retire at most 64 pages; NVIDIA's page-retirement guidance treats a GPU
# near that table's end as a replacement candidate.
RETIRED_PAGES_WARN = 60
# clocks_event_reasons bits that mean the hardware is protecting itself; the others (0x1 GPU
# idle, 0x2 application clocks, 0x4 SW power cap, 0x10 sync boost, 0x100 display clock) are
# normal operation.
SLOWDOWN_REASONS = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}
# Before a job, the hardware's own protection fails a GPU: HW slowdown (0x8), HW thermal
# slowdown (0x40) and HW power brake (0x80) cut its clocks by half or more, and a synchronous
# job runs at that GPU's pace. DCGM's diagnostic fails a GPU on any of these and SW thermal
# slowdown while it runs (DcgmRecorder::CheckForClocksEvent, failure mask 0xE8); an idle GPU
# has no load to excuse them. SW thermal slowdown (0x20, the driver trimming clocks at its
# maximum operating temperature) warns: gpu.temperature judges that margin.
HW_PROTECTION = 0x8 | 0x40 | 0x80
PER_NODE = "measure what it costs: `clusterkit bench INVENTORY --per-node` runs each node alone"

# More replay-related PCIe errors than this since boot warns: DCGM's diagnostic PCIe test fails
# a GPU with more than 80 replays while it runs (`pcie.max_pcie_replays`), and its health watch
# more than 8 a minute ("the maximum recommended by RM"); a healthy link stays at or near 0.
PCIE_REPLAY_WARN = 80
# The AER correctable errors of a link retransmitting (sysfs names, kernel 4.19 and later, and
# the ABI document's older spelling): packets received bad (NAKed, so the partner replays), the
# GPU's own replay timer expiring, its replay number rolling over.
PCIE_REPLAY_COUNTERS = (
    *("BadTLP", "BadDLLP", "Rollover", "Timeout"),
    *("Bad TLP", "Bad DLLP", "RELAY_NUM Rollover", "REPLAY_NUM Rollover", "Replay Timer Timeout"),
)

Problem = tuple[Status, str, str]  # (status, evidence, what a person does)
RESET = "reset the GPU once idle (`nvidia-smi -r -i {index}`) or reboot the node"
REPLACE = "replace the GPU (RMA: open a support case with `nvidia-bug-report.sh` attached)"


def gpu_label(gpu: GpuDevice) -> str:
    """'GPU 3 (00000000:4B:00.0, serial 1654922000103)': index, bus id, serial or UUID."""
    ident = f"serial {gpu['serial']}" if gpu.get("serial") else gpu.get("uuid")
    parts = [str(part) for part in (gpu.get("pci.bus_id"), ident) if part]
    return f"GPU {gpu.get('index')}" + (f" ({', '.join(parts)})" if parts else "")


def _number(value: str | None) -> int | None:
    """A count from a CSV cell: None for [N/A] (already None), text or a negative number."""
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() else None


def _yes(value: str | None) -> bool:
    """`Yes` in --query-gpu, `1` in --query-remapped-rows: both mean set."""
    return str(value).strip().lower() in ("yes", "1", "true")


def _devices(host_facts: HostFacts) -> list[GpuDevice]:
    return collected(host_facts.get("gpus")).get("devices", [])


def row_remap_problems(gpu: GpuDevice) -> list[Problem]:
    """(status, evidence, action) for one GPU's row remapping (Ampere and newer)."""
    problems: list[Problem] = []
    index = gpu.get("index")
    if _yes(gpu.get("remapped_rows.failure")):
        problems.append((Status.FAIL, "row remapping failed (no spare rows left)", REPLACE))
    if _yes(gpu.get("remapped_rows.pending")):
        action = RESET.format(index=index) + " to apply it"
        problems.append((Status.FAIL, "row remap pending", action))
    uncorrectable = _number(gpu.get("remapped_rows.uncorrectable"))
    if uncorrectable is not None and uncorrectable > REMAP_UNCORRECTABLE_FAIL:
        evidence = (
            "too many rows remapped for uncorrectable errors "
            f"({uncorrectable}, over {REMAP_UNCORRECTABLE_FAIL})"
        )
        problems.append((Status.FAIL, evidence, REPLACE))
    elif uncorrectable is not None and uncorrectable > REMAP_UNCORRECTABLE_WARN:
        evidence = f"{uncorrectable} rows remapped for uncorrectable errors"
        problems.append((Status.WARN, evidence, "plan its replacement: " + REPLACE))
    return problems


def sram_problems(gpu: GpuDevice) -> list[Problem]:
    """Corrected SRAM ECC errors over the bound (since the last reset, or in the GPU's
    lifetime), and any uncorrected SRAM error in its lifetime (the volatile count is
    gpu.ecc's)."""
    corrected = {
        "since reset": _number(gpu.get("ecc.errors.corrected.volatile.sram")),
        "lifetime": _number(gpu.get("ecc.errors.corrected.aggregate.sram")),
    }
    high = [f"{count} {when}" for when, count in corrected.items()
            if count is not None and count > SRAM_CORRECTED_WARN]  # fmt: skip
    problems: list[Problem] = []
    action = "watch whether the count rises; plan its replacement: " + REPLACE
    if high:
        evidence = f"corrected SRAM ECC errors {', '.join(high)} (over {SRAM_CORRECTED_WARN})"
        problems.append((Status.WARN, evidence, action))
    uncorrected = _number(gpu.get("ecc.errors.uncorrected.aggregate.sram"))
    if uncorrected:
        evidence = f"{uncorrected} uncorrected SRAM ECC errors in its lifetime"
        problems.append((Status.WARN, evidence, action))
    return problems


def _signed(value: str | None) -> int | None:
    """A temperature or margin from a CSV cell, negative ones too; None for anything else."""
    text = str(value).strip() if value is not None else ""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdigit() and len(digits) < 4 else None


def temperature_problems(gpu: GpuDevice) -> list[Problem]:
    """The driver's margin to the maximum operating temperature where it gives one, else the
    GPU's temperature against a fixed bound."""
    current = _signed(gpu.get("temperature.gpu"))
    margin = _signed(gpu.get("temperature.gpu.tlimit"))
    shown = f"GPU at {current} C" if current is not None else "GPU temperature"
    action = (
        "check cooling (fans, airflow, inlet temperature, a blocked heatsink; `nvidia-smi -q "
        "-d TEMPERATURE`) and drain the node until it runs cooler"
    )
    if margin is not None and margin <= TLIMIT_FAIL:
        evidence = (
            f"{shown}, {-margin} C past its maximum operating temperature (T.Limit {margin} C)"
        )
        return [(Status.FAIL, evidence, action)]
    if margin is not None and margin < TLIMIT_WARN:
        evidence = f"{shown}, {margin} C below its maximum operating temperature"
        return [(Status.WARN, evidence, action)]
    if margin is None and current is not None and current >= TEMPERATURE_WARN:
        evidence = f"{shown} (at or above {TEMPERATURE_WARN} C)"
        return [(Status.WARN, evidence, action)]
    return []


def retired_page_problems(gpu: GpuDevice) -> list[Problem]:
    """(status, evidence, action) for one GPU's page retirement (Volta and older)."""
    problems: list[Problem] = []
    index = gpu.get("index")
    if _yes(gpu.get("retired_pages.pending")):
        action = RESET.format(index=index) + " to retire them"
        problems.append((Status.FAIL, "page retirement pending", action))
    retired = [_number(gpu.get("retired_pages.single_bit_ecc.count")),
               _number(gpu.get("retired_pages.double_bit.count"))]  # fmt: skip
    total = sum(count for count in retired if count is not None)
    if total >= RETIRED_PAGES_WARN:
        evidence = f"{total} pages retired (of at most 64)"
        problems.append((Status.WARN, evidence, "plan its replacement: " + REPLACE))
    return problems


def _graded(
    check_id: CheckId,
    facts: Facts,
    problems_of: Callable[[GpuDevice], list[Problem]],
    *,
    what: str,
    ok: str,
) -> list[Finding]:
    """One finding per status found (fail and warn hosts apart), else one OK; skip without
    GPUs. `problems_of(gpu)` -> [(status, evidence, action)]."""
    checked = [h for h, f in facts.items() if _devices(f)]
    if not checked:
        return [Finding(check_id, Status.SKIP, "not checked: no host has NVIDIA GPUs")]
    problems: list[HostProblem] = [
        (status, host, f"{gpu_label(gpu)}: {evidence}", f"{gpu_label(gpu)}: {action}")
        for host in checked
        for gpu in _devices(facts[host])
        for status, evidence, action in problems_of(gpu)
    ]
    return graded(check_id, checked, problems, what=what, ok=ok)


def pcie_width_problems(gpu: GpuDevice) -> list[Problem]:
    """A link trained narrower than its maximum (x8 of x16 halves host bandwidth). The
    generation is not judged: it drops to gen 1 whenever the GPU is idle."""
    current = _number(gpu.get("pcie.link.width.current"))
    widest = _number(gpu.get("pcie.link.width.max"))
    if current is None or widest is None or current >= widest:
        return []
    evidence = f"PCIe link x{current} of x{widest}"
    action = (
        "reseat the GPU or its riser and check the slot's BIOS link settings "
        f"(`lspci -vv -s {gpu.get('pci.bus_id')}`: LnkSta against LnkCap); replace the GPU "
        "if it persists"
    )
    return [(Status.WARN, evidence, action)]


def pcie_replay_problems(gpu: GpuDevice) -> list[Problem]:
    """Link-level retransmissions counted by the kernel's AER for this GPU since boot."""
    counters = gpu.get("pcie.aer_correctable")
    if counters is None:
        return []
    counted = {name: counters[name] for name in PCIE_REPLAY_COUNTERS
               if counters.get(name, 0) > 0}  # fmt: skip
    total = sum(counted.values())
    if total <= PCIE_REPLAY_WARN:
        return []
    shown = ", ".join(f"{name} {count}" for name, count in counted.items())
    evidence = f"{total} PCIe replay errors since boot ({shown})"
    bus = gpu.get("pci.bus_id")
    action = (
        "watch whether the count rises under load (aer_dev_correctable under /sys/bus/pci/"
        f"devices); reseat the GPU or its riser (`lspci -vv -s {bus}`); replace the GPU if it "
        "keeps rising"
    )
    return [(Status.WARN, evidence, action)]


def _pcie_replay(facts: Facts) -> list[Finding]:
    """gpu.pcie-replay: none when no GPU's AER counters could be read (a kernel without AER,
    or firmware-first error handling that keeps the counts in the BMC)."""
    read = {
        host: host_facts
        for host, host_facts in facts.items()
        if any(gpu.get("pcie.aer_correctable") is not None for gpu in _devices(host_facts))
    }
    if not read:
        return []
    return _graded(
        "gpu.pcie-replay",
        read,
        pcie_replay_problems,
        what="PCIe link replaying (corrupted packets resent)",
        ok="no GPU's PCIe link shows more than a few replays since boot",
    )


def _reason_mask(gpu: GpuDevice) -> int | None:
    """The clocks_event_reasons.active bit mask; None when unread or not hex."""
    text = str(gpu.get("clocks_event_reasons.active") or "").strip()
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _slowdown(gpu: GpuDevice, *, before_job: bool) -> tuple[Status, str, str] | None:
    """(status, the reasons' names, action) for a GPU slowed by a protecting reason."""
    mask = _reason_mask(gpu) or 0
    active = [name for bit, name in SLOWDOWN_REASONS.items() if mask & bit]
    if not active:
        return None
    status = Status.FAIL if before_job and mask & HW_PROTECTION else Status.WARN
    action = (
        "check cooling (fans, airflow, inlet temperature; `nvidia-smi -q -d TEMPERATURE,"
        "PERFORMANCE`)"
        if mask & 0x60
        else "check the power supply and the BMC's event log (`nvidia-smi -q -d PERFORMANCE`)"
    )
    return status, ", ".join(active), action + "; drain the node if it persists; " + PER_NODE


def _temperatures(gpus: list[GpuDevice]) -> str:
    """', GPU 86-88 C, memory 95 C': each sensor's range over the GPUs, where read."""
    shown = []
    read = (
        ("GPU", [gpu.get("temperature.gpu") for gpu in gpus]),
        ("memory", [gpu.get("temperature.memory") for gpu in gpus]),
    )
    for label, cells in read:
        values = sorted(v for v in map(_number, cells) if v is not None)
        if values:
            span = f"{values[0]}" if values[0] == values[-1] else f"{values[0]}-{values[-1]}"
            shown.append(f"{label} {span} C")
    return "".join(", " + text for text in shown)


def clock_reason_problems(gpu: GpuDevice, *, before_job: bool = False) -> list[Problem]:
    """Active slowdown reasons, with the mask and the temperatures they go with. Under a
    running job (the launch watch) every reason warns: the job goes on at the slowed GPU's
    pace; before a job (`before_job=True`, as check grades it) the hardware's own
    protection fails."""
    found = _slowdown(gpu, before_job=before_job)
    if found is None:
        return []
    status, reasons, action = found
    mask = str(gpu.get("clocks_event_reasons.active")).strip()
    return [(status, f"clocks slowed: {reasons} ({mask}){_temperatures([gpu])}", action)]


def _gpus_named(gpus: list[GpuDevice]) -> str:
    """One GPU by its full label; several as 'GPUs 0-7' (an index not a number as read)."""
    if len(gpus) == 1:
        return gpu_label(gpus[0])
    indexes = [str(gpu.get("index")) for gpu in gpus]
    numbers = [int(index) for index in indexes if index.isdigit()]
    others = [index for index in indexes if not index.isdigit()]
    return "GPUs " + ", ".join(([fold_numbers(numbers)] if numbers else []) + others)


def _folded_slowdowns(host: str, gpus: list[GpuDevice]) -> list[HostProblem]:
    """One problem per host and kind of slowdown, its GPUs folded: 8 GPUs in HW thermal
    slowdown are one line, 'GPUs 0-7: clocks slowed: ..., GPU 88 C'."""
    groups: dict[tuple[Status, str, str], list[GpuDevice]] = {}
    for gpu in gpus:
        found = _slowdown(gpu, before_job=True)
        if found is not None:
            groups.setdefault(found, []).append(gpu)
    problems: list[HostProblem] = []
    for (status, reasons, action), members in groups.items():
        masks = {str(gpu.get("clocks_event_reasons.active")).strip() for gpu in members}
        shown = f" ({masks.pop()})" if len(masks) == 1 else ""
        evidence = f"{_gpus_named(members)}: clocks slowed: {reasons}{shown}"
        problems.append((status, host, evidence + _temperatures(members), action))
    return problems


def _clock_reasons(facts: Facts) -> list[Finding]:
    """gpu.clock-reasons, one line per host and kind of slowdown with its GPUs folded."""
    checked = [h for h, f in facts.items() if _devices(f)]
    if not checked:
        return [Finding("gpu.clock-reasons", Status.SKIP, "not checked: no host has NVIDIA GPUs")]
    problems = [p for host in checked for p in _folded_slowdowns(host, _devices(facts[host]))]
    return graded(
        "gpu.clock-reasons",
        checked,
        problems,
        what="GPU clocks slowed by the hardware",
        ok="no GPU is slowed by thermal, power-brake or hardware slowdown",
    )


def gpu_health_findings(facts: Facts) -> list[Finding]:
    """gpu.row-remap, gpu.retired-pages, gpu.sram-ecc, gpu.temperature, gpu.pcie-width,
    gpu.pcie-replay, gpu.clock-reasons."""
    return [
        *_graded(
            "gpu.row-remap",
            facts,
            row_remap_problems,
            what="GPU memory row remapping needs action",
            ok="no GPU has a pending or failed row remap",
        ),
        *_graded(
            "gpu.retired-pages",
            facts,
            retired_page_problems,
            what="GPU memory page retirement needs action",
            ok="no GPU has a page retirement pending",
        ),
        *_graded(
            "gpu.sram-ecc",
            facts,
            sram_problems,
            what="GPU on-chip (SRAM) memory errors",
            ok=f"no GPU has more than {SRAM_CORRECTED_WARN} corrected or any uncorrected SRAM "
            "errors on record",
        ),
        *_graded(
            "gpu.temperature",
            facts,
            temperature_problems,
            what="GPU temperature near or past its limit",
            ok="every GPU runs below its maximum operating temperature",
        ),
        *_graded(
            "gpu.pcie-width",
            facts,
            pcie_width_problems,
            what="PCIe link narrower than its maximum (host transfers slowed)",
            ok="every GPU's PCIe link runs at its full width",
        ),
        *_pcie_replay(facts),
        *_clock_reasons(facts),
    ]


BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
NEEDS = {REPLACE: "needs replacement"}
HOT = "over temperature needs cooling check"


def drain_notes(host_facts: HostFacts) -> list[str]:
    """Short words for a Slurm drain reason, `GPU 3 00000000:4B:00.0 remap pending needs
    reset`, for each failing memory repair. Node text never reaches it: the index must be
    digits and the bus id a bus id, else `?`."""
    notes = []
    for gpu in _devices(host_facts):
        index, bus = str(gpu.get("index")), str(gpu.get("pci.bus_id"))
        where = f"GPU {index if index.isdigit() else '?'} {bus if BUS_ID.fullmatch(bus) else '?'}"
        for status, evidence, action in row_remap_problems(gpu) + retired_page_problems(gpu):
            if status is Status.FAIL:
                short = evidence.split(" (")[0]
                notes.append(f"{where} {short} {NEEDS.get(action, 'needs reset')}")
        if any(status is Status.FAIL for status, _, _ in temperature_problems(gpu)):
            notes.append(f"{where} {HOT}")
    return notes + _slowdown_notes(_devices(host_facts))


def _slowdown_notes(gpus: list[GpuDevice]) -> list[str]:
    """`GPUs 0-7 HW slowdown, HW thermal slowdown needs cooling check`, one per kind of
    failing slowdown; only digit indexes are named (node text never reaches the reason)."""
    groups: dict[tuple[str, bool], list[int]] = {}
    for gpu in gpus:
        found = _slowdown(gpu, before_job=True)
        index = str(gpu.get("index"))
        if found is not None and found[0] is Status.FAIL:
            key = (found[1], "cooling" in found[2])
            groups.setdefault(key, []).append(int(index) if index.isdigit() else -1)
    notes = []
    for (reasons, thermal), indexes in groups.items():
        named = fold_numbers([i for i in indexes if i >= 0]) or "?"
        what = "cooling" if thermal else "power supply"
        notes.append(f"GPU{'s' if len(indexes) > 1 else ''} {named} {reasons} needs {what} check")
    return notes
