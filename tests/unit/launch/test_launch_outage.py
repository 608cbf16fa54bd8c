"""A lost node, told fast and reported truthfully: detected after the node timeout counted
from its last byte, never waited on in the critical path, and the outage (the incident's
times, the trace `cost` reads) counted from its last sign of life, not from the detection."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from clusterkit.launch.failure import Failure
from clusterkit.launch.faults import classify
from clusterkit.launch.incidents import Incident, trace_text
from clusterkit.launch.job import NODE_TIMEOUT
from clusterkit.launch.supervise import START_SECONDS
from clusterkit.node import launch as node_launch
from clusterkit.transport.base import Deadline
from tests.unit.launch.test_launch_hostile_node import control, supervisor
from tests.unit.launch.test_launch_messages import _until, start_node_program


def test_the_defaults_tell_a_lost_node_within_fifteen_seconds_without_false_losses() -> None:
    """Ten missed beats before a loss: a loaded node delays one by a second, not ten."""
    assert node_launch.HEARTBEAT_SECONDS <= 1.0
    assert 8 * node_launch.HEARTBEAT_SECONDS <= NODE_TIMEOUT <= 12.0


def test_the_node_program_speaks_every_second_while_the_job_is_silent(tmp_path: Path) -> None:
    """The real node program running a silent job that is no rank (no progress reports): a
    heartbeat comes every second or so (five within eight seconds; every 5 s before, too
    rare for a 10 s node timeout)."""
    process, token = start_node_program(tmp_path, {})
    try:
        _until(process, token, "started", 20)
        started = time.monotonic()
        beats = [_until(process, token, "alive", 8) for _ in range(5)]
        assert time.monotonic() - started < 8.0, beats
        process.send(b"stop\n")
        _until(process, token, "exit", 20)
    finally:
        process.finish(Deadline.after(10))


def test_the_node_program_ends_as_soon_as_it_has_reported(tmp_path: Path) -> None:
    """After its exit report the node program leaves at once, status 0. An ordinary
    interpreter exit waited a second for the lock of stdin, held by the thread reading the
    commands, then aborted (SIGABRT): a second added to every stop and every restart."""
    process, token = start_node_program(tmp_path, {})
    try:
        _until(process, token, "started", 20)
        process.send(b"stop\n")
        (*_, report) = _until(process, token, "exit", 20)
        assert report["stopped"] is True
    finally:
        result = process.finish(Deadline.after(10))
    assert result.exit_code == 0, result.stderr[-500:]
    assert b"Fatal Python error" not in result.stderr


def test_a_silent_node_is_lost_and_its_fault_began_at_its_last_byte() -> None:
    sup, _ = supervisor()
    n1, n2 = sup.nodes["n1"], sup.nodes["n2"]
    now = time.monotonic()
    for node in (n1, n2):
        node.spoke, node.heard_at = True, now
    n2.heard_at = now - NODE_TIMEOUT - 0.5  # its last byte came before the timeout
    sup._decide(Deadline.after(3600.0))
    assert not n1.lost and n2.lost
    assert [(f.host, f.lost) for f in sup.failures] == [("n2", True)]
    assert sup.nodes["n1"].stopped_by_us  # the rest is stopped at once
    outcome = sup._outcome()
    assert outcome.onset_at == n2.heard_at
    assert outcome.detected_at is not None
    assert outcome.detected_at - outcome.onset_at >= NODE_TIMEOUT


def test_a_crashed_nodes_fault_began_at_its_last_byte_not_at_the_news() -> None:
    sup, _ = supervisor()
    node = sup.nodes["n2"]
    node.spoke, node.heard_at = True, time.monotonic() - 0.8
    sup._handle("ended", node, "unreachable: the SSH connection was lost")
    outcome = sup._outcome()
    assert outcome.result == "lost"
    assert outcome.onset_at == node.heard_at < (outcome.detected_at or 0)


def test_a_failing_rank_begins_when_it_is_reported() -> None:
    sup, _ = supervisor()
    control(sup, "n1", {"event": "exit", "code": 1})
    outcome = sup._outcome()
    assert outcome.onset_at is not None and outcome.onset_at == outcome.detected_at


def test_a_node_still_starting_gets_the_start_allowance_not_the_node_timeout() -> None:
    """Before its first byte a node may be starting its interpreter on a loaded machine."""
    sup, _ = supervisor()
    node = sup.nodes["n2"]
    node.heard_at = time.monotonic() - NODE_TIMEOUT - 1
    sup._decide(Deadline.after(3600.0))
    assert not node.lost
    node.heard_at = time.monotonic() - START_SECONDS - 1
    sup._decide(Deadline.after(3600.0))
    assert node.lost


def test_the_watch_does_not_wait_for_a_lost_nodes_stop() -> None:
    """A lost node is gone: the stop of the others ends the watch; its own connection is
    cleaned up in the background (it would wait out the stop grace and a sweep)."""
    sup, _ = supervisor()
    n1, n2 = sup.nodes["n1"], sup.nodes["n2"]
    n2.spoke, n2.heard_at = True, time.monotonic() - NODE_TIMEOUT - 1
    sup._decide(Deadline.after(3600.0))
    assert n2.lost and n2.stopped_by_us  # told to stop, if it ever hears it
    control(sup, "n1", {"event": "exit", "code": 143, "stopped": True})
    sup._handle("ended", n1, "")
    watch = threading.Thread(target=sup._watch, args=(Deadline.after(3600.0),), daemon=True)
    watch.start()
    watch.join(5.0)
    assert not watch.is_alive()
    assert sup._outcome().result == "lost"


def test_the_outage_is_counted_from_the_last_sign_of_life() -> None:
    """A node silent since T, found lost at T + 10.4: the incident, its JSON record and the
    trace `cost` reads all start at T; the detection is kept beside it."""
    fault = classify([Failure("node3", None, None, 1.0, lost=True)])
    onset = 1_790_000_000.0
    incident = Incident(0, onset + 10.4, fault, running_s=21.5, onset=onset)
    record = incident.to_dict()
    assert record["onset"] == "2026-09-21T14:13:20+00:00"
    assert record["detected"] == "2026-09-21T14:13:30+00:00"
    assert record["detect_s"] == 10.4
    assert incident.line().startswith("incident 2026-09-21T14:13:20+00:00 node fault on node3")
    assert "2026-09-21T14:13:20+00:00 node3" in trace_text([incident], 3, 1.0).splitlines()
    found = Incident(0, onset, fault)  # no onset known: the detection is the start
    assert found.to_dict()["detect_s"] == 0.0 and found.began == onset


def test_a_node_lost_after_its_peers_failed_moves_the_onset_to_its_last_sign() -> None:
    """Under srun a crashed node's stream goes quiet without ending: its peers' ranks fail
    first, the node is lost at the node timeout. The outage began at its last byte, before
    the peers' failures, not when they were reported."""
    sup, _ = supervisor()
    n1, n2 = sup.nodes["n1"], sup.nodes["n2"]
    now = time.monotonic()
    n1.spoke, n1.heard_at = True, now
    n2.spoke, n2.heard_at = True, now - NODE_TIMEOUT - 0.5
    control(sup, "n1", {"event": "exit", "code": 1})  # its ranks lost their peer
    reported = sup.failed_at
    assert reported is not None and n2.heard_at < reported
    sup._decide(Deadline.after(3600.0))
    assert n2.lost
    outcome = sup._outcome()
    assert outcome.onset_at == n2.heard_at
    assert outcome.detected_at == reported  # the stop began with the first failure


