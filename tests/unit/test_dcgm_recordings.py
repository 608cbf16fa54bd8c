"""DCGM diagnostics over real `dcgmi diag -j` documents captured on a GB10 (DCGM 4.2.3 and
4.5.2; tests/fixtures/dcgm/README.md names the source): what each real reading must give."""

from __future__ import annotations

import json
from pathlib import Path

from clusterkit.checks.dcgm import dcgm_findings, parse_diag
from clusterkit.checks.model import Status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
ALLOWED = "dcgm4.5.2_r2_gb10_allowed.json"  # -r 2 with memory and pcie allowed: both ran
GATED = "dcgm4.5.2_r2_gb10_gated.json"  # -r 2 as shipped: DCGM skips memory and pcie on GB10
LEVEL1 = "dcgm4.2.3_r1_gb10.json"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def verdicts(name: str) -> set[tuple[str, int | None, str]]:
    return {(r.test, r.gpu, r.status) for r in parse_diag(fixture(name)).results}


def test_each_real_document_is_read_with_its_version_and_every_result() -> None:
    assert verdicts(ALLOWED) == {
        ("software", 0, "fail"), ("memory", 0, "pass"), ("pcie", 0, "pass"),
    }  # fmt: skip
    assert verdicts(GATED) == {
        ("software", 0, "fail"), ("memory", 0, "skip"), ("pcie", 0, "skip"),
    }  # fmt: skip
    assert verdicts(LEVEL1) == {("software", 0, "fail")}
    versions = {name: parse_diag(fixture(name)).version for name in (ALLOWED, GATED, LEVEL1)}
    assert versions == {ALLOWED: "4.5.2", GATED: "4.5.2", LEVEL1: "4.2.3"}


def test_a_recorded_configuration_failure_asks_for_the_setting_not_an_rma() -> None:
    """The recorded software failure is persistence mode off, which DCGM marks
    error_severity 5 (CONFIG): the node fails, and the action is the setting."""
    for name, level in ((ALLOWED, 2), (LEVEL1, 1)):
        diag = parse_diag(fixture(name))
        (software,) = [r for r in diag.results if r.status == "fail"]
        assert software.severity == 5
        (finding,) = dcgm_findings({"spark": diag}, level)
        assert finding.status is Status.FAIL and finding.hosts == ["spark"]
        assert "spark GPU 0: DCGM test 'software' failed" in finding.message
        assert "Persistence mode for GPU 0 is disabled" in finding.message
        assert "nvidia-smi -pm 1" in (finding.remedy or "")
        assert "RMA" not in (finding.remedy or "")


def test_entries_without_a_severity_keep_the_general_action() -> None:
    """3.x documents before 3.1 give no error_severity: the drain-and-rerun advice stays."""
    doc = json.loads(fixture(LEVEL1))
    result = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
    del result["warnings"][0]["error_severity"]
    (finding,) = dcgm_findings({"spark": parse_diag(json.dumps(doc))}, 1)
    assert "dcgmi diag -r 3" in (finding.remedy or "") and "RMA" in (finding.remedy or "")


def test_tests_dcgm_skipped_are_named_in_the_ok() -> None:
    """The gated recording with its persistence failure fixed: software passes, memory and
    pcie never ran on this GPU model. The OK says so instead of 'every test passed' alone."""
    doc = json.loads(fixture(GATED))
    software = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
    software["status"] = "Pass"
    del software["warnings"]
    (finding,) = dcgm_findings({"spark": parse_diag(json.dumps(doc))}, 2)
    assert finding.status is Status.OK
    assert finding.message.endswith("(DCGM 4.5.2); skipped: memory, pcie on spark")
    allowed = json.loads(fixture(ALLOWED))
    del allowed["DCGM Diagnostic"]["test_categories"][0]
    (ran,) = dcgm_findings({"spark": parse_diag(json.dumps(allowed))}, 2)
    assert ran.status is Status.OK and "skipped" not in ran.message


def test_a_hostile_severity_is_ignored_not_a_crash() -> None:
    """error_severity is node text: a list (unhashable), a string or true must neither crash
    the parser nor pick an action; the general advice stays."""
    for hostile in ([2], "2", True, {"x": 6}):
        doc = json.loads(fixture(LEVEL1))
        result = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
        result["warnings"][0]["error_severity"] = hostile
        diag = parse_diag(json.dumps(doc))
        assert [r.severity for r in diag.results] == [None]
        (finding,) = dcgm_findings({"spark": diag}, 1)
        assert "dcgmi diag -r 3" in (finding.remedy or "")


def test_many_skipped_tests_are_counted_not_listed() -> None:
    doc = json.loads(fixture(GATED))
    tests = doc["DCGM Diagnostic"]["test_categories"][1]["tests"]
    tests += [dict(tests[0], name=f"plugin{n:02d}") for n in range(20)]
    del doc["DCGM Diagnostic"]["test_categories"][0]
    (finding,) = dcgm_findings({"spark": parse_diag(json.dumps(doc))}, 2)
    assert finding.message.endswith("plugin05 and 14 more on spark")
