"""A job judged by its progress, not its printing; stragglers named from the ranks' own
samples; flight records read where the ranks parted (real records of desynced gloo jobs,
tests/fixtures/flight-recorder/, checked against torch's own analyser)."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.launch.flight import divergence
from clusterkit.launch.progress import ProgressWatch, Sample, advanced
from clusterkit.node.launch import MARKER, Runner
from clusterkit.node.launch_records import job_process, pg_counters, progress_notes, read_record
from clusterkit.transport.base import Deadline
from tests.unit.launch.test_launch_hostile_node import control, supervisor

RECORDS = Path(__file__).resolve().parents[2] / "fixtures" / "flight-recorder"
WAITING = {"0": (6, 5)}  # collective #6 enqueued, #5 the last completed: inside a collective
OUTSIDE = {"0": (5, 5)}


def sample(at: float, cpu: float, groups: dict[str, tuple[int, int]] | None) -> Sample:
    return Sample(at, cpu, groups)


# --- progress ------------------------------------------------------------------------------


def test_a_completed_collective_is_progress_and_waiting_is_not_whatever_the_cpu() -> None:
    assert advanced(sample(0, 0, {"0": (5, 4)}), sample(2, 0, {"0": (6, 5)}))
    # NCCL spins the CPU while it waits: still no progress.
    assert not advanced(sample(0, 0, WAITING), sample(2, 2.0, WAITING))
    # Outside any collective, the CPU is work (an evaluation, a checkpoint) ...
    assert advanced(sample(0, 0, OUTSIDE), sample(2, 1.0, OUTSIDE))
    # ... and a rank outside any collective using none is idle (a sleep, a deadlock).
    assert not advanced(sample(0, 0, OUTSIDE), sample(2, 0.01, OUTSIDE))
    # Before its process group exists, the CPU alone says it works (imports, data).
    assert advanced(sample(0, 0, None), sample(2, 1.5, None))
    assert advanced(sample(0, 0, None), sample(2, 0, OUTSIDE))  # its group came up


def test_a_silent_job_that_advances_is_never_hung_and_a_chatty_stuck_one_is() -> None:
    """A job that logs to a file was stopped as hung; a job whose logging thread printed
    while its ranks sat in a collective never was."""
    sup, _ = supervisor()
    sup.options.hang_timeout = 5.0
    deadline = Deadline.after(3600.0)

    def progress(completed: int, cpu: float, waiting: bool) -> None:
        groups = {"0": [completed + int(waiting), completed]}
        for host, rank in (("n1", 0), ("n2", 8)):
            entry = {"rank": rank, "pid": 100 + rank, "cpu": cpu, "groups": groups}
            entry.update(ticks=0, busy=0)
            control(sup, host, {"event": "progress", "ranks": [entry]})

    progress(1, 0.0, waiting=False)
    for step in range(2, 5):  # silent: not one line printed, collectives completing
        sup.last_progress -= 10  # as if 10 s had passed since the last sign
        progress(step, float(step), waiting=False)
        sup._decide(deadline)
        assert not sup.hang_reason
    sup.last_progress -= 10
    progress(4, 9.0, waiting=True)  # stuck in collective #5, spinning the CPU
    sup._line(sup.nodes["n1"], b"[rank0]:still alive, step 4")  # its logging thread
    sup._decide(deadline)
    assert sup.hang_reason.startswith("no rank advanced for 5 s")
    assert sup.dump_since is not None  # the stacks and flight records are asked for
    stuck_since = sup.last_progress
    sup._analyse_hang(missing=[])
    outcome = sup._outcome()
    # The outage a restart reports (running_s, --trace) counts from the job's last advance,
    # not from the detection a hang timeout later.
    assert outcome.result == "hung" and outcome.onset_at == stuck_since
    assert outcome.detected_at is not None and outcome.detected_at - stuck_since >= 5.0


def test_printing_still_counts_for_a_job_whose_ranks_report_nothing() -> None:
    """In a container the ranks cannot report progress: their lines stay the sign."""
    sup, _ = supervisor()
    sup.options.hang_timeout = 5.0
    sup._line(sup.nodes["n1"], b"[rank0]:step 1")
    sup.last_progress -= 10
    sup._line(sup.nodes["n1"], b"[rank0]:step 2")
    sup._decide(Deadline.after(3600.0))
    assert not sup.hang_reason


def test_a_node_reports_progress_only_for_its_own_ranks() -> None:
    sup, _ = supervisor()
    forged = {"rank": 0, "pid": 1, "cpu": 1.0, "groups": {"0": [9, 9]}, "ticks": 1, "busy": 1}
    control(sup, "n2", {"event": "progress", "ranks": [forged]})
    assert sup.progress.last == {}
    control(sup, "n2", {"event": "progress", "ranks": [{"rank": 8, "pid": 1, "cpu": "x"}]})
    assert sup.progress.last == {}


# --- stragglers ----------------------------------------------------------------------------


def watch_of(busy: dict[str, float], samples: int = 20, ranks_per_node: int = 1) -> ProgressWatch:
    """A report every 2 s from every rank, each counting 20 of its own samples in between;
    a rank of a node with share b computed in b of them and waited in the others."""
    watch = ProgressWatch()
    for index in range(samples):
        for node, (host, share) in enumerate(busy.items()):
            for local in range(ranks_per_node):
                ticks = index * 20
                sample = Sample(index * 2.0, index * share, {"0": (index, index)}, ticks,
                                round(ticks * share))  # fmt: skip
                watch.add(host, node * ranks_per_node + local, sample)
    return watch


def test_the_node_the_others_wait_for_is_named_with_its_slowdown() -> None:
    found = watch_of({"node1": 0.1, "node2": 0.1, "node3": 0.9, "node4": 0.15}).straggler()
    assert found is not None and found.host == "node3"
    assert found.slowdown is not None and 7 < found.slowdown < 10  # 0.9 / median(0.1, 0.15)
    assert "node3 is a straggler" in found.describe() and "slower" in found.describe()


@pytest.mark.parametrize(
    "busy",
    [
        {"node1": 0.3, "node2": 0.35, "node3": 0.3},  # healthy: every rank alike
        {"node1": 0.8, "node2": 0.85, "node3": 0.8},  # compute-bound, nobody waits long
        {"node1": 0.6, "node2": 0.3, "node3": 0.3},  # a margin that is not clear
        {"node1": 0.9},  # one node: nobody to compare with
    ],
)
def test_healthy_nodes_are_never_named(busy: dict[str, float]) -> None:
    assert watch_of(busy).straggler() is None


def test_too_short_a_window_names_nobody() -> None:
    assert watch_of({"node1": 0.1, "node2": 0.9}, samples=8).straggler() is None


def test_a_hung_rank_is_no_straggler() -> None:
    """A rank asleep outside any collective (a hang) uses no CPU: the others wait for it,
    but it is hung, not slow, and the hang clock deals with it."""
    watch = ProgressWatch()
    for index in range(20):
        watch.add("node1", 0, Sample(index * 2.0, 0.0, {"0": (5, 4)}, index * 20, 0))
        watch.add("node2", 1, Sample(index * 2.0, 0.0, {"0": (4, 4)}, index * 20, 0))
    assert watch.straggler() is None


# --- the node's reading of the ranks' files -------------------------------------------------


def test_the_runner_reads_the_ranks_notes_newest_per_rank(tmp_path: Path) -> None:
    (tmp_path / "progress-0.100.json").write_text(json.dumps({"t": 1.0, "pg_status": None}))
    status = {"0": {"last_enqueued_collective": "7", "last_completed_collective": "6"}}
    (tmp_path / "progress-0.200.json").write_text(json.dumps({"t": 2.0, "pg_status": status}))
    (tmp_path / "progress-1.300.json").write_text("not json")
    (tmp_path / "progress-x.1.json").write_text("{}")
    (tmp_path / "progress-2.400.json").write_text(json.dumps({"t": 3.0, "pg_status": "?"}))
    # rank 0's spawned DataLoader worker (or torch.compile's): newer, but no group
    (tmp_path / "progress-0.250.json").write_text(json.dumps({"t": 9.0, "pg_status": None}))
    notes = progress_notes(str(tmp_path))
    assert [(rank, pid) for rank, pid, _ in notes] == [(0, 200), (2, 400)]
    assert pg_counters(notes[0][2]) == {"0": [7, 6]}
    assert pg_counters(notes[1][2]) is None


def test_a_note_naming_a_process_that_is_not_the_rank_is_ignored(tmp_path: Path) -> None:
    """The job (or anyone who can write its notes) names the pid: the runner reads a pid's
    CPU time, and keeps it for the watch's OOM kills, only when that process carries the
    job's marker and the note's RANK."""
    runner = Runner({"token": "t", "marker": "run-1/0"})
    runner.run_dir = str(tmp_path)
    Path(runner.stacks_dir).mkdir()
    env = {**os.environ, MARKER: "run-1/0", "RANK": "0"}
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    rank = subprocess.Popen(sleep, env=env)
    other = subprocess.Popen(sleep, env={**env, MARKER: "run-2/0"})  # another job's rank
    try:
        notes = {0: rank.pid, 1: os.getpid(), 2: rank.pid, 3: other.pid}  # 1-3 are lies
        for number, pid in notes.items():
            note = Path(runner.stacks_dir) / f"progress-{number}.{pid}.json"
            note.write_text(json.dumps({"t": 1.0, "pg_status": None}))
        sampled = runner.progress_sample(100.0)
    finally:
        for process in (rank, other):
            process.kill()
            process.wait()
    assert [(entry["rank"], entry["pid"]) for entry in sampled] == [(0, rank.pid)]
    assert runner.rank_pids == {rank.pid}


def test_a_rank_is_a_process_of_the_jobs_user_with_its_marker_and_rank(tmp_path: Path) -> None:
    """Over a /proc laid out by hand: owner, marker and RANK must all match, to the byte."""
    marker = f"{MARKER}=run-1/0".encode()

    def process(pid: int, *items: bytes) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(b"\0".join(items) + b"\0")

    process(10, b"PATH=/bin", marker, b"RANK=3")
    process(11, marker + b"x", b"RANK=3")  # another marker that starts with the job's
    process(12, b"RANK=3", b"X=" + marker)  # the marker as another variable's value
    (tmp_path / "13").mkdir()  # no environ to read (a kernel thread, a zombie)
    mine = os.getuid()
    assert job_process(10, 3, marker, proc=str(tmp_path), uid=mine)
    assert not job_process(10, 3, marker, proc=str(tmp_path), uid=mine + 1)  # another user's
    assert not job_process(10, 4, marker, proc=str(tmp_path), uid=mine)  # another rank
    for pid in (11, 12, 13, 14):
        assert not job_process(pid, 3, marker, proc=str(tmp_path), uid=mine)


def test_a_watchdog_pickle_is_read_as_plain_data_only(tmp_path: Path) -> None:
    record = json.loads((RECORDS / "skip" / "rank0.json").read_text())
    plain = tmp_path / "nccl_trace_rank_0"
    plain.write_bytes(pickle.dumps(record))
    entries = read_record(str(plain), pickled=True)
    assert entries and entries[-1]["seq"] == 5 and entries[-1]["op"] == "gloo:all_reduce"
    hostile = tmp_path / "nccl_trace_rank_1"
    hostile.write_bytes(pickle.dumps({"entries": [Path("/etc/shadow")]}))
    assert read_record(str(hostile), pickled=True) is None  # names a class: refused


# --- flight records --------------------------------------------------------------------------


def records(case: str) -> dict[tuple[str, int], list]:
    """The fixture's ranks, one per node, as the node reduces them for the wire."""
    found = {}
    for rank in range(3):
        entries = read_record(str(RECORDS / case / f"rank{rank}.json"))
        assert entries is not None
        found[(f"node{rank + 1}", rank)] = entries
    return found


