"""The launch plan: from the checked settings to each node's exact torchrun command and
environment. Pure: the same inputs give the same plan, printed (`launch --print`) or run.

Static rendezvous with an explicit node rank is used on purpose: c10d rendezvous decides
which agent hosts the store by hostname, and fails when nodes share one (containers,
namespaces, cloned images).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from clusterkit.checks.parity import torch_cuda
from clusterkit.facts import FactsByHost, collected
from clusterkit.rundir import RUN_DIR, folder_name, make_folder_line, shell_line, shell_word
from clusterkit.versions import parse_version

TORCHRUN = ("-m", "torch.distributed.run")
# Every line a rank prints comes back as "[rank<N>]:<line>" (torchrun's --tee with this
# template), which is how the supervisor knows the rank of every line.
LINE_PREFIX_TEMPLATE = "[rank${rank}]:"
MARKER_VARIABLE = "CLUSTERKIT_LAUNCH"  # "<run id>/<node rank>": finds the job's processes

# Why each variable is set; docs/launch.md repeats this table for users.
VARIABLE_REASONS = {
    "MASTER_ADDR": "the master's address as the check resolved it (the TCP store host)",
    "MASTER_PORT": "the master port the check found open",
    "WORLD_SIZE": "nodes x ranks per node",
    "NNODES": "number of nodes",
    "NODE_RANK": "this node's rank (0 is the master)",
    "NPROC_PER_NODE": "ranks on this node",
    "NCCL_SOCKET_IFNAME": "the interface the check validated, for NCCL's bootstrap and sockets",
    "GLOO_SOCKET_IFNAME": "the same interface for gloo (CPU collectives, and NCCL's store)",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3: a collective that times out tears the process down "
    "instead of hanging it (torch >= 2.2)",
    "NCCL_ASYNC_ERROR_HANDLING": "1: the same, under its name before torch 2.2",
    "TORCH_FR_BUFFER_SIZE": "flight recorder: keep the last N collectives per rank (torch "
    ">= 2.8; before: TORCH_NCCL_TRACE_BUFFER_SIZE, from 2.5)",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "flight recorder: keep the last N collectives per rank "
    "(torch 2.5 to 2.7)",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "flight recorder: write the buffer when the watchdog fires",
    "TORCH_FR_DUMP_TEMP_FILE": "flight recorder: dump file prefix, one file per rank (read "
    "them with torchfrtrace; before 2.8: TORCH_NCCL_DEBUG_INFO_TEMP_FILE)",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "flight recorder: dump file prefix (torch 2.5 to 2.7)",
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "prefix every rank's output line with its global rank",
    "PYTHONUNBUFFERED": "ranks print at once, so output (and the hang detector) sees progress",
}
# With --no-check nothing was resolved or validated: these say where the value came from.
UNCHECKED_REASONS = {
    "MASTER_ADDR": "clusterkit.master as the inventory writes it (not checked: --no-check)",
    "MASTER_PORT": "clusterkit.master_port (not checked that it is free: --no-check)",
    "NPROC_PER_NODE": "ranks on this node, not checked against its GPUs (--no-check)",
    "NCCL_SOCKET_IFNAME": "the interface the inventory names (not validated: --no-check)",
}
UNCHECKED_HEADER = "# NOTHING WAS CHECKED (--no-check): the values below are the inventory's"
RUN_DIR_VARIABLE = "CLUSTERKIT_RUN_DIR"
RUN_DIR_REASON = (
    "this run's folder on the node (torchrun's logs, flight recorder dumps): made fresh, "
    "mode 0700, so no other user of the node can plant or read anything in it"
)
FLIGHT_RECORDER_SINCE = (2, 5)
FLIGHT_RECORDER_RENAMED = (2, 8)  # TORCH_NCCL_TRACE_* -> TORCH_FR_* (the old names warn)
ASYNC_ERROR_NAME_SINCE = (2, 2)
FLIGHT_RECORDER_ENTRIES = 2000
# Suggestions written (commented out) into env files: useful, but noisy or slow.
DEBUG_SUGGESTIONS = (
    ("NCCL_DEBUG", "INFO", "NCCL's own log: which transport, interface and rings it chose"),
    ("TORCH_DISTRIBUTED_DEBUG", "DETAIL", "checks that ranks call the same collectives (slow)"),
    ("TORCH_NCCL_DESYNC_DEBUG", "1", "names the rank that fell out of step on a timeout"),
)


@dataclass(frozen=True)
class PlanNode:
    """A host as the plan needs it: inventory name, interpreter on the node."""

    name: str
    python: str = "python3"


@dataclass(frozen=True)
class LaunchSettings:
    """Everything a plan is made of; the command fills it from the inventory and the check."""

    nodes: tuple[PlanNode, ...]  # node rank order: the master first
    master_addr: str
    master_port: int
    nproc_per_node: int
    script: tuple[str, ...]  # train.py ARGS...
    interface: str | None = None
    join_timeout: int = 300  # seconds every node waits for the others at the rendezvous
    torch_version: str | None = None  # the nodes' torch (decides the flight recorder names)
    image: str | None = None  # run inside this image (clusterkit.image)
    image_run_args: tuple[str, ...] = ()  # the image's own `docker run` flags
    gpus: bool = False  # `--gpus all` in the container
    workdir: str | None = None  # cd here on the node (mounted into the container)
    run_id: str = "job"
    checked: bool = True  # False with --no-check: the env file says so
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeLaunch:
    """One node's share of the job: run `argv` with `env` added to the environment. RUN_DIR
    in them stands for the run folder the node makes private when it starts (`run_name`
    begins its name; clusterkit/rundir.py says why)."""

    host: str
    node_rank: int
    argv: tuple[str, ...]
    env: dict[str, str]
    container: str | None
    run_name: str
    workdir: str | None
    checked: bool = True

    @property
    def command_line(self) -> str:
        """The argv for sh, the run folder as "$CLUSTERKIT_RUN_DIR" (the env file makes it)."""
        return shell_line(self.argv, {RUN_DIR: RUN_DIR_VARIABLE})

    def reasons(self) -> Mapping[str, str]:
        """Why each variable is set; unchecked values say where they came from instead."""
        return VARIABLE_REASONS if self.checked else {**VARIABLE_REASONS, **UNCHECKED_REASONS}

    def env_file(self) -> str:
        """A shell-sourceable env file (`set -a; . FILE; set +a`), every value quoted. It
        makes the run folder first, fresh and private, as clusterkit's own launch does."""
        lines = [f"# clusterkit launch: node {self.host}, node rank {self.node_rank}"]
        if not self.checked:
            lines.append(UNCHECKED_HEADER)
        lines.append(f"# {RUN_DIR_REASON}")
        lines.append(make_folder_line(self.run_name, RUN_DIR_VARIABLE))
        reasons = self.reasons()
        for name, value in self.env.items():
            reason = reasons.get(name)
            if reason:
                lines.append(f"# {reason}")
            lines.append(f"{name}={shell_word(value, {RUN_DIR: RUN_DIR_VARIABLE})}")
        lines.append("# debugging only (uncomment when chasing a problem):")
        for name, value, reason in DEBUG_SUGGESTIONS:
            lines.append(f"# {name}={value}  # {reason}")
        return "\n".join(lines) + "\n"

    def script(self, env_file: str) -> str:
        """A shell script that runs this node's share by hand: source the env, exec."""
        lines = ["#!/bin/sh", "set -e", "set -a", f". {shlex.quote(env_file)}", "set +a"]
        if self.workdir:
            lines.append(f"cd {shlex.quote(self.workdir)}")
        lines.append(f"exec {self.command_line}")
        return "\n".join(lines) + "\n"


