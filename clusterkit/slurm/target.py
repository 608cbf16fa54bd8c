"""Which nodes a Slurm-driven check covers, and with which settings.

Inside an allocation (`--slurm`) the nodes are SLURM_JOB_NODELIST's; outside one,
`--slurm-nodes HOSTLIST` or `--slurm-partition P` names them. Settings come from
`--settings FILE` (a YAML file holding the same `clusterkit:` mapping as an inventory) or
from an inventory given alongside, whose hosts then also supply the SSH parameters. The
master is the first node unless the settings name another.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from clusterkit.errors import ConfigError, UsageError
from clusterkit.hostlist import NODE_NAME, check_node_name, expand_hostlist
from clusterkit.inventory.model import ClusterSettings, Host, Inventory
from clusterkit.inventory.yamlfile import load_yaml
from clusterkit.settings import VARIABLE, parse_settings

SLURM_SECONDS = 15.0  # sinfo / scontrol answer from slurmctld: bounded like any remote call
NAMES_IN_ARGV = 32768  # characters of node names given to scontrol; past that it lists all
_SETTINGS_KEYS = (VARIABLE, "ansible_python_interpreter")


@dataclass(frozen=True)
class SlurmRequest:
    """The Slurm options of a command line (check, bench, launch), as given."""

    allocation: bool = False  # --slurm: the nodes of the allocation we run in
    nodes: str | None = None  # --slurm-nodes HOSTLIST
    partition: str | None = None  # --slurm-partition P
    settings: str | None = None  # --settings FILE
    transport: str | None = None  # --transport ssh|srun; None: srun inside the allocation

    @property
    def wanted(self) -> bool:
        """Whether the command acts on Slurm's nodes (rather than an inventory's)."""
        return bool(self.allocation or self.nodes or self.partition)


@dataclass(frozen=True)
class SlurmTarget:
    inventory: Inventory
    job_id: str | None  # the allocation the check runs in, if any
    source: str  # "SLURM_JOB_NODELIST", "--slurm-nodes", "--slurm-partition P"
    transport: str  # how the stages reach the nodes: "ssh" or "srun"


def slurm_target(
    request: SlurmRequest, inventory: Inventory | None, environ: Mapping[str, str]
) -> SlurmTarget:
    """The nodes and settings for `check --slurm*`, in the run's `environ` (the allocation's
    variables, and the PATH that finds scontrol); UsageError/ConfigError on bad input."""
    chosen = [
        flag
        for flag, given in (
            ("--slurm", request.allocation),
            ("--slurm-nodes", request.nodes),
            ("--slurm-partition", request.partition),
        )
        if given
    ]
    if len(chosen) > 1:
        raise UsageError(f"{' and '.join(chosen)} cannot be combined: name the nodes one way")
    names, source, job_id = _named_nodes(request, environ)
    for name in names:
        check_node_name(name, source)
    names = list(dict.fromkeys(names))  # a node named twice is checked once
    if inventory is not None and request.settings:
        raise UsageError("give --settings or an inventory, not both: both hold the settings")
    if inventory is not None:
        hosts = _hosts_from_inventory(inventory, names, source)
        settings = inventory.settings
        path = inventory.path
    else:
        settings, hosts = _hosts_from_slurm(names, request.settings, environ)
        path = request.settings
    if settings.master is None:
        settings = replace(settings, master=names[0])
    return SlurmTarget(
        Inventory(path=path, hosts=tuple(hosts), settings=settings),
        job_id,
        source,
        request.transport or ("srun" if job_id else "ssh"),
    )


def _named_nodes(
    request: SlurmRequest, environ: Mapping[str, str]
) -> tuple[list[str], str, str | None]:
    """(node names, where they came from, the allocation that holds them all, if any)."""
    job_id = environ.get("SLURM_JOB_ID") or None
    if request.allocation:
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
        if not nodelist:
            raise UsageError(
                "--slurm: not inside a Slurm allocation (SLURM_JOB_NODELIST is not set)",
                hint="run it in sbatch/salloc, or name nodes with --slurm-nodes/--slurm-partition",
            )
        return expand_hostlist(nodelist), "SLURM_JOB_NODELIST", job_id
    if request.nodes:
        names, source = expand_hostlist(request.nodes), "--slurm-nodes"
    else:
        partition = request.partition or ""
        names = partition_nodes(partition, environ)
        source = f"--slurm-partition {partition}"
    return names, source, job_id if _inside(names, environ) else None


def _hosts_from_slurm(
    names: list[str], settings_file: str | None, environ: Mapping[str, str]
) -> tuple[ClusterSettings, list[Host]]:
    """Settings from --settings (or the defaults) and a host per node, at its NodeAddr."""
    settings, interpreter = (
        load_settings(settings_file) if settings_file else (ClusterSettings(), None)
    )
    # Slurm nodes share the filesystem: by default they run the interpreter (and its
    # torch) that clusterkit runs under here, as the job itself will.
    interpreter = interpreter or sys.executable
    addresses = node_addresses(names, environ)
    hosts = [
        Host(
            name=name,
            address=addresses.get(name, name),
            python_interpreter=interpreter,
            groups=("all", "slurm"),
        )
        for name in names
    ]
    return settings, hosts


def _inside(names: list[str], env: Mapping[str, str]) -> bool:
    """Whether every node is in the run's own allocation (steps can run there)."""
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return False
    return set(names) <= set(expand_hostlist(nodelist))