def test_a_skipped_collective_names_where_the_ranks_wait_and_who_never_came() -> None:
    assert divergence(records("skip")) == [
        "ranks 0,2 (node1, node3) wait in all_reduce #5 of process group 0; "
        "rank 1 (node2) never entered it: its last was #4"
    ]


def test_a_mismatched_collective_names_both_calls() -> None:
    assert divergence(records("mismatch")) == [
        "collective #4 of process group 0 differs: ranks 0,2 (node1, node3) called "
        "all_reduce [[4]]; rank 1 (node2) called broadcast [[4]]"
    ]


def test_ranks_that_agree_have_no_divergence() -> None:
    agreeing = {key: entries[:4] for key, entries in records("skip").items()}
    assert divergence(agreeing) == []


def torch_analyser(case: str, folder: Path) -> str:
    """torch's own flight-record analyser on the same records (it reads pickles, and needs
    the group name torch 2.13 leaves empty in gloo's pg_config)."""
    for rank in range(3):
        data = json.loads((RECORDS / case / f"rank{rank}.json").read_text())
        data["pg_config"] = {"0": dict(data["pg_config"][""], name="0")}
        (folder / f"trace_rank_{rank}").write_bytes(pickle.dumps(data))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder),
         "--prefix", "trace_rank_"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