def ranks_per_node(
    flag: int | None,
    expected_gpus: int | None,
    facts: FactsByHost,
) -> int:
    """--nproc-per-node, else the GPUs every node has (when torch can use them), else 1.
    Without facts (nothing checked) the inventory's expect.gpus_per_node stands for them."""
    if flag:
        return flag
    if not facts:
        return expected_gpus or 1
    cuda_builds = [torch_cuda(f) for f in facts.values()]
    usable = bool(cuda_builds) and all(build not in (None, "cpu") for build in cuda_builds)
    if not usable:
        return 1  # a CPU build of torch: one gloo rank per node
    if expected_gpus:
        return expected_gpus
    counts = [collected(f.get("gpus")).get("count", 0) for f in facts.values()]
    return max(1, min(counts)) if counts else 1


def job_environment(settings: LaunchSettings, node_rank: int) -> dict[str, str]:
    """The variables every rank of this node gets (see VARIABLE_REASONS for why)."""
    nnodes = len(settings.nodes)
    env = {
        "MASTER_ADDR": settings.master_addr,
        "MASTER_PORT": str(settings.master_port),
        "WORLD_SIZE": str(nnodes * settings.nproc_per_node),
        "NNODES": str(nnodes),
        "NODE_RANK": str(node_rank),
        "NPROC_PER_NODE": str(settings.nproc_per_node),
    }
    if settings.interface:
        env["NCCL_SOCKET_IFNAME"] = settings.interface
        env["GLOO_SOCKET_IFNAME"] = settings.interface
    version = parse_version(settings.torch_version)
    if version is not None and version < ASYNC_ERROR_NAME_SINCE:
        env["NCCL_ASYNC_ERROR_HANDLING"] = "1"
    else:
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "3"
    if version is None or version >= FLIGHT_RECORDER_RENAMED:
        env["TORCH_FR_BUFFER_SIZE"] = str(FLIGHT_RECORDER_ENTRIES)
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
        env["TORCH_FR_DUMP_TEMP_FILE"] = f"{RUN_DIR}/nccl_trace_rank_"
    elif version >= FLIGHT_RECORDER_SINCE:
        env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = str(FLIGHT_RECORDER_ENTRIES)
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = f"{RUN_DIR}/nccl_trace_rank_"
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = LINE_PREFIX_TEMPLATE
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings.extra_env)
    return env


