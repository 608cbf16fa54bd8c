"""The driver's own reset verdict (nvidia-smi reset_status fields) as a check and a drain note.
Values as nvidia-smi prints them in public `nvidia-smi -q` recordings: `Yes`/`No` (R530 to
R565, "Reset Required : No"), `Requested functionality has been deprecated` (R570+, beside
"GPU Recovery Action : None"), and `[N/A]`, which the probe reads as None."""

from __future__ import annotations

from typing import Any

from clusterkit.checks.model import Status
from clusterkit.checks.recovery import drain_notes, recovery_findings
from clusterkit.facts import parse_facts
from clusterkit.slurm.drain import NodeState, decide

DEPRECATED = "Requested functionality has been deprecated"


def host(*flags: tuple[str | None, str | None]) -> Any:
    devices = [
        {
            "index": str(i),
            "uuid": f"GPU-{i}",
            "pci.bus_id": f"00000000:{0x18 + 0x20 * i:02X}:00.0",
            "reset_status.reset_required": required,
            "reset_status.drain_and_reset_recommended": drain,
        }
        for i, (required, drain) in enumerate(flags)
    ]
    return parse_facts({"gpus": {"count": len(devices), "devices": devices}})


def test_a_gpu_the_driver_wants_reset_fails_its_node_and_names_the_gpu() -> None:
    facts = {"n1": host(("No", "No"), ("No", "No")), "n2": host(("No", "No"), ("Yes", "No"))}
    (fail, ok) = recovery_findings(facts)
    assert (fail.status, fail.hosts, ok.status, ok.hosts) == (
        Status.FAIL,
        ["n2"],
        Status.OK,
        ["n1"],
    )
    assert "GPU 1 (00000000:38:00.0, GPU-1): reset required" in fail.message
    notes = drain_notes(facts["n2"])
    assert notes == ["GPU 1 0000:38:00 driver: reset required"]
    action = decide(NodeState("IDLE", ""), ["gpu.reset-required"], notes)
    assert (
        action.reason == "clusterkit: gpu.reset-required; GPU 1 0000:38:00 driver: reset required"
    )


def test_drain_and_reset_recommended_fails_too() -> None:
    (fail,) = recovery_findings({"n": host(("No", "Yes"))})
    assert fail.status is Status.FAIL and "drain and reset recommended" in fail.message


def test_a_driver_without_the_verdict_gives_no_finding() -> None:
    assert recovery_findings({"n": host((None, None), (DEPRECATED, DEPRECATED))}) == []
    assert drain_notes(host((DEPRECATED, DEPRECATED))) == []


def test_a_hostile_index_or_bus_id_never_reaches_the_drain_reason() -> None:
    facts = host(("Yes", "No"))
    facts["gpus"]["devices"][0]["index"] = "0; scontrol update"
    facts["gpus"]["devices"][0]["pci.bus_id"] = "0000:zz:00.0 x"
    assert drain_notes(facts) == ["GPU ? ? driver: reset required"]
