"""GPU health checks (row remapping, retired pages, PCIe width, clock event reasons) over
nvidia-smi output as drivers print it, and the probe's fallback for a driver that rejects a
field name (tests/support/fake_nvidia_smi.py prints the real rejection)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clusterkit.checks.gpu_health import clock_reason_problems, drain_notes, gpu_health_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.node.prelude import ToolError, run_tool
from clusterkit.node.probe_gpu import (
    BASE_GPU_FIELDS,
    GPU_FIELDS,
    parse_aer_counters,
    parse_gpu_csv,
    query_gpu_fields,
    read_aer_counters,
)
from clusterkit.node.probe_host import collect_kernel_log
from clusterkit.slurm.drain import NodeState, decide
from tests.support import fake_nvidia_smi

SMI = Path(__file__).parent.parent.parent / "fixtures" / "nvidia-smi"
# --query-gpu=GPU_FIELDS --format=csv,noheader,nounits: an idle H100 (gen 1 of 5, x16, reason
# 0x1 GPU idle, retired pages [N/A] on Hopper, remap counts 0/0/No/No).
H100_IDLE = (
    "0, GPU-ad1516b7-3ce3-59df-bd39-e0342e9309d7, NVIDIA H100 80GB HBM3, 550.54.15, 81559, 0, "
    "00000000:19:00.0, Enabled, Enabled, 0, 9.0, 1654922000100, 0, 0, No, No, [N/A], [N/A], "
    "[N/A], 1, 5, 16, 16, 0x0000000000000001, 29, 37, 58, 0, 0, 0, 96.00.A5.00.01, "
    "G520.0200.00.05, No, No\n"
)
# Under load: SW power cap and application clocks are normal too; lifetime corrected remaps
REMAPS_KEPT = H100_IDLE.replace("0, 0, No, No", "5, 1, No, No").replace(
    "0x0000000000000001", "0x0000000000000006"
)
PENDING = H100_IDLE.replace("0, 0, No, No", "0, 2, Yes, No").replace(
    "00000000:19:00.0", "00000000:4B:00.0"
)
FAILED = H100_IDLE.replace("0, 0, No, No", "0, 12, No, Yes")
NARROW = H100_IDLE.replace("1, 5, 16, 16", "4, 5, 8, 16")
HOT = H100_IDLE.replace("0x0000000000000001", "0x0000000000000060").replace("29, 37", "91, 95")
# A V100 on driver 525: remap fields [N/A]; two pages retired, one more pending
V100 = (
    "0, GPU-1f2e3d4c-0000-1111-2222-333344445555, Tesla V100-SXM2-32GB, 525.147.05, 32768, 0, "
    "00000000:1A:00.0, Enabled, Enabled, 0, 7.0, 0323618012345, [N/A], [N/A], [N/A], [N/A], "
    "1, 1, Yes, 3, 3, 16, 16, 0x0000000000000000, 41, 38, [N/A], 0, 0, 0, 88.00.4F.00.09, "
    "G503.0201.00.03, [N/A], [N/A]\n"
)


def facts_of(**hosts: str) -> dict:
    return {
        host: {"gpus": {"count": 1, "devices": parse_gpu_csv(text)}} for host, text in hosts.items()
    }


def problems(findings: list[Finding]) -> dict[str, tuple[str, list[str]]]:
    return {f.id: (f.status.value, f.hosts) for f in findings if f.status is not Status.OK}


def test_an_idle_healthy_gpu_is_quiet_and_so_are_kept_remaps_and_normal_reasons() -> None:
    findings = gpu_health_findings(facts_of(n1=H100_IDLE, n2=REMAPS_KEPT, n3=V100.replace(
        "1, 1, Yes", "1, 1, No")))  # fmt: skip
    assert {f.id: f.status for f in findings} == {
        "gpu.row-remap": Status.OK,
        "gpu.retired-pages": Status.OK,
        "gpu.sram-ecc": Status.OK,
        "gpu.temperature": Status.OK,
        "gpu.pcie-width": Status.OK,
        "gpu.clock-reasons": Status.OK,
    }


def test_each_fault_is_named_on_its_host_with_gpu_evidence_and_action() -> None:
    findings = gpu_health_findings(
        facts_of(ok=H100_IDLE, pend=PENDING, dead=FAILED, narrow=NARROW, hot=HOT, volta=V100)
    )
    by = {(f.id, f.status): f for f in findings}
    remap = by[("gpu.row-remap", Status.FAIL)]
    assert remap.hosts == ["pend", "dead"]
    assert "GPU 0 (00000000:4B:00.0, serial 1654922000100): row remap pending" in remap.message
    assert "row remapping failed (no spare rows left)" in remap.found["dead"]
    assert "nvidia-smi -r -i 0" in remap.remedy and "RMA" in remap.remedy
    many = by[("gpu.row-remap", Status.WARN)]  # 12 uncorrectable remaps, over 8
    assert many.hosts == ["dead"] and "12 rows remapped" in many.message
    assert by[("gpu.retired-pages", Status.FAIL)].hosts == ["volta"]
    width = by[("gpu.pcie-width", Status.WARN)]
    assert width.hosts == ["narrow"] and "PCIe link x8 of x16" in width.message
    clocks = by[("gpu.clock-reasons", Status.FAIL)]
    assert clocks.hosts == ["hot"]
    assert "SW thermal slowdown, HW thermal slowdown (0x0000000000000060)" in clocks.message
    assert "GPU 91 C, memory 95 C" in clocks.message and "cooling" in clocks.remedy


def _gpus(line: str, count: int) -> str:
    """`count` GPUs of one node, each `line` with its own index and bus id."""
    return "".join(
        line.replace("0, GPU-", f"{i}, GPU-", 1).replace("00000000:19:", f"00000000:{i + 19}:")
        for i in range(count)
    )


THERMAL_88 = H100_IDLE.replace("0x0000000000000001", "0x0000000000000048").replace(
    "29, 37", "88, 91"
)


def test_eight_gpus_in_hw_thermal_slowdown_fail_on_one_line_that_points_at_bench() -> None:
    """Issue 37 item 3: every GPU of a node in HW thermal slowdown at 88 C while idle passed
    with a warning; DCGM's diagnostic fails it, and a synchronous job runs at its pace."""
    eight = _gpus(THERMAL_88, 8)
    findings = gpu_health_findings(facts_of(node1=_gpus(H100_IDLE, 8), node2=eight))
    (clocks,) = [f for f in findings if f.id == "gpu.clock-reasons"]
    assert clocks.status is Status.FAIL and clocks.hosts == ["node2"]
    assert clocks.found["node2"] == (
        "GPUs 0-7: clocks slowed: HW slowdown, HW thermal slowdown (0x0000000000000048), "
        "GPU 88 C, memory 91 C"
    )
    assert clocks.remedy.count("node2 ") == 1 and "cooling" in clocks.remedy
    assert "clusterkit bench INVENTORY --per-node" in clocks.remedy
    assert drain_notes(facts_of(n=eight)["n"]) == [
        "GPUs 0-7 HW slowdown, HW thermal slowdown needs cooling check"
    ]


