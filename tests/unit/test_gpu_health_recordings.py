"""The GPU health checks over real `nvidia-smi -q` recordings of several driver generations
(tests/fixtures/nvidia-smi/README.md names each source): a recorded pending remap fails,
healthy and idle recordings stay quiet.

`-q` prints the same NVML readings the probe asks with `--query-gpu` (its "Remapped Rows >
Pending" is remapped_rows.pending, its clock reason lines are the bits of
clocks_event_reasons.active); `query_line` writes them as the CSV line the probe parses, and
the probe's own parser and the real checks take it from there."""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.checks.gpu_health import drain_notes, gpu_health_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.node.collector import GPU_FIELDS, parse_gpu_csv

SMI = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"
GPU_HEADER = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
# NVML's clock event reason bits, in the order `-q` lists them (older drivers title the
# section "Clocks Throttle Reasons", 535 and later "Clocks Event Reasons").
REASON_BITS = {
    "Idle": 0x1,
    "Applications Clocks Setting": 0x2,
    "SW Power Cap": 0x4,
    "HW Slowdown": 0x8,
    "Sync Boost": 0x10,
    "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}
# --query-gpu field -> the `-q` path it is printed under (a GPU block's nesting, by "/").
Q_PATHS = {
    "uuid": "GPU UUID",
    "name": "Product Name",
    "pci.bus_id": "PCI/Bus Id",
    "persistence_mode": "Persistence Mode",
    "serial": "Serial Number",
    "remapped_rows.correctable": "Remapped Rows/Correctable Error",
    "remapped_rows.uncorrectable": "Remapped Rows/Uncorrectable Error",
    "remapped_rows.pending": "Remapped Rows/Pending",
    "remapped_rows.failure": "Remapped Rows/Remapping Failure Occurred",
    "retired_pages.single_bit_ecc.count": "Retired Pages/Single Bit ECC",
    "retired_pages.double_bit.count": "Retired Pages/Double Bit ECC",
    "retired_pages.pending": "Retired Pages/Pending Page Blacklist",
    "pcie.link.gen.current": "PCI/GPU Link Info/PCIe Generation/Current",
    "pcie.link.gen.max": "PCI/GPU Link Info/PCIe Generation/Max",
    "pcie.link.width.current": "PCI/GPU Link Info/Link Width/Current",
    "pcie.link.width.max": "PCI/GPU Link Info/Link Width/Max",
    "temperature.gpu": "Temperature/GPU Current Temp",
    "temperature.memory": "Temperature/Memory Current Temp",
}


def q_gpus(text: str) -> list[dict[str, str]]:
    """Each GPU block of `nvidia-smi -q` as {"PCI/GPU Link Info/Link Width/Current": "16x"}."""
    gpus: list[dict[str, str]] = []
    sections: list[tuple[int, str]] = []
    for line in text.splitlines():
        if GPU_HEADER.match(line):
            gpus.append({})
            sections = []
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while sections and sections[-1][0] >= indent:
            sections.pop()
        key, colon, value = line.strip().partition(" : ")
        path = "/".join([*(name for _, name in sections), key.strip()])
        if colon:
            gpus[-1][path] = value.strip()
        else:
            sections.append((indent, key.strip()))
    return gpus


def reasons_mask(gpu: dict[str, str]) -> str:
    """The clocks_event_reasons.active bit mask from the per-reason Active lines."""
    for section in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
        lines = {path.rsplit("/", 1)[1]: value for path, value in gpu.items()
                 if path.startswith(section + "/")}  # fmt: skip
        if lines:
            mask = sum(bit for name, bit in REASON_BITS.items() if lines.get(name) == "Active")
            return f"0x{mask:016x}"
    return "[N/A]"


def query_value(gpu: dict[str, str], field: str, index: int) -> str:
    """One cell as `--query-gpu ... --format=csv,noheader,nounits` prints it."""
    if field == "index":
        return str(index)
    if field == "clocks_event_reasons.active":
        return reasons_mask(gpu)
    value = gpu.get(Q_PATHS.get(field, ""), "N/A")
    if value == "N/A":
        return "[N/A]"
    return re.sub(r"(?<=\d)(x| C| MiB)$", "", value)  # 16x, 33 C, 23028 MiB: nounits


def query_line(text: str, first_index: int = 0) -> str:
    """The probe's --query-gpu CSV for every GPU of a `-q` recording."""
    return "".join(
        ", ".join(query_value(gpu, field, first_index + n) for field in GPU_FIELDS) + "\n"
        for n, gpu in enumerate(q_gpus(text))
    )


def facts(**recordings: tuple[str, int]) -> dict:
    """host -> (fixture, index of its first GPU) as the checks read probe facts."""
    out = {}
    for host, (name, first) in recordings.items():
        devices = parse_gpu_csv(query_line((SMI / name).read_text(), first))
        out[host] = {"gpus": {"count": len(devices), "devices": devices}}
    return out


def problems(findings: list[Finding]) -> dict[tuple[str, Status], list[str]]:
    return {(f.id, f.status): f.hosts for f in findings if f.status is not Status.OK}


A10_PENDING = ("q-535.129.03-a10-remap-pending.txt", 0)
TITAN_V = ("q-560.35.03-titanv.txt", 0)


def test_every_recording_reads_as_the_probe_reads_a_gpu() -> None:
    """The conversion keeps every field the checks use; nothing is lost to the CSV parser."""
    read = facts(a10=A10_PENDING, titan=TITAN_V)
    assert {host: f["gpus"]["count"] for host, f in read.items()} == {"a10": 1, "titan": 1}
    (a10,) = read["a10"]["gpus"]["devices"]
    assert a10["pci.bus_id"] == "00000000:07:00.0" and a10["serial"] == "1324521052681"
    assert (a10["remapped_rows.uncorrectable"], a10["remapped_rows.pending"]) == ("4", "Yes")
    assert a10["retired_pages.pending"] is None  # N/A on Ampere: not a fault
    (titan,) = read["titan"]["gpus"]["devices"]
    assert titan["remapped_rows.pending"] is None  # "Remapped Rows : N/A" on Volta
    assert (titan["pcie.link.gen.current"], titan["pcie.link.gen.max"]) == ("1", "3")


def test_a_recorded_pending_remap_fails_its_node_and_drains_it_for_a_reset() -> None:
    """A10 on 535.129.03 with 4 uncorrectable rows remapped and the remap pending."""
    findings = gpu_health_findings(facts(a10=A10_PENDING))
    assert problems(findings) == {("gpu.row-remap", Status.FAIL): ["a10"]}
    (remap,) = [f for f in findings if f.status is Status.FAIL]
    assert "GPU 0 (00000000:07:00.0, serial 1324521052681): row remap pending" in remap.message
    assert "nvidia-smi -r -i 0" in (remap.remedy or "")
    assert "4 rows remapped" not in remap.message  # 4 uncorrectable remaps: under the warning
    assert drain_notes(facts(a10=A10_PENDING)["a10"]) == [
        "GPU 0 00000000:07:00.0 row remap pending needs reset"
    ]


def test_healthy_recordings_of_older_generations_are_quiet() -> None:
    """TITAN V (Volta, 560.35.03): no ECC, remapping and retirement N/A, the idle link at
    gen 1 of 3. Nothing to report."""
    findings = gpu_health_findings(facts(titan=TITAN_V))
    assert problems(findings) == {}
    assert {f.id for f in findings} == {
        "gpu.row-remap", "gpu.retired-pages", "gpu.pcie-width", "gpu.clock-reasons",
    }  # fmt: skip


def test_all_recordings_together_name_each_fault_on_its_own_host_only() -> None:
    findings = gpu_health_findings(facts(a10=A10_PENDING, titan=TITAN_V))
    assert problems(findings) == {("gpu.row-remap", Status.FAIL): ["a10"]}
