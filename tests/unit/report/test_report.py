"""The report: verdict precedence, the JSON schema, JUnit counts, plain text."""

from __future__ import annotations

import io
import json
import tracemalloc
import xml.etree.ElementTree as ET

import pytest

from clusterkit.checks.model import Finding, Status, verdict_status
from clusterkit.environment import Environment
from clusterkit.node import collector
from clusterkit.report import emit
from clusterkit.report.jsonout import render_json
from clusterkit.report.junit import render_junit
from clusterkit.report.model import Report
from clusterkit.report.text import render_plain, render_rich
from clusterkit.status import ExitStatus


def finding(status: Status, check_id: str = "parity.driver", stage: str = "static") -> Finding:
    return Finding(check_id, status, f"{check_id} is {status.value}", stage=stage)


@pytest.mark.parametrize(
    ("statuses", "strict", "expected"),
    [
        ([], False, ExitStatus.PASSED),
        ([Status.OK, Status.SKIP], False, ExitStatus.PASSED),
        ([Status.OK, Status.WARN], False, ExitStatus.PASSED),
        ([Status.OK, Status.WARN], True, ExitStatus.FAILED),
        ([Status.OK, Status.ERROR], False, ExitStatus.INCOMPLETE),
        ([Status.ERROR, Status.FAIL], False, ExitStatus.FAILED),
        ([Status.FAIL, Status.ERROR, Status.WARN], False, ExitStatus.FAILED),
        ([Status.ERROR, Status.WARN], True, ExitStatus.FAILED),
        ([Status.SKIP], True, ExitStatus.PASSED),
    ],
)
def test_verdict_precedence(statuses: list[Status], strict: bool, expected: ExitStatus) -> None:
    assert verdict_status([finding(s) for s in statuses], strict=strict) is expected


def sample_report(strict: bool = False) -> Report:
    findings = [
        Finding("host.reachable", Status.OK, "2 of 3 hosts connected", ["n1", "n2"],
                stage="connect"),
        Finding("host.reachable", Status.ERROR, "n3: connection refused", ["n3"],
                found="refused", remedy="start sshd on n3", stage="connect"),
        Finding("parity.driver", Status.FAIL, "NVIDIA driver differs", ["n2"],
                expected="550.54.15", found={"n2": "535.183.01"},
                remedy="clusterkit provision inv.yaml --tags nvidia --limit n2"),
        Finding("env.memlock", Status.WARN, "memlock not unlimited", ["n1"]),
        Finding("compat.driver-cuda", Status.SKIP, "no CUDA build of torch"),
        Finding("gpu.ecc", Status.OK, "no uncorrected ECC errors", ["n1", "n2"]),
    ]  # fmt: skip
    hosts = {
        "n1": {"address": "10.0.0.1", "reachable": True, "error": None, "facts": {}},
        "n2": {"address": "10.0.0.2", "reachable": True, "error": None, "facts": {}},
        "n3": {"address": "10.0.0.3", "reachable": False, "error": "refused: x", "facts": None},
    }
    return Report("check", "inv.yaml", findings, hosts, stages={"network": "skipped by --skip"},
                  strict=strict, seconds=1.25)  # fmt: skip


def test_json_of_a_full_mesh_at_256_nodes_takes_little_more_than_its_text() -> None:
    """65,280 connect records, as a full mesh of 256 nodes reports: json.dumps with an indent
    held three times the text in small strings at once (80 MB here)."""
    pairs = [(a, b) for a in range(256) for b in range(256) if a != b]
    connects = [
        {"from": f"node{a}", "peer": f"node{b}", "port": 40000 + b, "result": "ok",
         "detail": f"node{b}", "seconds": 0.0012, "round": 1}
        for a, b in pairs
    ]  # fmt: skip
    report = sample_report()
    report.details = {"network": {"connects": connects}}
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        text = render_json(report)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert json.loads(text)["details"]["network"]["connects"][-1]["peer"] == "node254"
    assert text == json.dumps(report.to_dict(), indent=2, default=str) + "\n"  # same text
    assert peak < 2.5 * len(text), f"{peak / 1e6:.0f} MB for {len(text) / 1e6:.0f} MB of JSON"


def test_json_schema_keys_and_types() -> None:
    data = json.loads(render_json(sample_report()))
    assert {
        "schema_version", "clusterkit_version", "probe_version", "command", "inventory", "verdict",
        "exit_status", "strict", "seconds", "counts", "stages", "findings", "hosts", "details",
    } <= set(data)  # fmt: skip
    assert data["verdict"] == "fail" and data["exit_status"] == 1
    assert data["schema_version"] == 1
    assert data["probe_version"] == collector.PROBE_VERSION  # the facts' shape, versioned
    assert data["counts"] == {"ok": 2, "warn": 1, "fail": 1, "skip": 1, "error": 1}
    assert data["stages"] == {"network": "skipped by --skip"}
    driver = next(f for f in data["findings"] if f["id"] == "parity.driver")
    assert driver == {
        "id": "parity.driver",
        "status": "fail",
        "message": "NVIDIA driver differs",
        "hosts": ["n2"],
        "expected": "550.54.15",
        "found": {"n2": "535.183.01"},
        "remedy": "clusterkit provision inv.yaml --tags nvidia --limit n2",
        "stage": "static",
    }
    assert {f["status"] for f in data["findings"]} <= {s.value for s in Status}
    assert data["hosts"]["n3"] == {
        "address": "10.0.0.3", "reachable": False, "error": "refused: x", "facts": None
    }  # fmt: skip


