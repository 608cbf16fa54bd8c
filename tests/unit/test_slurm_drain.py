"""Drain decisions of node-check --slurm-drain: never lift a drain someone else set."""

from __future__ import annotations

import pytest

from clusterkit.errors import UsageError
from clusterkit.slurm.drain import (
    REASON_LIMIT,
    NodeState,
    decide,
    drain_reason,
    local_node_name,
)


def test_a_failing_node_drains_with_the_check_ids() -> None:
    action = decide(NodeState("IDLE", ""), ["gpu.ecc", "compat.driver-cuda", "gpu.ecc"])
    assert (action.kind, action.reason) == ("drain", "clusterkit: compat.driver-cuda,gpu.ecc")


def test_an_admin_drain_is_left_alone_failing_or_passing() -> None:
    admin = NodeState("IDLE+DRAIN", "fan replaced, burn-in")
    assert decide(admin, ["gpu.ecc"]).kind == "keep"
    assert decide(admin, []).kind == "keep"


def test_our_drain_is_lifted_once_the_node_passes_and_updated_while_it_fails() -> None:
    ours = NodeState("IDLE+DRAIN", "clusterkit: gpu.ecc")
    assert decide(ours, []).kind == "resume"
    assert decide(ours, ["gpu.ecc"]).kind == "keep"
    changed = decide(ours, ["gpu.nvidia-smi"])
    assert (changed.kind, changed.reason) == ("drain", "clusterkit: gpu.nvidia-smi")


def test_a_healthy_undrained_node_is_untouched_and_long_reasons_are_cut() -> None:
    assert decide(NodeState("MIXED", ""), []).kind == "keep"
    assert len(drain_reason([f"check.{i:03d}" for i in range(100)])) == REASON_LIMIT


def test_the_node_name_from_slurm_must_be_one_node() -> None:
    assert local_node_name({"SLURMD_NODENAME": "gpu07"}) == "gpu07"
    for bad in ("gpu[01-64]", "gpu01,gpu02", "gpu01 gpu02", "../x", "a\x1b[2Jb"):
        with pytest.raises(UsageError, match=r"SLURMD_NODENAME: .* is not a single node name"):
            local_node_name({"SLURMD_NODENAME": bad})
