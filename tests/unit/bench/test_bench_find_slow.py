"""`bench --find-slow`, the pure parts: who measures with whom each round, and the rule that
names a slow or failing node from recorded per-group bandwidths."""

from __future__ import annotations

import itertools
import math
import random
import shlex

import pytest

from clusterkit.bench import pairing
from clusterkit.bench.attribution import NodeRun
from clusterkit.bench.findslow import _finding, _group_result, global_deadline
from clusterkit.bench.launcher import BenchOptions, node_argv
from clusterkit.bench.slowrule import GroupRun, judge_groups
from clusterkit.checks.model import Status
from clusterkit.framing import encode
from clusterkit.inventory.model import Host
from clusterkit.transport.base import CommandResult, Deadline
from tests.support.bench_results import worker_result

SIZES = [(k, n) for k in (2, 3, 4) for n in [*range(k * k, 40), 64, 81, 100, 128, 255, 256]]


def hosts(n: int) -> list[str]:
    return [f"node{i + 1}" for i in range(n)]


def simulate(
    n: int,
    k: int = 2,
    slow: dict[int, float] | None = None,
    failing: tuple[int, ...] = (),
    noise: float = 0.0,
    seed: int = 0,
) -> list[GroupRun]:
    """Every group's busbw: 1.0, times the factor of its slowest member, with noise."""
    rng = random.Random(seed)
    names = hosts(n)
    runs = []
    for number, groups in enumerate(pairing.schedule(n, k)):
        for group in groups:
            factor = min([1.0, *((slow or {}).get(i, 1.0) for i in group)])
            busbw = factor * rng.lognormvariate(0, noise) if noise else factor
            failed = any(i in failing for i in group)
            runs.append(GroupRun(number, tuple(names[i] for i in group), None if failed else busbw))
    return runs


# --- the schedule -------------------------------------------------------------------------


def test_pairs_on_a_power_of_two_are_the_hypercube() -> None:
    plan = pairing.schedule(16)
    assert len(plan) == 4
    for r, groups in enumerate(plan):
        assert groups == sorted((i, i ^ (1 << r)) for i in range(16) if i < i ^ (1 << r))


def test_eight_nodes_three_rounds_each_node_meets_three_partners() -> None:
    assert pairing.schedule(8) == [
        [(0, 1), (2, 3), (4, 5), (6, 7)],
        [(0, 2), (1, 3), (4, 6), (5, 7)],
        [(0, 4), (1, 5), (2, 6), (3, 7)],
    ]


@pytest.mark.parametrize(("k", "n"), SIZES)
def test_every_round_holds_every_node_once_in_groups_of_two_to_k_plus_one(k: int, n: int) -> None:
    plan = pairing.schedule(n, k)
    digits = math.ceil(round(math.log(n, k), 9))
    assert len(plan) == pairing.default_rounds(n, k) == max(3, digits)  # O(log N)
    for groups in plan:
        assert sorted(i for group in groups for i in group) == list(range(n))
        assert all(2 <= len(group) <= k + 1 for group in groups)


@pytest.mark.parametrize(("k", "n"), [(2, 4), (2, 64), (3, 27), (4, 16), (4, 64)])
def test_on_a_power_of_k_two_nodes_share_at_most_one_round(k: int, n: int) -> None:
    plan = pairing.schedule(n, k, rounds=99)
    together = [
        frozenset(p) for groups in plan for g in groups for p in itertools.combinations(g, 2)
    ]
    assert len(together) == len(set(together))
    assert all(len(group) == k for groups in plan for group in groups)


@pytest.mark.parametrize(("k", "n"), SIZES)
def test_no_two_nodes_share_every_round(k: int, n: int) -> None:
    """Else a slow node could not be told from its partner."""
    plan = pairing.schedule(n, k)
    shared: dict[frozenset[int], int] = {}
    for groups in plan:
        for group in groups:
            for pair in itertools.combinations(group, 2):
                shared[frozenset(pair)] = shared.get(frozenset(pair), 0) + 1
    assert max(shared.values()) < len(plan)


def test_odd_and_uneven_sizes_fall_back_deterministically() -> None:
    # 5 nodes as points of a 3-cube: node 4 has no partner along the first two directions
    # and joins a pair it has met least; along the third, 0 and 4 already met twice.
    assert pairing.schedule(5) == [
        [(0, 1, 4), (2, 3)],
        [(0, 2, 4), (1, 3)],
        [(0, 3), (1, 2, 4)],
    ]
    assert pairing.schedule(13) == pairing.schedule(13)
    assert pairing.schedule(9, 3)[0] == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
    # 17 nodes: along the fifth direction only 0 and 16 are a coset; the rest pair afresh.
    assert pairing.schedule(17, rounds=5)[4] == [
        (0, 3), (1, 2), (4, 7), (5, 6), (8, 11, 16), (9, 10), (12, 15), (13, 14)
    ]  # fmt: skip


