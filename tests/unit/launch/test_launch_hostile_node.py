"""A hostile node's answers to the supervisor: never a path, never a crash, never raw on the
terminal. The node holds the control token (it is the node process), so it can send any JSON."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from clusterkit.commands.launch import report_outcome
from clusterkit.environment import Environment
from clusterkit.launch.failure import Failure
from clusterkit.launch.faults import classify
from clusterkit.launch.job import JobOutcome, SuperviseOptions
from clusterkit.launch.plan import LaunchSettings, PlanNode, build_plan
from clusterkit.launch.supervise import Supervisor
from clusterkit.safefiles import PrivateFolder
from clusterkit.transport.base import Deadline
from tests.unit.launch.test_launch_stacks import (
    FAULTHANDLER,
    IN_ALL_REDUCE,
    py_spy_entry,
    rank_entry,
)

SETTINGS = LaunchSettings(
    nodes=(PlanNode("n1"), PlanNode("n2")),
    master_addr="10.0.0.1",
    master_port=29500,
    nproc_per_node=8,  # n1 runs ranks 0-7, n2 ranks 8-15
    script=("train.py",),
)
ESCAPE = "\x1b]0;owned\x07\x1b[2J"
FORGED = "\nclusterkit: job succeeded after 1.0 s: every rank succeeded"


def supervisor(log_dir: PrivateFolder | None = None) -> tuple[Supervisor, list[str]]:
    notes: list[str] = []
    options = SuperviseOptions(log_dir=log_dir, out=io.StringIO(), note=notes.append)
    plan = build_plan(SETTINGS)
    transports: Any = {node.host: object() for node in plan}  # never used: no process runs
    return Supervisor(transports, plan, "run1", {}, options), notes


def control(sup: Supervisor, host: str, message: object) -> None:
    """One control line from `host`'s node process, as it arrives on the connection."""
    sup._line(sup.nodes[host], sup.token.encode() + b" " + json.dumps(message).encode())


HOSTILE_RANKS = [
    py_spy_entry(0, 100, IN_ALL_REDUCE),
    rank_entry("x/../../y", 5, method="faulthandler", raw=FAULTHANDLER),
    rank_entry(1, "123", method="faulthandler", raw=FAULTHANDLER),
    {"method": "py-spy", "raw": "[]"},
    "../../z",
    rank_entry(True, 5),
    rank_entry(2.5, 5),
    rank_entry(-1, 5),
    rank_entry(10**30, 5),
    rank_entry(3, 6, raw=["not", "text"]),
    rank_entry(3, 6, sources={"a": 1}),
    rank_entry(4, 7, method="py-spy", raw="[1, 2]"),
    rank_entry(5, 8, method="py-spy", raw='[{"frames": [{"line": 1e999}]}]'),
    rank_entry(6, 9, method="py-spy", raw="[" * 100_000),
    rank_entry(7, 10, error=f"py-spy failed{FORGED}{ESCAPE}"),
]


def test_a_hostile_dump_reply_is_checked_not_trusted(tmp_path: Path) -> None:
    """rank `x/../../y` used to crash launch with a traceback (int() of it), and a rank that
    became part of a file name would have written outside --log-dir."""
    logs = tmp_path / "work" / "logs"
    with PrivateFolder.open(logs) as folder:
        sup, _ = supervisor(folder)
        control(sup, "n1", {"event": "dump", "ranks": HOSTILE_RANKS})
        control(sup, "n2", {"event": "dump", "ranks": "x/../../y"})
        sup.hang_reason = "no rank printed anything for 1 s"
        sup._analyse_hang(missing=[])
    hang = sup.hang
    assert hang is not None
    assert sorted(s.rank for s in hang.stacks) == [0, 4, 5, 6, 7]
    assert [s.error is not None for s in sorted(hang.stacks, key=lambda s: s.rank)] == [
        False, True, True, True, True
    ]  # fmt: skip
    assert len(hang.malformed) == 11  # entries 1 to 10 of n1, and n2's whole answer
    assert hang.malformed[0] == "n1: dump.ranks[1].rank: int expected, got 'x/../../y'"
    assert hang.malformed[1] == "n1: dump.ranks[2].pid: int expected, got '123'"
    assert hang.malformed[6] == "n1: dump.ranks[7].rank: -1 is out of range (0 to 2147483647)"
    assert "n2: dump.ranks: a list expected, got 'x/../../y'" in hang.malformed
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert written == ["work", "work/logs"] + [
        f"work/logs/stacks-n1-{rank}.txt" for rank in (0, 4, 5, 6, 7)
    ]


