"""Which pairs `--mesh auto` tests (clusterkit/net/cover.py), and what its rounds find, driven
against a modelled network: a set of blocked (connects, accepts) pairs."""

from __future__ import annotations

from collections.abc import Callable, Collection

import pytest

from clusterkit.checks.model import Status
from clusterkit.net import analysis
from clusterkit.net.cover import (
    RING_SPAN,
    MeshRounds,
    Pair,
    all_pairs,
    covering_pairs,
    subnet_cuts,
)
from clusterkit.net.matrix import build_matrix, pair_results, render_matrix
from clusterkit.net.plan import NetworkOptions, interface_choices, subnets_of
from tests.support.net_reports import facts_report, interface, listener

OPTIONS = NetworkOptions("n1", "10.0.0.11", 29500, 29400, "eth0")


def cluster(sizes: list[int]) -> tuple[list[str], dict[str, str]]:
    """Nodes n1.. in consecutive subnets of the given sizes (like the test clusters)."""
    hosts, subnets = [], {}
    for index, size in enumerate(sizes):
        for _ in range(size):
            host = f"n{len(hosts) + 1}"
            hosts.append(host)
            subnets[host] = f"10.0.{index}.0/24"
    return hosts, subnets


def peers(pairs: Collection[Pair], host: str) -> tuple[set[str], set[str]]:
    """(whom host connects to, who connects to host)."""
    return {b for a, b in pairs if a == host}, {a for a, b in pairs if b == host}


