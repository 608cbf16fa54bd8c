"""Real kernel-log records (tests/fixtures/kernel-log, sources in its README) through the
probe's parser and the checks: lost GPUs without an Xid line, Xid 45 graded by its cause,
NVLink5 and SXid severities, repaired GPUs after a driver reload, the host's own faults, and
text any user can write that must not read as any of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.hostlog import drain_notes as host_drain_notes
from clusterkit.checks.hostlog import host_log_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.xid import drain_notes, xid_findings
from clusterkit.facts import parse_facts
from clusterkit.node.kernellog import parse_kernel_log, parse_oom_kill
from clusterkit.slurm.drain import NodeState, decide

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernel-log"


def log(*names: str, source: str = "dmesg") -> dict[str, Any]:
    text = "".join((FIXTURES / name).read_text() for name in names)
    return parse_kernel_log(text, source)


def facts(kernel_log: dict[str, Any], buses: tuple[str, ...] = ("0000:38:00",)) -> Any:
    """One host's facts as the control side reads them (checked by parse_facts)."""
    devices = [
        {"index": str(i), "uuid": f"GPU-{i}", "pci.bus_id": f"0000{bus}.0"}
        for i, bus in enumerate(buses)
    ]
    raw = {"gpus": {"count": len(devices), "devices": devices}, "kernel_log": kernel_log}
    return parse_facts(raw)


def finding(findings: list[Finding], check_id: str) -> Finding:
    (found,) = [f for f in findings if f.id == check_id and f.hosts == ["n"]]
    return found


def test_a_gpu_lost_without_an_xid_line_is_xid_79_for_that_gpu() -> None:
    kernel = log("fallen-off-no-xid-570.txt")
    (event,) = kernel["events"]
    assert (event["code"], event["pci"], event["time"]) == (
        79,
        "0000:b3:00",
        "uptime 1843.308145 s",
    )
    # The GPU fell off as this very load probed it: the load does not excuse it.
    assert kernel["driver_load"]["at"] <= event["at"]
    found = finding(xid_findings({"n": facts(kernel, ("0000:b3:00",))}), "gpu.xid")
    assert found.status is Status.FAIL and "Xid 79" in found.message
    assert drain_notes([found]) == ["GPU 0 0000:b3:00 Xid 79 needs reboot"]


def test_the_one_line_fallen_off_forms_count_and_a_gpu_at_line_alone_does_not() -> None:
    events = log("fallen-off-one-line.txt")["events"]
    assert [(e["pci"], e["code"]) for e in events] == [("0000:0e:00", 79), ("0000:01:00", 79)]
    quiet = "[ 1.0] NVRM: GPU at PCI:0000:01:00: GPU-299fe279-1c52-2255-d4ba-07d7bd2861d9\n"
    assert parse_kernel_log(quiet, "dmesg")["events"] == []


def test_xid_45_after_a_hardware_xid_fails_with_its_cause() -> None:
    kernel = log("xid45-after-62.txt")
    groups = finding(xid_findings({"n": facts(kernel, ("0000:19:00",))}), "gpu.xid").found
    by_code = {g["code"]: g for g in groups["n"]}
    assert by_code[45]["status"] == "fail" and by_code[45]["cause"] == 62
    assert by_code[45]["count"] == 3 and "after Xid 62" in by_code[45]["mnemonic"]
    assert by_code[45]["action"] == by_code[62]["action"]


def test_xid_45_after_an_application_fault_only_warns() -> None:
    kernel = log("xid45-after-13-app.txt")
    found = finding(xid_findings({"n": facts(kernel, ("0000:3b:00",))}), "gpu.xid")
    assert found.status is Status.WARN and drain_notes([found]) == []
    assert {g["code"]: g["cause"] for g in found.found["n"]} == {13: None, 45: None}


def test_nvlink5_xids_are_graded_by_the_severity_they_name() -> None:
    kernel = log("nvlink5-xid145.txt")
    assert [e["fatal"] for e in kernel["events"]] == [False, True]
    fatal, nonfatal = (dict(kernel, events=[e]) for e in reversed(kernel["events"]))
    failed = finding(xid_findings({"n": facts(fatal, ("0000:00:1e",))}), "gpu.xid")
    assert failed.status is Status.FAIL and failed.found["n"][0]["action"] == "reset"
    warned = finding(xid_findings({"n": facts(nonfatal, ("0018:01:00",))}), "gpu.xid")
    assert warned.status is Status.WARN and "Nonfatal" in warned.message


