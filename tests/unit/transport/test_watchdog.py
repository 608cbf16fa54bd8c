"""The shared watchdog: an alarm fires at its time unless cancelled, a cancelled one never
fires, one stuck action does not hold up another, and cancelled alarms do not pile up."""

from __future__ import annotations

import threading
import time

from clusterkit.transport.watchdog import Watchdog

WAIT = 10.0  # generous: the machine is busy; every wait ends as soon as its condition holds


def test_an_alarm_fires_at_its_time_not_before() -> None:
    watchdog, fired = Watchdog(), threading.Event()
    started = time.monotonic()
    watchdog.after(0.2, fired.set)
    assert fired.wait(WAIT)
    assert time.monotonic() - started >= 0.2


def test_a_cancelled_alarm_never_fires_and_later_ones_still_do() -> None:
    watchdog = Watchdog()
    cancelled, later = threading.Event(), threading.Event()
    watchdog.after(0.05, cancelled.set).cancel()
    watchdog.after(0.3, later.set)
    assert later.wait(WAIT)
    assert not cancelled.is_set()


def test_alarms_fire_in_time_order_whatever_the_order_they_were_set() -> None:
    watchdog, order, done = Watchdog(), [], threading.Event()
    watchdog.after(0.3, lambda: (order.append("late"), done.set()))
    watchdog.after(0.1, lambda: order.append("early"))
    assert done.wait(WAIT)
    assert order == ["early", "late"]


def test_a_stuck_action_does_not_hold_up_another_hosts_alarm() -> None:
    watchdog, release, other = Watchdog(), threading.Event(), threading.Event()
    watchdog.after(0.0, lambda: release.wait(WAIT))  # a close blocked on a dead connection
    watchdog.after(0.1, other.set)
    try:
        assert other.wait(WAIT)
    finally:
        release.set()


def test_cancel_waits_for_a_running_action_to_end() -> None:
    watchdog, running, release, ended = Watchdog(), threading.Event(), threading.Event(), []

    def action() -> None:
        running.set()
        release.wait(WAIT)
        ended.append(True)

    alarm = watchdog.after(0.0, action)
    assert running.wait(WAIT)
    threading.Timer(0.1, release.set).start()
    alarm.cancel()  # returns only once the action has run to its end
    assert ended == [True]


def test_cancelled_alarms_are_dropped_rather_than_kept_until_their_time() -> None:
    watchdog = Watchdog()
    for _ in range(1000):
        watchdog.after(3600.0, lambda: None).cancel()
    assert len(watchdog._heap) <= 130