@pytest.mark.parametrize(
    "message",
    [
        [1, 2],
        "exit",
        {"event": "dump", "ranks": {"rank": 0}},
        {"event": "dump", "ranks": None},
        {"event": "started", "stacks": ["py-spy"]},
        {"event": "exit", "code": [1], "error": {"x": ESCAPE}},
        {"event": "exit", "code": "0"},
    ],
)
def test_wrongly_typed_control_messages_do_not_crash(message: object) -> None:
    """Dropped like a line that is not JSON (a dump still answers, with nothing usable):
    a node whose exit report was dropped is lost once it ends."""
    sup, notes = supervisor()
    control(sup, "n1", message)
    node = sup.nodes["n1"]
    assert node.stacks_method is None
    assert node.exit_code is None and node.reported_at is None and sup.failures == []
    assert all("\x1b" not in note for note in notes)
    sup._handle("ended", node, "")
    assert [(f.rank, f.lost) for f in sup.failures] == [(None, True)]


def test_a_rank_number_too_long_for_int_is_just_a_line() -> None:
    sup, _ = supervisor()
    sup._line(sup.nodes["n1"], b"[rank" + b"9" * 5000 + b"]:hello")
    assert sup.last_lines == {}


def test_node_text_in_the_summaries_is_escaped() -> None:
    """Function names, file names, source lines and last lines come from the node or the job:
    they must not forge a line or reach the terminal as escape sequences."""
    sup, _ = supervisor()
    frames = [(f"evil{FORGED}{ESCAPE}", f"/job/t{ESCAPE}.py", 3)]
    odd = dict(py_spy_entry(9, 200, frames), sources={f"/job/t{ESCAPE}.py:3": f"x{FORGED}"})
    control(sup, "n1", {"event": "dump", "ranks": [py_spy_entry(0, 100, IN_ALL_REDUCE)]})
    control(sup, "n2", {"event": "dump", "ranks": [odd, {"rank": f"{ESCAPE}"}]})
    sup.hang_reason = "no rank printed anything for 1 s"
    sup._analyse_hang(missing=[])
    env = Environment()
    report_outcome(sup._outcome(), sup.options, env)
    failed = Failure("n2", 3, 1, 0.0, last_lines=(f"boom{ESCAPE}", f"x{FORGED}"))
    report_outcome(JobOutcome(1, "failed", failed.describe(), failed), sup.options, env)
    err = env.stderr.getvalue()
    assert "\x1b" not in err and "\x07" not in err
    assert "\nclusterkit: job succeeded" not in err
    lines = err.splitlines()
    verdicts = [line.split()[2] for line in lines if line.startswith("clusterkit: job ")]
    assert verdicts == ["hung", "failed"]  # the forged "job succeeded" is not a line of its own
    assert any("odd one out: rank 9 on n2" in line and "\\x1b" in line for line in lines)
    assert any(line.startswith("clusterkit: malformed stack dump from n2: ") for line in lines)
    assert "  boom\\x1b]0;owned\\x07\\x1b[2J" in lines


def test_secrets_in_the_jobs_last_lines_are_redacted(tmp_path: Path) -> None:
    """A failing rank printed its environment: the summary quotes its last lines, on stderr
    and in --log-dir's outcome.txt, without the secrets in them."""
    secret = "hf_" + "Zq8" * 10
    folder = PrivateFolder.open(tmp_path / "logs")
    lines = (f'HF_TOKEN="{secret}"', f"export AWS_SECRET_ACCESS_KEY='{secret}'", "step 3 ok")
    failed = Failure("n2", 3, 1, 0.0, last_lines=lines)
    env = Environment()
    outcome = JobOutcome(1, "failed", failed.describe(), failed)
    report_outcome(outcome, SuperviseOptions(log_dir=folder), env)
    err = env.stderr.getvalue()
    written = (tmp_path / "logs" / "outcome.txt").read_text()
    for text in (err, written):
        assert secret not in text and "step 3 ok" in text and "HF_TOKEN=" in text


