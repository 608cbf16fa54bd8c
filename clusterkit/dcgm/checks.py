"""DCGM diagnostics (`dcgmi diag -r N -j`): each failing test on each GPU becomes a finding.

Two JSON shapes are read (tests/fixtures/dcgm/README.md has recorded examples):
DCGM 3.x puts everything under "DCGM GPU Diagnostic" and names a result's GPU with "gpu_id"
(or "gpu_ids", a comma list); DCGM 4.x uses "DCGM Diagnostic", "entity_group"/"entity_id",
a list of "info" lines and a "metadata" block with the version. Both nest the tests as
test_categories > tests > results, each result with a status (Pass, Fail, Warn, Skip) and
"warnings" entries that say why; from 3.1 on an entry also carries DCGM's error_severity, which
picks the action the finding recommends (a configuration fix is not an RMA).

Read strictly: only a Pass counts as tested and passed. A node where every test was skipped
tested nothing (a warning, never "every test passed"), and a status DCGM does not give, or an
entry that is no result at all, is an error: node text that cannot be read is no verdict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.escape import printable
from clusterkit.words import counted

# Seconds each level may run on a node before it is killed (DCGM's own guidance: level 1
# takes seconds, level 2 about two minutes, level 3 up to half an hour on 8 GPUs).
LEVEL_SECONDS = {1: 120.0, 2: 600.0, 3: 2700.0}
TEXT_LIMIT = 300  # characters of DCGM's explanation kept per finding
SKIPPED_SHOWN = 8  # skipped test names listed per node in the OK
NO_HOSTENGINE = ("unable to connect to host engine", "unable to establish a connection")
HOSTENGINE_REMEDY = (
    "start the DCGM host engine on the node: `systemctl start nvidia-dcgm` "
    "(or run `nv-hostengine`), then check again"
)
SEVERITY = {"fail": Status.FAIL, "warn": Status.WARN}
MISSING_REMEDY = (
    "install DCGM on the node (NVIDIA's datacenter-gpu-manager package, then `systemctl start "
    "nvidia-dcgm`), or leave out --dcgm-level / clusterkit.dcgm_level"
)
# Every status dcgmi writes (3.x Pass/Skip/Fail; 4.x adds Warn and Not Run), lower case; any
# other text, or none, is an unreadable result.
KNOWN_STATUSES = ("pass", "fail", "warn", "skip", "not run")
UNTESTED = ("skip", "not run")
UNREADABLE = "unreadable"  # the status given to an entry that is no result object
GENERAL_REMEDY = (
    "drain the node and run `dcgmi diag -r 3` on it; a GPU that keeps failing "
    "needs a reset (`nvidia-smi -r -i N`), a reboot or an RMA as DCGM's text says"
)
UNTESTED_REMEDY = (
    "find why DCGM skipped its tests (`dcgmi diag -r N -v` names the reason: a GPU model it "
    "does not allow a plugin on, a busy GPU, a missing CUDA library) and run it again; "
    'allow a gated plugin with `-p "PLUGIN.is_allowed=true"`'
)
# What to do per DCGM error severity (dcgmErrorSeverity_t in dcgmlib/dcgm_errors.h, listed in
# NVIDIA's "Diagnostic Errors" reference): 1 monitor, 2 isolate, 3 unknown, 4 triage,
# 5 config, 6 reset. The most urgent action of a result's entries wins.
SEVERITY_REMEDY = {
    2: "take the GPU out of service (DCGM: isolate it) and replace it (RMA, with "
    "`nvidia-bug-report.sh` attached)",
    6: "drain the node and reset the GPU (`nvidia-smi -r -i N`, or reboot), then run "
    "`dcgmi diag` again",
    4: GENERAL_REMEDY,
    3: GENERAL_REMEDY,
    5: "a configuration problem, not a GPU fault: fix the setting DCGM names (persistence "
    "mode: `nvidia-smi -pm 1`), then run `dcgmi diag` again",
    1: "keep the GPU in service and watch it: run `dcgmi diag` again after the next job",
}


@dataclass(frozen=True)
class TestResult:
    """One test's verdict on one GPU (gpu None: the test spoke for the whole node)."""

    test: str
    gpu: int | None
    status: str  # lower case: pass, fail, warn, skip, not run
    text: str
    severity: int | None = None  # DCGM's error_severity of its most urgent entry (3.1+)


