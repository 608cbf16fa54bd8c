"""What each attempt's plan is made of: the job's flags, fixed for the launch, and what the
check learned of the attempt's node set (facts, and the stages' details). Pure.

The plan itself is launch/plan.py; this picks its inputs: the ranks per node, the master's
address as the nodes resolved it, the container's run flags and whether it gets the GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clusterkit.facts import FactsByHost
from clusterkit.inventory.model import Inventory
from clusterkit.launch.plan import LaunchSettings, PlanNode, ranks_per_node
from clusterkit.net.plan import NetworkOptions

DEFAULT_RUN_ARGS = ("--shm-size", "16g", "--network", "host", "--ulimit", "memlock=-1:-1")


@dataclass(frozen=True)
class JobFlags:
    """The job as the command line gives it: the same for every attempt."""

    script: tuple[str, ...]  # the words after `--`
    nproc_per_node: int | None = None  # --nproc-per-node; None: from the facts
    join_timeout: float = 300.0  # --join-timeout
    workdir: str | None = None  # --workdir
    checked: bool = True  # False with --no-check


SettingsFor = Callable[[Inventory, FactsByHost, Mapping[str, Any], str], LaunchSettings]


def settings_for(job: JobFlags) -> SettingsFor:
    """How each attempt's plan is made from its node set's facts: the flags are fixed."""

    def make(
        inventory: Inventory, facts: FactsByHost, details: Mapping[str, Any], run_id: str
    ) -> LaunchSettings:
        return launch_settings(job, inventory, facts, details, run_id)

    return make


def launch_settings(
    job: JobFlags,
    inventory: Inventory,
    all_facts: FactsByHost,
    details: Mapping[str, Any],
    run_id: str,
) -> LaunchSettings:
    settings = inventory.settings
    master = inventory.master
    ordered = [master, *[h for h in inventory.hosts if h is not master]]
    facts = {h.name: all_facts[h.name] for h in ordered if all_facts.get(h.name)}
    torch_versions = {str((f.get("torch") or {}).get("version")) for f in facts.values()}
    torch_versions.discard("None")
    image = settings.image
    return LaunchSettings(
        nodes=tuple(PlanNode(h.name, h.python_interpreter or "python3") for h in ordered),
        master_addr=master_address(inventory, details),
        master_port=settings.master_port,
        nproc_per_node=ranks_per_node(job.nproc_per_node, settings.expect.gpus_per_node, facts),
        script=job.script,
        interface=settings.interface,
        join_timeout=int(job.join_timeout),
        torch_version=min(torch_versions) if len(torch_versions) == 1 else None,
        image=image,
        image_run_args=image_run_args(settings.image_run_args, details) if image else (),
        gpus=uses_gpus(settings.expect.gpus_per_node, facts),
        workdir=job.workdir,
        run_id=run_id,
        checked=job.checked,
    )


def uses_gpus(expected_gpus: int | None, facts: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the container gets `--gpus all`: any node has GPUs, or, with no facts
    (nothing checked), the inventory expects them."""
    if not facts:
        return bool(expected_gpus)
    return any(int((f.get("gpus") or {}).get("count") or 0) > 0 for f in facts.values())


def master_address(inventory: Inventory, details: Mapping[str, Any]) -> str:
    """The master's address as every node resolved it in the network stage (when they all
    agree), else `clusterkit.master` as written: what the check validated."""
    name = NetworkOptions.from_inventory(inventory).master_name
    nodes = (details.get("network") or {}).get("nodes") or {}
    firsts = {
        tuple(entry.get("master_addresses") or [])[:1]
        for entry in nodes.values()
        if isinstance(entry, dict) and entry.get("ran")
    }
    if len(firsts) == 1 and (only := next(iter(firsts))):
        return str(only[0])
    return name


def image_run_args(
    configured: tuple[str, ...] | None, details: Mapping[str, Any]
) -> tuple[str, ...]:
    """clusterkit.image_run_args, else the image's own run flags as the image stage read
    them from its label, else the flags images built by clusterkit carry by default."""
    if configured is not None:
        return configured
    for entry in (details.get("image") or {}).values():
        if isinstance(entry, dict) and isinstance(entry.get("run_args"), list):
            return tuple(str(arg) for arg in entry["run_args"] if arg != "--gpus")
    return DEFAULT_RUN_ARGS