def test_json_exit_status_matches_the_verdict() -> None:
    report = sample_report()
    report.findings = [f for f in report.findings if f.status is not Status.FAIL]
    data = json.loads(render_json(report))
    assert (data["verdict"], data["exit_status"]) == ("incomplete", 3)
    report.findings = [f for f in report.findings if f.status is not Status.ERROR]
    data = json.loads(render_json(report))
    assert (data["verdict"], data["exit_status"]) == ("pass", 0)
    report.strict = True
    data = json.loads(render_json(report))
    assert (data["verdict"], data["exit_status"], data["strict"]) == ("fail", 1, True)


def _suites(xml_text: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml_text.split("\n", 1)[1])
    assert root.tag == "testsuites"
    return {suite.get("name"): suite for suite in root.findall("testsuite")}


def test_junit_counts_and_elements() -> None:
    suites = _suites(render_junit(sample_report()))
    assert list(suites) == ["clusterkit.connect", "clusterkit.static"]  # stage order
    connect, static = suites["clusterkit.connect"], suites["clusterkit.static"]
    assert {k: connect.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "2", "failures": "0", "errors": "1", "skipped": "0"
    }  # fmt: skip
    assert {k: static.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "4", "failures": "1", "errors": "0", "skipped": "1"
    }  # fmt: skip
    cases = {case.get("name"): case for case in static.findall("testcase")}
    failure = cases["parity.driver"].find("failure")
    assert failure is not None and failure.get("type") == "parity.driver"
    assert "remedy: clusterkit provision inv.yaml" in failure.text
    assert "expected: 550.54.15" in failure.text
    assert cases["compat.driver-cuda"].find("skipped") is not None
    assert cases["env.memlock"].find("failure") is None
    assert cases["env.memlock"].find("system-out").text.startswith("WARN: ")
    error = connect.findall("testcase")[1].find("error")
    assert error is not None and "start sshd" in error.text


def test_junit_strict_turns_warnings_into_failures() -> None:
    static = _suites(render_junit(sample_report(strict=True)))["clusterkit.static"]
    assert static.get("failures") == "2"
    cases = {case.get("name"): case for case in static.findall("testcase")}
    assert cases["env.memlock"].find("failure") is not None


def test_junit_escapes_markup_in_messages() -> None:
    report = sample_report()
    report.findings = [Finding("probe.ran", Status.ERROR, 'n1: <stderr> & "quotes"', ["n1"])]
    suites = _suites(render_junit(report))
    error = suites["clusterkit.static"].find("testcase").find("error")
    assert error.get("message") == 'n1: <stderr> & "quotes"'


def test_plain_text_has_hosts_findings_remedies_and_the_verdict_line() -> None:
    stream = io.StringIO()
    render_plain(sample_report(), stream)
    text = stream.getvalue()
    lines = text.splitlines()
    assert lines[-1] == (
        "verdict: FAIL (exit 1): 1 failed, 1 warning, 1 error, 2 ok, 1 skipped on 3 hosts in 1.2 s"
    )
    assert any(line.split()[:2] == ["FAIL", "parity.driver"] for line in lines)
    assert "remedy: clusterkit provision inv.yaml --tags nvidia --limit n2" in text
    assert "network: skipped: skipped by --skip" in text
    assert "refused: x" in text  # the unreachable host's state


def test_rich_text_has_the_verdict_line() -> None:
    stream = io.StringIO()
    render_rich(sample_report(), stream)
    assert "verdict: FAIL (exit 1)" in stream.getvalue()
    assert "parity.driver" in stream.getvalue()


def test_emit_writes_the_format_to_the_output_file(tmp_path) -> None:
    target = tmp_path / "report.xml"
    env = Environment()
    emit(sample_report(), "junit", str(target), env)
    assert "clusterkit.static" in _suites(target.read_text())
    assert env.stdout.getvalue() == ""
    assert env.stderr.getvalue().startswith("verdict: FAIL (exit 1)")


def test_hosts_table_says_nothing_about_a_host_never_reached() -> None:
    """An unreachable host has no facts: its row is unknown ("?"), never "torch missing"."""
    from clusterkit.report.text import HOST_COLUMNS, host_rows

    report = sample_report()
    report.hosts["n1"]["facts"] = {"torch": {"present": False}, "gpus": {"count": 0}}
    rows = {row[0]: dict(zip(HOST_COLUMNS, row)) for row in host_rows(report)}
    assert rows["n3"]["state"] == "refused: x"
    assert {rows["n3"][c] for c in HOST_COLUMNS[3:]} == {"?"}
    assert rows["n1"]["torch"] == "missing"  # reached, and really without torch
    stream = io.StringIO()
    render_plain(report, stream)
    n3 = next(line for line in stream.getvalue().splitlines() if line.strip().startswith("n3"))
    assert "missing" not in n3


def test_fix_plan_lives_in_the_json_document_only_when_asked() -> None:
    report = Report("check", None, [finding(Status.FAIL)], {})
    assert "fix_plan" not in json.loads(render_json(report))
    report.fix_plan = ["clusterkit provision inv.yaml --tags nvidia --limit node2"]
    assert json.loads(render_json(report))["fix_plan"] == report.fix_plan
