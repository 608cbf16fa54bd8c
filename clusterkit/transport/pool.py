"""Fan work out over hosts with a bounded number of threads (like Ansible's forks).

Ctrl-C reaches only the main thread; before waiting for the workers we cancel every live
transport, which kills its remote process group and returns at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Cancellable(Protocol):
    def cancel(self) -> None: ...


_live: weakref.WeakSet[Cancellable] = weakref.WeakSet()


def register_cancellable(item: Cancellable) -> None:
    """Transports register here so an interrupt anywhere can stop their remote commands."""
    _live.add(item)


def cancel_all() -> None:
    for item in list(_live):
        item.cancel()


def parallel(
    fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None
) -> list[R | BaseException]:
    """Apply fn to every item concurrently (at most `workers` at once; None: all of them);
    results in input order, exceptions returned as values so one host's failure never hides
    the others'. KeyboardInterrupt cancels every live transport, waits for the workers to
    return, and propagates."""
    items = list(items)
    if not items:
        return []
    limit = len(items) if workers is None else min(workers, len(items))
    executor = ThreadPoolExecutor(max_workers=max(1, limit))
    results: list[R | BaseException] = []
    try:
        futures = [executor.submit(fn, item) for item in items]
        for future in futures:
            try:
                results.append(future.result())
            except Exception as error:  # reported per host by the caller
                results.append(error)
    except KeyboardInterrupt:
        cancel_all()
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)
    return results
