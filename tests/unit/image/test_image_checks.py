"""The image stage's verdicts over node reports shaped like clusterkit/node/image.py output."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from clusterkit.checks.model import Status
from clusterkit.image.checks import image_findings, size_bytes
from clusterkit.image.engine import chunk_error
from clusterkit.image.presence import ImagePresence, parse_presence
from clusterkit.inventory.model import ClusterSettings

IMAGE = "registry.example/train:2.5.1-cu124"
CONFIG = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "m" * 64
LABELS = {
    "io.clusterkit.spec-hash": "f" * 64,
    "io.clusterkit.torch": "2.5.1",
    "io.clusterkit.cuda": "12.4",
    "io.clusterkit.nccl": "2.21.5",
    "io.clusterkit.python": "3.10",
    "io.clusterkit.min-driver": "550.54.14",
    "io.clusterkit.driver-floor": "525",
    "io.clusterkit.run-args": json.dumps(["--ipc", "host", "--network", "host"]),
}
INSIDE = {
    "python": "3.10.12",
    "torch": "2.5.1",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "shm_bytes": 32 << 30,
    "memlock_soft": None,
    "memlock_hard": None,
    "nvidia_disable_require": None,
}


def node(**changes: Any) -> ImagePresence:
    """A node's report, checked as the stage checks it on arrival."""
    facts: dict[str, Any] = {
        "image": IMAGE,
        "present": True,
        "id": CONFIG,  # classic store: Id is the config digest
        "repo_digests": [f"registry.example/train@{MANIFEST}"],
        "labels": dict(LABELS),
        "env": {},
        "run_args": ["--ipc", "host", "--network", "host", "--ulimit", "memlock=-1:-1"],
        "run": {"ok": True, "facts": dict(INSIDE)},
    }
    for key, value in changes.items():
        facts[key] = value
    return parse_presence(facts)


def by_id(findings, id_):
    return [f for f in findings if f.id == id_]


def worst(findings, id_):
    return max((f.status for f in by_id(findings, id_)), key=lambda s: s.rank)


SETTINGS = ClusterSettings(image=IMAGE)
DRIVERS = {"a": "550.54.15", "b": "550.54.15", "c": "550.54.15"}


def test_identical_nodes_pass():
    findings = image_findings({h: node() for h in "abc"}, SETTINGS, DRIVERS)
    assert all(f.status in (Status.OK, Status.SKIP) for f in findings), findings


def test_missing_image_names_the_node():
    facts = {"a": node(), "b": node(), "c": {"image": IMAGE, "present": False}}
    findings = image_findings(facts, SETTINGS, DRIVERS)
    missing = by_id(findings, "image.present")[0]
    assert missing.status is Status.FAIL and missing.hosts == ["c"]


def test_different_image_under_the_same_tag_names_who_has_what():
    other = node(
        id="sha256:" + "d" * 64, repo_digests=[f"registry.example/train@sha256:{'e' * 64}"]
    )
    findings = image_findings({"a": node(), "b": node(), "c": other}, SETTINGS, DRIVERS)
    digest = by_id(findings, "image.digest")[0]
    assert digest.status is Status.FAIL and digest.hosts == ["c"]
    assert "a, b:" in digest.message and "c:" in digest.message


def test_classic_and_containerd_store_nodes_holding_the_same_push_agree():
    containerd = node(id=MANIFEST, repo_digests=[f"registry.example/train@{MANIFEST}"])
    findings = image_findings({"a": node(), "b": containerd}, SETTINGS, DRIVERS)
    assert worst(findings, "image.digest") is Status.OK


def test_locally_built_images_compare_by_id_when_never_pushed():
    one, two = node(repo_digests=[]), node(repo_digests=[], id="sha256:" + "9" * 64)
    findings = image_findings({"a": one, "b": two}, SETTINGS, DRIVERS)
    assert worst(findings, "image.digest") is Status.FAIL


def test_spec_hash_difference_is_reported():
    labels = dict(LABELS, **{"io.clusterkit.spec-hash": "0" * 64})
    facts = {"a": node(), "b": node(labels=labels), "c": node()}
    assert by_id(image_findings(facts, SETTINGS, DRIVERS), "image.spec-hash")[0].hosts == ["b"]


