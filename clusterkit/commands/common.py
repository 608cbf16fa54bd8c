"""What the commands that reach nodes share: the hosts and how to connect, and the check's
plan (its stages: clusterkit/stages/lists.py), each from their flags."""

from __future__ import annotations

from dataclasses import replace

from clusterkit.cli.requests import (
    CheckRun,
    Connection,
    ReportRequest,
    TargetRequest,
)
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.inventory import Inventory, select_hosts
from clusterkit.redact import redact_text
from clusterkit.settings.loader import load_inventory, local_inventory
from clusterkit.slurm.target import SlurmTarget, slurm_target
from clusterkit.stages.lists import CheckPlan
from clusterkit.transport.endpoint import ConnectOptions


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


def connect_options(flags: Connection, env: Environment) -> ConnectOptions:
    """The connection flags with this run's variables and warnings stream."""
    return ConnectOptions(
        host_key_policy=flags.host_key_policy,
        known_hosts=flags.known_hosts,
        ssh_config=flags.ssh_config,
        connect_timeout=flags.connect_timeout,
        forks=flags.forks,
        environ=env.environ,
        warnings=env.stderr,
    )


def check_plan(run: CheckRun, env: Environment) -> CheckPlan:
    """The check's flags as the values its stages take (clusterkit/stages/lists.py)."""
    return CheckPlan(
        connect_options(run.connection, env),
        skip=run.skip,
        mesh=run.mesh,
        timeout=run.timeout,
        min_busbw=run.min_busbw,
        dcgm_level=run.dcgm_level,
    )


def report_view(view: ReportRequest) -> dict[str, bool]:
    """How much of the text report the flags ask for: `-q` the problems alone, `-v` every
    check and host on a terminal too (else one screen, the passing checks counted)."""
    return {"only_problems": view.only_problems, "verbose": view.verbose > 0}
