"""The launch stage: gated on the session's findings, and its outcome recorded as a stage's."""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status
from clusterkit.inventory.model import Host, Inventory
from clusterkit.launch.failure import Failure
from clusterkit.launch.job import JobOutcome, SuperviseOptions
from clusterkit.launch.plan import LaunchSettings, PlanNode
from clusterkit.launch.stage import LaunchStage, job_finding, outcome_details
from clusterkit.stages import Session, run_stages
from clusterkit.transport.base import Deadline
from tests.support.fake_transport import FakeTransport

SETTINGS = LaunchSettings(
    nodes=(PlanNode("n1"), PlanNode("n2")),
    master_addr="10.0.0.1",
    master_port=29500,
    nproc_per_node=1,
    script=("train.py",),
)


def session_with(findings: list[Finding], connected: tuple[str, ...] = ("n1", "n2")) -> Session:
    inventory = Inventory(None, (Host("n1", "10.0.0.1"), Host("n2", "10.0.0.2")))
    session = Session(inventory, Deadline.after(60))
    session.transports = {name: FakeTransport(name) for name in connected}
    session.findings = list(findings)
    return session


def test_a_failed_check_keeps_the_job_from_starting() -> None:
    session = session_with([Finding("net.mesh", Status.FAIL, "node2 unreachable")])
    stage = LaunchStage(SETTINGS, SuperviseOptions())
    run_stages(session, [stage])
    assert stage.outcome is None
    assert session.stages["launch"] == "the check did not pass"
    assert [(f.id, f.status) for f in session.findings][-1] == ("launch.job", Status.SKIP)


def test_warnings_refuse_only_when_strict() -> None:
    warned = [Finding("env.shm", Status.WARN, "small /dev/shm")]
    assert LaunchStage(SETTINGS, SuperviseOptions()).skip_reason(session_with(warned)) is None
    strict = LaunchStage(SETTINGS, SuperviseOptions(), strict=True)
    assert strict.skip_reason(session_with(warned)) == "the check did not pass"


def test_ungated_still_needs_every_node_connected() -> None:
    failed = [Finding("probe.ran", Status.ERROR, "n2: timeout")]
    ungated = LaunchStage(SETTINGS, SuperviseOptions(), gated=False)
    assert ungated.skip_reason(session_with(failed)) is None
    assert ungated.skip_reason(session_with([], connected=("n1",))) == (
        "not every node is connected (n2)"
    )


def test_outcome_becomes_a_finding_and_details() -> None:
    first = Failure("n2", 1, -9, at=1.0, last_lines=("step 3",))
    outcome = JobOutcome(137, "failed", first.describe(), first, node_codes={"n1": 1, "n2": 1})
    finding = job_finding(outcome)
    assert (finding.status, finding.hosts) == (Status.FAIL, ["n2"])
    assert finding.message == "job failed: rank 1 on n2 was killed by SIGKILL"
    details = outcome_details(outcome)
    assert details["exit_status"] == 137
    assert details["first_failure"] == {
        "host": "n2", "rank": 1, "exit_code": -9, "signal": "SIGKILL", "last_lines": ["step 3"],
        "remedy": None,
    }  # fmt: skip
    ok = job_finding(JobOutcome(0, "succeeded", "every rank succeeded"))
    assert ok.status is Status.OK and ok.hosts == []
