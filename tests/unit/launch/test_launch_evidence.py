"""Evidence per attempt: with --log-dir each attempt writes into its own checked folder, and
every incident (printed, in the JSON record, in the trace) names the folder of its attempt."""

from __future__ import annotations

import io
import os
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest

from clusterkit.cost.rates import read_trace
from clusterkit.launch.attempts import Attempts, RecoveryOptions
from clusterkit.launch.failure import Failure
from clusterkit.launch.faults import classify
from clusterkit.launch.incidents import Incident, attempt_folder_name, trace_text
from clusterkit.launch.job import SuperviseOptions
from clusterkit.launch.plan import LaunchSettings, PlanNode, build_plan
from clusterkit.launch.supervise import Supervisor
from clusterkit.safefiles import PrivateFolder

NOBODY = pwd.getpwnam("nobody").pw_uid
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: needs root")


def attempts(log_dir: PrivateFolder | None, notes: list[str]) -> Attempts:
    """The attempts of a launch, only as far as their folders go (nothing runs)."""
    unused: Any = None
    return Attempts(
        RecoveryOptions(), unused, unused, unused,
        SuperviseOptions(log_dir=log_dir), "run1", unused, notes.append, unused, unused,
    )  # fmt: skip


def test_each_attempt_writes_into_its_own_private_folder(tmp_path: Path) -> None:
    notes: list[str] = []
    with PrivateFolder.open(tmp_path / "logs") as top:
        run = attempts(top, notes)
        folders = []
        for number in range(2):
            run.attempt = number
            folder = run._attempt_folder()
            assert folder is not None
            with folder:
                folder.write("node1-0.log", f"attempt {number}\n")
            folders.append(Path(folder.path))
    assert [p.name for p in folders] == ["attempt-0", "attempt-1"]
    for number, path in enumerate(folders):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        assert (path / "node1-0.log").read_text() == f"attempt {number}\n"  # not overwritten
    assert notes == []
    assert attempts(None, notes)._attempt_folder() is None  # no --log-dir: nothing made


@as_root
def test_an_attempt_folder_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    """--log-dir is a shared sticky folder; another user made `attempt-0` (a folder of
    theirs) and `attempt-1` (a link to a folder of root's): neither is written to."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "attempt-0").mkdir()
    os.chown(shared / "attempt-0", NOBODY, -1)
    target = tmp_path / "roots"
    target.mkdir()
    (shared / "attempt-1").symlink_to(target)
    os.lchown(shared / "attempt-1", NOBODY, -1)
    notes: list[str] = []
    with PrivateFolder.open(shared) as top:
        run = attempts(top, notes)
        for number in range(2):
            run.attempt = number
            assert run._attempt_folder() is None
    assert len(notes) == 2
    assert "attempt 0 is not logged" in notes[0] and "belongs to user 'nobody'" in notes[0]
    assert "attempt 1 is not logged" in notes[1] and "symlink of user 'nobody'" in notes[1]
    assert list(target.iterdir()) == [] and list((shared / "attempt-0").iterdir()) == []


def test_the_supervisor_logs_into_the_attempts_folder_and_says_so(tmp_path: Path) -> None:
    settings = LaunchSettings(
        nodes=(PlanNode("n1"),), master_addr="10.0.0.1", master_port=29500,
        nproc_per_node=1, script=("train.py",),
    )  # fmt: skip
    plan = build_plan(settings)
    with PrivateFolder.open(tmp_path / attempt_folder_name(1)) as folder:
        options = SuperviseOptions(log_dir=folder, out=io.StringIO(), note=lambda _: None)
        transports: Any = {"n1": object()}  # never used: no process runs
        sup = Supervisor(transports, plan, "run1", {}, options)
        sup._line(sup.nodes["n1"], b"[rank0]:step 1")
        for handle in sup.logs.values():
            handle.close()
        outcome = sup._outcome()
    assert outcome.evidence == str(tmp_path / "attempt-1")
    assert (tmp_path / "attempt-1" / "n1-0.log").read_text() == "step 1\n"


def test_every_incident_names_the_folder_of_its_evidence(tmp_path: Path) -> None:
    lost = classify([Failure("node3", None, None, 1.0, lost=True)])
    logs = str(tmp_path / "logs" / "attempt-0")
    incident = Incident(0, 1_790_000_000.0, lost, action="left out node3", evidence=logs)
    assert incident.line().endswith(f"-> left out node3 (evidence in {logs})")
    assert incident.to_dict()["evidence_dir"] == logs
    assert "evidence in" not in Incident(0, 1_790_000_000.0, lost).line()  # nothing kept
    assert Incident(0, 1_790_000_000.0, lost).to_dict()["evidence_dir"] is None
    text = trace_text([incident], nodes=3, hours=1.0)
    lines = text.splitlines()
    assert lines[-2] == f"# evidence of the fault below: {logs}"
    assert lines[-1].endswith(" node3")


def test_a_folder_name_cannot_forge_a_trace_line(tmp_path: Path) -> None:
    """A --log-dir path with a newline stays one comment line: `cost --trace` reads the
    one fault, not a second one made of the path."""
    lost = classify([Failure("node3", None, None, 1.0, lost=True)])
    logs = "/tmp/x\n2026-11-26T06:00:00+00:00 node9\n/attempt-0"
    incident = Incident(0, 1_790_000_000.0, lost, evidence=logs)
    assert "\n" not in incident.line()
    path = tmp_path / "trace.txt"
    path.write_text(trace_text([incident], nodes=3, hours=1.0))
    source = read_trace(str(path))
    assert source.rate == pytest.approx(1 / 3)
    assert "node9" not in "".join(
        line for line in path.read_text().splitlines() if not line.startswith("#")
    )
