"""DCGM diagnostics over real `dcgmi diag -j` documents captured on a GB10 (DCGM 4.2.3 and
4.5.2; tests/fixtures/dcgm/README.md names the source): what each real reading must give."""

from __future__ import annotations

import json
from pathlib import Path

from clusterkit.checks.model import Status
from clusterkit.dcgm.checks import dcgm_findings, parse_diag

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
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


# -- read strictly: nothing tested is no pass, an unknown status is no verdict ------------


def test_a_real_all_skip_document_warns_that_nothing_was_tested() -> None:
    """NVIDIA/DCGM issue #139: every test skipped on a T400. The old reading called it
    "every test passed"."""
    diag = parse_diag(fixture("dcgm3_r3_all_skip_t400.json"))
    assert diag.problem is None and {r.status for r in diag.results} == {"skip"}
    findings = dcgm_findings({"t400": diag}, 3)
    assert [(f.status, f.hosts) for f in findings] == [(Status.WARN, ["t400"])]
    assert "tested nothing on t400" in findings[0].message
    assert "passed" not in findings[0].message
    assert "GPU Memory" in findings[0].message


def test_a_node_that_tested_nothing_is_not_in_the_ok_of_the_others() -> None:
    skipped = parse_diag(fixture("dcgm3_r3_all_skip_t400.json"))
    ran = parse_diag(fixture(ALLOWED))
    ran.results = [r for r in ran.results if r.status == "pass"]
    findings = dcgm_findings({"a": ran, "b": skipped}, 2)
    assert {(f.status, tuple(f.hosts)) for f in findings} == {(Status.WARN, ("b",))}


def _with_status(status: object) -> str:
    doc = json.loads(fixture(ALLOWED))
    results = doc["DCGM Diagnostic"]["test_categories"]
    for category in results:
        for test in category["tests"]:
            for result in test["results"]:
                result["status"] = status
    return json.dumps(doc)


def test_a_status_dcgm_never_writes_is_an_error_not_a_pass() -> None:
    for status in ("Passed!", "OK", "", None, 1, ["Pass"], "Pass\x1b[2J\nverdict: PASS"):
        findings = dcgm_findings({"n": parse_diag(_with_status(status))}, 2)
        assert [f.status for f in findings] == [Status.ERROR], status
        assert "no DCGM status" in findings[0].message
        assert "\n" not in findings[0].message and "\x1b" not in findings[0].message


def test_entries_that_are_no_result_objects_are_errors() -> None:
    doc = json.loads(fixture(ALLOWED))
    tests = doc["DCGM Diagnostic"]["test_categories"][1]["tests"]
    tests[0]["results"] = ["Pass"]  # a string where a result object belongs
    tests.append("garbage")
    software = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
    software["status"] = "Pass"
    findings = dcgm_findings({"n": parse_diag(json.dumps(doc))}, 2)
    assert [f.status for f in findings] == [Status.ERROR]
    assert findings[0].found == {"unreadable": 2}


def test_the_known_statuses_still_read_as_before() -> None:
    for status, expected in (("Pass", Status.OK), ("Fail", Status.FAIL), ("Warn", Status.WARN)):
        findings = dcgm_findings({"n": parse_diag(_with_status(status))}, 2)
        assert {f.status for f in findings} == {expected}, status
    findings = dcgm_findings({"n": parse_diag(_with_status("Not Run"))}, 2)
    assert [f.status for f in findings] == [Status.WARN]


def test_documents_of_the_wrong_shape_at_any_level_are_errors_never_crashes() -> None:
    """Each level DCGM nests (top, categories, tests, results, GPU ids) given a value of
    another shape: an error naming the node, never a traceback and never a pass. The old
    reading crashed on the first two and passed the last three."""
    doc = json.loads(fixture(ALLOWED))
    tests = doc["DCGM Diagnostic"]["test_categories"][1]["tests"]
    odd_id = {"status": "Pass", "entity_group": "GPU", "entity_id": [0]}
    categories = [
        [{"tests": [*tests, {"name": "x", "results": "Pass"}]}],
        [{"tests": tests}, "garbage"],
        [{"tests": [{"name": "memory", "results": [odd_id]}]}],
    ]
    hostile = [{"DCGM Diagnostic": [1]}, {"DCGM Diagnostic": "Pass"}] + [
        {"DCGM Diagnostic": {"test_categories": found}} for found in categories
    ]
    for document in hostile:
        findings = dcgm_findings({"n": parse_diag(json.dumps(document))}, 2)
        assert Status.ERROR in {f.status for f in findings}, document
        assert Status.OK not in {f.status for f in findings}, document


def test_a_test_with_only_its_summary_reads_as_the_nodes_result() -> None:
    """A 4.x test object may carry only `test_summary` (as in the recorded documents, beside
    its results): its status then speaks for the node, read as strictly as a result."""
    doc = json.loads(fixture(ALLOWED))
    software = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    del software["results"]
    diag = parse_diag(json.dumps(doc))
    assert ("software", None, "fail") in {(r.test, r.gpu, r.status) for r in diag.results}
    software["test_summary"]["status"] = "Fine"
    findings = dcgm_findings({"n": parse_diag(json.dumps(doc))}, 2)
    assert [f.status for f in findings] == [Status.ERROR]
