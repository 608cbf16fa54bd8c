"""Xid/SXid lines as real drivers print them, through the probe's parser and the catalog."""

from __future__ import annotations

from typing import Any

from clusterkit.checks.model import Status
from clusterkit.checks.xid import catalog, classify, drain_notes, xid_findings
from clusterkit.node.kernellog import MAX_KERNEL_EVENTS, parse_kernel_event, parse_kernel_log
from clusterkit.slurm.drain import NodeState, decide

NEW = "NVRM: Xid (PCI:0000:38:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
OLD = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
APP = (
    "NVRM: Xid (PCI:0000:18:00): 13, pid=2345, name=python3, "
    "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"
)
SXID = (
    "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, "
    "Non-fatal, Link 32 egress non-posted PRIV error (First)"
)
PREFIXES = {
    "[ 1234.567890] ": "uptime 1234.567890 s",
    "2026-11-26T00:12:01,123456+00:00 ": "2026-11-26T00:12:01,123456+00:00",
    "2026-11-26T00:12:01+0000 node2 kernel: ": "2026-11-26T00:12:01+0000",
    "[Thu Nov 26 00:12:01 2026] ": "Thu Nov 26 00:12:01 2026",
}


def test_both_xid_shapes_parse_under_every_tool_prefix() -> None:
    for prefix, time in PREFIXES.items():
        new = parse_kernel_event(prefix + NEW)
        old = parse_kernel_event(prefix + OLD)
        app = parse_kernel_event(prefix + APP)
        assert new == {
            **{"kind": "xid", "pci": "0000:38:00", "code": 79, "pid": "<unknown>"},
            **{"name": None, "text": "GPU has fallen off the bus.", "time": time, "fatal": None},
        }
        assert (old["pci"], old["code"], old["pid"], old["name"]) == ("0000:3b:00", 79, 0, None)
        assert (app["pid"], app["name"], app["code"]) == (2345, "python3", 13)
        assert app["text"].startswith("Graphics SM Warp Exception on (GPC 0")


def test_sxid_lines_parse_and_continuations_join_their_record() -> None:
    event = parse_kernel_event("[ 5.1] " + SXID)
    assert (event["kind"], event["pci"], event["code"]) == ("sxid", "0000:05:00", 12028)
    assert (event["fatal"], event["part"]) == (False, False)
    more = SXID.replace(
        "Non-fatal, Link 32 egress non-posted PRIV error (First)", "Severity 0 Engine instance 32"
    )
    assert parse_kernel_event("[ 5.1] " + more)["part"] is True
    assert len(parse_kernel_log(f"[ 5.1] {SXID}\n[ 5.1] {more}\n")["events"]) == 1


def test_ordinary_lines_and_lookalikes_are_not_events() -> None:
    for line in ("NVRM: loading NVIDIA UNIX x86_64 Kernel Module 550.54.15",
                 "usb 1-1: Xid (PCI:0000:38:00): 79, pid=0, not the driver",
                 "NVRM: Xid (PCI:zz:38:00): 79, pid=0, bad bus"):  # fmt: skip
        assert parse_kernel_event(line) is None


def test_a_flood_keeps_the_last_events_and_counts_all() -> None:
    text = "\n".join(f"[ {i}.0] {OLD}" for i in range(3 * MAX_KERNEL_EVENTS + 7))
    found = parse_kernel_log(text)
    assert found["matched"] == 3 * MAX_KERNEL_EVENTS + 7
    assert len(found["events"]) == MAX_KERNEL_EVENTS
    assert found["events"][-1]["time"] == f"uptime {3 * MAX_KERNEL_EVENTS + 6}.0 s"


def test_the_log_scan_finds_the_same_events_as_reading_every_line() -> None:
    """The scan jumps from mark to mark; lines cut by \\r, CRLF endings, a mark on the
    first and the last line (no final newline) come out as splitlines() cuts them."""
    filler = "\n".join(f"[ {i}.5] EXT4-fs (nvme0n1): re-mounted." for i in range(500))
    text = "\n".join(
        [f"[ 1.0] {NEW}", filler, f"junk\r[ 2.0] {OLD}\r\n[ 3.0] {APP}", filler, f"[ 4.0] {SXID}"]
    )
    every_line = [e for e in map(parse_kernel_event, text.splitlines()) if e is not None]
    found = parse_kernel_log(text)
    for event in every_line:
        event.pop("part", None)
    assert [{k: v for k, v in e.items() if k != "at"} for e in found["events"]] == every_line
    assert [e["time"] for e in every_line] == [f"uptime {n}.0 s" for n in range(1, 5)]
    assert parse_kernel_log(filler) == {
        **{"events": [], "matched": 0, "oom_kills": [], "driver_load": None},
        **{"host_events": [], "host_matched": 0},
    }


