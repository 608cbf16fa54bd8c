"""One thread that keeps every deadline's alarm (close a stalled socket or channel), instead
of a threading.Timer thread per connect and per command start: at a few hundred hosts those
were a third of the control side's threads. Alarms nearly always end cancelled; one that
fires runs its action on a thread of its own, so an action stuck on a dead connection never
holds up another host's alarm."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Alarm:
    """A scheduled action. Once cancel() returns, the action has either run to its end or
    never will (a Timer's cancel gives no such promise)."""

    def __init__(self, watchdog: Watchdog, at: float, action: Callable[[], None]) -> None:
        self._watchdog, self.at, self._action = watchdog, at, action
        self._lock = threading.Lock()
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            if not self.cancelled:
                self.cancelled = True
                self._watchdog._dropped()

    def _fire(self) -> None:
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            with contextlib.suppress(Exception):  # a close that fails has nothing left to do
                self._action()


class Watchdog:
    """Starts each alarm's action once its time has come, unless it was cancelled."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._cancelled = 0  # alarms in the heap that will never fire
        self._thread: threading.Thread | None = None

    def after(self, seconds: float, action: Callable[[], None]) -> Alarm:
        alarm = Alarm(self, time.monotonic() + max(0.0, seconds), action)
        with self._wake:
            heapq.heappush(self._heap, (alarm.at, next(self._order), alarm))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()
        return alarm

    def _dropped(self) -> None:
        """A cancelled alarm stays in the heap until its time; rebuild it when they are most
        of it, so commands started with long deadlines do not pile up."""
        with self._wake:
            self._cancelled += 1
            if self._cancelled > 64 and 2 * self._cancelled > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._heap:
                    self._wake.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                alarm = heapq.heappop(self._heap)[2]
                if alarm.cancelled:
                    self._cancelled = max(0, self._cancelled - 1)
                    continue
            threading.Thread(target=alarm._fire, name="watchdog-alarm", daemon=True).start()


WATCHDOG = Watchdog()
