"""DCGM diagnostics (`dcgmi diag -r N -j`): each failing test on each GPU becomes a finding.

Two JSON shapes are read (tests/fixtures/dcgm/README.md has recorded examples):
DCGM 3.x puts everything under "DCGM GPU Diagnostic" and names a result's GPU with "gpu_id"
(or "gpu_ids", a comma list); DCGM 4.x uses "DCGM Diagnostic", "entity_group"/"entity_id",
a list of "info" lines and a "metadata" block with the version. Both nest the tests as
test_categories > tests > results, each result with a status (Pass, Fail, Warn, Skip) and
"warnings" entries that say why; from 3.1 on an entry also carries DCGM's error_severity, which
picks the action the finding recommends (a configuration fix is not an RMA).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.report.escape import printable
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
GENERAL_REMEDY = (
    "drain the node and run `dcgmi diag -r 3` on it; a GPU that keeps failing "
    "needs a reset (`nvidia-smi -r -i N`), a reboot or an RMA as DCGM's text says"
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
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    version = (metadata or {}).get("version") or (top.get("version") if top else None)
    results = [
        result
        for category in _list(top.get("test_categories") if isinstance(top, dict) else None)
        for test in _list(category.get("tests") if isinstance(category, dict) else None)
        for result in _test_results(test)
    ]
    runtime_error = top.get("runtime_error") if isinstance(top, dict) else None
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


def _test_results(test: Any) -> list[TestResult]:
    if not isinstance(test, dict):
        return []
    name = _clean(test.get("name") or "?")
    out = []
    for result in _list(test.get("results")):
        if not isinstance(result, dict):
            continue
        status = str(result.get("status") or "").strip().lower()
        text = "; ".join(_texts(result.get("warnings")) + _texts(result.get("info")))
        severity = _severity(result.get("warnings"))
        for gpu in _gpus(result):
            out.append(TestResult(name, gpu, status, _clean(text), severity))
    return out


def _severity(entries: Any) -> int | None:
    """The most urgent error_severity among a result's warning entries (None: none given);
    anything but a JSON integer is node text and is ignored."""
    found = [entry.get("error_severity") for entry in _list(entries) if isinstance(entry, dict)]
    levels = {level for level in found if type(level) is int}
    return next((level for level in SEVERITY_REMEDY if level in levels), None)


def _gpus(result: Mapping[str, Any]) -> list[int | None]:
    """The GPU indexes a result is about: 4.x entity_id (GPU group), 3.x gpu_id or gpu_ids."""
    if "entity_id" in result:
        group = result.get("entity_group")
        return [_index(result["entity_id"])] if group in (None, "GPU") else [None]
    raw = result.get("gpu_id", result.get("gpu_ids"))
    if raw is None:
        return [None]
    parts = str(raw).split(",") if not isinstance(raw, int) else [raw]
    return [_index(part) for part in parts] or [None]


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
    """dcgm.diag: one finding per failing or warning test on each GPU; one skip for the
    nodes without dcgmi, one error for those whose host engine is down, one per other node
    that gave no result; OK over the nodes where every test passed."""
    findings = [_result_finding(host, level, r) for host, d in diags.items() for r in _bad(d)]
    missing = [host for host, d in diags.items() if d.missing]
    down = {host: d.problem for host, d in diags.items() if d.no_hostengine}
    if missing:
        message = f"dcgmi is not installed on {counted(len(missing), 'node')}: {', '.join(missing)}"
        findings.append(Finding("dcgm.diag", Status.SKIP, message, hosts=missing))
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
    passed = [host for host, d in diags.items() if not (d.missing or d.problem or _bad(d))]
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
