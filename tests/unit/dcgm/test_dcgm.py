"""DCGM diagnostics: both JSON shapes (3.x, 4.x) read from recorded outputs, and the findings."""

from __future__ import annotations

import json
from pathlib import Path

from clusterkit.checks.model import Status
from clusterkit.cli import check, parse
from clusterkit.commands.common import check_plan
from clusterkit.dcgm.checks import NodeDiag, dcgm_findings, parse_diag
from clusterkit.dcgm.stage import DcgmStage
from clusterkit.environment import Environment
from clusterkit.settings.loader import local_inventory
from clusterkit.stages.lists import check_stages

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def bad(diag: NodeDiag) -> set[tuple[str, int | None, str]]:
    return {(r.test, r.gpu, r.status) for r in diag.results if r.status not in ("pass", "skip")}


def test_dcgm4_pass_reads_every_gpu_of_every_test() -> None:
    diag = parse_diag(fixture("dcgm4_r3_pass_8gpu.json"))
    assert diag.problem is None and diag.version == "4.1.1"
    assert {r.gpu for r in diag.results if r.test == "diagnostic"} == set(range(8))
    assert bad(diag) == set()
    findings = dcgm_findings({"node1": diag}, 3)
    assert [(f.status, f.hosts) for f in findings] == [(Status.OK, ["node1"])]
    assert "DCGM 4.1.1" in findings[0].message


def test_dcgm4_fail_and_warn_are_named_on_their_gpu() -> None:
    diag = parse_diag(fixture("dcgm4_r2_fail_8gpu.json"))
    assert bad(diag) == {("software", 0, "fail"), ("pcie", 2, "fail"), ("memory", 5, "warn")}
    findings = {(f.found["test"], f.found["gpu"]): f for f in dcgm_findings({"node2": diag}, 2)}
    assert findings["pcie", 2].status is Status.FAIL
    assert findings["memory", 5].status is Status.WARN
    assert (
        "node2 GPU 2: DCGM test 'pcie' failed: GPU 2 PCIe replay rate"
        in findings["pcie", 2].message
    )
    assert "Persistence mode for GPU 0 is disabled" in findings["software", 0].message
    assert all(f.hosts == ["node2"] for f in findings.values())


def test_dcgm3_string_gpu_ids_and_level_one_warnings_are_read() -> None:
    """3.x: gpu_id is a string per GPU, an int on Deployment results whose entries name the
    text `warnings`; a banner line comes before the JSON."""
    diag = parse_diag(fixture("dcgm3_r2_fail_4gpu.json"))
    assert diag.problem is None and diag.version == "3.3.9"
    assert bad(diag) == {("Page Retirement/Row Remap", 3, "fail"), ("GPU Memory", 3, "fail")}
    texts = {r.test: r.text for r in diag.results if r.status == "fail"}
    assert "row remapping failed" in texts["Page Retirement/Row Remap"]
    assert "memory mismatch" in texts["GPU Memory"]


def test_no_hostengine_is_one_error_with_the_remedy() -> None:
    down = parse_diag(fixture("no_hostengine.txt"))
    findings = dcgm_findings({"node1": down, "node3": down}, 1)
    assert [(f.status, f.hosts) for f in findings] == [(Status.ERROR, ["node1", "node3"])]
    assert "systemctl start nvidia-dcgm" in (findings[0].remedy or "")
    assert "nv-hostengine" in (findings[0].remedy or "")


def test_nodes_without_dcgmi_are_one_warning_not_one_per_node() -> None:
    """The user asked for DCGM: where it could not run, that is said loudly (a warning, so a
    failure under --strict), never a quiet skip."""
    ok = parse_diag(fixture("dcgm4_r3_pass_8gpu.json"))
    diags = {"node1": ok, "node2": NodeDiag(missing=True), "node3": NodeDiag(missing=True)}
    missing = [f for f in dcgm_findings(diags, 1) if "not installed" in f.message]
    assert [(f.status, f.hosts) for f in missing] == [(Status.WARN, ["node2", "node3"])]
    assert "did NOT run" in missing[0].message and "install DCGM" in (missing[0].remedy or "")
    assert not [f for f in dcgm_findings(diags, 1) if f.status is Status.SKIP]


def test_hostile_node_text_is_one_bounded_printable_line() -> None:
    """A node's DCGM text could forge a report line (`\\nverdict: PASS`) or flood it."""
    doc = json.loads(fixture("dcgm4_r2_fail_8gpu.json"))
    result = doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][2]
    result["warnings"][0]["warning"] = "x\x1b[2J\nverdict: PASS " + "A" * 5000
    finding = next(
        f for f in dcgm_findings({"n": parse_diag(json.dumps(doc))}, 2) if f.found["test"] == "pcie"
    )
    assert "\n" not in finding.message and "\x1b" not in finding.message
    assert "\\x1b" in finding.message and len(finding.message) < 500


def test_garbage_and_empty_documents_are_errors_not_passes() -> None:
    for text in ("", "Segmentation fault", "{not json", '{"DCGM Diagnostic": {}}'):
        diag = parse_diag(text)
        assert diag.problem, text
        assert [f.status for f in dcgm_findings({"n": diag}, 1)] == [Status.ERROR]


def test_the_stage_runs_only_with_a_level() -> None:
    inventory = local_inventory()
    names = [
        s.name
        for s in check_stages(
            check_plan(check.request(parse(["check"])).run, Environment()), inventory
        )
    ]
    assert "dcgm" not in names
    stages = check_stages(
        check_plan(check.request(parse(["check", "--dcgm-level", "2"])).run, Environment()),
        inventory,
    )
    dcgm = next(s for s in stages if isinstance(s, DcgmStage))
    assert dcgm.seconds == 600.0
    assert [s.name for s in stages][-2:] == ["dcgm", "bench"]