def test_a_node_lost_later_for_its_own_reasons_does_not_move_the_onset_back() -> None:
    """A node whose last sign came after the first failure explains nothing before it."""
    sup, _ = supervisor()
    control(sup, "n1", {"event": "exit", "code": 1})
    first = sup.onset_at
    assert first is not None
    sup._fail(Failure("n2", None, None, time.monotonic(), lost=True), first + 1.0)
    assert sup._outcome().onset_at == first


def test_a_node_whose_channel_ends_while_it_is_being_stopped_is_lost() -> None:
    """Its peers failed first and the job is being stopped; the node's channel then ends
    without its exit report (a crashed node under srun, known from srun's connections): it
    is lost, and the outage began at its last byte."""
    sup, _ = supervisor()
    n2 = sup.nodes["n2"]
    n2.spoke, n2.heard_at = True, time.monotonic() - 3.0
    sup._line(sup.nodes["n1"], b"RuntimeError: Connection reset by peer")  # torchrun's words
    control(sup, "n1", {"event": "exit", "code": 1})
    sup._stop_all("a rank failed")  # after the failure grace
    assert n2.stopped_by_us and not n2.lost
    sup._handle("ended", n2, "unreachable: its step's connection to srun closed")
    assert n2.lost
    assert [f.host for f in sup.failures if f.lost] == ["n2"]
    assert sup._outcome().result == "lost" and sup._outcome().onset_at == n2.heard_at


def test_a_node_we_gave_up_stopping_is_not_called_lost() -> None:
    """Its stop overdue, we ended its process ourselves: that ending is ours, not its."""
    sup, _ = supervisor()
    n2 = sup.nodes["n2"]
    control(sup, "n1", {"event": "exit", "code": 1})
    sup._stop_all("a rank failed")
    n2.abandoned = True
    sup._handle("ended", n2, "")
    assert n2.ended and not n2.lost
