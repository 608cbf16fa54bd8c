"""The hardware watch during a run: the node side (clusterkit/node/launch.py HardwareWatch)
reading a kernel log that grows, sysfs ports and the nvidia-smi stand-in as a node shows
them, and the control side (launch/watch.py, launch/messages.py) checking and grading what it
sends. Kernel-log lines are real records (tests/fixtures/kernel-log, sources in its README);
nvidia-smi is the stand-in replaying the real CSV format (tests/support/fake_nvidia_smi.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.model import Status
from clusterkit.facts import parse_facts
from clusterkit.launch.faults import classify
from clusterkit.launch.job import SuperviseOptions
from clusterkit.launch.messages import MalformedControl, WatchEvent, parse_control
from clusterkit.launch.plan import build_plan
from clusterkit.launch.supervise import Supervisor
from clusterkit.launch.watch import grade, node_devices, own_events
from clusterkit.node.launch_watch import HardwareWatch, ib_ports
from tests.support.nodescripts import write_composed
from tests.unit.launch.test_launch_hostile_node import ESCAPE, SETTINGS

ROOT = Path(__file__).resolve().parents[3]
KERNEL_LOG = ROOT / "tests" / "fixtures" / "kernel-log"
STAND_IN = ROOT / "tests" / "support" / "fake_nvidia_smi.py"
BOOT = "2026-11-26T00:00:01,000000+00:00 Linux version 6.1.0 (debian-kernel@lists.debian.org)\n"
XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus."


def iso(line: str, second: int) -> str:
    """A record as `dmesg --time-format iso` prints it."""
    return f"2026-11-26T00:01:{second:02d},000000+00:00 {line}\n"


def recorded(name: str) -> list[str]:
    """The messages of a recorded log, without dmesg's `[ uptime]` prefix."""
    lines = (KERNEL_LOG / name).read_text().splitlines()
    return [line.split("] ", 1)[1] for line in lines if "] " in line]


class Node:
    """A node as the watch sees it: dmesg, nvidia-smi (the stand-in) and sysfs in tmp_path."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin, self.sysfs = tmp_path / "bin", tmp_path / "sys"
        self.bin.mkdir()
        self.log, self.state = tmp_path / "dmesg.log", tmp_path / "smi.json"
        self.log.write_text(BOOT)
        self.tool("dmesg", f"exec cat {self.log}")
        monkeypatch.setenv("PATH", f"{self.bin}:/usr/bin:/bin")
        self.gpus = [self.gpu(0x18), self.gpu(0x33)]

    def tool(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    @staticmethod
    def gpu(bus: int) -> dict[str, object]:
        idle = "0x0000000000000001"
        return {"pci.bus_id": f"00000000:{bus:02X}:00.0", "remapped_rows.pending": "No",
                "remapped_rows.failure": "No", "clocks_event_reasons.active": idle}  # fmt: skip

    def with_smi(self) -> None:
        self.write_smi()
        self.tool("nvidia-smi", f'exec {sys.executable} -S -E {STAND_IN} {self.state} "$@"')

    def write_smi(self) -> None:
        self.state.write_text(json.dumps({"mode": "normal", "gpus": self.gpus}))

    def append(self, *lines: str) -> None:
        with self.log.open("a") as handle:
            handle.writelines(iso(line, i) for i, line in enumerate(lines))

    def port(self, state: str, downed: int) -> None:
        port = self.sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        (port / "state").write_text(state + "\n")
        (port / "counters" / "link_downed").write_text(f"{downed}\n")


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def test_only_xids_logged_after_the_start_are_told_and_each_once(node: Node) -> None:
    """What the log held at the start is `check`'s: an Xid from before is not news."""
    node.append("NVRM: Xid (PCI:0000:33:00): 13, pid=2345, name=python3, Graphics SM Warp")
    watch = HardwareWatch(set())
    watch.start()
    assert watch.sample() == []
    node.append(*recorded("nvlink5-xid145.txt"), XID_79)
    events = watch.sample()
    assert [(e["kind"], e["device"], e["code"], e["fatal"]) for e in events] == [
        ("xid", "0018:01:00", 145, False),
        ("xid", "0000:00:1e", 145, True),
        ("xid", "0000:18:00", 79, None),
    ]
    assert events[2]["text"] == "GPU has fallen off the bus."
    assert watch.sample() == []


