"""Fan work out over hosts with a bounded number of threads (like Ansible's forks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def parallel(
    fn: Callable[[T], R], items: Iterable[T], *, workers: int = 64
) -> list[R | BaseException]:
    """Apply fn to every item concurrently; results in input order, exceptions returned as
    values so one host's failure never hides the others'. KeyboardInterrupt propagates."""
    items = list(items)
    if not items:
        return []
    results: list[R | BaseException] = []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as executor:
        futures = [executor.submit(fn, item) for item in items]
        for future in futures:
            try:
                results.append(future.result())
            except Exception as error:  # reported per host by the caller
                results.append(error)
    return results
