"""Job errors explained: a failure's last lines select one of clusterkit's own remedies.

Over real torchrun outputs (tests/fixtures/job-errors/, sources in SOURCES.md), read as the
supervisor keeps them: a rank's last 20 lines, its prefixes taken off.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from clusterkit.commands.launch import report_outcome
from clusterkit.environment import Environment
from clusterkit.launch.failure import Failure
from clusterkit.launch.faults import classify
from clusterkit.launch.job import JobOutcome, SuperviseOptions
from clusterkit.launch.remedies import MAX_CHARS, MAX_LINES, remedy_for
from clusterkit.launch.stage import job_finding, outcome_details
from clusterkit.launch.supervise import LAST_LINES

FIXTURES = Path(__file__).parent.parent.parent / "fixtures" / "job-errors"
_PREFIX = re.compile(r"^\[rank(\d+)\]:")

# torch 2.13's own texts (`strings libtorch_cpu.so`): DDP with static_graph=True whose graph
# changed, and the warning find_unused_parameters=True prints when nothing was unused.
STATIC_GRAPH = (
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting "
    "a new one. This error indicates that your training graph has changed in this iteration, "
    "e.g., one parameter is used in first iteration, but then got unused in the second "
    "iteration. this is not compatible with static_graph set to True."
)
NOTHING_UNUSED = (
    "[W reducer.cpp:1400] Warning: find_unused_parameters=True was specified in DDP "
    "constructor, but did not find any unused parameters in the forward pass."
)
PEER_LOST = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
    "Connection closed by peer [10.0.0.13]:32433"
)
NCCL_REFUSED = "NCCL WARN socketStartConnect: Connect to 10.0.0.2<4311> failed : Connection refused"


def last_lines(name: str, rank: int | None) -> list[str]:
    """What the supervisor keeps of `rank` (None: torchrun's own lines) in a recording."""
    kept = []
    for line in (FIXTURES / name).read_text().splitlines():
        match = _PREFIX.match(line)
        if rank is None and match is None:
            kept.append(line)
        elif match is not None and int(match[1]) == rank:
            text = line[match.end() :]
            own = f"[rank{rank}]:"
            kept.append(text[len(own) :].lstrip(" ") if text.startswith(own) else text)
    return kept[-LAST_LINES:]


@pytest.mark.parametrize(
    ("fixture", "rank", "key"),
    [
        ("ddp-unused-parameters.txt", 0, "ddp-unused-parameters"),
        ("ddp-unused-parameters.txt", 1, "ddp-unused-parameters"),
        ("store-unreachable.txt", 0, "store-unreachable"),
        ("rendezvous-port-in-use.txt", None, "rendezvous-port-in-use"),
        ("cuda-oom.txt", 3, "cuda-oom"),
        ("invalid-device-ordinal.txt", 9, "invalid-device-ordinal"),
    ],
)
def test_each_recorded_error_selects_its_remedy(fixture: str, rank: int | None, key: str) -> None:
    lines = last_lines(fixture, rank)
    assert lines, fixture
    remedy = remedy_for(lines)
    assert remedy is not None and remedy.key == key


def test_the_remedies_say_what_to_do_in_clusterkits_words() -> None:
    unused = remedy_for(last_lines("ddp-unused-parameters.txt", 0))
    assert unused is not None and "find_unused_parameters=True" in unused.line()
    ordinal = remedy_for(last_lines("invalid-device-ordinal.txt", 9))
    assert ordinal is not None and "LOCAL_RANK, not RANK" in ordinal.line()
    assert "--nproc-per-node" in ordinal.line()
    for fixture, rank in (("store-unreachable.txt", 0), ("rendezvous-port-in-use.txt", None)):
        remedy = remedy_for(last_lines(fixture, rank))
        assert remedy is not None and "`clusterkit check`" in remedy.line()
        assert "network stage" in remedy.line()


def test_ddp_with_a_static_graph_is_told_apart_from_unused_parameters() -> None:
    remedy = remedy_for(["[rank2]: Traceback (most recent call last):", STATIC_GRAPH])
    assert remedy is not None and remedy.key == "ddp-static-graph"


@pytest.mark.parametrize(
    "lines",
    [
        ["step 1", "RuntimeError: rank 1 fails on purpose"],  # the job's own bug
        ["step 4", PEER_LOST],  # a consequence of a peer's death
        ["step 4", NCCL_REFUSED],  # mid-run: not at init_process_group
        [NOTHING_UNUSED, "step 3", "ValueError: bad batch"],  # DDP's warning, not its error
        [],
    ],
)
def test_no_remedy_for_what_it_does_not_know(lines: list[str]) -> None:
    assert remedy_for(lines) is None


def test_a_refused_connection_at_init_process_group_points_at_the_network_stage() -> None:
    lines = [
        '  File "/job/train.py", line 12, in main',
        '    dist.init_process_group("gloo")',
        "RuntimeError: Gloo connectFullMesh failed with [pair.cc:144] no error",
    ]
    remedy = remedy_for(lines)
    assert remedy is not None and remedy.key == "ranks-unreachable"
    assert "network stage" in remedy.line()


def test_the_job_only_selects_the_remedy_never_writes_it() -> None:
    """A job that prints the trigger phrase with its own words around it (a forged line,
    escapes, a node's name) gets the fixed remedy: none of its text is echoed."""
    hostile = [
        "CUDA out of memory on node2 \x1b[2J\nclusterkit: remedy: drain node2, its GPU is bad",
        "node2 is broken: reboot it",
    ]
    remedy = remedy_for(hostile)
    plain = remedy_for(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB."])
    assert remedy is not None and remedy == plain
    for text in ("node2", "\x1b", "drain", "reboot", "\n"):
        assert text not in remedy.line()


def test_a_remedy_never_blames_a_node() -> None:
    """The remedy is no evidence: every recorded error is still the job's fault."""
    for fixture, rank in (
        ("ddp-unused-parameters.txt", 0),
        ("cuda-oom.txt", 3),
        ("invalid-device-ordinal.txt", 9),
        ("store-unreachable.txt", 0),
    ):
        lines = tuple(last_lines(fixture, rank))
        fault = classify([Failure("node2", rank, 1, 0.0, last_lines=lines)])
        assert not fault.node, fixture


def test_the_text_read_is_bounded() -> None:
    """A phrase past MAX_CHARS of a line, or before the last MAX_LINES lines, selects
    nothing; a 10 MB line of near-misses is read in linear time."""
    assert remedy_for(["x" * MAX_CHARS + "CUDA out of memory"]) is None
    old = ["CUDA out of memory", *(["step"] * MAX_LINES)]
    assert remedy_for(old) is None and remedy_for(old[:MAX_LINES]) is not None
    near_misses = ["server socket has failed to " * 400_000, "client socket has " * 500_000]
    started = time.monotonic()
    assert remedy_for(near_misses) is None
    assert time.monotonic() - started < 2.0


def test_launch_prints_the_remedy_and_records_it() -> None:
    """In-process: the outcome of a rank that hit DDP's error, as launch reports it."""
    lines = tuple(last_lines("ddp-unused-parameters.txt", 1))
    failed = Failure("node2", 1, 1, 0.0, last_lines=lines)
    outcome = JobOutcome(1, "failed", failed.describe(), failed)
    env = Environment()
    report_outcome(outcome, SuperviseOptions(), env)
    printed = env.stderr.getvalue().splitlines()
    remedies = [line for line in printed if line.startswith("clusterkit: remedy: ")]
    assert remedies == [
        "clusterkit: remedy: DDP found parameters that got no gradient in the last step: pass "
        "find_unused_parameters=True to DistributedDataParallel, or make every output of "
        "forward() count in the loss; TORCH_DISTRIBUTED_DEBUG=DETAIL names the parameters"
    ]
    finding = job_finding(outcome)
    assert finding.remedy is not None and finding.remedy in remedies[0]
    details = outcome_details(outcome)["first_failure"]
    assert details["remedy"]["id"] == "ddp-unused-parameters"


def test_a_forged_remedy_line_stays_inside_the_quoted_last_lines() -> None:
    forged = "CUDA out of memory\nclusterkit: remedy: drain node2"
    failed = Failure("node2", 1, 1, 0.0, last_lines=(forged,))
    env = Environment()
    report_outcome(JobOutcome(1, "failed", failed.describe(), failed), SuperviseOptions(), env)
    printed = env.stderr.getvalue().splitlines()
    assert [line for line in printed if line.startswith("clusterkit: remedy: ")] == [
        "clusterkit: remedy: " + (remedy_for([forged]) or pytest.fail("no remedy")).line()
    ]
    assert not any("drain node2" in line and not line.startswith("  ") for line in printed)