def test_slowed_gpus_fold_by_kind_and_the_driver_trimming_clocks_only_warns() -> None:
    """GPUs 0-3 and 5 in a power brake fail as one line; GPU 7 trimmed by the driver's SW
    thermal slowdown (0x20) warns alone, named with its bus id; GPU 4 and 6 are idle."""
    brake = H100_IDLE.replace("0x0000000000000001", "0x0000000000000088")
    sw = H100_IDLE.replace("0x0000000000000001", "0x0000000000000020").replace("29, 37", "84, 86")
    lines = _gpus(brake, 8).splitlines(keepends=True)
    lines[4], lines[6] = _gpus(H100_IDLE, 8).splitlines(keepends=True)[4:7:2]
    lines[7] = _gpus(sw, 8).splitlines(keepends=True)[7]
    by = {f.status: f for f in gpu_health_findings(facts_of(n="".join(lines)))
          if f.id == "gpu.clock-reasons"}  # fmt: skip
    assert by[Status.FAIL].found["n"] == (
        "GPUs 0-3, 5: clocks slowed: HW slowdown, HW power brake (0x0000000000000088), GPU 29 C, "
        "memory 37 C"
    )
    assert "power supply" in by[Status.FAIL].remedy
    assert by[Status.WARN].found["n"].startswith("GPU 7 (00000000:26:00.0, serial ")
    assert "SW thermal slowdown (0x0000000000000020), GPU 84 C" in by[Status.WARN].found["n"]


def test_the_launch_watch_still_only_warns_on_a_slowdown_under_load() -> None:
    """Under a running job the same reasons warn: the job goes on at the slowed pace."""
    (gpu,) = parse_gpu_csv(THERMAL_88)
    assert [p[0] for p in clock_reason_problems(gpu)] == [Status.WARN]
    assert [p[0] for p in clock_reason_problems(gpu, before_job=True)] == [Status.FAIL]


def test_no_gpus_is_a_skip_never_an_ok() -> None:
    findings = gpu_health_findings({"cpu": {"gpus": {"count": 0, "devices": []}}})
    assert {f.status for f in findings} == {Status.SKIP}


