"""The stage runner: skip reasons recorded, stage names stamped once, concurrency per stage."""

from __future__ import annotations

import pytest

from clusterkit.bench.stage import BenchStage, bench_blocker
from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import SessionOptions
from clusterkit.inventory.model import Host, Inventory
from clusterkit.stages import Session, Stage, StageResult, build_report, run_stages
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline
from tests.support.fake_transport import FakeTransport


class Recorder(Stage):
    """Emits one finding (stamped with another stage's name) and records its workers."""

    def __init__(self, name: str, *, together: bool = False, why: str | None = None) -> None:
        self.name, self.together, self.why = name, together, why
        self.workers: int | None = None

    def skip_reason(self, session: Session) -> str | None:
        return super().skip_reason(session) or self.why

    def run(self, session: Session) -> StageResult:
        self.workers = session.workers
        finding = Finding(f"{self.name}.ran", Status.OK, "ran", stage="somewhere-else")
        return StageResult([finding], {"seen": len(session.findings)}, ["a line"])


def session_of(hosts: int, **options) -> Session:
    inventory = Inventory(None, tuple(Host(f"n{i}", f"10.0.0.{i}") for i in range(hosts)))
    session = Session(inventory, Deadline.after(60), SessionOptions(**options))
    session.transports = {host.name: FakeTransport(host.name) for host in inventory.hosts}
    return session


def test_runner_stamps_names_and_records_details_and_text() -> None:
    session = session_of(3)
    run_stages(session, [Recorder("first"), Recorder("second")])
    assert [(f.id, f.stage) for f in session.findings] == [
        ("first.ran", "first"),
        ("second.ran", "second"),
    ]
    assert session.stages == {"first": "ran", "second": "ran"}
    assert session.details == {"first": {"seen": 0}, "second": {"seen": 1}}  # saw the first's
    assert session.text == {"first": ["a line"], "second": ["a line"]}


def test_skipped_stage_is_recorded_with_its_reason_and_not_run() -> None:
    session = session_of(2, skip=frozenset({"flagged"}))
    flagged, refused = Recorder("flagged"), Recorder("refused", why="nothing to do")
    run_stages(session, [flagged, refused])
    assert session.stages == {"flagged": "skipped by --skip", "refused": "nothing to do"}
    assert flagged.workers is None and refused.workers is None
    assert session.findings == []


def test_together_stages_get_every_host_others_get_the_forks() -> None:
    session = session_of(100, forks=8)
    pooled, gang = Recorder("pooled"), Recorder("gang", together=True)
    run_stages(session, [pooled, gang])
    assert pooled.workers == 8
    assert gang.workers == 100


def test_without_forks_every_stage_acts_on_every_host_at_once() -> None:
    session = session_of(300)  # no --forks: a later host must not wait for a wave to end
    pooled = Recorder("pooled")
    run_stages(session, [pooled])
    assert pooled.workers == 300


def test_skipped_bench_stands_as_a_skip_finding() -> None:
    session = session_of(2)
    session.findings.append(
        Finding("net.mesh", Status.FAIL, "blocked", stage="network")  # as the network stage
    )
    run_stages(session, [BenchStage(lambda s: pytest.fail("the bench must not start"))])
    assert "network stage failed (net.mesh)" in session.stages["bench"]
    skip = session.findings[-1]
    assert (skip.id, skip.status, skip.stage) == ("bench.busbw", Status.SKIP, "bench")
    assert skip.message.startswith("bench not run: the network stage failed")


def test_bench_blocker_reasons_in_order() -> None:
    session = session_of(2)
    assert bench_blocker(session) is None
    session.findings.append(Finding("torch.present", Status.FAIL, "no torch"))
    assert bench_blocker(session) == "torch is missing or broken on a node"
    session.findings.append(Finding("host.reachable", Status.ERROR, "down", stage="connect"))
    assert "not every host could be reached" in (bench_blocker(session) or "")
    single = session_of(1)
    assert bench_blocker(single) == "a single host without GPUs: nothing to measure"


def test_session_bounds_and_report() -> None:
    session = session_of(2)
    assert session.bounded(None) == session.deadline
    assert session.bounded(1).at < session.deadline.at
    assert session.bounded(3600).at == session.deadline.at
    unbounded = Session(session.inventory)
    assert unbounded.bounded(5).remaining() <= 5
    with pytest.raises(ValueError):
        unbounded.bounded(None)
    session.failures["n1"] = "probe failed: exit 1"
    run_stages(session, [Recorder("only")])
    report = build_report(session, "check", seconds=1.0)
    assert report.exit_status is ExitStatus.PASSED
    assert report.hosts["n1"]["error"] == "probe failed: exit 1"
    assert report.stages == {"only": "ran"} and report.text_blocks == {"only": ["a line"]}