def test_versions_inside_the_container_must_match_the_labels():
    inside = dict(INSIDE, nccl="2.20.5")
    findings = image_findings({"a": node(run={"ok": True, "facts": inside})}, SETTINGS, DRIVERS)
    versions = by_id(findings, "image.versions")[0]
    assert versions.status is Status.FAIL and "nccl 2.20.5 (label 2.21.5)" in versions.message


@pytest.mark.parametrize(
    ("driver", "status"),
    [("550.54.15", None), ("535.104.05", Status.WARN), ("470.57.02", Status.FAIL)],
)
def test_driver_against_the_image_minimum(driver, status):
    findings = image_findings({"a": node()}, SETTINGS, {"a": driver})
    found = by_id(findings, "image.driver")
    assert (found[0].status if found else None) is status


@pytest.mark.parametrize(("available", "status"), [(True, Status.WARN), (False, Status.FAIL)])
def test_an_old_driver_running_the_image_through_forward_compatibility_warns(available, status):
    """An NGC-style image carries cuda-compat: torch inside saw CUDA, so it runs (warn)."""
    inside = dict(INSIDE, cuda_available=available)
    findings = image_findings({"a": node(run={"ok": True, "facts": inside})}, SETTINGS,
                              {"a": "470.57.02"})  # fmt: skip
    driver = by_id(findings, "image.driver")[0]
    assert driver.status is status
    assert ("forward compatibility" in driver.message) is available


def test_runtime_flags_that_break_nccl():
    inside = dict(INSIDE, shm_bytes=64 << 20, memlock_soft=8 << 20, nvidia_disable_require="1")
    bad = node(run_args=[], run={"ok": True, "facts": inside})
    findings = image_findings({"a": node(), "b": bad}, SETTINGS, DRIVERS)
    assert by_id(findings, "image.shm")[0].status is Status.FAIL
    assert by_id(findings, "image.memlock")[0].hosts == ["b"]
    assert by_id(findings, "image.network")[0].hosts == ["b"]
    assert by_id(findings, "image.disable-require")[0].hosts == ["b"]


def test_a_container_that_does_not_run_is_an_error_not_a_pass():
    broken = node(run={"ok": False, "error": "docker run exited 125: no such runtime"})
    findings = image_findings({"a": broken}, SETTINGS, DRIVERS)
    assert by_id(findings, "image.run")[0].status is Status.ERROR


def test_no_image_in_the_inventory_skips():
    findings = image_findings({}, ClusterSettings(), {})
    assert [f.status for f in findings] == [Status.SKIP]


def test_inspect_failure_is_an_error():
    findings = image_findings(
        {"a": node(), "b": {"present": None, "error": "Cannot connect to the Docker daemon"}},
        SETTINGS,
        DRIVERS,
    )
    assert by_id(findings, "image.inspect")[0].hosts == ["b"]


def test_in_band_push_errors_are_recognised():
    assert chunk_error({"errorDetail": {"message": "denied"}, "error": "denied"}) == "denied"
    assert chunk_error({"errorDetail": {"message": "unauthorized"}}) == "unauthorized"
    assert chunk_error({"status": "Pushed", "id": "abc"}) is None


def test_size_parsing():
    assert size_bytes("16g") == 16 << 30 and size_bytes("512m") == 512 << 20
    assert size_bytes("x") is None


def test_node_facts_are_not_mutated():
    facts = {"a": node()}
    before = copy.deepcopy(facts)
    image_findings(facts, SETTINGS, DRIVERS)
    assert facts == before


def test_rdma_nodes_need_dev_infiniband_in_the_run_arguments():
    from clusterkit.image.checks import rdma_findings

    ib = {"infiniband": {"devices": [{"name": "mlx5_0", "ports": [{"state": "ACTIVE"}]}]}}
    probe = {"a": ib, "b": ib, "c": {"infiniband": {"devices": []}}}
    with_device = node(run_args=[*node()["run_args"], "--device", "/dev/infiniband"])
    facts = {"a": node(), "b": with_device, "c": node()}
    (finding,) = rdma_findings(facts, probe)
    assert (finding.id, finding.status, finding.hosts) == ("image.infiniband", Status.WARN, ["a"])
    assert rdma_findings({"c": node()}, probe) == []  # no RDMA device: nothing to say