def test_an_sxid_record_without_its_first_line_is_kept_and_its_fatal_severity_fails() -> None:
    kernel = log("sxid-record.txt")
    events = [(e["code"], e["fatal"]) for e in kernel["events"]]
    assert events == [(24007, True), (20009, False)]  # one event per record, not per line
    assert kernel["events"][0]["text"].startswith("(record's first line not in the log)")
    found = finding(xid_findings({"n": facts(kernel)}), "nvswitch.sxid")
    assert found.status is Status.FAIL
    assert {g["code"]: g["status"] for g in found.found["n"]}[24007] == "fail"


def test_an_xid_before_the_driver_reload_no_longer_counts_and_says_why() -> None:
    kernel = log("driver-reload.txt")
    assert kernel["driver_load"]["count"] == 2
    found = finding(xid_findings({"n": facts(kernel, ("0000:03:00",))}), "gpu.xid")
    assert found.status is Status.OK and drain_notes([found]) == []
    assert "no longer counted" in found.message and "Xid 48" in found.message
    assert "uptime 5101.000000 s" in found.message  # when the driver was loaded again
    # The same Xid after the reload counts again.
    again = (FIXTURES / "driver-reload.txt").read_text() + (
        "[ 6000.0] NVRM: Xid (PCI:0000:03:00): 48, pid=1, name=python3, DBE\n"
    )
    found = finding(
        xid_findings({"n": facts(parse_kernel_log(again, "dmesg"), ("0000:03:00",))}), "gpu.xid"
    )
    assert found.status is Status.FAIL and "x1" in found.message
    assert "no longer counted" in found.message  # the old one still named, apart


@pytest.mark.parametrize("source", ["dmesg", "journalctl", None])
def test_text_any_user_can_write_is_no_xid_oom_kill_or_host_fault(source: str | None) -> None:
    text = (FIXTURES / "user-written.txt").read_text()
    if source == "journalctl":
        text = "".join(
            f"2026-11-26T00:12:01+0000 node2 kernel: {line.split('] ', 1)[1]}\n"
            for line in text.splitlines()
        )
    found = parse_kernel_log(text, source)
    assert found["events"] == [] and found["matched"] == 0
    assert found["oom_kills"] == [] and found["host_events"] == []
    assert found["driver_load"] is None  # a load banner in a mount option reloads nothing
    for line in text.splitlines():
        assert parse_oom_kill(line, source) is None


def test_the_oom_killers_own_lines_still_count() -> None:
    lines = (
        "[ 1.0] Out of memory: Killed process 22629 (python3) total-vm:98765432kB",
        "[ 2.0] Memory cgroup out of memory: Killed process 4242 (pt_main_thread) total-vm:1kB",
        "[ 3.0] Killed process 77 (python) total-vm:2kB, anon-rss:1kB",  # older kernels
    )
    kills = parse_kernel_log("\n".join(lines), "dmesg")["oom_kills"]
    assert [k["pid"] for k in kills] == [22629, 4242, 77]


def test_machine_checks_fail_when_uncorrected_and_warn_when_corrected() -> None:
    kernel = log("mce.txt")
    whats = [(e["what"], e["device"]) for e in kernel["host_events"]]
    assert whats == [("logged", None), ("corrected", "4"), ("uncorrected", "1")]
    found = finding(host_log_findings({"n": facts(kernel)}), "host.mce")
    assert found.status is Status.FAIL and "b000000000000000" in found.message
    corrected = dict(kernel, host_events=kernel["host_events"][:2])
    assert finding(host_log_findings({"n": facts(corrected)}), "host.mce").status is Status.WARN
    assert host_drain_notes(facts(kernel)) == ["MCE bank 1 uncorrected"]


def test_an_edac_uncorrected_error_fails_and_names_the_controller() -> None:
    kernel = log("edac-ue-skx.txt")
    events = [(e["kind"], e["what"], e["device"]) for e in kernel["host_events"]]
    assert events.count(("edac", "uncorrected", "MC3")) == 2  # the driver's own detail
    assert ("mce", "uncorrected", None) in events  # lines and GHES's are not counted twice
    assert len(events) == 10 and {e[0] for e in events} == {"mce", "edac"}
    found = finding(host_log_findings({"n": facts(kernel)}), "host.edac")
    assert found.status is Status.FAIL and "CPU_SrcID#0_MC#3_Chan#0_DIMM#0" in found.message
    assert "x2" in found.message
    assert finding(host_log_findings({"n": facts(kernel)}), "host.mce").status is Status.FAIL
    notes = host_drain_notes(facts(kernel))
    assert notes == ["MCE uncorrected", "EDAC MC3 uncorrected memory error"]
    action = decide(NodeState("IDLE", ""), ["host.edac", "host.mce"], notes)
    assert action.reason == (
        "clusterkit: host.edac,host.mce; MCE uncorrected; EDAC MC3 uncorrected memory error"
    )