def _hosts_from_inventory(inventory: Inventory, names: list[str], source: str) -> list[Host]:
    by_name = {host.name: host for host in inventory.hosts}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise UsageError(
            f"{source} names {', '.join(missing)}, not in inventory {inventory.path}",
            hint="add the nodes to the inventory, or use --settings instead",
        )
    return [by_name[name] for name in names]


def load_settings(path: str) -> tuple[ClusterSettings, str | None]:
    """(settings, python interpreter) from a YAML file with a `clusterkit:` mapping."""
    try:
        document = load_yaml(path)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path}: must be a mapping with a `{VARIABLE}:` key")
    unknown = [key for key in document if key not in _SETTINGS_KEYS]
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {unknown[0]!r}",
            hint=f"a settings file holds {' and '.join(_SETTINGS_KEYS)}",
        )
    line = document.line_of(VARIABLE) if hasattr(document, "line_of") else None
    settings = parse_settings(document.get(VARIABLE), (path, line))
    interpreter = document.get("ansible_python_interpreter")
    if interpreter is not None and not isinstance(interpreter, str):
        raise ConfigError(f"{path}: ansible_python_interpreter must be a path")
    return settings, interpreter


def slurm_tool(name: str, environ: Mapping[str, str]) -> str | None:
    """Where the run's PATH finds a Slurm client tool (no PATH: the system's default
    search path, as exec uses), or None."""
    return shutil.which(name, path=environ.get("PATH", os.defpath))


def run_slurm_tool(
    argv: Sequence[str], environ: Mapping[str, str], seconds: float
) -> subprocess.CompletedProcess[str] | None:
    """A Slurm client tool (argv[0], found on the run's PATH) run with the run's `environ`
    under a deadline: its output as text, its status for the caller to judge; None when it
    is not installed. The caller words TimeoutExpired and OSError for its own flag."""
    tool = slurm_tool(argv[0], environ)
    if tool is None:
        return None
    return subprocess.run(
        [tool, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=seconds,
        env=dict(environ),
        check=False,
    )


def _slurm_command(argv: list[str], env: Mapping[str, str], what: str) -> str:
    try:
        done = run_slurm_tool(argv, env, SLURM_SECONDS)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{what}: {argv[0]} did not answer in {SLURM_SECONDS:g} s") from None
    except OSError as error:
        raise UsageError(f"{what}: cannot run {argv[0]}: {error.strerror or error}") from None
    if done is None:
        raise UsageError(f"{what}: {argv[0]} not found (install the Slurm client tools)")
    if done.returncode != 0:
        # scontrol says "Partition x not found" on stdout, other errors on stderr.
        said = done.stderr.strip() or done.stdout.strip()
        detail = said.splitlines()[-1:] or [f"exit {done.returncode}"]
        raise UsageError(f"{what}: {' '.join(argv)} failed: {detail[0]}")
    return done.stdout


def partition_nodes(partition: str, env: Mapping[str, str]) -> list[str]:
    """Every node of a partition, as `scontrol show partition` lists them."""
    if not NODE_NAME.fullmatch(partition):
        raise UsageError(f"--slurm-partition: {partition!r} is not a valid partition name")
    what = f"--slurm-partition {partition}"
    text = _slurm_command(["scontrol", "show", "partition", partition, "-o"], env, what)
    match = re.search(r"(?:^|\s)Nodes=(\S+)", text)
    if not match or match.group(1) == "(null)":
        raise UsageError(f"{what}: the partition has no nodes")
    return expand_hostlist(match.group(1))


def node_addresses(names: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """NodeName -> NodeAddr from `scontrol show node` (SSH goes there); {} when unknown.
    Many names are not put in scontrol's argv (Linux refuses one argument over 128 KiB):
    then every node is listed and only ours kept."""
    if slurm_tool("scontrol", env) is None:
        return {}
    joined = ",".join(names)
    which = [joined] if len(joined) <= NAMES_IN_ARGV else []
    try:
        text = _slurm_command(["scontrol", "show", "node", *which, "-o"], env, "nodes")
    except UsageError:
        return {}
    addresses, wanted = {}, set(names)
    for line in text.splitlines():
        name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
        addr = re.search(r"(?:^|\s)NodeAddr=(\S+)", line)
        if name and addr and name.group(1) in wanted:
            addresses[name.group(1)] = addr.group(1)
    return addresses
