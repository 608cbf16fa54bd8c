"""What the commands that reach nodes share: the hosts and how to connect (from their
flags), and the check's stages, which `check` reports and `launch` runs before the job."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from clusterkit.checks.parity import torch_cuda
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.inventory import Inventory, load_inventory, local_inventory, select_hosts
from clusterkit.provision.remedy import with_stage_fixes
from clusterkit.redact import redact_text
from clusterkit.slurm.check import slurm_stages
from clusterkit.slurm.target import SlurmRequest, SlurmTarget, slurm_target
from clusterkit.stages import Session, Stage, run_stages
from clusterkit.stages.bench import BenchStage
from clusterkit.stages.connect import ConnectStage
from clusterkit.stages.dcgm import DcgmStage
from clusterkit.stages.image import IMAGE_SECONDS, ImageStage
from clusterkit.stages.network import NETWORK_SECONDS, NetworkStage
from clusterkit.stages.probe import ProbeStage
from clusterkit.stages.session import ProgressSink, SessionOptions
from clusterkit.stages.static import StaticStage
from clusterkit.stages.storage import SHARED_SECONDS, StorageStage
from clusterkit.transport.endpoint import ConnectOptions

if TYPE_CHECKING:  # the bench's modules are imported only when the bench runs
    from clusterkit.bench.options import BenchOptions


@dataclass(frozen=True)
class TargetRequest:
    """Which hosts a command acts on, as its flags name them."""

    sources: tuple[str, ...] = ()  # the positional inventory, then every -i, in order
    via_ansible: bool = False  # --inventory-via-ansible
    slurm: SlurmRequest = field(default_factory=SlurmRequest)
    python: str | None = None  # --python: the job's interpreter on every host
    limit: str | None = None  # --limit

    @property
    def machine_only(self) -> bool:
        """Whether the check describes this machine rather than a job's nodes: no inventory,
        no Slurm nodes and no --python. A missing torch then says what the machine can run."""
        return not (self.sources or self.slurm.wanted or self.python)


def target_request(args: argparse.Namespace) -> TargetRequest:
    """The hosts' flags of check, bench or launch (a flag a command lacks: not given)."""
    positional = [args.inventory] if getattr(args, "inventory", None) else []
    return TargetRequest(
        sources=(*positional, *(getattr(args, "inventory_sources", None) or ())),
        via_ansible=bool(getattr(args, "inventory_via_ansible", False)),
        slurm=SlurmRequest(
            allocation=bool(getattr(args, "slurm", False)),
            nodes=getattr(args, "slurm_nodes", None),
            partition=getattr(args, "slurm_partition", None),
            settings=getattr(args, "settings", None),
            transport=getattr(args, "transport", None),
        ),
        python=getattr(args, "python", None),
        limit=getattr(args, "limit", None),
    )


def load_target(args: argparse.Namespace, env: Environment) -> Inventory:
    """The inventory named on the command line (limited), or this machine."""
    return load_targets(target_request(args), env)[0]


def load_targets(request: TargetRequest, env: Environment) -> tuple[Inventory, SlurmTarget | None]:
    """The hosts to act on: Slurm's nodes with --slurm* (an inventory, if given, supplies the
    settings and SSH parameters), else the inventory (limited), else this machine."""
    inventory = (
        load_inventory(request.sources, via_ansible=request.via_ansible, environ=env.environ)
        if request.sources
        else None
    )
    for warning in inventory.warnings if inventory else ():  # Ansible would warn too: once
        print(f"clusterkit: warning: {redact_text(warning)}", file=env.stderr)
    slurm = request.slurm
    if slurm.wanted:
        target = slurm_target(slurm, inventory, env.environ)
        inventory = target.inventory
    else:
        if slurm.settings:
            raise UsageError("--settings goes with --slurm, --slurm-nodes or --slurm-partition")
        if slurm.transport == "srun":
            raise UsageError(
                "--transport srun needs Slurm nodes: add --slurm, --slurm-nodes or "
                "--slurm-partition"
            )
        # This machine runs the job's Python as a node would: python3 on PATH, not the
        # interpreter clusterkit happens to run under.
        target, inventory = None, inventory or _job_python(local_inventory(), None)
    if request.python:
        inventory = _job_python(inventory, request.python)
    if request.limit:
        inventory = select_hosts(inventory, request.limit)
    return inventory, target


def _job_python(inventory: Inventory, python: str | None) -> Inventory:
    """Every host runs `python` (None: each node's default, python3 on PATH)."""
    hosts = tuple(replace(host, python_interpreter=python) for host in inventory.hosts)
    return replace(inventory, hosts=hosts)


def connect_options(args: argparse.Namespace, env: Environment) -> ConnectOptions:
    return ConnectOptions(
        host_key_policy=args.host_key_policy,
        known_hosts=tuple(args.known_hosts),
        ssh_config=args.ssh_config,
        connect_timeout=args.connect_timeout,
        forks=args.forks,
        environ=env.environ,
        warnings=env.stderr,
    )


def check_stages(args: argparse.Namespace, env: Environment, inventory: Inventory) -> list[Stage]:
    """The check, in order. The bench comes last and never starts on a network known to be
    broken: it would only hang."""

    def bench_options(session: Session) -> BenchOptions:
        from clusterkit.bench.options import BenchOptions

        facts = session.facts
        return BenchOptions.from_settings(
            session.inventory.settings.bench,
            min_busbw=args.min_busbw,
            facts=facts,
            # A CPU build of torch runs gloo: one rank per node measures the network;
            # a rank per (unusable) GPU would only measure this machine's cores.
            nproc_per_node=None
            if any(torch_cuda(f) not in (None, "cpu") for f in facts.values())
            else 1,
        )

    return [
        ConnectStage(connect_options(args, env)),
        ProbeStage(args.timeout),
        StaticStage(),
        StorageStage(SHARED_SECONDS),
        NetworkStage(NETWORK_SECONDS, mesh=getattr(args, "mesh", None)),
        ImageStage(IMAGE_SECONDS),
        *dcgm_stage(args, inventory),
        BenchStage(bench_options, seconds=inventory.settings.bench.timeout),
    ]


def dcgm_stage(args: argparse.Namespace, inventory: Inventory) -> list[Stage]:
    """The DCGM diagnostic, only when a level is asked for (--dcgm-level wins over
    clusterkit.dcgm_level; 0 turns it off): otherwise it costs nothing, not even a skip."""
    level = getattr(args, "dcgm_level", None)
    level = inventory.settings.dcgm_level if level is None else level
    return [DcgmStage(level)] if level else []


def checked_session(
    args: argparse.Namespace,
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
        SessionOptions(forks=args.forks, skip=frozenset(args.skip), machine_only=machine),
        progress=bar,
    )
    try:
        stages = check_stages(args, env, inventory)
        run_stages(session, slurm_stages(slurm, stages, env.environ))
    except BaseException:
        session.close()
        raise
    session.findings = with_stage_fixes(session.findings, inventory.path)
    return session


def report_view(args: argparse.Namespace) -> dict[str, bool]:
    """How much of the text report the flags ask for: `-q` the problems alone, `-v` every
    check and host on a terminal too (else one screen, the passing checks counted)."""
    return {"only_problems": args.only_problems, "verbose": args.verbose > 0}