@dataclass
class NodeDiag:
    """What `dcgmi diag` said on one node: results, or why there are none."""

    results: list[TestResult] = field(default_factory=list)
    version: str | None = None
    missing: bool = False  # dcgmi is not installed
    problem: str | None = None  # no result: the host engine is down, a timeout, bad output
    no_hostengine: bool = False


def parse_diag(stdout: str) -> NodeDiag:
    """The results of one `dcgmi diag -j` run; a document with no test in it is a problem."""
    start, end = stdout.find("{"), stdout.rfind("}")
    if start < 0 or end < start:
        return _unparsed(stdout)
    try:
        document = json.loads(stdout[start : end + 1])
    except ValueError:
        return _unparsed(stdout)
    if not isinstance(document, dict):
        return _unparsed(stdout)
    top = document.get("DCGM Diagnostic") or document.get("DCGM GPU Diagnostic") or {}
    top = top if isinstance(top, dict) else {}
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    version = (metadata or {}).get("version") or top.get("version")
    results = _all_results(top.get("test_categories"))
    runtime_error = top.get("runtime_error")
    diag = NodeDiag(results, str(version) if version else None)
    if runtime_error:
        diag.problem = f"DCGM runtime error: {_clean(runtime_error)}"
    elif not results:
        diag.problem = "dcgmi printed no test results"
    return diag


def _unparsed(stdout: str) -> NodeDiag:
    text = " ".join(stdout.split())
    down = any(marker in text.lower() for marker in NO_HOSTENGINE)
    why = "the DCGM host engine is not running" if down else "no JSON in dcgmi's output"
    return NodeDiag(problem=f"{why}: {_clean(text) or 'no output'}", no_hostengine=down)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _all_results(categories: Any) -> list[TestResult]:
    """Every result of test_categories > tests > results. A level that is not the shape DCGM
    writes (a category or test that is no object, a list that is no list) becomes an
    UNREADABLE result: never dropped, so it can never leave a pass behind."""
    if categories is None:
        return []
    if not isinstance(categories, list):
        return [TestResult("?", None, UNREADABLE, _clean(categories))]
    results = []
    for category in categories:
        tests = category.get("tests") if isinstance(category, dict) else category
        if not isinstance(tests, list):
            results.append(TestResult("?", None, UNREADABLE, _clean(category)))
            continue
        for test in tests:
            results += _test_results(test)
    return results


def _test_results(test: Any) -> list[TestResult]:
    """One TestResult per GPU of each result; a test or result that is no object, or names
    its GPU in no form DCGM writes, is kept as an UNREADABLE result."""
    if isinstance(test, dict) and "results" not in test and "test_summary" in test:
        test = {**test, "results": [test["test_summary"]]}  # 4.x: only the summary, the node's
    if not isinstance(test, dict) or not isinstance(test.get("results"), list):
        return [TestResult("?", None, UNREADABLE, _clean(test))]
    name = _clean(test.get("name") or "?")
    out = []
    for result in test["results"]:
        gpus = _gpus(result) if isinstance(result, dict) else None
        if not isinstance(result, dict) or gpus is None:
            out.append(TestResult(name, None, UNREADABLE, _clean(result)))
            continue
        raw = result.get("status")
        status = _clean(raw).lower()[:40] if isinstance(raw, str) else UNREADABLE
        text = "; ".join(_texts(result.get("warnings")) + _texts(result.get("info")))
        severity = _severity(result.get("warnings"))
        for gpu in gpus:
            out.append(TestResult(name, gpu, status, _clean(text), severity))
    return out


def _severity(entries: Any) -> int | None:
    """The most urgent error_severity among a result's warning entries (None: none given);
    anything but a JSON integer is node text and is ignored."""
    found = [entry.get("error_severity") for entry in _list(entries) if isinstance(entry, dict)]
    levels = {level for level in found if type(level) is int}
    return next((level for level in SEVERITY_REMEDY if level in levels), None)


