"""Drift from a known-good baseline (checks/baseline.py) over recorded facts
(tests/fixtures/facts/healthy-h100.json, README.md there), and the file's round trip and
refusals (report/baseline.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.baseline import (
    CHECK,
    Baseline,
    drift_findings,
    size_words,
    snapshot,
)
from clusterkit.checks.model import Finding, Status
from clusterkit.errors import UsageError
from clusterkit.facts import HostEntry, HostFacts, parse_facts
from clusterkit.inventory.model import Expectations
from clusterkit.report.baseline import bus_bandwidth, load_baseline, save_baseline
from clusterkit.report.model import Report
from tests.support.cli import run_cli

FACTS = Path(__file__).parent.parent.parent / "fixtures" / "facts"
BENCH = Path(__file__).parent.parent.parent / "fixtures" / "bench" / "result-gloo-3ranks.json"
GIB = 2**30
TAKEN = "2026-11-20"


def cluster(count: int = 4, **edits: Any) -> dict[str, HostFacts]:
    """`count` nodes of the recorded healthy H100 node (eth0 read as hardware)."""
    recorded = json.loads((FACTS / "healthy-h100.json").read_text())
    recorded["network"]["interfaces"]["eth0"]["kind"] = "device"
    return {f"node{n}": parse_facts(copy.deepcopy(recorded)) for n in range(1, count + 1)}


def baseline_of(facts: dict[str, HostFacts], bandwidth: Any = None) -> Baseline:
    return snapshot(facts, bandwidth or {}, taken=TAKEN, versions=("0.1.0", 2))


def drift(before: Baseline, facts: dict[str, HostFacts], **kwargs: Any) -> list[Finding]:
    bandwidth = kwargs.pop("bandwidth", {})
    return drift_findings(before, facts, bandwidth, Expectations(**kwargs))


def set_driver(facts: dict[str, HostFacts], driver: str, *hosts: str) -> None:
    for host in hosts or list(facts):
        facts[host]["gpus"]["driver"] = driver


def test_nothing_moved_is_one_ok() -> None:
    facts = cluster()
    (only,) = drift(baseline_of(facts), facts)
    assert only.status is Status.OK and only.id == CHECK
    assert only.message == f"no drift on 4 nodes since the baseline of {TAKEN}"


def test_an_upgrade_on_every_node_is_named_though_parity_holds() -> None:
    facts = cluster()
    before = baseline_of(facts)
    set_driver(facts, "560.35.03")
    (change,) = drift(before, facts)
    assert change.status is Status.WARN
    assert change.message == (
        f"driver 550.54.15 -> 560.35.03 on all 4 nodes since the baseline of {TAKEN}"
    )
    assert change.hosts == ["node1", "node2", "node3", "node4"]
    assert change.expected == "550.54.15" and change.found["node3"] == "560.35.03"


def test_a_change_on_some_nodes_names_them_and_each_field_separately() -> None:
    facts = cluster()
    before = baseline_of(facts)
    set_driver(facts, "560.35.03", "node2")
    facts["node3"]["network"]["interfaces"]["eth0"]["mtu"] = 9000
    facts["node4"]["gpus"]["devices"][0]["vbios_version"] = "96.00.99.00.01"
    messages = sorted(f.message for f in drift(before, facts))
    assert messages == [
        f"GPU VBIOS none -> 96.00.99.00.01 on node4 since the baseline of {TAKEN}",
        f"MTU of eth0 1500 -> 9000 on node3 since the baseline of {TAKEN}",
        f"driver 550.54.15 -> 560.35.03 on node2 since the baseline of {TAKEN}",
    ]


def test_a_pin_decides_the_drift_of_what_it_pins() -> None:
    facts = cluster()
    before = baseline_of(facts)
    set_driver(facts, "560.35.03")
    (met,) = drift(before, facts, driver=">=560")
    assert (
        met.status is Status.OK and "pinned by expect.driver >=560, which it meets" in met.message
    )
    (missed,) = drift(before, facts, driver="550")
    assert missed.status is Status.FAIL and "which it does not meet" in missed.message


def test_a_new_node_and_a_bandwidth_drop_are_findings() -> None:
    facts = cluster(3)
    before = baseline_of(facts, {"all_reduce": {GIB: 190.0, 2**20: 20.0}})
    facts["node9"] = cluster(1)["node1"]
    found = drift(before, facts, bandwidth={"all_reduce": {GIB: 155.8, 2**20: 19.0}})
    by_stage = {f.stage: f for f in found}
    assert (
        by_stage["static"].hosts == ["node9"]
        and "not in the baseline" in by_stage["static"].message
    )
    drop = by_stage["bench"]
    assert drop.status is Status.WARN and drop.message.startswith(
        "all_reduce bus bandwidth down 18% at 1 GiB (190 -> 156 GB/s)"
    )
    assert len(found) == 2  # 5% less at 1 MiB is noise, not drift


def test_hostile_values_are_escaped_and_bounded_in_the_message() -> None:
    facts = cluster(1)
    before = baseline_of(facts)
    set_driver(facts, "560\n\x1b[2Jverdict: PASS" + "9" * 500)
    (change,) = drift(before, facts)
    assert "\n" not in change.message and "\x1b" not in change.message
    assert len(change.message) < 200


def test_size_words() -> None:
    assert [size_words(s) for s in (GIB, 16 * 2**20, 512)] == ["1 GiB", "16 MiB", "512 B"]


def report_of(facts: dict[str, HostFacts], details: dict[str, Any] | None = None) -> Report:
    hosts = {h: HostEntry(address=h, reachable=True, facts=f) for h, f in facts.items()}
    return Report("check", "inv.yaml", [], hosts, details=details or {})


def test_the_file_round_trips_sorted_and_diffable(tmp_path: Path) -> None:
    result = json.loads(BENCH.read_text())
    report = report_of(cluster(2), {"bench": {"result": result}})
    path = tmp_path / "baseline.json"
    save_baseline(str(path), report)
    text = path.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    loaded = load_baseline(str(path))
    sizes = loaded["bus_bandwidth_gbps"]["all_reduce"]
    assert sizes[str(result["results"][-1]["size"])] == round(
        result["results"][-1]["out_of_place"]["bus_bw"], 3
    )
    assert loaded["hosts"]["node1"]["driver"] == "550.54.15"
    assert loaded["hosts"]["node1"]["interfaces"] == {"eth0": 1500}
    assert bus_bandwidth({"bench": {"result": {"error": {"kind": "join"}}}}) == {}


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"baseline_version": 2}, "written by another version"),
        ({"probe_version": 1}, "written by another version"),
        ({"hosts": {"node1": {"driver": 550}}}, "baseline.hosts.node1.driver"),
        ({"extra": 1}, "unknown key 'extra'"),
    ],
)
def test_a_file_of_another_version_or_shape_is_refused_in_one_line(
    tmp_path: Path, edit: dict[str, Any], said: str
) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(str(path), report_of(cluster(1)))
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    with pytest.raises(UsageError) as error:
        load_baseline(str(path))
    assert said in str(error.value) and "\n" not in str(error.value)


def test_not_json_or_missing_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text("driver: 550\n")
    for name, said in (("b.json", "not JSON"), ("missing.json", "cannot read it")):
        with pytest.raises(UsageError, match=said):
            load_baseline(str(tmp_path / name))


def test_the_cli_refuses_a_baseline_of_another_version_before_any_host(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"baseline_version": 0, "clusterkit_version": "0.0.1"}))
    done = run_cli(["check", "--baseline", str(path)], timeout=60)
    assert done.status == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "written by another version" in done.stderr
    assert "connect:" not in done.stderr  # refused before any host was contacted


def test_only_a_passing_run_is_saved_as_the_baseline(tmp_path: Path) -> None:
    """This machine, with --strict: whatever its verdict, the file exists only for a pass."""
    path = tmp_path / "baseline.json"
    argv = ["check", "--skip", "network,bench,image", "--strict", "-q", "--save-baseline"]
    done = run_cli([*argv, str(path)], timeout=120)
    assert done.status in (0, 1)
    assert path.exists() == (done.status == 0)
    if done.status:
        assert "not saved: the verdict is fail" in done.stderr
