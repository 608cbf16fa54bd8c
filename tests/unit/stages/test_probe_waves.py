"""`--timeout` bounds each host's probe: with fewer forks than hosts the probe runs in waves,
and a host of the last wave gets as long as one of the first (the stage lasts that many
times longer), instead of what the first waves left of one shared deadline."""

from __future__ import annotations

import threading
import time

import pytest

from clusterkit import framing
from clusterkit.contract.session import SessionOptions
from clusterkit.facts import PROBE_VERSION
from clusterkit.inventory.model import Host, Inventory
from clusterkit.probe.stage import ProbeStage
from clusterkit.stages import Session, run_stages
from clusterkit.transport.base import CommandResult
from tests.support.fake_transport import Call, FakeTransport

PROBE_SECONDS = 10.0
WORK_SECONDS = 8.0  # what each probe takes on its node, on the test's clock


class Clock:
    """A monotonic clock that moves only when a host works (one at a time: exact waves)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def working_node(host: str, clock: Clock, seen: dict[str, float]) -> FakeTransport:
    """A node that answers the probe after WORK_SECONDS of the clock, if its deadline allows."""

    def answer(call: Call) -> CommandResult:
        seen[host] = call.deadline.remaining()
        if call.deadline.remaining() < WORK_SECONDS:
            clock.advance(call.deadline.remaining())
            return CommandResult(host, None, b"", b"", timed_out=True)
        clock.advance(WORK_SECONDS)
        payload = {"probe_version": PROBE_VERSION, "facts": {"hostname": {"hostname": host}}}
        return CommandResult(host, 0, framing.encode(payload), b"")

    return FakeTransport(host, answer=answer)


def test_every_host_gets_the_whole_probe_timeout_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock)
    hosts = tuple(Host(f"n{i}", f"10.0.0.{i}") for i in range(4))
    session = Session(Inventory(None, hosts), None, SessionOptions(forks=1))
    seen: dict[str, float] = {}
    session.transports = {h.name: working_node(h.name, clock, seen) for h in hosts}
    run_stages(session, [ProbeStage(PROBE_SECONDS)])
    assert session.failures == {}
    assert sorted(session.facts) == ["n0", "n1", "n2", "n3"]
    assert all(remaining == pytest.approx(PROBE_SECONDS) for remaining in seen.values()), seen
    # Four waves of 8 s under a 10 s bound per host: the stage took 32 s of the clock.
    assert clock.now == pytest.approx(1000.0 + 4 * WORK_SECONDS)


def test_hosts_whose_facts_the_session_holds_are_not_probed_again() -> None:
    """A launch's re-check after a node fault: the survivors' facts are seconds old (their
    post-mortem probe), so only the spares taken are probed; every host has facts after."""
    clock = Clock()
    hosts = tuple(Host(f"n{i}", f"10.0.0.{i}") for i in range(4))
    session = Session(Inventory(None, hosts), None, SessionOptions())
    seen: dict[str, float] = {}
    session.transports = {h.name: working_node(h.name, clock, seen) for h in hosts}
    known = {"n0": {"hostname": {"hostname": "post-mortem"}}, "n2": {}}
    session.facts.update(known)  # type: ignore[arg-type]
    stage = ProbeStage(PROBE_SECONDS)
    assert stage.steps(session) == 2
    run_stages(session, [stage])
    assert sorted(seen) == ["n1", "n3"]
    assert sorted(session.facts) == ["n0", "n1", "n2", "n3"]
    assert session.facts["n0"] == {"hostname": {"hostname": "post-mortem"}}