def torchrun_args(settings: LaunchSettings, node_rank: int) -> list[str]:
    return [
        *TORCHRUN,
        "--nnodes", str(len(settings.nodes)),
        "--node-rank", str(node_rank),
        "--nproc-per-node", str(settings.nproc_per_node),
        "--master-addr", settings.master_addr,
        "--master-port", str(settings.master_port),
        "--max-restarts", "0",
        "--rdzv-conf", f"timeout={settings.join_timeout}",
        "--log-dir", f"{RUN_DIR}/torchrun",
        "--tee", "3",
    ]  # fmt: skip


def build_plan(settings: LaunchSettings) -> list[NodeLaunch]:
    """Every node's command and environment, in node rank order."""
    if not settings.nodes:
        raise ValueError("a launch needs at least one node")
    if not settings.script:
        raise ValueError("a launch needs a script to run")
    plan = []
    for rank, node in enumerate(settings.nodes):
        run_name = folder_name(f"clusterkit-launch-{settings.run_id}-n{rank}")
        env = job_environment(settings, rank)
        torchrun = torchrun_args(settings, rank)
        container = None
        if settings.image:
            container = f"clusterkit-launch-{settings.run_id}-n{rank}"
            argv = [
                *docker_prefix(settings, container, [*env, MARKER_VARIABLE, "PYTHONPATH"]),
                settings.image,
                "python3",
                *torchrun,
                *settings.script,
            ]
        else:
            argv = [node.python, *torchrun, *settings.script]
        plan.append(
            NodeLaunch(
                node.name,
                rank,
                tuple(argv),
                env,
                container,
                run_name,
                settings.workdir,
                checked=settings.checked,
            )
        )
    return plan


def docker_prefix(settings: LaunchSettings, container: str, passed: Sequence[str]) -> list[str]:
    """`docker run` with the image's own run flags (shm/ipc, host network, memlock), the
    variables passed through from the caller's environment, and the run (and work) folder."""
    argv = ["docker", "run", "--rm", "--init", "--name", container]
    argv += list(settings.image_run_args)
    if "--network" not in settings.image_run_args and not any(
        arg.startswith("--network=") for arg in settings.image_run_args
    ):
        argv += ["--network", "host"]  # the master address and ports are the host's
    if settings.gpus and "--gpus" not in settings.image_run_args:
        argv += ["--gpus", "all"]
    for name in passed:
        argv += ["-e", name]
    argv += ["-v", f"{RUN_DIR}:{RUN_DIR}"]
    if settings.workdir:
        argv += ["-v", f"{settings.workdir}:{settings.workdir}", "-w", settings.workdir]
    return argv


def render_print(plan: Sequence[NodeLaunch], env_dir: str = ".") -> str:
    """What `launch --print` shows: per node, its env file and the command to run."""
    blocks = []
    for node in plan:
        env_path = f"{env_dir.rstrip('/')}/{node.host}.env"
        block = [
            f"### {node.host} (node rank {node.node_rank} of {len(plan)})",
            f"# {env_path}:",
            node.env_file().rstrip("\n"),
            f"# run on {node.host}:",
            "set -a; . " + shlex.quote(env_path) + "; set +a",
        ]
        if node.workdir:
            block.append(f"cd {shlex.quote(node.workdir)}")
        block.append(node.command_line)
        blocks.append("\n".join(block))
    return "\n\n".join(blocks) + "\n"