def test_a_rotated_log_tells_nothing_twice(node: Node) -> None:
    """The ring buffer drops its oldest lines: the last read's end is gone, the whole log is
    read again, and what was told or known is not told again."""
    node.append(XID_79)
    watch = HardwareWatch(set())
    watch.start()
    node.log.write_text(iso(XID_79, 0) + iso("usb 1-1: new device", 9) * 300)
    assert watch.sample() == []
    node.append("NVRM: Xid (PCI:0000:33:00): 48, pid=0, name=<unknown>, An uncorrectable ECC")
    assert [e["code"] for e in watch.sample()] == [48]


def test_an_oom_kill_is_told_only_for_the_jobs_ranks(node: Node) -> None:
    watch = HardwareWatch({4242})
    watch.start()
    node.append(
        "Out of memory: Killed process 777 (postgres) total-vm:1kB, anon-rss:1kB",
        "Out of memory: Killed process 4242 (python3) total-vm:1kB, anon-rss:1kB",
    )
    (event,) = watch.sample()
    assert (event["kind"], event["code"]) == ("oom", 4242)


def test_a_port_going_down_and_link_downed_rising_are_told(node: Node) -> None:
    node.port("4: ACTIVE", 0)
    watch = HardwareWatch(set(), str(node.sysfs))
    watch.start()
    assert ib_ports(str(node.sysfs)) == {("mlx5_0", "1"): ("ACTIVE", 0)}
    node.port("4: ACTIVE", 2)
    assert [(e["kind"], e["code"]) for e in watch.sample()] == [("ib-flap", 2)]
    node.port("1: DOWN", 2)
    assert [(e["kind"], e["device"], e["text"]) for e in watch.sample()] == [
        ("ib-port", "mlx5_0/1", "port DOWN")
    ]