def test_rounds_can_be_fewer_or_as_many_as_the_directions_allow() -> None:
    assert len(pairing.schedule(64, rounds=2)) == 2
    assert len(pairing.schedule(8, rounds=5)) == 5  # 3 unit directions + 2 of the 3 sums
    assert len(pairing.schedule(8, rounds=10)) == 6
    assert len(pairing.schedule(4, rounds=10)) == 3  # K4 has 3 perfect matchings
    with pytest.raises(ValueError, match="at least 2 rounds"):
        pairing.schedule(8, rounds=1)


def test_too_few_nodes_say_why() -> None:
    assert pairing.unusable_reason(4) is None
    assert "at least 4 nodes" in (pairing.unusable_reason(3) or "")
    assert "at least 9 nodes" in (pairing.unusable_reason(8, 3) or "")
    assert "at least 2" in (pairing.unusable_reason(8, 1) or "")
    with pytest.raises(ValueError, match="at least 4 nodes"):
        pairing.schedule(3)


# --- the rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), SIZES)
def test_any_one_slow_node_is_named_alone(k: int, n: int) -> None:
    for slow in range(0, n, 1 if n <= 64 else 7):
        verdict = judge_groups(simulate(n, k, {slow: 0.25}), hosts(n), 0.7)
        assert verdict.named == [hosts(n)[slow]], (k, n, slow)


def test_a_failing_node_is_named_and_its_partners_are_not() -> None:
    verdict = judge_groups(simulate(12, failing=(6,)), hosts(12), 0.7)
    assert verdict.named == ["node7"]
    node = verdict.nodes["node7"]
    assert len(pairing.schedule(12)) == 4
    assert node.failed == node.counted == node.slow == 4
    assert node.median_busbw is None and node.median_ratio == 0.0


def test_two_slow_nodes_that_met_are_both_named() -> None:
    plan = pairing.schedule(16)
    assert (0, 1) in plan[0]
    verdict = judge_groups(simulate(16, slow={0: 0.3, 1: 0.2}), hosts(16), 0.7)
    assert verdict.named == ["node2", "node1"]  # the slower first
    assert verdict.nodes["node1"].slow == 3  # its round with node2 no longer counts


def test_a_healthy_cluster_with_noise_names_nobody() -> None:
    for seed in range(50):
        verdict = judge_groups(simulate(16, noise=0.08, seed=seed), hosts(16), 0.7)
        assert verdict.named == [], seed


def test_a_halved_node_is_found_through_noise() -> None:
    for seed in range(50):
        verdict = judge_groups(simulate(16, slow={5: 0.5}, noise=0.08, seed=seed), hosts(16), 0.7)
        assert verdict.named == ["node6"], seed


def test_one_slow_round_is_not_enough() -> None:
    """A node slow once (bad luck while paired with a healthy partner) is not named."""
    runs = simulate(8)
    runs = [
        GroupRun(r.round, r.hosts, 0.2 if r.round == 1 and "node3" in r.hosts else r.busbw)
        for r in runs
    ]
    assert judge_groups(runs, hosts(8), 0.7).named == []


def test_rounds_are_compared_with_their_own_median() -> None:
    """A whole round slowed by something else (a busy moment) names nobody."""
    runs = [
        GroupRun(r.round, r.hosts, (r.busbw or 0) * (0.1 if r.round == 2 else 1.0))
        for r in simulate(8, slow={2: 0.3})
    ]
    verdict = judge_groups(runs, hosts(8), 0.7)
    assert verdict.named == ["node3"]
    assert verdict.round_medians[2] == pytest.approx(0.1)


def test_a_group_timed_after_the_others_is_not_compared() -> None:
    """It missed the go and ran alone on an idle machine: its speed says nothing."""
    runs = [
        GroupRun(r.round, r.hosts, 5.0, together=False) if r.round == 0 and "node5" in r.hosts
        else r
        for r in simulate(8, slow={4: 0.25})
    ]  # fmt: skip
    verdict = judge_groups(runs, hosts(8), 0.7)
    assert verdict.named == ["node5"]
    assert verdict.nodes["node5"].counted == verdict.nodes["node5"].slow == 2
    assert verdict.round_medians[0] == 1.0  # its 5.0 is in no median
    assert verdict.nodes["node6"].counted == 2  # nor in its partner's rounds


