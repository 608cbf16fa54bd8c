"""The Prometheus writer over recorded facts: real `nvidia-smi -q` recordings (through the
probe's own parser), a real kernel log, a real bench result; its output checked by the real
`promtool check metrics` (Debian package prometheus) and read back by the exposition format's
rules. Hostile node text stays inside its label."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.facts import HostEntry, parse_facts
from clusterkit.node.kernellog import parse_kernel_log
from clusterkit.report.model import Report
from clusterkit.report.prometheus import LABEL_MAX, METRICS, label_value, render_prometheus
from tests.support.cli import run_cli
from tests.unit.checks.test_gpu_health_recordings import A10_PENDING, TITAN_V, facts

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
DOCS = Path(__file__).resolve().parents[3] / "docs"
SAMPLE = re.compile(r'^([a-z_]+)(?:\{((?:[a-z_]+="(?:[^"\\\n]|\\.)*",?)*)\})? (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\\n]|\\.)*)"')
NOW = 1_790_000_000.0


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(name, labels) -> value of every sample line, each series once (a scrape refuses a
    series written twice); every line is a comment or a sample."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = frozenset(LABEL.findall(match[2] or ""))
        key = (match[1], labels)
        assert key not in found, f"series twice: {line!r}"
        found[key] = float(match[3])
    return found


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool missing (apt-get install prometheus; scripts/test.sh does)")
    return subprocess.run(
        [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


def recorded_report() -> Report:
    """Two GPU nodes from real recordings (an A10 with a row remap pending, a Titan V), one
    with a real kernel log of Xid 62 then Xid 45s, and a real 3-rank bench result."""
    hosts = facts(a10=A10_PENDING, titan=TITAN_V)
    log = (FIXTURES / "kernel-log" / "xid45-after-62.txt").read_text()
    hosts["a10"]["kernel_log"] = parse_kernel_log(log)
    bench = json.loads((FIXTURES / "bench" / "result-gloo-3ranks.json").read_text())
    findings = [
        Finding("gpu.row-remap", Status.FAIL, "GPU 0 row remap pending", hosts=["a10"]),
        Finding("gpu.row-remap", Status.OK, "ok", hosts=["a10", "titan"]),
        Finding("bench.busbw", Status.SKIP, "skipped"),
    ]
    return Report(
        command="check",
        inventory="inventory.yaml",
        findings=findings,
        hosts={
            h: HostEntry(address=h, reachable=True, facts=parse_facts(f)) for h, f in hosts.items()
        },
        details={"bench": {"result": bench}},
        seconds=2.5,
    )


def test_recorded_facts_become_per_gpu_series_that_promtool_accepts() -> None:
    text = render_prometheus(recorded_report(), now=NOW)
    found = samples(text)
    # the worst status of a check on a host; a finding about no host has host=""
    assert value(found, "clusterkit_check_status", check="gpu.row-remap", host="a10") == 4
    assert value(found, "clusterkit_check_status", check="gpu.row-remap", host="titan") == 0
    assert value(found, "clusterkit_check_status", check="bench.busbw", host="") == 1
    assert value(found, "clusterkit_verdict", command="check", verdict="fail") == 1
    assert value(found, "clusterkit_verdict", command="check", verdict="pass") == 0
    assert value(found, "clusterkit_verdict_timestamp_seconds", command="check") == NOW
    # the A10 recording: Uncorrectable Error 4, Pending Yes, link x16, Idle the only reason
    a10 = {"host": "a10", "gpu": "0"}
    assert value(found, "clusterkit_gpu_remapped_rows", cause="uncorrectable", **a10) == 4
    assert value(found, "clusterkit_gpu_remapped_rows_pending", **a10) == 1
    assert value(found, "clusterkit_gpu_pcie_link_width_lanes", **a10) == 16
    reason = "clusterkit_gpu_clock_event_reason_active"
    assert value(found, reason, reason="hw_slowdown", **a10) == 0
    # Xid 62 once and its Xid 45 cleanups, counted per code on the GPU's bus
    xid = {"host": "a10", "gpu": "", "pci": "0000:19:00"}
    assert value(found, "clusterkit_gpu_xid_events", code="62", **xid) == 1
    assert value(found, "clusterkit_gpu_xid_events", code="45", **xid) >= 2
    # the bench's rows: GB/s as bytes per second, per size
    bench = json.loads((FIXTURES / "bench" / "result-gloo-3ranks.json").read_text())
    row = bench["results"][-1]
    busbw = value(
        found,
        "clusterkit_bench_bus_bandwidth_bytes_per_second",
        collective="all_reduce",
        size_bytes=str(row["size"]),
    )
    assert busbw == pytest.approx(row["out_of_place"]["bus_bw"] * 1e9)
    checked = promtool(text)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


HOSTILE = 'n1"} 1\nclusterkit_verdict{verdict="pass"} 1\n\\' + "x" * 500


def test_hostile_node_text_stays_inside_its_label_bounded() -> None:
    """A GPU index, a Xid's bus id and a host name that try to end the label and write a
    sample of their own: escaped, cut, one line; promtool reads the same series."""
    report = recorded_report()
    host_facts = report.hosts["a10"]["facts"]
    assert host_facts is not None
    host_facts["gpus"]["devices"][0]["index"] = HOSTILE
    report.hosts[HOSTILE] = report.hosts.pop("a10")
    report.findings.append(Finding("gpu.xid", Status.FAIL, "x", hosts=[HOSTILE]))
    text = render_prometheus(report, now=NOW)
    found = samples(text)
    assert ("clusterkit_verdict", frozenset({("verdict", "pass")})) not in found
    assert not any(line.startswith("clusterkit_verdict{verdict=") for line in text.splitlines())
    assert value(found, "clusterkit_verdict", command="check", verdict="pass") == 0
    labels = [v for key in found for _, v in key[1]]
    assert all(len(v) <= 2 * LABEL_MAX for v in labels)
    assert label_value(HOSTILE).startswith('n1\\"} 1\\\\n') and len(label_value(HOSTILE)) < 300
    assert promtool(text).returncode == 0


def test_a_node_listing_two_gpus_under_one_index_still_writes_each_series_once() -> None:
    report = recorded_report()
    host_facts = report.hosts["a10"]["facts"]
    assert host_facts is not None
    devices = host_facts["gpus"]["devices"]
    devices.append(dict(devices[0]))  # type: ignore[arg-type]
    samples(render_prometheus(report, now=NOW))  # asserts no series twice


# A real run's details.bench.per_node and .find_slow: `clusterkit bench INV -b 1M -e 4M
# --per-node --nproc-per-node 2 --find-slow --format json` on the 4-node namespace cluster
# (tests/support/netcluster.py, gloo), the two sections kept as written.
ROUNDS = FIXTURES / "bench" / "per-node-find-slow-4nodes.json"


def test_every_pair_of_find_slow_and_every_node_alone_is_a_series() -> None:
    report = recorded_report()
    recorded = json.loads(ROUNDS.read_text())
    report.details["bench"].update(recorded)
    found = samples(render_prometheus(report, now=NOW))
    size = str(recorded["find_slow"]["bytes"])
    groups = [g for r in recorded["find_slow"]["rounds"] for g in r["groups"]]
    assert len(groups) == 6  # 4 nodes in pairs, 3 rounds: every pair once
    for entry in recorded["find_slow"]["rounds"]:
        for group in entry["groups"]:
            series = value(
                found,
                "clusterkit_bench_group_bus_bandwidth_bytes_per_second",
                round=str(entry["round"]),
                hosts=",".join(group["hosts"]),
                size_bytes=size,
            )
            assert series == pytest.approx(group["busbw"] * 1e9)
    for host, node in recorded["per_node"]["nodes"].items():
        name = "clusterkit_bench_node_bus_bandwidth_bytes_per_second"
        assert value(found, name, host=host, size_bytes=size) == pytest.approx(node["busbw"] * 1e9)


def test_every_metric_is_documented_with_its_help() -> None:
    text = (DOCS / "report.md").read_text()
    assert all(f"`{name}`" in text for name in METRICS)
    assert all(name.startswith("clusterkit_") for name in METRICS)


def test_check_and_node_check_write_prometheus_on_this_machine() -> None:
    """The real commands on this machine, through the CLI: the text is the exposition
    format (promtool reads it), the verdict series agrees with the exit status."""
    for argv in (["check", "--skip", "network,bench,image"], ["node-check"]):
        done = run_cli([*argv, "--format", "prometheus"], timeout=120)
        verdict = {0: "pass", 1: "fail", 3: "incomplete"}[done.status]
        found = samples(done.stdout)
        command = argv[0]
        assert value(found, "clusterkit_verdict", command=command, verdict=verdict) == 1
        assert promtool(done.stdout).returncode == 0
