"""The host's own devices and processes: NVMe SMART health read as nvme-cli prints it
(tests/fixtures/nvme/README.md names each recording), processes stuck in D state read from a
/proc laid out as the kernel writes it, and the checks over both."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.host_health import drain_notes, host_health_findings
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.one_node import node_drain_notes
from clusterkit.facts import parse_facts
from clusterkit.node.prelude import ToolError
from clusterkit.node.probe_devices import (
    DSTATE_MIN_AGE,
    MAX_NVME,
    collect_dstate,
    collect_nvme,
    parse_nvme_list,
    parse_proc_stat,
    parse_smart_log,
)
from tests.support import fake_nvme

NVME = Path(__file__).parent.parent.parent / "fixtures" / "nvme"


def recorded(name: str) -> str:
    return (NVME / name).read_text()


def problems(findings: list[Finding]) -> dict[tuple[str, Status], list[str]]:
    return {(f.id, f.status): f.hosts for f in findings if f.status is not Status.OK}


def drive(**smart: Any) -> dict[str, Any]:
    healthy = parse_smart_log(recorded("smart-log-2.x-verbose.json"))
    return {"name": "nvme0", "model": "Dell Express Flash NVMe P4510 4TB SFF",
            "serial": "PHLJ9135027L4P0DGN", **healthy, **smart}  # fmt: skip


def nvme_facts(*devices: dict[str, Any]) -> dict[str, Any]:
    return {"nvme": {"devices": list(devices), "count": len(devices)}}


# -- reading nvme-cli ------------------------------------------------------------------------


def test_every_recorded_smart_log_reads_its_counts() -> None:
    """1.x (`"key" : value`), 2.x -H (critical_warning an object): the same numbers."""
    verbose = parse_smart_log(recorded("smart-log-2.x-verbose.json"))
    assert verbose == {
        "critical_warning": 0, "media_errors": 0, "percent_used": 2,
        "avail_spare": 100, "spare_thresh": 10, "num_err_log_entries": 1860,
    }  # fmt: skip
    old = parse_smart_log(recorded("smart-log-1.x.json"))
    assert (old["critical_warning"], old["percent_used"], old["spare_thresh"]) == (0, 15, 5)


def test_both_list_formats_name_one_controller_each() -> None:
    for name in ("list-1.x.json", "list-2.x.json"):
        ((controller, path, model, serial),) = parse_nvme_list(recorded(name))
        assert path.startswith(f"/dev/{controller}n") and controller.startswith("nvme")
        assert (model, serial) == ("Dell Express Flash NVMe P4510 4TB SFF", "PHLJ9135027L4P0DGN")


def test_hostile_list_and_log_values_are_refused_not_trusted() -> None:
    listed = {"Devices": [
        {"DevicePath": "/dev/nvme0n1; reboot", "ModelNumber": "x"},
        {"DevicePath": "../../etc/passwd"},
        {"DevicePath": "/dev/nvme1n1", "ModelNumber": "M\x1b[2J\n" + "A" * 500},
        {"DevicePath": "/dev/nvme1n2"},  # the same controller again
        "garbage",
    ]}  # fmt: skip
    ((controller, path, model, _),) = parse_nvme_list(json.dumps(listed))
    assert (controller, path) == ("nvme1", "/dev/nvme1n1")
    assert model is not None and len(model) == 64 and "\x1b" not in model and "\n" not in model
    log = parse_smart_log(json.dumps({"critical_warning": True, "media_errors": "-3",
                                      "percent_used": 2**70, "avail_spare": [1]}))  # fmt: skip
    assert set(log.values()) == {None}
    for text in ("", "Error: no such device", "[1, 2]"):
        with pytest.raises(ToolError):
            parse_smart_log(text)


def _stand_in_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, devices: list) -> None:
    state = tmp_path / "nvme.json"
    state.write_text(json.dumps({"devices": devices}))
    wrapper = tmp_path / "nvme"
    wrapper.write_text(
        f'#!/bin/sh\nexec {shlex.join([sys.executable, fake_nvme.__file__, str(state)])} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_the_collector_reads_the_stand_in_as_it_reads_nvme_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in prints nvme-cli 2.x's layout; the probe's facts pass the typed check."""
    _stand_in_on_path(tmp_path, monkeypatch, [
        {"name": "nvme0"}, {"name": "nvme1", "smart": {"media_errors": 3}}])  # fmt: skip
    facts = collect_nvme({})
    assert [(d["name"], d["media_errors"]) for d in facts["devices"]] == [
        ("nvme0", 0),
        ("nvme1", 3),
    ]
    parse_facts({"nvme": facts})
    assert fake_nvme.list_devices({"devices": [{"name": "nvme0"}]}).startswith(
        '{\n  "Devices":[\n    {\n      "NameSpace":1,\n      "DevicePath":"/dev/nvme0n1",'
    )