def test_a_round_where_every_group_failed_is_left_out() -> None:
    runs = [GroupRun(r.round, r.hosts, None if r.round == 0 else r.busbw) for r in simulate(8)]
    verdict = judge_groups(runs, hosts(8), 0.7)
    assert verdict.round_medians[0] is None and verdict.rounds_counted == 2
    assert verdict.measured and verdict.named == []
    only_one = [GroupRun(r.round, r.hosts, None if r.round else 1.0) for r in simulate(8)]
    assert not judge_groups(only_one, hosts(8), 0.7).measured


# --- the finding and the group's result -----------------------------------------------------


def test_the_finding_names_the_node_with_its_numbers() -> None:
    verdict = judge_groups(simulate(8, slow={4: 0.25}), hosts(8), 0.7)
    finding = _finding(verdict, hosts(8), BenchOptions(), 3, 3)
    assert finding.status is Status.WARN and finding.hosts == ["node5"]
    assert "node5: slow in 3 of 3 rounds, median 0.25 GB/s, 0.25 x" in finding.message
    assert finding.found == {
        "node5": {
            "median_busbw": 0.25,
            "median_ratio": 0.25,
            "slow_rounds": 3,
            "rounds": 3,
            "failed_rounds": 0,
        }
    }
    failing = _finding(verdict, hosts(8), BenchOptions(find_slow_status="fail"), 3, 4)
    assert (
        failing.status is Status.FAIL and "(3 of 4 rounds before the deadline)" in failing.message
    )
    healthy = _finding(judge_groups(simulate(8), hosts(8), 0.7), hosts(8), BenchOptions(), 3, 3)
    assert healthy.status is Status.OK and "no slow node among 8" in healthy.message


def test_too_little_measured_is_an_error_not_a_pass() -> None:
    runs = [GroupRun(r.round, r.hosts, None) for r in simulate(8)]
    finding = _finding(judge_groups(runs, hosts(8), 0.7), hosts(8), BenchOptions(), 3, 3)
    assert finding.status is Status.ERROR
    assert "0 of 3 rounds measured anything" in finding.message


def _run(host: str, rank: int, stdout: bytes, stderr: bytes = b"", code: int = 0) -> NodeRun:
    run = NodeRun(host, rank)
    run.result = CommandResult(host, code, stdout, stderr)
    run.ended_at = 1.0
    return run


def test_a_group_reads_the_slowest_rank_and_wrong_data_fails_it() -> None:
    result = worker_result([[0.01], [0.02]], sizes=(1 << 23,))
    slowest = result["results"][-1]["slowest"]["bus_bw"]
    ok = _run("a", 0, encode(result))
    assert _group_result([ok, _run("b", 1, b"")], Deadline.after(5)) == (slowest, "")
    result["results"][-1]["in_place"]["nwrong"] = 3
    wrong = _run("a", 0, encode(result))
    assert _group_result([wrong], Deadline.after(5)) == (
        None,
        "3 wrong elements after all_reduce(sum)",
    )
    died = _run("a", 0, b"", b"clusterkit-bench: error rank-failed: boom\n", code=1)
    busbw, error = _group_result([died], Deadline.after(5))
    assert busbw is None and "a failed (exit 1): rank-failed: boom" in error


def test_groups_wait_for_the_go_only_when_asked() -> None:
    def argv(barrier: float | None) -> list[str]:
        line = node_argv(
            Host("n1", "10.0.0.1"), 0, nodes=2, nproc=1, master="10.0.0.1", port=40001,
            run_name="clusterkit-bench-x", container=None, image=None, gpus=False, interface=None,
            options=BenchOptions(), barrier_timeout=barrier,
        )[-1]  # fmt: skip
        return shlex.split(line)  # the node's shell expands "$dir": its private run folder

    assert "--barrier-dir" not in argv(None)
    command = argv(30.0)
    assert command[command.index("--barrier-dir") + 1] == "$dir"
    assert command[command.index("--barrier-timeout") + 1] == "30"
    assert command[command.index("--master-port") + 1] == "40001"


def test_the_global_run_leaves_the_rounds_half_the_time() -> None:
    deadline = Deadline.after(100)
    assert global_deadline(deadline, BenchOptions()) == deadline
    half = global_deadline(deadline, BenchOptions(find_slow=True))
    assert 49 < half.remaining() <= 50