def test_recorded_remapped_rows_values_parse_as_the_checks_read_them() -> None:
    """--query-remapped-rows prints Yes/No (recorded); `1` means set too. One uncorrectable
    remap kept after the reset that applied it is not a fault."""
    lines = (SMI / "query-remapped-rows-after-reset-x4.txt").read_text().splitlines()
    header = [name.strip() for name in lines[0].split(",")]
    devices = []
    for index, line in enumerate(lines[1:]):
        row = dict(zip(header, (value.strip() for value in line.split(","))))
        devices.append({"index": str(index), "uuid": row.pop("gpu_uuid"), **row})
    facts = {"n": {"gpus": {"count": 4, "devices": devices}}}
    assert problems(gpu_health_findings(facts)) == {}
    devices[2]["remapped_rows.pending"] = "1"
    assert problems(gpu_health_findings(facts)) == {"gpu.row-remap": ("fail", ["n"])}


def test_drain_reason_names_the_gpu_and_reset_or_replace() -> None:
    facts = facts_of(n=PENDING)["n"]
    notes = drain_notes(facts)
    assert notes == ["GPU 0 00000000:4B:00.0 row remap pending needs reset"]
    action = decide(NodeState("IDLE", ""), ["gpu.row-remap"], notes)
    assert action.reason == (
        "clusterkit: gpu.row-remap; GPU 0 00000000:4B:00.0 row remap pending needs reset"
    )
    assert drain_notes(facts_of(n=FAILED)["n"]) == [
        "GPU 0 00000000:19:00.0 row remapping failed needs replacement"
    ]
    assert drain_notes(facts_of(n=H100_IDLE)["n"]) == []
    hostile = facts_of(n=PENDING.replace("00000000:4B:00.0", "x;reboot"))["n"]
    assert drain_notes(hostile) == ["GPU 0 ? row remap pending needs reset"]


def _run_fake(tmp_path: Path, unknown: list[str]):
    state = tmp_path / "state.json"
    gpu = {"index": 0, "name": "Tesla V100-SXM2-32GB", "pci.bus_id": "00000000:1A:00.0",
           "clocks_event_reasons.active": "0x0000000000000001", "pcie.link.width.current": 16,
           "pcie.link.width.max": 16}  # fmt: skip
    state.write_text(json.dumps({"driver": "470.256.02", "gpus": [gpu], "unknown_fields": unknown}))

    def run(names: list[str]) -> str:
        argv = [sys.executable, "-S", "-E", fake_nvidia_smi.__file__, str(state),
                "--query-gpu=" + ",".join(names), "--format=csv,noheader,nounits"]  # fmt: skip
        return run_tool(argv, 10)

    return run


def test_a_driver_rejecting_new_field_names_gets_the_older_name_or_none(tmp_path: Path) -> None:
    """nvidia-smi fails the whole query on one unknown name: the old spelling of the clock
    reasons is asked instead, a field it lacks altogether is left out, the rest still read."""
    run = _run_fake(tmp_path, ["clocks_event_reasons.active", "remapped_rows.failure"])
    text, asked = query_gpu_fields(run)
    assert "clocks_throttle_reasons.active" in asked and "remapped_rows.failure" not in asked
    (gpu,) = parse_gpu_csv(text, [n.replace("throttle", "event") for n in asked])
    assert gpu["clocks_event_reasons.active"] == "0x0000000000000001"
    assert gpu["remapped_rows.failure"] is None and gpu["pcie.link.width.current"] == "16"
    assert set(gpu) == set(GPU_FIELDS)


def test_a_rejected_base_field_is_still_an_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match='Field "compute_cap" is not a valid field'):
        query_gpu_fields(_run_fake(tmp_path, ["compute_cap"]))


def test_gpu_health_off_asks_only_the_base_fields_and_reads_no_kernel_log(
    tmp_path: Path,
) -> None:
    """The probe option the benchmark's anchor uses (benchmarks/bench_gpu_health.py): the
    same check without the health work, and the Xid check then says it did not look."""
    text, asked = query_gpu_fields(_run_fake(tmp_path, []), health=False)
    assert asked == list(BASE_GPU_FIELDS)
    (gpu,) = parse_gpu_csv(text, asked)
    assert gpu["pci.bus_id"] == "00000000:1A:00.0" and gpu["remapped_rows.pending"] is None
    assert collect_kernel_log({"gpu_health": False}) is None


# -- PCIe replays (AER counters in sysfs) ---------------------------------------------------