def test_many_drives_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in_on_path(tmp_path, monkeypatch, [{"name": f"nvme{n}"} for n in range(MAX_NVME + 4)])
    facts = collect_nvme({})
    assert (len(facts["devices"]), facts["count"]) == (MAX_NVME, MAX_NVME + 4)


# -- the NVMe check --------------------------------------------------------------------------


def test_recorded_healthy_drives_are_quiet() -> None:
    old = {"name": "nvme0", **parse_smart_log(recorded("smart-log-1.x.json"))}
    findings = host_health_findings({"a": nvme_facts(drive()), "b": nvme_facts(old)})
    assert [(f.id, f.status, f.hosts) for f in findings] == [("host.nvme", Status.OK, ["a", "b"])]


def test_media_errors_and_critical_warnings_fail_naming_the_drive() -> None:
    findings = host_health_findings({
        "ok": nvme_facts(drive()),
        "media": nvme_facts(drive(media_errors=3)),
        "ro": nvme_facts(drive(name="nvme1", critical_warning=0x0C)),
        "hot": nvme_facts(drive(critical_warning=0x02)),
        "worn": nvme_facts(drive(percent_used=95)),
    })  # fmt: skip
    assert problems(findings) == {
        ("host.nvme", Status.FAIL): ["media", "ro"],
        ("host.nvme", Status.WARN): ["hot", "worn"],
    }  # fmt: skip
    failed = next(f for f in findings if f.status is Status.FAIL)
    assert ("nvme0 (Dell Express Flash NVMe P4510 4TB SFF, serial PHLJ9135027L4P0DGN): 3 media"
            in failed.message)  # fmt: skip
    assert "reliability degraded" in failed.message and "read-only" in failed.message
    assert "replace the drive" in (failed.remedy or "")


def test_no_nvme_cli_anywhere_is_no_finding_and_a_failed_tool_warns() -> None:
    none = {"a": {"nvme": {"devices": [], "reason": "nvme not found"}}}
    assert host_health_findings(none) == []
    broken = host_health_findings({"a": {"nvme": {"error": "nvme exited 1: \x1b[31mboom"}}})
    assert problems(broken) == {("host.nvme", Status.WARN): ["a"]}
    assert "\x1b" not in broken[0].message


def test_drain_notes_name_the_drive_only_by_a_checked_name() -> None:
    devices = [drive(media_errors=1), drive(name="nvme0; x", critical_warning=8),
               drive(name="nvme3", critical_warning=2)]  # fmt: skip
    notes = drain_notes(nvme_facts(*devices))
    assert notes == ["NVMe nvme0 media errors needs replacement",
                     "NVMe ? critical warning needs replacement"]  # fmt: skip


# -- processes stuck in D state --------------------------------------------------------------

HZ = os.sysconf("SC_CLK_TCK")


def _stat(pid: int, comm: str, state: str, *, cpu: int = 7, start_s: float = 10.0,
          flags: int = 4194560) -> str:  # fmt: skip
    """A /proc/PID/stat line in the kernel's layout (fs/proc/array.c do_task_stat)."""
    fields = [state, "1", str(pid), str(pid), "0", "-1", str(flags), "96", "0", "0", "0",
              str(cpu), "0", "0", "0", "20", "0", "1", "0", str(int(start_s * HZ)),
              "3133440", "381"] + ["0"] * 30  # fmt: skip
    return f"{pid} ({comm}) {' '.join(fields)}"


