"""Checkpoint/restart theory: Young (1974) and Daly (2006), in hours.

M is the mean time between interruptions of the whole job; math.inf means none.
"""

from __future__ import annotations

import math


def young_interval(checkpoint_h: float, mtbi_h: float) -> float:
    """Young's first-order optimum: sqrt(2 delta M)."""
    return math.sqrt(2.0 * checkpoint_h * mtbi_h)


def daly_interval(checkpoint_h: float, mtbi_h: float) -> float:
    """Daly's higher-order optimum tau*; M itself once the checkpoint costs 2M or more."""
    if math.isinf(mtbi_h):
        return math.inf
    if checkpoint_h >= 2.0 * mtbi_h:
        return mtbi_h
    ratio = checkpoint_h / (2.0 * mtbi_h)
    return (
        math.sqrt(2.0 * checkpoint_h * mtbi_h) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0)
        - checkpoint_h
    )


def segment_time(length_h: float, restart_h: float, mtbi_h: float) -> float:
    """Expected time to finish `length_h` of uninterrupted work that restarts after each
    interruption (restarts can be interrupted too): M e^(R/M) (e^(L/M) - 1)."""
    if math.isinf(mtbi_h):
        return length_h
    try:
        return mtbi_h * math.exp(restart_h / mtbi_h) * math.expm1(length_h / mtbi_h)
    except OverflowError:
        return math.inf


def daly_wall_time(
    solve_h: float, interval_h: float, checkpoint_h: float, restart_h: float, mtbi_h: float
) -> float:
    """Daly's expected wall time: T_s / tau segments of tau + delta each (published form)."""
    return segment_time(interval_h + checkpoint_h, restart_h, mtbi_h) * solve_h / interval_h


def segments(solve_h: float, interval_h: float) -> tuple[int, float]:
    """Whole segments of `interval_h` and the remainder of compute left for a last one."""
    if math.isinf(interval_h) or interval_h >= solve_h:
        return 0, solve_h
    full = math.floor(solve_h / interval_h + 1e-9)
    remainder = solve_h - full * interval_h
    return full, (remainder if remainder > 1e-9 * solve_h else 0.0)


def wall_time(
    solve_h: float, interval_h: float, checkpoint_h: float, restart_h: float, mtbi_h: float
) -> float:
    """Expected wall time with whole segments: Daly's form counts T_s / tau segments, a
    fraction included; here the last, shorter segment is its own (equal when tau divides
    T_s). Every segment, the last included, ends with a checkpoint."""
    full, remainder = segments(solve_h, interval_h)
    total = full * segment_time(interval_h + checkpoint_h, restart_h, mtbi_h) if full else 0.0
    if remainder:
        total += segment_time(remainder + checkpoint_h, restart_h, mtbi_h)
    return total
