"""The typed requests the shared option groups (clusterkit.cli.options) become: read once from
the parsed command line, so a renamed flag is a type error here, not a silent default below."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from clusterkit.contract.names import StageName
from clusterkit.probe import PROBE_SECONDS
from clusterkit.slurm.target import SlurmRequest


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


@dataclass(frozen=True)
class Connection:
    """How every host is reached: the connection group (--limit aside: it picks hosts)."""

    forks: int | None = None  # hosts contacted at once; None: all of them
    host_key_policy: str | None = None
    known_hosts: tuple[str, ...] = ()
    ssh_config: str | None = None
    connect_timeout: float | None = None


@dataclass(frozen=True)
class ReportRequest:
    """Where the report goes and how much of it: the report group, and -v."""

    format: str = "text"
    output: str | None = None  # -o FILE; None: stdout
    only_problems: bool = False
    verbose: int = 0


@dataclass(frozen=True)
class CheckRun:
    """How the check runs, the same for `check` and the gate of `launch`."""

    connection: Connection = field(default_factory=Connection)
    skip: frozenset[StageName] = frozenset()
    strict: bool = False
    mesh: str | None = None  # --mesh; None: clusterkit.network.mesh
    timeout: float = PROBE_SECONDS  # each host's probe
    min_busbw: float | None = None
    dcgm_level: int | None = None  # --dcgm-level; None: clusterkit.dcgm_level


def target(args: argparse.Namespace, *, python: str | None = None) -> TargetRequest:
    """The inventory, Slurm and --limit flags (add_inventory_arguments, add_slurm_options,
    add_connection_options); `python`: --python, for the commands that have it."""
    positional = [args.inventory] if args.inventory else []
    return TargetRequest(
        sources=(*positional, *args.inventory_sources),
        via_ansible=args.inventory_via_ansible,
        slurm=SlurmRequest(
            allocation=args.slurm,
            nodes=args.slurm_nodes,
            partition=args.slurm_partition,
            settings=args.settings,
            transport=args.transport,
        ),
        python=python,
        limit=args.limit,
    )


def connection(args: argparse.Namespace) -> Connection:
    """The connection group (add_connection_options)."""
    return Connection(
        forks=args.forks,
        host_key_policy=args.host_key_policy,
        known_hosts=tuple(args.known_hosts),
        ssh_config=args.ssh_config,
        connect_timeout=args.connect_timeout,
    )


def report(args: argparse.Namespace) -> ReportRequest:
    """--format, -o (absent: stdout), --only-problems and -v."""
    return ReportRequest(
        format=args.format,
        output=args.output,
        only_problems=args.only_problems,
        verbose=args.verbose,
    )


def check_run(args: argparse.Namespace, *, dcgm_level: int | None = None) -> CheckRun:
    """add_check_run_options, --min-busbw and the connection; `dcgm_level`: --dcgm-level,
    for the commands that have it."""
    return CheckRun(
        connection=connection(args),
        skip=frozenset(args.skip),
        strict=args.strict,
        mesh=args.mesh,
        timeout=args.timeout,
        min_busbw=args.min_busbw,
        dcgm_level=dcgm_level,
    )