@pytest.mark.slow
def test_clusterkit_and_torchs_analyser_agree_on_the_same_records(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    (tmp_path / "skip").mkdir()
    said = torch_analyser("skip", tmp_path / "skip")
    assert "Not all ranks joining collective, sequence number: 5" in said, said
    assert re.search(r"missing ranks: \{1\}", said), said
    ours = divergence(records("skip"))[0]
    assert "wait in all_reduce #5" in ours and "rank 1 (node2) never entered it" in ours
    (tmp_path / "mismatch").mkdir()
    said = torch_analyser("mismatch", tmp_path / "mismatch")
    assert "Collective sequence number: 4 has errors" in said, said
    assert "COLLECTIVE_TYPE_MISMATCH" in said
    assert divergence(records("mismatch"))[0].startswith("collective #4 of process group 0")


def test_flight_records_are_written_to_the_log_dir_of_the_hang(tmp_path: Path) -> None:
    from clusterkit.safefiles import PrivateFolder
    from tests.unit.launch.test_launch_stacks import IN_ALL_REDUCE, py_spy_entry

    with PrivateFolder.open(tmp_path / "logs") as folder:
        sup, _ = supervisor(folder)
        for host, rank, case_rank in (("n1", 0, 0), ("n2", 8, 1)):
            entry = dict(py_spy_entry(rank, 100 + rank, IN_ALL_REDUCE))
            entry["flight"] = read_record(str(RECORDS / "skip" / f"rank{case_rank}.json"))
            control(sup, host, {"event": "dump", "ranks": [entry]})
        sup.hang_reason = "no rank advanced for 1 s"
        sup._analyse_hang(missing=[])
    assert sup.hang is not None
    assert sup.hang.flight == [
        "rank 0 (n1) waits in all_reduce #5 of process group 0; "
        "rank 8 (n2) never entered it: its last was #4"
    ]
    saved = json.loads((tmp_path / "logs" / "flight-n2-8.json").read_text())
    assert saved["rank"] == 8 and saved["entries"][-1]["seq"] == 4
    message = sup._outcome().message
    assert message.startswith("the job hung (no rank advanced for 1 s): rank 0 (n1) waits in")