def test_a_node_answers_only_for_its_own_ranks_each_once(tmp_path: Path) -> None:
    """n2 answered the hang dump with made-up stacks for n1's ranks 0-7 (elsewhere) and its own
    ranks twice: a healthy n1 was singled out and left out, and n2 became master. Only the
    ranks the plan gives n2 count, each once; the rest is dropped and said so."""
    with PrivateFolder.open(tmp_path / "logs") as folder:
        sup, _ = supervisor(folder)
        sleeping = [("sleep", "/job/train.py", 41)]
        own = [py_spy_entry(rank, 100 + rank, IN_ALL_REDUCE) for rank in range(8)]
        control(sup, "n1", {"event": "dump", "ranks": own})
        forged = [py_spy_entry(rank, 300 + rank, sleeping) for rank in range(8)]
        twice = [py_spy_entry(8, 408, IN_ALL_REDUCE), py_spy_entry(8, 409, sleeping)]
        control(sup, "n2", {"event": "dump", "ranks": forged + twice})
        sup.hang_reason = "no rank printed anything for 1 s"
        sup._analyse_hang(missing=[])
    hang = sup.hang
    assert hang is not None
    assert sorted((s.host, s.rank) for s in hang.stacks) == [("n1", r) for r in range(8)] + [
        ("n2", 8)
    ]
    assert len(hang.groups) == 1  # every rank that answered waits in all_reduce
    fault = classify([], hang_groups=hang.groups, hang_missing=hang.missing)
    assert not fault.node and "n1" not in fault.hosts
    assert "n2: dump: rank 0 is not one of this node's (8-15)" in hang.malformed
    assert "n2: dump: rank 8 answered twice, the first kept" in hang.malformed
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert files == sorted([f"stacks-n1-{r}.txt" for r in range(8)] + ["stacks-n2-8.txt"])


def test_a_dump_of_twenty_thousand_ranks_is_bounded(tmp_path: Path) -> None:
    with PrivateFolder.open(tmp_path / "logs") as folder:
        sup, _ = supervisor(folder)
        many = [rank_entry(rank, 5) for rank in range(20_000)]
        control(sup, "n2", {"event": "dump", "ranks": many})
        sup.hang_reason = "no rank printed anything for 1 s"
        sup._analyse_hang(missing=[])
    assert sup.hang is not None
    assert sorted(s.rank for s in sup.hang.stacks) == list(range(8, 16))
    assert "n2: dump.ranks: 20000 entries, only the first 1024 read" in sup.hang.malformed
    assert len(list((tmp_path / "logs").iterdir())) == 8


def test_a_node_that_keeps_its_heartbeat_but_never_reports_is_bounded() -> None:
    """n1 ended and reported; n2 keeps sending its heartbeat and never its exit report: the
    launch waited forever without --time-limit. Past the exit wait with no rank line it is
    stopped (a rank still printing, e.g. a last checkpoint, keeps it waiting)."""
    sup, notes = supervisor()
    control(sup, "n1", {"event": "exit", "code": 0})
    control(sup, "n2", {"event": "alive"})
    deadline = Deadline.after(3600.0)
    sup._decide(deadline)
    assert sup.stopping_since is None  # n2 may still be finishing
    past = time.monotonic() - sup.options.exit_wait - 1
    sup.nodes["n1"].reported_at = past
    sup._line(sup.nodes["n2"], b"[rank8]:saving the last checkpoint")
    sup._decide(deadline)
    assert sup.stopping_since is None  # its rank printed just now
    sup.last_progress = past
    sup._decide(deadline)
    assert sup.stopping_since is not None and sup.nodes["n2"].stopped_by_us
    assert "n2 sent no exit report" in sup.stop_reason
    assert any("n2 sent no exit report" in note for note in notes)