def test_filesystem_read_only_and_shutdown_fail_and_errors_alone_warn() -> None:
    ext4 = log("ext4-read-only.txt", source="journalctl")
    assert [(e["what"], e["device"]) for e in ext4["host_events"]] == [
        ("error", "dm-17"),
        ("read-only", "dm-17"),
        ("error", "dm-21"),
    ]
    assert finding(host_log_findings({"n": facts(ext4)}), "host.filesystem").status is Status.FAIL
    errors_only = dict(ext4, host_events=[e for e in ext4["host_events"] if e["what"] == "error"])
    assert (
        finding(host_log_findings({"n": facts(errors_only)}), "host.filesystem").status
        is Status.WARN
    )
    xfs = log("xfs-shutdown.txt")
    assert [(e["what"], e["device"]) for e in xfs["host_events"]] == [
        ("shutdown", "sdb1"),
        ("shutdown", "dm-4"),
    ]
    assert host_drain_notes(facts(xfs)) == ["fs sdb1 shutdown", "fs dm-4 shutdown"]


def test_a_hostile_device_name_never_reaches_the_drain_reason() -> None:
    line = "[ 1.0] EXT4-fs (sda1;scontrol): Remounting filesystem read-only\n"
    kernel = parse_kernel_log(line, "dmesg")
    assert host_drain_notes(facts(kernel)) == ["fs ? read-only"]


def test_a_healthy_log_gives_ok_host_findings() -> None:
    kernel = parse_kernel_log("[ 1.0] EXT4-fs (nvme0n1p2): mounted filesystem.\n", "dmesg")
    found = host_log_findings({"n": facts(kernel)})
    assert [(f.id, f.status) for f in found] == [
        ("host.mce", Status.OK),
        ("host.edac", Status.OK),
        ("host.filesystem", Status.OK),
    ]


def test_xid_154_is_graded_by_the_recovery_action_it_changes_to() -> None:
    kernel = log("xid154-recovery-actions.txt")
    codes = [(e["pci"], e["code"]) for e in kernel["events"]]
    # The driver's "NVRM: GPU ...: GPU has fallen off the bus." beside the Xid 79 is that loss.
    assert codes.count(("0000:01:00", 79)) == 1
    buses = ("0000:01:00", "0000:0d:00", "0018:01:00")
    groups = finding(xid_findings({"n": facts(kernel, buses)}), "gpu.xid").found["n"]
    actions = {(g["pci"], g["code"]): (g["status"], g["action"]) for g in groups}
    assert actions[("0000:01:00", 154)] == ("fail", "reboot")
    assert actions[("0000:0d:00", 154)] == ("fail", "reset")  # PF FLR: a function-level reset
    assert actions[("0018:01:00", 154)] == ("fail", "reset")
    assert actions[("0018:01:00", 149)] == ("fail", "reset")  # "NETIR_INT  Fatal   XC0"


def test_an_xid_154_back_to_none_asks_nothing() -> None:
    # The recorded shape (xid154-recovery-actions.txt), changing back: the words are the
    # driver's, the codes NVML's; "PF FLR" alone made the old reading of the words miss it.
    back = (
        "[ 1.0] NVRM: Xid (PCI:0000:0d:00): 154, GPU recovery action changed from 0x1 (PF FLR) "
        "to 0x0 (None)\n"
    )
    found = finding(
        xid_findings({"n": facts(parse_kernel_log(back, "dmesg"), ("0000:0d:00",))}), "gpu.xid"
    )
    assert found.status is Status.WARN and drain_notes([found]) == []


def test_a_process_name_cannot_make_an_nvlink5_xid_fatal() -> None:
    """The name= field is the process's own (15 characters a user chooses); the driver's
    severity words come after it, and the last ones count."""
    line = (
        "[ 1.0] NVRM: Xid (PCI:0018:01:00): 145, pid=7, name=a, X Fatal XC0 , "  # 15 chars
        "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)"
    )
    (event,) = parse_kernel_log(line, "dmesg")["events"]
    assert event["fatal"] is False
