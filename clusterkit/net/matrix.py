"""The connect matrix (every pair, or the pairs a covering mesh tested): built from the
nodes' connect results, rendered as plain lines."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from clusterkit.net.cover import Cut
from clusterkit.net.messages import Connect

# Worst first wins when a pair has several ports (mesh port plus extra ports).
SEVERITY = ("ok", "foreign", "refused", "unreachable", "timeout", "error", "untested")
SYMBOL = {
    "ok": ".",
    "foreign": "F",
    "refused": "R",
    "unreachable": "U",
    "timeout": "T",
    "error": "E",
    "untested": "?",
}
LEGEND = (
    ". ok  R refused  T timed out  U unreachable  F another program answered  E error  ? not tested"
)
FULL_MATRIX_LIMIT = 8
PAIR_LIST_LIMIT = 40


def worse(first: str, second: str) -> str:
    rank = {name: index for index, name in enumerate(SEVERITY)}
    return first if rank.get(first, len(SEVERITY)) >= rank.get(second, len(SEVERITY)) else second


def build_matrix(
    hosts: Sequence[str],
    connects: Iterable[Connect],
    planned: Collection[tuple[str, str]] | None = None,
) -> dict[str, dict[str, str]]:
    """matrix[source][destination]: the worst result over the destination's mesh ports.
    `planned`: the pairs the mesh set out to test (every pair when None); the others are
    absent. A planned pair no node reported on stays "untested" (a node could not run)."""
    if planned is None:
        matrix = {src: {dst: "untested" for dst in hosts if dst != src} for src in hosts}
    else:
        matrix = {src: {} for src in hosts}
        for src, dst in planned:
            if src in matrix and dst in matrix and src != dst:
                matrix[src][dst] = "untested"
    seen: set[tuple[str, str]] = set()
    for item in connects:
        if item["role"] not in ("mesh", "extra"):
            continue
        src, dst = item["from"], item["peer"]
        if src not in matrix or dst not in matrix[src]:
            continue
        result = item["result"]
        matrix[src][dst] = result if (src, dst) not in seen else worse(matrix[src][dst], result)
        seen.add((src, dst))
    return matrix


def pair_results(matrix: dict[str, dict[str, str]]) -> dict[tuple[str, str], str]:
    return {(src, dst): result for src, row in matrix.items() for dst, result in row.items()}


def tested_pairs(matrix: dict[str, dict[str, str]]) -> int:
    return sum(1 for row in matrix.values() for result in row.values() if result != "untested")


def failing_pairs(matrix: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    return [
        (src, dst, result)
        for src, row in matrix.items()
        for dst, result in row.items()
        if result not in ("ok", "untested")
    ]


def render_matrix(
    matrix: dict[str, dict[str, str]],
    hosts: Sequence[str],
    *,
    cuts: Sequence[Cut] = (),
    subnets: Mapping[str, str] | None = None,
) -> list[str]:
    """A full grid (row connects to column) for small clusters; for larger ones, the failing
    pairs only, because a 32 x 32 grid says less than the handful of pairs that fail. The
    first line counts the pairs tested of all that exist; a cut between two subnets is one
    line, not its pairs."""
    total = len(matrix) * (len(matrix) - 1)
    planned = sum(len(row) for row in matrix.values())
    failing = failing_pairs(matrix)
    untested = planned - tested_pairs(matrix)
    tested = planned - untested
    summary = f"TCP mesh: {tested} of {total} node pairs tested"
    if planned < total:
        summary += " (covering set)"
    summary += f", {tested - len(failing)} connect"
    if failing:
        summary += f", {len(failing)} fail"
    if untested:
        summary += f", {untested} not tested"
    lines = [summary]
    cut_keys = {(cut.first, cut.second) for cut in cuts}
    if cut_keys and subnets is not None:
        lines += [
            f"  cut: {cut.describe()}: all {cut.pairs} tested pairs between them fail"
            for cut in cuts
        ]
        failing = [
            item
            for item in failing
            if tuple(sorted((subnets.get(item[0], ""), subnets.get(item[1], "")))) not in cut_keys
        ]
    if len(hosts) <= FULL_MATRIX_LIMIT:
        width = max(len(host) for host in hosts)
        lines.append(" " * (width + 5) + " ".join(str(index + 1) for index in range(len(hosts))))
        for row_index, src in enumerate(hosts):
            cells = [
                "-" if dst == src else SYMBOL.get(matrix[src].get(dst, "untested"), "?")
                for dst in hosts
            ]
            lines.append(f"{row_index + 1:>2} {src:<{width}}  " + " ".join(cells))
        lines.append("row connects to column: " + LEGEND)
        return lines
    for src, dst, result in failing[:PAIR_LIST_LIMIT]:
        lines.append(f"  {src} -> {dst}: {result}")
    if len(failing) > PAIR_LIST_LIMIT:
        lines.append(f"  ... and {len(failing) - PAIR_LIST_LIMIT} more failing pairs")
    return lines
