"""Which nodes measure together in each round of `bench --find-slow` (pure).

A slow node drags down every group it is in, so it is found by putting every node in a
different group each round: a node slow in most of its groups is the cause; a partner that
shared one slow group with it is not. The schedule is the generalised hypercube: nodes are
points of Z_k^d (k the group size, k**d >= N), and round r groups the points that differ
only along direction v_r: the unit directions first (for pairs, node i meets i XOR 2**r),
then sums of two of them when more rounds are wanted (pairs: i XOR 3, i XOR 5, ...), and
two nodes share a group in at most one round. When N is not a power of k some points are
missing: a node left without a partner in a round is grouped with other such nodes it has
met least, and a last one joins the group it has met least, so every node is measured in
every round and no two nodes share all of their rounds. Rounds: max(3, d), so O(log N).
"""

from __future__ import annotations

import itertools

MIN_ROUNDS = 2  # a node alone in a slow group cannot be told from its partners


def digits_for(nodes: int, group_size: int) -> int:
    """d: the smallest with k**d >= nodes (the hypercube's dimension)."""
    power, digits = 1, 0
    while power < nodes:
        power, digits = power * group_size, digits + 1
    return digits


def directions(digits: int) -> list[tuple[int, ...]]:
    """The group directions in Z_k^d, in the order rounds use them: each unit vector, then
    each sum of two. Any two are independent over Z_k (each has a digit 1 where the other
    has 0), so two points share a group along at most one of them."""
    units = [tuple(int(i == j) for i in range(digits)) for j in range(digits)]
    pairs = [
        tuple(a + b for a, b in zip(units[i], units[j]))
        for i, j in itertools.combinations(range(digits), 2)
    ]
    return units + pairs


def default_rounds(nodes: int, group_size: int = 2) -> int:
    """max(3, d) rounds, as many as the directions allow: a majority of three."""
    digits = digits_for(nodes, group_size)
    return min(max(3, digits), len(directions(digits)))


def unusable_reason(nodes: int, group_size: int = 2) -> str | None:
    """Why no schedule can tell nodes apart, or None."""
    if group_size < 2:
        return f"groups need at least 2 nodes, not {group_size}"
    if nodes < group_size**MIN_ROUNDS:
        return (
            f"groups of {group_size} need at least {group_size**MIN_ROUNDS} nodes to measure "
            f"every node with different partners; there are {nodes}"
        )
    return None


def schedule(
    nodes: int, group_size: int = 2, rounds: int | None = None
) -> list[list[tuple[int, ...]]]:
    """Rounds of disjoint groups (node indexes, each group sorted) that together hold every
    node once per round. `rounds` None: default_rounds; more than the directions allow is
    cut to what they allow. Raises ValueError when the nodes are too few (unusable_reason)."""
    reason = unusable_reason(nodes, group_size)
    if reason:
        raise ValueError(reason)
    k = group_size
    digits = digits_for(nodes, k)
    usable = directions(digits)
    wanted = default_rounds(nodes, k) if rounds is None else rounds
    if wanted < MIN_ROUNDS:
        raise ValueError(f"need at least {MIN_ROUNDS} rounds, not {wanted}")
    met: dict[tuple[int, int], int] = {}  # (a, b), a < b: rounds a and b shared a group
    plan: list[list[tuple[int, ...]]] = []
    for direction in usable[: min(wanted, len(usable))]:
        step = sum(k**i * v for i, v in enumerate(direction))
        groups: list[list[int]] = []
        alone: list[int] = []
        placed: set[int] = set()
        for start in range(nodes):
            if start in placed:
                continue
            coset = [_shift(start, j, step, k, digits) for j in range(k)]
            placed.update(coset)
            present = [point for point in coset if point < nodes]
            fresh = not any(_met(met, a, b) for a, b in itertools.combinations(present, 2))
            if len(present) == k and fresh:
                groups.append(present)
            else:  # short of nodes, or holding a pair a fix-up already put together
                alone += present
        groups += _group_alone(sorted(alone), groups, k, met)
        finished = sorted(tuple(sorted(group)) for group in groups)
        for members in finished:
            for a, b in itertools.combinations(members, 2):
                met[(a, b)] = met.get((a, b), 0) + 1
        plan.append(finished)
    return plan


def _group_alone(
    alone: list[int], groups: list[list[int]], k: int, met: dict[tuple[int, int], int]
) -> list[list[int]]:
    """Nodes without a full coset this round (the node count is not a power of k), grouped
    among themselves: each group takes, up to k, the nodes its members have never met. A
    node that finds none joins the group it has met least (in place), the smaller first.
    Returns the new groups."""
    pool = list(alone)
    made: list[list[int]] = []
    single: list[int] = []

    def cost(node: int, group: list[int]) -> tuple[int, int]:
        counts = [_met(met, node, member) for member in group]
        return max(counts), sum(counts)

    while pool:
        group = [pool.pop(0)]
        while len(group) < k and pool:
            best = min(range(len(pool)), key=lambda i: (*cost(pool[i], group), i))
            if cost(pool[best], group)[0]:
                break  # a smaller group rather than partners that met before
            group.append(pool.pop(best))
        if len(group) > 1:
            made.append(group)
        else:
            single.append(group[0])
    for node in single:
        everyone = groups + made
        best = min(
            range(len(everyone)), key=lambda i: (*cost(node, everyone[i]), len(everyone[i]), i)
        )
        everyone[best].append(node)
    return made


def _shift(point: int, times: int, step: int, k: int, digits: int) -> int:
    """point + times * step in Z_k^d, digit by digit (no carries)."""
    result = 0
    for i in range(digits):
        weight = k**i
        digit = (point // weight % k + times * (step // weight % k)) % k
        result += digit * weight
    return result


def _met(met: dict[tuple[int, int], int], a: int, b: int) -> int:
    return met.get((min(a, b), max(a, b)), 0)