def test_nvidia_smi_tells_a_pending_remap_a_slowdown_and_a_gpu_gone(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.with_smi()
    monkeypatch.setattr("clusterkit.node.launch_watch.SMI_SECONDS", 0.0)
    watch = HardwareWatch(set())
    watch.start()
    assert watch.sample() == []  # idle (0x1) and no remap: nothing to tell
    node.gpus[0]["remapped_rows.pending"] = "Yes"
    node.gpus[1]["clocks_event_reasons.active"] = "0x0000000000000040"
    node.write_smi()
    events = watch.sample()
    assert [(e["kind"], e["device"]) for e in events] == [
        ("gpu", "0000:18:00"),
        ("gpu", "0000:33:00"),
    ]
    assert events[0]["fields"]["remapped_rows.pending"] == "Yes"
    node.gpus.pop()
    node.write_smi()
    assert [(e["kind"], e["device"]) for e in watch.sample()] == [("gpu-gone", "0000:33:00")]


def test_a_gpu_nvidia_smi_cannot_reach_while_it_lists_the_others_is_gone(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's words for a GPU it lost, on stderr while the others are listed
    (NVIDIA/open-gpu-kernel-modules#387: "Unable to determine the device handle for GPU
    0000:0B:00.0: Unknown Error"), nvidia-smi exiting non-zero: that GPU is gone. Nothing
    listed at all is no answer (a driver reload, NVML mismatched), never every GPU gone."""
    node.with_smi()
    monkeypatch.setattr("clusterkit.node.launch_watch.SMI_SECONDS", 0.0)
    watch = HardwareWatch(set())
    watch.start()
    row = "00000000:18:00.0, No, No, 0x0000000000000001"
    lost = "Unable to determine the device handle for GPU 0000:33:00.0: Unknown Error"
    node.tool("nvidia-smi", f"echo '{row}'; echo '{lost}' >&2; exit 15")
    assert [(e["kind"], e["device"]) for e in watch.sample()] == [("gpu-gone", "0000:33:00")]
    node.tool("nvidia-smi", "echo 'No devices were found'; exit 6")
    assert watch.sample() == []


def test_without_nvidia_smi_or_a_kernel_log_the_watch_is_quiet(node: Node) -> None:
    node.tool("dmesg", "exit 1")
    watch = HardwareWatch(set(), "/nonexistent")
    watch.start()
    assert watch.smi is None and watch.sample() == []


# -- the control side ----------------------------------------------------------------------


def event(kind: str, device: str, code: int = 0, **more: object) -> WatchEvent:
    fields = {"kind": kind, "device": device, "code": code, "fatal": None, "text": "",
              "fields": {}}  # fmt: skip
    fields.update(more)
    return fields  # type: ignore[return-value]


def test_a_fatal_xid_fails_and_an_application_xid_warns_as_check_grades_them() -> None:
    fallen = grade("node2", event("xid", "0000:18:00", 79, text="GPU has fallen off the bus."))
    assert fallen.status is Status.FAIL and fallen.fatal
    assert "Xid 79" in fallen.line() and "node2: node fault" in fallen.line()
    app = grade("node2", event("xid", "0000:18:00", 13, text="Graphics SM Warp Exception"))
    assert app.status is Status.WARN and not app.fatal
    nonfatal = grade("node2", event("xid", "0000:18:00", 145, fatal=False))
    assert nonfatal.status is Status.WARN


def test_gpu_rows_ports_and_oom_are_graded() -> None:
    pending = {"remapped_rows.pending": "Yes", "remapped_rows.failure": "No"}
    assert grade("n", event("gpu", "0000:18:00", fields=pending)).status is Status.FAIL
    thermal = {"clocks_event_reasons.active": "0x0000000000000040"}
    slowed = grade("n", event("gpu", "0000:18:00", fields=thermal))
    assert slowed.status is Status.WARN and "HW thermal slowdown" in slowed.what
    assert grade("n", event("gpu-gone", "0000:18:00")).status is Status.FAIL
    assert grade("n", event("ib-port", "mlx5_0/1", text="port DOWN")).status is Status.FAIL
    assert grade("n", event("ib-flap", "mlx5_0/1", 2)).status is Status.WARN
    assert grade("n", event("oom", "", 4242, text="killed")).status is Status.WARN


def test_a_node_names_only_its_own_devices() -> None:
    """A node's devices are its facts' (nvidia-smi's bus ids, its RDMA ports): an event
    naming another is dropped; an OOM kill names none."""
    facts = parse_facts({
        "gpus": {"devices": [{"pci.bus_id": "00000000:18:00.0"}]},
        "infiniband": {"devices": [{"name": "mlx5_0", "ports": [{"port": "1"}]}]},
    })  # fmt: skip
    devices = node_devices(facts)
    assert devices == {"0000:18:00", "mlx5_0/1"}
    events = [event("xid", "0000:18:00", 79), event("xid", "0000:19:00", 79),
              event("ib-port", "mlx5_1/1"), event("oom", "", 4242)]  # fmt: skip
    kept, dropped = own_events(events, devices)
    assert [(e["kind"], e["device"]) for e in kept] == [("xid", "0000:18:00"), ("oom", "")]
    assert len(dropped) == 2 and "'0000:19:00', not this node's" in dropped[0]
    assert own_events(events, None)[0] == events  # unchecked: nothing known to hold it to


def test_hostile_hardware_messages_are_dropped_entry_by_entry() -> None:
    good = event("xid", "0000:18:00", 79, text="GPU has fallen off the bus.")
    raw = {"event": "hardware", "events": [
        good,
        {**good, "text": "x" * 5000},  # longer than the watch sends
        {**good, "code": True},  # JSON true is no code
        {**good, "kind": "meltdown"},
        {**good, "fields": {"evil": "1"}},
        {**good, "extra": 1},
        "garbage",
    ]}  # fmt: skip
    message, dropped = parse_control(raw)
    assert message == {"event": "hardware", "events": [good]}
    assert len(dropped) == 6
    with pytest.raises(MalformedControl):
        parse_control({"event": "hardwares", "events": []})
    flood, dropped = parse_control({"event": "hardware", "events": [good] * 5000})
    assert len(flood["events"]) == 64 and "5000 entries, only the first 64 read" in dropped[-1]  # type: ignore[typeddict-item]


def test_a_watch_fault_is_a_node_fault_on_the_nodes_own_evidence() -> None:
    """It may drain the node (`own_evidence`): its own kernel log said so."""
    fault = classify([], hardware=("node2", "Xid 79 (GPU has fallen off the bus) on 0000:18:00"))
    assert fault.node and fault.hosts == ("node2",) and fault.own_evidence == ("node2",)
    assert "Xid 79" in fault.reason


def shipped_watch_sample(tmp_path: Path, fault: str) -> list[dict[str, Any]]:
    """The events of one sample of the watch in the runner's shipped text, run with no
    clusterkit on the path as on a node, after `fault` (a line of Python) between its start
    and the sample."""
    folder = write_composed("launch", tmp_path / "shipped").parent
    script = (
        "import json, launch\n"
        "w = launch.HardwareWatch(set())\n"
        "w.start()\n"
        f"{fault}\n"
        "w.smi_at = -1e9\n"  # nvidia-smi due now, not in its 20 s
        "print(json.dumps(w.sample()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(folder)}
    out = subprocess.run(
        [sys.executable, "-S", "-c", script], env=env, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout  # fmt: skip
    events: list[dict[str, Any]] = json.loads(out)
    return events


def test_the_runner_composed_for_a_node_runs_the_watch_without_clusterkit(
    tmp_path: Path, node: Node
) -> None:
    """The shipped text (the prelude and the kernel-log library inserted) imports and
    watches with no clusterkit on the path, as on a node."""
    events = shipped_watch_sample(
        tmp_path, f"open({str(node.log)!r}, 'a').write({iso(XID_79, 5)!r})"
    )
    assert [(e["kind"], e["code"]) for e in events] == [("xid", 79)]
    assert parse_control({"event": "hardware", "events": events}) == (  # strictly, as sent
        {"event": "hardware", "events": events},
        [],
    )


# -- the supervisor: one node's report, as it arrives ------------------------------------------


def watching(devices: dict[str, frozenset[str]] | None) -> tuple[Supervisor, list[str]]:
    notes: list[str] = []
    options = SuperviseOptions(out=io.StringIO(), note=notes.append, devices=devices)
    plan = build_plan(SETTINGS)
    transports: Any = {node.host: object() for node in plan}  # never used: no process runs
    return Supervisor(transports, plan, "run1", {}, options), notes


def report(sup: Supervisor, host: str, *events: object) -> None:
    """A hardware report from `host`'s node process, as it arrives on the connection."""
    message = json.dumps({"event": "hardware", "events": list(events)}).encode()
    sup._line(sup.nodes[host], sup.token.encode() + b" " + message)


def test_a_warning_is_told_once_and_a_fault_stops_the_job_as_the_nodes() -> None:
    sup, notes = watching({"n1": frozenset({"0000:18:00"}), "n2": frozenset({"0000:19:00"})})
    app = event("xid", "0000:19:00", 13, text="Graphics SM Warp Exception")
    report(sup, "n2", app)
    report(sup, "n2", app)  # the same again: told once
    assert [n for n in notes if "warning" in n] == [
        "clusterkit: n2: warning during the run: Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION / "
        "ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY) on 0000:19:00: no node action: Graphics SM Warp "
        "Exception"
    ]
    assert sup.stopping_since is None and sup.failed_at is None
    report(sup, "n2", event("xid", "0000:18:00", 79, text="GPU has fallen off the bus."))
    assert sup.stopping_since is None  # n1's GPU: n2 does not speak for it
    assert "n2: dropped: hardware: xid names '0000:18:00', not this node's" in notes[-1]
    report(sup, "n2", event("xid", "0000:20:00", 79), "garbage")  # told once per node
    assert len([n for n in notes if "dropped" in n]) == 1 and sup.stopping_since is None
    report(sup, "n2", event("xid", "0000:19:00", 79, text=f"fallen off{ESCAPE}"))
    assert sup.stopping_since is not None and sup.hardware_fault is not None
    assert sup.hardware_fault.host == "n2" and "\x1b" not in notes[-1]
    outcome = sup._outcome()
    assert (outcome.result, outcome.status) == ("node-fault", 1)
    assert [g.status for g in outcome.hardware] == [Status.WARN, Status.FAIL]