# `aer_dev_correctable` as drivers/pci/pcie/aer.c prints it (Linux 4.19+: its short error
# strings, then the total), and the sample of the kernel's ABI document (older long names).
AER_KERNEL = (
    "RxErr 0\nBadTLP {tlp}\nBadDLLP {dllp}\nRollover 0\nTimeout {timeout}\nNonFatalErr 0\n"
    "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {total}\n"
)
AER_ABI_SAMPLE = (
    "Receiver Error 2\nBad TLP 0\nBad DLLP 0\nRELAY_NUM Rollover 0\nReplay Timer Timeout 0\n"
    "Advisory Non-Fatal 0\nCorrected Internal Error 0\nHeader Log Overflow 0\nTOTAL_ERR_COR 2\n"
)


def aer_file(root: Path, device: str, text: str) -> Path:
    folder = root / "bus" / "pci" / "devices" / device
    folder.mkdir(parents=True)
    (folder / "aer_dev_correctable").write_text(text)
    return root


def aer_text(tlp: int = 0, dllp: int = 0, timeout: int = 0, rx: int = 0) -> str:
    text = AER_KERNEL.format(tlp=tlp, dllp=dllp, timeout=timeout, total=tlp + dllp + timeout + rx)
    return text.replace("RxErr 0", f"RxErr {rx}")


def with_aer(text: str, **counters: int) -> list[dict]:
    devices = parse_gpu_csv(text)
    devices[0]["pcie.aer_correctable"] = parse_aer_counters(aer_text(**counters))
    return devices


def test_the_probe_reads_aer_counters_by_the_gpus_bus_id(tmp_path: Path) -> None:
    """nvidia-smi's `00000000:4B:00.0` is sysfs's `0000:4b:00.0`; both kernel spellings read."""
    root = aer_file(tmp_path, "0000:4b:00.0", aer_text(tlp=3, timeout=90))
    counters = read_aer_counters({"sysfs": str(root)}, "00000000:4B:00.0")
    assert counters == {"RxErr": 0, "BadTLP": 3, "BadDLLP": 0, "Rollover": 0, "Timeout": 90,
                        "NonFatalErr": 0, "CorrIntErr": 0, "HeaderOF": 0,
                        "TOTAL_ERR_COR": 93}  # fmt: skip
    assert parse_aer_counters(AER_ABI_SAMPLE)["Replay Timer Timeout"] == 0
    assert parse_aer_counters(AER_ABI_SAMPLE)["Receiver Error"] == 2
    assert read_aer_counters({"sysfs": str(root)}, "00000000:19:00.0") is None  # no AER file


def test_a_bus_id_that_is_no_bus_id_never_becomes_a_path(tmp_path: Path) -> None:
    """The bus id comes from the node's nvidia-smi: `..` or a slash must not walk sysfs."""
    aer_file(tmp_path / "x", "0000:4b:00.0", aer_text(tlp=500))
    for bus in ("../../x/bus/pci/devices/0000:4b:00.0", "0000:4b:00.0/..", "00000000:4B:00", ""):
        assert read_aer_counters({"sysfs": str(tmp_path / "a" / "b")}, bus) is None


def test_many_replays_warn_naming_gpu_and_counters_and_few_stay_quiet() -> None:
    hosts = {
        "node1": {"gpus": {"count": 1, "devices": with_aer(H100_IDLE, tlp=40, timeout=40)}},
        "node2": {"gpus": {"count": 1, "devices": with_aer(PENDING, tlp=3, dllp=2, timeout=90)}},
        "node3": {"gpus": {"count": 1, "devices": with_aer(H100_IDLE, rx=5000)}},
    }
    (finding,) = [f for f in gpu_health_findings(hosts) if f.id == "gpu.pcie-replay"]
    assert (finding.status, finding.hosts) == (Status.WARN, ["node2"])
    assert finding.message.endswith(
        "node2: GPU 0 (00000000:4B:00.0, serial 1654922000100): 95 PCIe replay errors since "
        "boot (BadTLP 3, BadDLLP 2, Timeout 90)"
    )
    assert "lspci -vv -s 00000000:4B:00.0" in (finding.remedy or "")
    quiet = {host: hosts[host] for host in ("node1", "node3")}
    assert [
        (f.status, f.hosts) for f in gpu_health_findings(quiet) if f.id == "gpu.pcie-replay"
    ] == [(Status.OK, ["node1", "node3"])]


def test_no_aer_counters_anywhere_no_replay_finding() -> None:
    """A kernel without AER, or firmware-first handling: nothing read, nothing claimed."""
    assert "gpu.pcie-replay" not in {f.id for f in gpu_health_findings(facts_of(node1=H100_IDLE))}
