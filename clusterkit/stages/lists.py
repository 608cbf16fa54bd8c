"""The check's stages, in order, which `check` reports and `launch` runs before the job (and
again for a new node set): one list, so the two cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterkit.bench.stage import BenchStage
from clusterkit.checks.parity import torch_cuda
from clusterkit.contract.names import StageName
from clusterkit.contract.session import ProgressSink, Session, SessionOptions
from clusterkit.contract.stage import Stage
from clusterkit.dcgm.stage import DcgmStage
from clusterkit.environment import Environment
from clusterkit.image.stage import IMAGE_SECONDS, ImageStage
from clusterkit.inventory import Inventory
from clusterkit.net.stage import NETWORK_SECONDS, NetworkStage
from clusterkit.probe import PROBE_SECONDS
from clusterkit.probe.stage import ProbeStage
from clusterkit.provision.remedy import with_stage_fixes
from clusterkit.slurm.check import slurm_stages
from clusterkit.slurm.target import SlurmTarget
from clusterkit.stages.connect import ConnectStage
from clusterkit.stages.runner import run_stages
from clusterkit.stages.static import StaticStage
from clusterkit.storage.stage import SHARED_SECONDS, StorageStage
from clusterkit.transport.endpoint import ConnectOptions

if TYPE_CHECKING:  # the bench's modules are imported only when the bench runs
    from clusterkit.bench.options import BenchOptions


@dataclass(frozen=True)
class CheckPlan:
    """How the check's stages run, in the values they take (a command makes it from its
    typed request: the flags stay above this layer)."""

    connect: ConnectOptions
    skip: frozenset[StageName] = frozenset()
    mesh: str | None = None  # None: clusterkit.network.mesh
    timeout: float = PROBE_SECONDS  # each host's probe
    min_busbw: float | None = None
    dcgm_level: int | None = None  # None: clusterkit.dcgm_level


def check_stages(plan: CheckPlan, inventory: Inventory) -> list[Stage]:
    """The check, in order. The bench comes last and never starts on a network known to be
    broken: it would only hang."""

    def bench_options(session: Session) -> BenchOptions:
        from clusterkit.bench.options import BenchOptions

        facts = session.facts
        return BenchOptions.from_settings(
            session.inventory.settings.bench,
            min_busbw=plan.min_busbw,
            facts=facts,
            # A CPU build of torch runs gloo: one rank per node measures the network;
            # a rank per (unusable) GPU would only measure this machine's cores.
            nproc_per_node=None
            if any(torch_cuda(f) not in (None, "cpu") for f in facts.values())
            else 1,
        )

    return [
        ConnectStage(plan.connect),
        ProbeStage(plan.timeout),
        StaticStage(),
        StorageStage(SHARED_SECONDS),
        NetworkStage(NETWORK_SECONDS, mesh=plan.mesh),
        ImageStage(IMAGE_SECONDS),
        *dcgm_stage(plan.dcgm_level, inventory),
        BenchStage(bench_options, seconds=inventory.settings.bench.timeout),
    ]


def dcgm_stage(level: int | None, inventory: Inventory) -> list[Stage]:
    """The DCGM diagnostic, only when a level is asked for (--dcgm-level wins over
    clusterkit.dcgm_level; 0 turns it off): otherwise it costs nothing, not even a skip."""
    level = inventory.settings.dcgm_level if level is None else level
    return [DcgmStage(level)] if level else []


def checked_session(
    plan: CheckPlan,
    env: Environment,
    inventory: Inventory,
    bar: ProgressSink,
    slurm: SlurmTarget | None = None,
    *,
    machine: bool = False,
) -> Session:
    """A session over `inventory` with every stage of the check run; its connections stay
    open for the caller to use and close (closed here when the check itself raises). On
    Slurm nodes with the srun transport, each node stage runs in one job step."""
    # No deadline for the whole run: each stage has its own bound (connect: per host).
    session = Session(
        inventory,
        None,
        SessionOptions(forks=plan.connect.forks, skip=plan.skip, machine_only=machine),
        progress=bar,
    )
    try:
        stages = check_stages(plan, inventory)
        run_stages(session, slurm_stages(slurm, stages, env.environ))
    except BaseException:
        session.close()
        raise
    session.findings = with_stage_fixes(session.findings, inventory.path)
    return session