def fake_proc(tmp_path: Path, uptime: float, procs: dict[int, tuple[str, str]]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text(f"{uptime:.2f} {uptime * 1.9:.2f}\n")
    for pid, (stat, wchan) in procs.items():
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(stat + "\n")
        (proc / str(pid) / "wchan").write_text(wchan)
    (proc / "self").mkdir()  # not a pid: skipped
    return proc


def test_the_stat_line_is_read_after_the_last_parenthesis() -> None:
    real = Path("/proc/self/stat").read_text()
    assert parse_proc_stat(real)["state"] in "RSD"
    odd = parse_proc_stat(_stat(42, "a) D (b", "S"))
    assert odd is not None and (odd["comm"], odd["state"]) == ("a) D (b", "S")
    assert parse_proc_stat("garbage") is None and parse_proc_stat("1 (x) D 1 2") is None


def test_only_old_user_processes_still_in_d_without_progress_count(tmp_path: Path) -> None:
    uptime = 10000.0
    proc = fake_proc(tmp_path, uptime, {
        101: (_stat(101, "python3", "D"), "nfs_wait_bit_killable"),
        102: (_stat(102, "dd", "D", start_s=uptime - 10), "blk_mq_get_tag"),  # young
        103: (_stat(103, "kworker/3:1", "D", flags=0x00208040), "0"),  # a kernel thread
        104: (_stat(104, "bash", "S"), "do_wait"),
        105: (_stat(105, "evil\x1b[2J\nname", "D"), "0"),  # wchan 0: none to name
    })  # fmt: skip
    facts = collect_dstate({"procfs": str(proc)})
    assert facts["count"] == 2 and facts["scanned"] == 5
    first, second = facts["processes"]
    assert (first["pid"], first["name"], first["wchan"]) == (
        101,
        "python3",
        "nfs_wait_bit_killable",
    )
    assert first["age_seconds"] >= DSTATE_MIN_AGE
    assert second["wchan"] is None and "\x1b" not in second["name"] and "\n" not in second["name"]
    parse_facts({"dstate": facts})


def test_a_healthy_proc_costs_no_second_look(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 500.0, {7: (_stat(7, "sshd", "S"), "do_select")})
    assert collect_dstate({"procfs": str(proc)}) == {"processes": [], "count": 0, "scanned": 1}


def test_stuck_processes_warn_with_their_wait_and_name_the_drain_reason() -> None:
    """A warning, not a failure: a job blocked a second on a slow checkpoint write looks the
    same to one probe, and node-check must not drain a node for its job's I/O."""
    stuck = {"processes": [{"pid": 101, "name": "python3", "wchan": "nfs_wait_bit_killable",
                            "age_seconds": 9990}], "count": 1, "scanned": 300}  # fmt: skip
    clean = {"processes": [], "count": 0, "scanned": 280}
    findings = host_health_findings({"n1": {"dstate": stuck}, "n2": {"dstate": clean}})
    assert problems(findings) == {("host.dstate", Status.WARN): ["n1"]}
    assert "pid 101 (python3) in nfs_wait_bit_killable, alive 9990 s" in findings[0].message
    assert drain_notes({"dstate": stuck}) == ["1 processes stuck in D state needs reboot"]
    assert drain_notes({"dstate": clean}) == []


def test_node_check_names_the_drive_and_the_stuck_processes_in_its_drain_reason() -> None:
    stuck = {"processes": [{"pid": 9, "name": "x", "wchan": None, "age_seconds": 400}],
             "count": 3, "scanned": 90}  # fmt: skip
    host = {**nvme_facts(drive(name="nvme1", media_errors=2)), "dstate": stuck}
    notes = node_drain_notes("n1", [], host)
    assert "NVMe nvme1 media errors needs replacement" in notes
    assert "3 processes stuck in D state needs reboot" in notes
