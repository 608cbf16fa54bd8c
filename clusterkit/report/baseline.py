"""The baseline file: `check --save-baseline FILE` writes a run's known-good state, `check
--baseline FILE` reads it back to name the drift (checks/baseline.py compares).

JSON with sorted keys and one value a line, so two baselines diff line by line in review;
written like every report file (safefiles.write_file: whole or not at all, never through a
planted link). A file of another baseline or probe version is refused, not half-read: its
keys may mean something else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone

from clusterkit import __version__
from clusterkit.checks.baseline import (
    BASELINE_VERSION,
    Baseline,
    drift_findings,
    snapshot,
    typed_baseline,
)
from clusterkit.checks.model import Finding
from clusterkit.errors import UsageError
from clusterkit.escape import printable
from clusterkit.facts import PROBE_VERSION, HostFacts
from clusterkit.inventory.model import Expectations
from clusterkit.report.model import Report
from clusterkit.safefiles import why, write_file
from clusterkit.shape import shape_problem

MAX_BYTES = 16 * 2**20  # a baseline of thousands of nodes is a few MB


def report_facts(report: Report) -> dict[str, HostFacts]:
    """The facts of every host that was probed."""
    return {host: facts for host, entry in report.hosts.items() if (facts := entry.get("facts"))}


def bus_bandwidth(details: Mapping[str, object]) -> dict[str, dict[int, float]]:
    """The bench's bus bandwidth (GB/s, out of place, as nccl-tests prints it) per collective
    and size, from details.bench.result; empty when the bench did not run or failed."""
    bench = details.get("bench")
    result = bench.get("result") if isinstance(bench, dict) else None
    if not isinstance(result, dict) or "error" in result:
        return {}
    measured: dict[str, dict[int, float]] = {}
    for one in [result, *(result.get("more_collectives") or [])]:
        op = str(one["config"]["collective"]).removesuffix("_perf")
        for row in one.get("results") or []:
            place = row.get("out_of_place") or row.get("in_place")
            if place and isinstance(place.get("bus_bw"), (int, float)):
                measured.setdefault(op, {})[int(row["size"])] = float(place["bus_bw"])
    return measured


def baseline_drift(report: Report, baseline: Baseline, expect: Expectations) -> list[Finding]:
    """The run's drift from `baseline` (checks/baseline.py), as findings."""
    return drift_findings(baseline, report_facts(report), bus_bandwidth(report.details), expect)


def save_baseline(path: str, report: Report) -> None:
    """Write the report's state as the baseline at `path` (UsageError: cannot write)."""
    today = datetime.now(timezone.utc).date().isoformat()
    content = snapshot(
        report_facts(report),
        bus_bandwidth(report.details),
        taken=today,
        versions=(__version__, PROBE_VERSION),
    )
    try:
        write_file(path, json.dumps(content, indent=2, sort_keys=True) + "\n")
    except OSError as error:
        raise UsageError(
            f"--save-baseline {path}: cannot write the baseline: {why(error, path)}"
        ) from None


def load_baseline(path: str) -> Baseline:
    """The baseline at `path`, checked: UsageError (one line) for an unreadable file, one
    that is not a baseline, or one written by another baseline or probe version."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--baseline {path}: cannot read it: {why(error, path)}") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"--baseline {path}: more than {MAX_BYTES >> 20} MiB: not a baseline")
    try:
        raw = json.loads(data)
    except ValueError as error:
        raise UsageError(f"--baseline {path}: not JSON ({error})") from None
    problem = baseline_problem(raw)
    if problem:
        raise UsageError(f"--baseline {path}: {problem}")
    return typed_baseline(raw)


def baseline_problem(raw: object) -> str | None:
    """Why `raw` is no baseline this version reads, or None."""
    if not isinstance(raw, dict) or "baseline_version" not in raw:
        return "not a clusterkit baseline (no baseline_version)"
    versions = (raw.get("baseline_version"), raw.get("probe_version"))
    if versions != (BASELINE_VERSION, PROBE_VERSION):
        written = printable(str(raw.get("clusterkit_version", "?"))[:40])
        return (
            f"written by another version (clusterkit {written}, baseline version "
            f"{_shown(versions[0])}, probe version {_shown(versions[1])}); this one reads "
            f"baseline version {BASELINE_VERSION}, probe version {PROBE_VERSION}: save a new "
            "baseline with it"
        )
    problem = shape_problem(raw, Baseline, "baseline")
    return f"not a baseline of this version: {problem}" if problem else None


def _shown(value: object) -> str:
    return printable(repr(value)[:20])
