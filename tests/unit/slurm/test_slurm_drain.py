"""Drain decisions of node-check --slurm-drain: never lift a drain someone else set."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.errors import ExternalToolError, UsageError
from clusterkit.slurm.drain import (
    REASON_LIMIT,
    NodeState,
    decide,
    drain_reason,
    local_node_name,
    node_state,
    parse_node_state,
)

SCONTROL = Path(__file__).parents[2] / "fixtures" / "scontrol"


def recorded(name: str) -> NodeState:
    """`scontrol show node node1 -o` as Slurm 22.05 printed it (tests/fixtures/scontrol)."""
    return parse_node_state((SCONTROL / f"show-node-{name}.txt").read_text(), "node1")


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


def test_recorded_states_and_reasons_are_read_whole() -> None:
    assert recorded("idle") == NodeState("IDLE", "")
    xid = recorded("drained-xid")
    assert xid == NodeState(
        "IDLE+DRAIN", "clusterkit: gpu.xid; GPU 1 0000:38:00 Xid 79 needs reboot"
    )
    assert xid.draining and xid.ours
    remap = recorded("drained-row-remap")
    assert remap.reason.endswith("GPU 3 00000000:4B:00.0 row remap pending needs reset")
    down = recorded("down-drain-admin")
    assert down == NodeState("DOWN+DRAIN", "admin: down for bios")
    assert down.draining and not down.ours


def test_an_admin_reason_that_looks_like_more_fields_is_kept_whole() -> None:
    """`Reason=admin: fan swap [ticket 42] see x=1 State=IDLE [root@...]` was cut at ` x=`:
    the reason is free text up to Slurm's own stamp, and the node's state is the real one."""
    admin = recorded("drained-admin-equals")
    assert admin == NodeState("IDLE+DRAIN", "admin: fan swap [ticket 42] see x=1 State=IDLE")
    action = decide(admin, [])
    assert action.kind == "keep" and "see x=1 State=IDLE" in action.reason


def test_the_recorded_cycle_drains_keeps_and_resumes_only_its_own() -> None:
    """NHC's convention over real scontrol states: drain a failing idle node, keep the same
    drain while it fails, resume it once it passes; Slurm's or an admin's drain is never
    lifted or re-labelled."""
    notes = ["GPU 1 0000:38:00 Xid 79 needs reboot"]
    first = decide(recorded("idle"), ["gpu.xid"], notes)
    assert first.kind == "drain" and first.reason == recorded("drained-xid").reason
    assert decide(recorded("drained-xid"), ["gpu.xid"], notes).kind == "keep"
    assert decide(recorded("drained-xid"), []).kind == "resume"
    assert decide(recorded("drained-row-remap"), []).kind == "resume"
    for theirs in ("down-drain-admin", "drained-admin-equals"):
        assert decide(recorded(theirs), ["gpu.xid"], notes).kind == "keep"
        assert decide(recorded(theirs), []).kind == "keep"
    slurm_own = NodeState("IDLE+DRAIN", "Kill task failed")
    assert decide(slurm_own, []).kind == "keep"


def test_an_unknown_node_is_a_one_line_error() -> None:
    with pytest.raises(ExternalToolError, match="does not know node 'gpu99'"):
        parse_node_state("Node gpu99 not found\n", "gpu99")


def test_a_scontrol_that_cannot_run_is_a_one_line_error(tmp_path: Path) -> None:
    """On the run's PATH, but it cannot be executed (here: its interpreter is missing): the
    drain says so in one line, never a traceback."""
    tool = tmp_path / "scontrol"
    tool.write_text("#!/nonexistent/interpreter\n")
    tool.chmod(0o755)
    with pytest.raises(ExternalToolError, match=r"^--slurm-drain: cannot run scontrol: .+"):
        node_state("node1", {"PATH": str(tmp_path)})