def test_the_catalog_buckets_of_common_codes() -> None:
    table = catalog()
    assert table["source"] and table["date"]
    assert all(
        row["immediate"] in table["buckets"]
        for kind in ("xid", "sxid")
        for row in table[kind].values()
    )
    fails = {79: "reboot", 95: "reset", 48: "reset", 119: "reset", 120: "reset", 74: "reset"}
    fails |= {64: "reset", 62: "reset", 61: "replace", 143: "reset", 145: "reset", 140: "reset"}
    for code, action in fails.items():
        verdict = classify("xid", code)
        assert (verdict.severity, verdict.action) == (Status.FAIL, action), code
    for code in (13, 31, 43, 45, 94, 63, 92):
        assert classify("xid", code).severity is Status.WARN, code
    assert classify("xid", 9999).bucket == "UNKNOWN"
    assert (
        classify("xid", 154, "changed from 0x0 (None) to 0x1 (GPU Reset Required)").action
        == "reset"
    )
    assert (
        classify("xid", 154, "changed from 0x0 (None) to 0x2 (Node Reboot Required)").action
        == "reboot"
    )
    assert classify("sxid", 12028).severity is Status.FAIL
    assert classify("sxid", 99999).severity is Status.WARN


def node(*lines: str, **log: Any) -> dict[str, Any]:
    devices = [
        {"index": str(i), "uuid": f"GPU-{i}", "pci.bus_id": f"00000000:{0x18 + i * 0x20:02X}:00.0"}
        for i in range(2)
    ]
    kernel = log or parse_kernel_log("\n".join(lines))
    return {"gpus": {"count": 2, "devices": devices}, "kernel_log": kernel}


def test_a_fatal_xid_fails_its_node_only_naming_the_gpu_and_remedy() -> None:
    facts = {"node1": node(), "node2": node("[ 1.0] " + NEW, "[ 2.0] " + NEW)}
    findings = [f for f in xid_findings(facts) if f.id == "gpu.xid"]
    assert [(f.status, f.hosts) for f in findings] == [(Status.FAIL, ["node2"])]
    assert (
        "GPU 1 (0000:38:00, GPU-1): Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS x2, "
        "last uptime 2.0 s" in findings[0].message
    )
    assert "reboot" in findings[0].remedy
    assert drain_notes(findings) == ["GPU 1 0000:38:00 Xid 79 needs reboot"]
    action = decide(NodeState("IDLE", ""), ["gpu.xid"], drain_notes(findings))
    assert action.reason == "clusterkit: gpu.xid; GPU 1 0000:38:00 Xid 79 needs reboot"


def test_a_reset_code_names_the_reset_command_and_an_app_code_only_warns() -> None:
    reset = "[ 1.0] NVRM: Xid (PCI:0000:18:00): 95, pid=77, name=python, Uncontained: FBHUB"
    (finding,) = [f for f in xid_findings({"n": node(reset)}) if f.id == "gpu.xid"]
    assert finding.status is Status.FAIL and "nvidia-smi -r -i 0" in finding.remedy
    (warn,) = [f for f in xid_findings({"n": node("[ 1.0] " + APP)}) if f.id == "gpu.xid"]
    assert warn.status is Status.WARN and drain_notes([warn]) == []


def test_a_healthy_node_is_ok_and_an_unreadable_log_warns() -> None:
    ok = xid_findings({"n": node()})
    assert [(f.id, f.status) for f in ok] == [("gpu.xid", Status.OK), ("nvswitch.sxid", Status.OK)]
    blind = xid_findings({"n": node(error="kernel log unreadable: dmesg exited 1")})
    assert blind[0].status is Status.WARN and "dmesg exited 1" in blind[0].message


def test_hostile_facts_cannot_write_the_drain_reason() -> None:
    group = {
        "pci": "0000:38:00; rm -rf",
        "code": 79,
        "index": "1 x",
        "status": "fail",
        "action": "reboot",
    }
    from clusterkit.checks.model import Finding

    notes = drain_notes([Finding("gpu.xid", Status.FAIL, "m", found={"n": [group]})])
    assert notes == ["GPU ? ? Xid 79 needs reboot"]