def _gpus(result: Mapping[str, Any]) -> list[int | None] | None:
    """The GPU indexes a result is about: 4.x entity_id (GPU group), 3.x gpu_id or gpu_ids;
    [None] for a result about the node; None when an id is given in no form DCGM writes."""
    if "entity_id" in result:
        group = result.get("entity_group")
        if group not in (None, "GPU"):
            return [None]
        index = _index(result["entity_id"])
        return None if index is None else [index]
    raw = result.get("gpu_id", result.get("gpu_ids"))
    if raw is None:
        return [None]
    parts = str(raw).split(",") if isinstance(raw, (int, str)) and raw is not True else []
    indexes = [_index(part) for part in parts]
    return None if not indexes or None in indexes else list(indexes)


def _index(value: Any) -> int | None:
    text = str(value).strip()
    return int(text) if text.isdigit() and len(text) < 6 else None


def _texts(value: Any) -> list[str]:
    """DCGM's explanations: a string, a list of strings, or warning entries (3.x level-one
    entries name the text "warnings", the rest "warning")."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    texts: list[str] = []
    for entry in _list(value):
        if isinstance(entry, dict):
            entry = entry.get("warning") or entry.get("warnings") or ""
        if isinstance(entry, str) and entry.strip():
            texts.append(entry)
    return texts


def _clean(text: Any) -> str:
    """Node text made one printable line of bounded length."""
    line = printable(" ".join(str(text).split()))
    return line if len(line) <= TEXT_LIMIT else line[: TEXT_LIMIT - 3] + "..."


def dcgm_findings(diags: Mapping[str, NodeDiag], level: int) -> list[Finding]:
    """dcgm.diag: one finding per failing or warning test on each GPU; one warning for the
    nodes without dcgmi (the level was asked for and did not run), one error for those whose
    host engine is down, one per other node
    that gave no result or a status DCGM does not write; a warning for the nodes where every
    test was skipped (nothing tested); OK over the nodes where every test ran and passed."""
    findings = [_result_finding(host, level, r) for host, d in diags.items() for r in _bad(d)]
    findings += _strict_findings(diags, level)
    missing = [host for host, d in diags.items() if d.missing]
    down = {host: d.problem for host, d in diags.items() if d.no_hostengine}
    if missing:  # asked for and not run: said loudly, a failure under --strict
        message = (
            f"DCGM diagnostic level {level} did NOT run: dcgmi is not installed on "
            f"{counted(len(missing), 'node')}: {', '.join(missing)}"
        )
        findings.append(
            Finding("dcgm.diag", Status.WARN, message, hosts=missing, remedy=MISSING_REMEDY)
        )
    if down:
        message = "the DCGM host engine (nv-hostengine) is not running on " + ", ".join(down)
        findings.append(
            Finding(
                "dcgm.diag", Status.ERROR, message, list(down), found=down, remedy=HOSTENGINE_REMEDY
            )
        )
    for host, diag in diags.items():
        if diag.problem and not diag.no_hostengine and not diag.missing:
            message = f"{host}: dcgmi diag -r {level} gave no verdict: {diag.problem}"
            findings.append(Finding("dcgm.diag", Status.ERROR, message, [host]))
    passed = [host for host, d in diags.items() if _passed(d)]
    if passed and not any(f.status in (Status.FAIL, Status.WARN) for f in findings):
        versions = sorted({d.version for h, d in diags.items() if h in passed and d.version})
        seen = f" (DCGM {', '.join(versions)})" if versions else ""
        message = f"dcgmi diag -r {level}: every test passed on {', '.join(passed)}{seen}"
        findings.append(Finding("dcgm.diag", Status.OK, message + _skipped(diags, passed), passed))
    return findings


def _skipped(diags: Mapping[str, NodeDiag], hosts: list[str]) -> str:
    """'; skipped: memory, pcie on node1': the tests DCGM did not run (a plugin it does not
    allow on that GPU model) are named, so an OK never hides a test that never ran."""
    parts = []
    for host in hosts:
        tests = sorted({r.test for r in diags[host].results if r.status in ("skip", "not run")})
        if tests:
            more = f" and {len(tests) - SKIPPED_SHOWN} more" if len(tests) > SKIPPED_SHOWN else ""
            parts.append(f"{', '.join(tests[:SKIPPED_SHOWN])}{more} on {host}")
    return f"; skipped: {'; '.join(parts)}" if parts else ""


def _bad(diag: NodeDiag) -> list[TestResult]:
    return [r for r in diag.results if r.status in SEVERITY]


def _unknown(diag: NodeDiag) -> list[TestResult]:
    """Results whose status is none DCGM writes (garbage, missing, not a string)."""
    return [r for r in diag.results if r.status not in KNOWN_STATUSES]


def _nothing_tested(diag: NodeDiag) -> bool:
    """Results came back, and every one of them is a Skip or Not Run."""
    return bool(diag.results) and all(r.status in UNTESTED for r in diag.results)


def _passed(diag: NodeDiag) -> bool:
    """Every result readable, none failing or warning, and at least one test that ran."""
    if diag.missing or diag.problem or _bad(diag) or _unknown(diag):
        return False
    return any(r.status == "pass" for r in diag.results)


def _strict_findings(diags: Mapping[str, NodeDiag], level: int) -> list[Finding]:
    """An error per node with unreadable results; one warning over the nodes that ran dcgmi
    and got only skips back (nothing was tested there)."""
    findings = [
        _unreadable_finding(host, level, unknown)
        for host, diag in diags.items()
        if (unknown := _unknown(diag)) and not diag.problem
    ]
    untested = [
        host
        for host, diag in diags.items()
        if not (diag.missing or diag.problem or _unknown(diag)) and _nothing_tested(diag)
    ]
    if untested:
        message = (
            f"dcgmi diag -r {level} tested nothing on {', '.join(untested)}: every test was "
            f"skipped{_skipped(diags, untested)}"
        )
        found = "every test skipped"
        warn = Finding("dcgm.diag", Status.WARN, message, untested, "Pass", found, UNTESTED_REMEDY)
        findings.append(warn)
    return findings


def _unreadable_finding(host: str, level: int, unknown: list[TestResult]) -> Finding:
    """Results with no DCGM status: an error naming each (bounded), never a pass."""
    shown = ", ".join(
        f"{r.test!r} {'GPU ' + str(r.gpu) if r.gpu is not None else 'node'}: "
        + (r.status if r.status == UNREADABLE else repr(r.status))
        for r in unknown[:SKIPPED_SHOWN]
    )
    more = f" and {len(unknown) - SKIPPED_SHOWN} more" if len(unknown) > SKIPPED_SHOWN else ""
    message = (
        f"{host}: dcgmi diag -r {level} gave results with no DCGM status (Pass, Fail, Warn, "
        f"Skip, Not Run), which are no verdict: {_clean(shown)}{more}"
    )
    found = {"unreadable": len(unknown)}
    return Finding("dcgm.diag", Status.ERROR, message, [host], found=found, remedy=GENERAL_REMEDY)


def _result_finding(host: str, level: int, result: TestResult) -> Finding:
    where = f"GPU {result.gpu}" if result.gpu is not None else "the node"
    verdict = "failed" if result.status == "fail" else "warned"
    why = f": {result.text}" if result.text else ""
    return Finding(
        "dcgm.diag",
        SEVERITY[result.status],
        f"{host} {where}: DCGM test {result.test!r} {verdict}{why}",
        [host],
        expected="Pass",
        found={
            "test": result.test,
            "gpu": result.gpu,
            "status": result.status,
            "level": level,
            "info": result.text,
        },
        remedy=_remedy(result),
    )


def _remedy(result: TestResult) -> str:
    """The action for the result's DCGM severity, with the GPU's index where one is known."""
    remedy = SEVERITY_REMEDY.get(result.severity or 0, GENERAL_REMEDY)
    return remedy if result.gpu is None else remedy.replace("-i N", f"-i {result.gpu}")
