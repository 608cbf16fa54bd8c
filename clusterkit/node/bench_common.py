"""What the bench worker's parts and the control side share: exit codes and the error,
sizes and dtypes, collectives and their bus-bandwidth formulas (nccl-tests' own).
"""

from __future__ import annotations

import re

LOG_PREFIX = "clusterkit-bench:"  # stderr lines the launcher reads to attribute failures

EXIT_FAILED = 1  # a rank failed or the data came back wrong
EXIT_USAGE = 2  # bad flags
EXIT_WORLD = 3  # world size mismatch or ranks that never arrived: the run could not start

DTYPES = {
    # nccl-tests name: (torch attribute, element bytes)
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "int32": ("int32", 4),
    "int": ("int32", 4),
    "int64": ("int64", 8),
    "half": ("float16", 2),
    "float16": ("float16", 2),
    "bfloat16": ("bfloat16", 2),
    "float": ("float32", 4),
    "float32": ("float32", 4),
    "double": ("float64", 8),
    "float64": ("float64", 8),
}
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class BenchError(Exception):
    """A failure with a kind the launcher maps to a finding (world-size, join, rank-failed)."""

    def __init__(self, kind: str, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code


# --- pure helpers (unit-tested without torch) -------------------------------------------


def parse_size(text: str) -> int:
    """nccl-tests sizes: bytes with an optional K/M/G/T suffix, powers of 1024 (`1M` = 2**20)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KkMmGgTt]?)[Bb]?\s*", str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K/M/G, e.g. 64M)")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


def size_sweep(min_bytes: int, max_bytes: int, factor: int, elem_bytes: int) -> list[int]:
    """The sizes nccl-tests visits: min, min*f, ... up to max, each rounded down to whole
    elements (at least one)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError("need 1 <= min bytes <= max bytes")
    if factor < 2 and min_bytes != max_bytes:
        raise ValueError("size factor must be at least 2")
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        aligned = max(elem_bytes, size // elem_bytes * elem_bytes)
        if not sizes or aligned != sizes[-1]:
            sizes.append(aligned)
        if factor < 2:
            break
        size *= factor
    return sizes


# nccl-tests collectives: name -> (redop column, bus factor numerator k: busbw = algbw*k(n-1)/n)
COLLECTIVES = {
    "all_reduce": ("sum", 2),
    "all_gather": ("none", 1),
    "reduce_scatter": ("sum", 1),
    "alltoall": ("none", 1),
}


def parse_collectives(text: str) -> list[str]:
    """`all_reduce,all_gather` -> names in the order given, each once; ValueError names the
    unknown one."""
    names: list[str] = []
    for part in str(text).split(","):
        name = part.strip()
        if name not in COLLECTIVES:
            known = ", ".join(COLLECTIVES)
            raise ValueError(f"unknown collective {name!r} (one or more of {known})")
        if name not in names:
            names.append(name)
    return names


def bus_factor(ranks: int, collective: str = "all_reduce") -> float:
    """nccl-tests' bus bandwidth factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
    reduce_scatter and alltoall; 0 for one rank, which nccl-tests prints as 0.00 (the gate
    treats a one-rank run as "does not apply", see gate.evaluate)."""
    return COLLECTIVES[collective][1] * (ranks - 1) / ranks if ranks > 0 else 0.0


def bandwidths(
    size_bytes: int, seconds: float, ranks: int, collective: str = "all_reduce"
) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9), as nccl-tests: algbw = S/t with S the size column (the
    whole buffer: for all_gather, reduce_scatter and alltoall count per rank x n x element
    bytes), busbw = algbw x bus_factor."""
    algbw = size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * bus_factor(ranks, collective)


def row_shape(size_bytes: int, elem_bytes: int, ranks: int, collective: str) -> tuple[int, int]:
    """(size column, count column) of one nccl-tests row for a swept size: all_reduce keeps
    size/elem elements; the others split them over the ranks (count per rank, at least one)
    and print the whole buffer, count x n x element bytes, as nccl-tests' setupArgs does."""
    count = max(1, size_bytes // elem_bytes)
    if collective == "all_reduce":
        return count * elem_bytes, count
    per_rank = max(1, count // max(1, ranks))
    return per_rank * max(1, ranks) * elem_bytes, per_rank
