"""The first failing rank: torchrun's summary read, causes ranked before consequences."""

from __future__ import annotations

from clusterkit.facts import PROBE_VERSION
from clusterkit.launch.failure import (
    Failure,
    exit_status,
    first_failure,
    node_failures,
    torchrun_failures,
)
from clusterkit.launch.reuse import report_problem

# torchrun 2.13's summary when a rank raised (stderr of the agent).
SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_11:38:30
  host      : node3
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 22629)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 22629
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_11:38:30
  host      : node3
  rank      : 4 (local_rank: 0)
  exitcode  : 1 (pid: 22628)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
PEER_LOST = "RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.13]:32433."


def test_summary_names_each_failed_rank_once() -> None:
    exits = torchrun_failures(SUMMARY + SUMMARY)
    assert [(e.rank, e.local_rank, e.exit_code) for e in exits] == [(5, 1, -9), (4, 0, 1)]
    assert exits[0].signal_name == "SIGKILL"


def test_the_raising_rank_beats_the_peers_that_lost_it() -> None:
    """node1's rank reports first, but its last words are a lost peer: node3's rank 2 raised."""
    peer = Failure("node1", 0, 1, at=10.0, last_lines=("step 1", PEER_LOST))
    cause = Failure("node3", 2, 1, at=10.4, last_lines=("RuntimeError: fails on purpose",))
    assert first_failure([peer, cause]) is cause
    assert cause.describe() == "rank 2 on node3 exited with status 1"


def test_an_outside_kill_beats_an_exception() -> None:
    killed = Failure("node2", 1, -9, at=11.0)
    raised = Failure("node3", 2, 1, at=10.0, last_lines=("ValueError",))
    assert first_failure([raised, killed]) is killed
    assert killed.describe() == "rank 1 on node2 was killed by SIGKILL"
    assert exit_status(killed) == 137


def test_same_kind_earliest_first() -> None:
    late = Failure("node2", 1, 3, at=11.0)
    early = Failure("node4", 3, 2, at=10.0)
    assert first_failure([late, early]) is early
    assert exit_status(early) == 2


def test_lost_node() -> None:
    lost = Failure("node2", None, None, at=1.0, lost=True)
    assert exit_status(lost) == 3
    assert "node2 was lost" in lost.describe()
    assert first_failure([]) is None


def test_node_failures_from_summary_and_without() -> None:
    lines = {4: ["RuntimeError: boom"], 5: [], -1: ["agent said"]}
    found = node_failures("node3", 1, SUMMARY, lines, 5.0)
    assert [(f.rank, f.exit_code, f.last_lines) for f in found] == [
        (5, -9, ()),
        (4, 1, ("RuntimeError: boom",)),
    ]
    bare = node_failures("node3", 127, "no summary here", lines, 5.0)
    assert [(f.rank, f.exit_code, f.last_lines) for f in bare] == [(None, 127, ("agent said",))]


def test_a_saved_report_must_pass_be_young_and_name_the_same_hosts() -> None:
    report = {
        "verdict": "pass",
        "probe_version": PROBE_VERSION,
        "hosts": {"node1": {}, "node2": {}},
    }
    assert report_problem(report, 10, 60, ["node2", "node1"]) is None
    assert "more than --max-age 60" in (report_problem(report, 100, 60, ["node1", "node2"]) or "")
    assert "names hosts" in (report_problem(report, 1, 60, ["node1", "node3"]) or "")
    failed = dict(report, verdict="fail")
    assert "'fail', not pass" in (report_problem(failed, 1, 60, ["node1", "node2"]) or "")
    assert report_problem([], 1, 60, []) == "not a clusterkit JSON report"


def test_a_saved_report_must_hold_facts_this_clusterkit_reads() -> None:
    """The facts are versioned with the probe, and a saved file is data like a node's
    answer: a report of another probe version, or with facts of another shape, is refused
    with where it differs, before any job starts."""
    hosts = {"node1": {"facts": {"gpus": {"count": 8}}}, "node2": {"facts": None}}
    report = {"verdict": "pass", "probe_version": PROBE_VERSION, "hosts": hosts}
    assert report_problem(report, 1, 60, ["node1", "node2"]) is None
    older = {k: v for k, v in report.items() if k != "probe_version"}
    assert f"probe version None, this clusterkit reads {PROBE_VERSION}" in (
        report_problem(older, 1, 60, ["node1", "node2"]) or ""
    )
    odd = dict(report, hosts={**hosts, "node2": {"facts": {"gpus": {"count": "8"}}}})
    assert report_problem(odd, 1, 60, ["node1", "node2"]) == (
        "host node2: facts.gpus.count: int expected, got '8'"
    )
