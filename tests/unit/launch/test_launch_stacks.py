"""Hang forensics: stack dumps parsed, ranks grouped by where they wait, odd ones named."""

from __future__ import annotations

import json

from clusterkit.launch.stacks import (
    group_ranks,
    odd_ones_out,
    parse_dump,
    rank_ranges,
    summary,
)

SITE = "/venv/lib/python3.11/site-packages/torch/distributed"


def rank_entry(rank: object, pid: object, **more: object) -> dict:
    """One rank's entry of a node's dump answer, with what the node always sends."""
    return {"rank": rank, "local_rank": str(rank), "pid": pid, "sources": {}, **more}


def py_spy_entry(rank: int, pid: int, frames: list[tuple[str, str, int]]) -> dict:
    """A node's dump entry holding py-spy `dump --json` output, as py-spy 0.4 prints it."""
    threads = [
        {
            "pid": pid,
            "thread_id": 140000000000000 + pid,
            "thread_name": None,
            "os_thread_id": pid + 7,
            "active": False,
            "owns_gil": False,
            "frames": [],
            "process_info": None,
        },
        {
            "pid": pid,
            "thread_id": 139823012383616,
            "thread_name": "MainThread",
            "os_thread_id": pid,
            "active": False,
            "owns_gil": False,
            "frames": [
                {"name": name, "filename": file, "module": None,
                 "short_filename": file.rsplit("/", 1)[-1], "line": line, "locals": None,
                 "is_entry": False, "is_shim_entry": False}
                for name, file, line in frames
            ],
            "process_info": None,
        },
    ]  # fmt: skip
    return rank_entry(rank, pid, method="py-spy", raw=json.dumps(threads))


IN_ALL_REDUCE = [
    ("all_reduce", f"{SITE}/distributed_c10d.py", 2951),
    ("wrapper", f"{SITE}/c10d_logger.py", 81),
    ("main", "/job/train.py", 88),
    ("<module>", "/job/train.py", 120),
]
SLEEPING = [("main", "/job/train.py", 41), ("<module>", "/job/train.py", 120)]

FAULTHANDLER = """Thread 0x00007fa3d771d6c0 (most recent call first):
  File "/job/loader.py", line 4 in worker
  File "/usr/lib/python3.11/threading.py", line 982 in run
  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner

Current thread 0x00007fa3d82a1b80 (most recent call first):
  File "/py/site-packages/torch/distributed/distributed_c10d.py", line 2951 in all_reduce
  File "/job/train.py", line 88 in main
  File "/job/train.py", line 120 in <module>
"""


def test_the_sleeping_rank_is_the_odd_one_out() -> None:
    entries = [
        ("node1", py_spy_entry(0, 100, IN_ALL_REDUCE)),
        ("node2", py_spy_entry(1, 200, IN_ALL_REDUCE)),
        ("node3", dict(py_spy_entry(2, 300, SLEEPING),
                       sources={"/job/train.py:41": "time.sleep(600)"})),
        ("node4", py_spy_entry(3, 400, IN_ALL_REDUCE)),
    ]  # fmt: skip
    groups = group_ranks(parse_dump(host, entry) for host, entry in entries)
    assert summary(groups) == (
        "ranks 0-1,3 in all_reduce at train.py:88; rank 2 at train.py:41 in main `time.sleep(600)`"
    )
    assert odd_ones_out(groups) == ["rank 2 on node3 at train.py:41 in main `time.sleep(600)`"]


def test_main_thread_is_chosen_over_others() -> None:
    stack = parse_dump("node1", py_spy_entry(0, 100, SLEEPING))
    assert stack.main_thread is not None and stack.main_thread.name == "MainThread"
    assert stack.where() == "at train.py:41 in main"


def test_faulthandler_dump_reads_like_py_spy() -> None:
    stack = parse_dump("node2", rank_entry(5, 9, method="faulthandler", raw=FAULTHANDLER))
    assert len(stack.threads) == 2
    assert stack.main_thread is stack.threads[-1]
    assert stack.where() == "in all_reduce at train.py:88"
    assert "all_reduce (/py/site-packages/torch" in stack.render()


def test_every_rank_in_one_place_has_no_odd_one_out() -> None:
    entries = [parse_dump("n", py_spy_entry(r, 10 + r, IN_ALL_REDUCE)) for r in range(4)]
    groups = group_ranks(entries)
    assert summary(groups) == "ranks 0-3 in all_reduce at train.py:88"
    assert odd_ones_out(groups) == []


def test_a_rank_without_a_stack_says_why() -> None:
    entry = rank_entry(1, 5, method="py-spy", raw="", error="py-spy exited 1: x")
    assert parse_dump("node2", entry).where() == "no stack (py-spy exited 1: x)"
    broken = rank_entry(1, 5, method="py-spy", raw="{not json")
    assert "unreadable dump" in parse_dump("node2", broken).where()


def test_rank_ranges() -> None:
    assert rank_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert rank_ranges([3]) == "3"
    assert rank_ranges([]) == ""
