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
from clusterkit.node.probe_gpu import GPU_FIELDS, parse_gpu_csv

SMI = Path(__file__).parent.parent.parent / "fixtures" / "nvidia-smi"
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
    "temperature.gpu.tlimit": "Temperature/GPU T.Limit Temp",
    "ecc.errors.corrected.volatile.sram": "ECC Errors/Volatile/SRAM Correctable",
    "ecc.errors.corrected.aggregate.sram": "ECC Errors/Aggregate/SRAM Correctable",
    # 535 prints one line; 560 splits it into Parity and SEC-DED (their sum, below)
    "ecc.errors.uncorrected.aggregate.sram": "ECC Errors/Aggregate/SRAM Uncorrectable",
    "vbios_version": "VBIOS Version",
    "inforom.img": "Inforom Version/Image Version",
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
    split = [
        gpu.get(f"ECC Errors/Aggregate/SRAM Uncorrectable {kind}") for kind in ("Parity", "SEC-DED")
    ]
    if field == "ecc.errors.uncorrected.aggregate.sram" and all(v and v.isdigit() for v in split):
        return str(sum(int(v or 0) for v in split))
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
        "gpu.sram-ecc", "gpu.temperature",
    }  # fmt: skip


def test_all_recordings_together_name_each_fault_on_its_own_host_only() -> None:
    findings = gpu_health_findings(facts(a10=A10_PENDING, titan=TITAN_V))
    assert problems(findings) == {("gpu.row-remap", Status.FAIL): ["a10"]}


H100 = ("a-560.35.03-h100.txt", 0)


def test_the_recorded_h100_reads_its_firmware_temperature_margin_and_sram_counts() -> None:
    """560.35.03 on an H100 SXM: T.Limit 53 C at 34 C, SRAM counts 0 (uncorrectable split into
    parity and SEC-DED), VBIOS and InfoROM as `-q` prints them."""
    (gpu,) = facts(h100=H100)["h100"]["gpus"]["devices"]
    assert (gpu["temperature.gpu"], gpu["temperature.gpu.tlimit"]) == ("34", "53")
    assert (gpu["vbios_version"], gpu["inforom.img"]) == ("96.00.A5.00.01", "G520.0200.00.05")
    assert gpu["ecc.errors.corrected.aggregate.sram"] == "0"
    assert gpu["ecc.errors.uncorrected.aggregate.sram"] == "0"
    findings = gpu_health_findings(facts(h100=H100, a10=A10_PENDING, titan=TITAN_V))
    assert problems(findings) == {("gpu.row-remap", Status.FAIL): ["a10"]}
    by_id = {f.id: f for f in findings if f.status is Status.OK}
    assert by_id["gpu.temperature"].hosts == ["h100", "a10", "titan"]


def _edited(name: str, **lines: str) -> str:
    """A recording with `-q` lines replaced: {"GPU T.Limit Temp": "-1 C"} keeps the layout."""
    text = (SMI / name).read_text()
    for key, value in lines.items():
        text = re.sub(rf"^(\s*{re.escape(key)}\s*: ).*$", rf"\g<1>{value}", text, flags=re.M)
    return text


def _facts_of_text(host: str, text: str) -> dict:
    devices = parse_gpu_csv(query_line(text))
    return {host: {"gpus": {"count": len(devices), "devices": devices}}}


def test_the_h100_at_its_temperature_limit_fails_and_near_it_warns() -> None:
    hot = _facts_of_text("hot", _edited("a-560.35.03-h100.txt", **{
        "GPU Current Temp": "88 C", "GPU T.Limit Temp": "-1 C"}))  # fmt: skip
    warm = _facts_of_text("warm", _edited("a-560.35.03-h100.txt", **{
        "GPU Current Temp": "84 C", "GPU T.Limit Temp": "3 C"}))  # fmt: skip
    findings = gpu_health_findings({**hot, **warm})
    assert problems(findings) == {
        ("gpu.temperature", Status.FAIL): ["hot"], ("gpu.temperature", Status.WARN): ["warm"],
    }  # fmt: skip
    failed = next(f for f in findings if f.status is Status.FAIL)
    assert "GPU at 88 C, 1 C past its maximum operating temperature" in failed.message
    assert "cooling" in (failed.remedy or "")
    assert drain_notes(hot["hot"]) == [
        "GPU 0 00000000:DB:00.0 over temperature needs cooling check"
    ]


def test_without_a_margin_a_hot_gpu_warns_from_85_c() -> None:
    """The A10 prints `GPU T.Limit Temp : N/A`: the fixed bound applies."""
    text = _edited("q-535.129.03-a10-remap-pending.txt", **{"GPU Current Temp": "86 C"})
    findings = gpu_health_findings(_facts_of_text("a10", text))
    assert ("gpu.temperature", Status.WARN) in problems(findings)
    cool = gpu_health_findings(facts(a10=A10_PENDING))
    assert ("gpu.temperature", Status.WARN) not in problems(cool)


def test_high_sram_counts_warn_and_many_uncorrectable_remaps_fail() -> None:
    sram = _facts_of_text("sram", _edited("a-560.35.03-h100.txt", **{
        "SRAM Correctable": "10001"}))  # fmt: skip
    lifetime = _facts_of_text("lifetime", _edited("a-560.35.03-h100.txt", **{
        "SRAM Uncorrectable SEC-DED": "1"}))  # fmt: skip
    worn = _facts_of_text("worn", _edited("a-560.35.03-h100.txt", **{
        "Uncorrectable Error": "513"}))  # fmt: skip
    edge = _facts_of_text("edge", _edited("a-560.35.03-h100.txt", **{
        "SRAM Correctable": "10000", "Uncorrectable Error": "512"}))  # fmt: skip
    findings = gpu_health_findings({**sram, **lifetime, **worn, **edge})
    assert problems(findings) == {
        ("gpu.sram-ecc", Status.WARN): ["sram", "lifetime"],
        ("gpu.row-remap", Status.FAIL): ["worn"],
        ("gpu.row-remap", Status.WARN): ["edge"],
    }  # fmt: skip
    messages = " ".join(f.message for f in findings)
    assert "corrected SRAM ECC errors 10001 since reset, 10001 lifetime (over 10000)" in messages
    assert "too many rows remapped for uncorrectable errors (513, over 512)" in messages
    assert drain_notes(worn["worn"]) == [
        "GPU 0 00000000:DB:00.0 too many rows remapped for uncorrectable errors needs replacement"
    ]