@pytest.mark.parametrize("sizes", [[30], [10, 12, 8], [50, 1, 20, 29], [2], [3, 3]])
def test_every_node_meets_its_ring_the_master_and_every_other_subnet_both_ways(
    sizes: list[int],
) -> None:
    hosts, subnets = cluster(sizes)
    master = hosts[len(hosts) // 3]
    pairs = covering_pairs(hosts, subnets, master)
    assert all(a != b for a, b in pairs)
    assert {(b, a) for a, b in pairs} == pairs  # each pair tested both ways
    count = len(hosts)
    for index, host in enumerate(hosts):
        out, into = peers(pairs, host)
        assert out == into
        ring = {hosts[(index + step) % count] for step in (1, -1, 2, -2)} - {host}
        assert ring <= out, host
        if host != master:
            assert master in out
        reached = {subnets[peer] for peer in out}
        others = {subnets[peer] for peer in hosts if subnets[peer] != subnets[host]}
        big = {name for name in others if list(subnets.values()).count(name) >= 2}
        assert big <= reached, host


@pytest.mark.parametrize(("nodes", "subnet_count"), [(100, 1), (256, 2), (1000, 4), (999, 8)])
def test_the_covering_set_grows_with_nodes_times_subnets_not_nodes_squared(
    nodes: int, subnet_count: int
) -> None:
    per = nodes // subnet_count
    hosts, subnets = cluster([per] * (subnet_count - 1) + [nodes - per * (subnet_count - 1)])
    pairs = covering_pairs(hosts, subnets, hosts[0])
    # links: ring (span per node), the master, one per other subnet; each both ways
    assert len(pairs) <= 2 * nodes * (RING_SPAN + subnet_count)
    assert len(pairs) < nodes * (nodes - 1) / 10 or nodes < 200


def test_the_covering_set_depends_only_on_the_order_of_the_hosts() -> None:
    hosts, subnets = cluster([40, 35, 25])
    first = covering_pairs(hosts, subnets, "n7")
    shuffled = dict(reversed(list(subnets.items())))
    assert covering_pairs(list(hosts), shuffled, "n7") == first
    assert MeshRounds(hosts, subnets, "n7", covering=True).first() == first
    assert MeshRounds(hosts, subnets, "n7", covering=False).first() is None  # every pair


def network(blocked: Collection[Pair]) -> Callable[[Collection[Pair]], dict[Pair, str]]:
    """What a round reports: every pair connects unless it is blocked (a DROP: timeout)."""
    return lambda pairs: {pair: "timeout" if pair in blocked else "ok" for pair in pairs}


def run_rounds(
    hosts: list[str], subnets: dict[str, str], master: str, blocked: Collection[Pair]
) -> tuple[dict[Pair, str], list[int], MeshRounds]:
    """Every round as the stage runs them (at most three): all results, pairs per round."""
    reply = network(blocked)
    rounds = MeshRounds(hosts, subnets, master, covering=True)
    pairs = rounds.first()
    assert pairs is not None
    results: dict[Pair, str] = {}
    sizes = []
    while pairs and len(sizes) < 3:
        assert not set(pairs) & set(results), "a pair is tested at most once"
        results.update(reply(pairs))
        sizes.append(len(pairs))
        pairs = rounds.next(results, hosts)
    return results, sizes, rounds


def failing(results: dict[Pair, str]) -> set[Pair]:
    return {pair for pair, result in results.items() if result != "ok"}


def test_a_firewalled_node_is_retested_against_everyone_and_only_its_pairs_fail() -> None:
    hosts, subnets = cluster([48, 48])
    blocked = {pair for pair in all_pairs(hosts) if "n17" in pair}
    results, sizes, rounds = run_rounds(hosts, subnets, "n1", blocked)
    assert failing(results) == blocked  # every pair with n17, both ways, and nothing else
    assert "n17" in rounds.retested
    assert len(sizes) == 2  # the pairs with n17 make no new suspect of its peers
    assert len(results) < len(hosts) * 20  # not a full mesh: 9120 pairs exist
    assert subnet_cuts(results, subnets) == []


def test_a_node_that_reaches_nobody_is_found_the_same_way() -> None:
    """Only n40's own connects fail (its route is broken): each pair fails one way."""
    hosts, subnets = cluster([48, 48])
    blocked = {("n40", peer) for peer in hosts if peer != "n40"}
    results, _sizes, rounds = run_rounds(hosts, subnets, "n1", blocked)
    assert failing(results) == blocked
    assert "n40" in rounds.retested


def test_a_cut_between_two_subnets_is_confirmed_not_retested_pair_by_pair() -> None:
    hosts, subnets = cluster([40, 30, 26])
    first, second = "10.0.0.0/24", "10.0.2.0/24"
    blocked = {(a, b) for a, b in all_pairs(hosts) if {subnets[a], subnets[b]} == {first, second}}
    results, sizes, rounds = run_rounds(hosts, subnets, "n1", blocked)
    (cut,) = subnet_cuts(results, subnets)
    assert (cut.first, cut.second) == (first, second)
    assert cut.hosts == 66 and cut.pairs == len(failing(results))
    assert rounds.retested == set()
    assert len(sizes) == 2 and sizes[1] <= 2 * 66  # one more partner per node, both ways
    for host in hosts:  # every node of the two tested against two nodes across the cut
        across = {
            b for a, b in results if a == host and {subnets[a], subnets[b]} == {first, second}
        }
        assert len(across) >= 2 or subnets[host] == "10.0.1.0/24", host


def test_a_suspected_cut_that_is_not_one_falls_back_to_retesting_its_nodes() -> None:
    """Exactly the pairs round 1 tested across two subnets fail: it looks like a cut until
    the sampled partners connect, then the nodes are retested and the exact pairs named."""
    hosts, subnets = cluster([20, 20])
    covering = covering_pairs(hosts, subnets, "n1")
    blocked = {(a, b) for a, b in covering if subnets[a] != subnets[b]}
    results, sizes, _rounds = run_rounds(hosts, subnets, "n1", blocked)
    assert len(sizes) == 3
    assert subnet_cuts(results, subnets) == []
    assert failing(results) == blocked


def test_one_cut_pair_of_ring_neighbours_is_found_and_named_exactly() -> None:
    hosts, subnets = cluster([48, 48])
    blocked = {("n30", "n31"), ("n31", "n30")}
    results, _sizes, rounds = run_rounds(hosts, subnets, "n1", blocked)
    assert failing(results) == blocked
    assert rounds.retested == {"n30", "n31"}


def test_one_cut_pair_outside_both_covering_sets_is_what_only_full_finds() -> None:
    hosts, subnets = cluster([48, 48])
    covering = covering_pairs(hosts, subnets, "n1")
    assert ("n10", "n30") not in covering
    results, sizes, _rounds = run_rounds(hosts, subnets, "n1", {("n10", "n30")})
    assert failing(results) == set() and sizes == [len(covering)]


def test_nodes_each_alone_in_a_subnet_get_their_ring_and_the_master_not_everyone() -> None:
    """A /32 per node (as on GCP): no subnet to reach, and one failing pair is no cut."""
    hosts = [f"n{i}" for i in range(1, 201)]
    subnets = {host: f"10.1.{i // 250}.{i % 250}/32" for i, host in enumerate(hosts)}
    pairs = covering_pairs(hosts, subnets, "n1")
    assert len(pairs) <= 2 * len(hosts) * (RING_SPAN + 1)
    results, _sizes, rounds = run_rounds(hosts, subnets, "n1", {("n5", "n6"), ("n6", "n5")})
    assert subnet_cuts(results, subnets) == []
    assert failing(results) == {("n5", "n6"), ("n6", "n5")} and rounds.retested == {"n5", "n6"}


def test_a_lone_broken_node_in_its_own_subnet_is_not_a_cut() -> None:
    """Every pair of n21 (the only node of its subnet) fails: the node, not the link."""
    hosts, subnets = cluster([20, 1])
    blocked = {pair for pair in all_pairs(hosts) if "n21" in pair}
    results, _sizes, rounds = run_rounds(hosts, subnets, "n1", blocked)
    assert subnet_cuts(results, subnets) == []
    assert failing(results) == blocked and "n21" in rounds.retested


def test_full_mesh_has_one_round() -> None:
    hosts, subnets = cluster([5, 5])
    rounds = MeshRounds(hosts, subnets, "n1", covering=False)
    assert rounds.next({("n1", "n2"): "timeout"}, hosts) == set()


def node_facts(address: str) -> dict:
    return facts_report(interfaces=[interface("eth0", address)], master=["10.0.0.11"])


def stage_findings(sizes: list[int], blocked: Collection[Pair]) -> tuple[dict, list[str]]:
    """The findings of a covering mesh over modelled nodes (n1 the master), rendezvous
    connects included, as the stage turns the rounds' results into them."""
    hosts, subnets = cluster(sizes)
    addresses = {h: f"10.0.{subnets[h].split('.')[2]}.{11 + i}" for i, h in enumerate(hosts)}
    facts_by_host = {host: node_facts(addresses[host]) for host in hosts}
    choices = interface_choices(facts_by_host, OPTIONS)
    results, _sizes, _rounds = run_rounds(hosts, subnets_of(choices), "n1", blocked)
    connects = [
        {"from": a, "round": 1, "peer": b, "address": addresses[b], "port": 40000,
         "role": "mesh", "result": result, "detail": ""}
        for (a, b), result in results.items()
    ]  # fmt: skip
    connects += [
        {"from": host, "round": 1, "peer": "n1", "address": addresses["n1"], "port": 29500,
         "role": "master_port", "result": "timeout" if (host, "n1") in blocked else "ok",
         "detail": "n1"}
        for host in hosts
    ]  # fmt: skip
    listeners = {"n1": [listener(29500, "master_port")]}
    matrix = build_matrix(hosts, connects, set(results))
    cuts = subnet_cuts(pair_results(matrix), subnets_of(choices))
    findings = analysis.connect_findings(
        hosts, connects, listeners, facts_by_host, choices, OPTIONS, matrix=matrix, cuts=cuts
    )
    lines = render_matrix(matrix, hosts, cuts=cuts, subnets=subnets_of(choices))
    return {f.id: f for f in findings}, lines


def test_a_cut_is_one_finding_naming_the_two_subnets_not_its_pairs() -> None:
    hosts, subnets = cluster([30, 30])
    blocked = {(a, b) for a, b in all_pairs(hosts) if subnets[a] != subnets[b]}
    found, lines = stage_findings([30, 30], blocked)
    cut = found["net.subnet-cut"]
    assert cut.status is Status.FAIL and cut.hosts == []
    assert [item["subnets"] for item in cut.found] == [["10.0.0.0/24", "10.0.1.0/24"]]
    assert "10.0.0.0/24 <-> 10.0.1.0/24: all" in cut.message
    assert "a router, switch ACL or security group" in cut.message
    mesh = found["net.mesh"]
    assert mesh.status is Status.OK and "across cut subnets (net.subnet-cut)" in mesh.message
    rendezvous = found["net.rendezvous"]
    assert rendezvous.status is Status.FAIL
    assert rendezvous.message.startswith(
        "rendezvous on n1 not reachable: 30 nodes of 10.0.1.0/24, cut off from n1's subnet"
    )
    assert (
        lines[0].startswith("TCP mesh: ")
        and " of 3540 node pairs tested (covering set)" in lines[0]
    )
    assert lines[1].startswith("  cut: 10.0.0.0/24 <-> 10.0.1.0/24: all ")
    assert len(lines) == 2  # the cut's pairs are not listed one by one
    assert "net.firewall" not in found


def test_a_firewalled_node_is_named_with_every_pair_it_fails() -> None:
    hosts, _subnets = cluster([30, 30])
    blocked = {pair for pair in all_pairs(hosts) if "n45" in pair}
    found, lines = stage_findings([30, 30], blocked)
    mesh = found["net.mesh"]
    assert mesh.status is Status.FAIL
    assert "118 of " in mesh.message and "n45 fails all 118 tested pairs with it" in mesh.message
    assert {(b["from"], b["to"]) for b in mesh.found} == blocked
    assert found["net.subnet-cut"].status is Status.OK
    assert " 118 fail" in lines[0] and "(covering set)" in lines[0]
