"""Stage names are declared once (clusterkit/contract/names.py): the Stage classes, the CLI's
--skip choices and the reports' order all agree with that declaration."""

from __future__ import annotations

import ast
import importlib
import io
import pkgutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import clusterkit
from clusterkit import cli
from clusterkit.checks.model import Finding, Status
from clusterkit.contract.names import SKIPPABLE, STAGE_ORDER, stage_rank
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult
from clusterkit.errors import UsageError
from clusterkit.report.junit import render_junit
from clusterkit.report.model import Report
from clusterkit.report.text import render_plain
from tests.support.cli import run_cli


def stage_classes() -> list[type[Stage]]:
    """Every Stage subclass in clusterkit (each module imported) that names its stage."""
    for module in pkgutil.walk_packages(clusterkit.__path__, "clusterkit."):
        if not module.name.startswith("clusterkit.node") and "__main__" not in module.name:
            importlib.import_module(module.name)
    found, todo = [], list(Stage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("clusterkit.") and "name" in vars(cls):
            found.append(cls)
    return found


def test_every_stage_class_is_declared_and_every_declared_stage_has_a_class() -> None:
    classes = stage_classes()
    named = {cls.name for cls in classes}
    assert named <= set(STAGE_ORDER), sorted(named - set(STAGE_ORDER))
    assert set(STAGE_ORDER) <= named, f"declared without a class: {set(STAGE_ORDER) - named}"
    assert len(classes) >= len(STAGE_ORDER)  # srun's connect stands in for ssh's


def test_a_stage_class_with_an_undeclared_name_fails_where_it_is_defined() -> None:
    with pytest.raises(TypeError, match=r"'netwrok' is not in clusterkit/contract/names\.py"):

        class Misspelled(Stage):
            name = "netwrok"  # type: ignore[assignment]

            def run(self, session: Session) -> StageResult:
                return StageResult()


def test_skip_offers_the_declared_skippable_stages_and_refuses_the_rest() -> None:
    assert set(SKIPPABLE) <= set(STAGE_ORDER)
    assert list(SKIPPABLE) == [s for s in STAGE_ORDER if s in SKIPPABLE]  # in report order
    assert cli.parse(["check", "--skip", ",".join(SKIPPABLE)]).skip == frozenset(SKIPPABLE)
    assert cli.parse(["launch", "--skip", "dcgm"]).skip == frozenset({"dcgm"})
    for stage in set(STAGE_ORDER) - set(SKIPPABLE):
        with pytest.raises(UsageError, match=f"unknown stage {stage}"):
            cli.parse(["check", "--skip", stage])
    help_text = run_cli(["check", "--help"]).stdout
    assert f"skip check stages: {', '.join(SKIPPABLE)}" in " ".join(help_text.split())


def report_over_every_stage() -> Report:
    """A failure per declared stage, in reverse order, and one of a stage not declared."""
    findings = [
        Finding(f"{stage}.seen", Status.FAIL, "failed", hosts=["n0"], stage=stage)
        for stage in [*reversed(STAGE_ORDER), "elsewhere"]
    ]
    return Report("check", None, findings, {"n0": {"address": "10.0.0.1"}})


def test_the_text_report_shows_stages_in_the_declared_order() -> None:
    stream = io.StringIO()
    render_plain(report_over_every_stage(), stream)
    text = stream.getvalue()
    places = [text.index(f"{stage}.seen") for stage in [*STAGE_ORDER, "elsewhere"]]
    assert places == sorted(places), text


def test_junit_suites_follow_the_declared_order() -> None:
    root = ET.fromstring(render_junit(report_over_every_stage()))
    suites = [suite.get("name") for suite in root.iter("testsuite")]
    assert suites == [f"clusterkit.{stage}" for stage in [*STAGE_ORDER, "elsewhere"]]


def test_dcgm_comes_after_the_image_and_before_the_bench() -> None:
    """The order the check runs them in: dcgm needs idle GPUs, before the bench loads them."""
    assert stage_rank("image") < stage_rank("dcgm") < stage_rank("bench")
    assert stage_rank("not-a-stage") == len(STAGE_ORDER)


# Modules that still name a finding's stage themselves, each with why; the runner
# (stages/runner.py:record) is the one place a stage's findings get its name.
STAMPS_A_STAGE: dict[str, str] = {
    "clusterkit/stages/runner.py": "the runner: the one place a stage's name is stamped",
    "clusterkit/report/fold.py": "a folded line keeps the stage of the findings it folds",
    "clusterkit/checks/baseline.py": "drift is compared after the stages: a drop shows as bench",
}


def stamps_a_stage(path: Path) -> bool:
    """A `stage=` argument or a `.stage =` assignment anywhere in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.keyword) and node.arg == "stage":
            return True
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Attribute) and t.attr == "stage" for t in targets):
            return True
    return False


def test_only_the_runner_stamps_a_findings_stage() -> None:
    root = Path(clusterkit.__file__).parent
    stamping = {
        str(path.relative_to(root.parent))
        for path in root.rglob("*.py")
        if "node" not in path.relative_to(root).parts[:1] and stamps_a_stage(path)
    }
    assert stamping <= set(STAMPS_A_STAGE), sorted(stamping - set(STAMPS_A_STAGE))
    stale = set(STAMPS_A_STAGE) - stamping
    assert not stale, f"remove from STAMPS_A_STAGE, they no longer stamp: {sorted(stale)}"
