"""Argument definitions and dispatch only: every command's logic lives in clusterkit.commands."""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from clusterkit import __version__
from clusterkit.completion import SHELLS
from clusterkit.errors import UsageError
from clusterkit.inventory.model import BenchSettings
from clusterkit.launch.spares import NodeCount
from clusterkit.probe import PROBE_SECONDS
from clusterkit.stagenames import SKIPPABLE, StageName
from clusterkit.status import ExitStatus

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from clusterkit.environment import Environment

FORMATS = ("text", "json", "junit")
REPORT_FORMATS = (*FORMATS, "prometheus", "html")  # check, node-check, bench (docs/report.md)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2, one line) instead of printing usage and exiting,
    and prints --help, --version and warnings to the run's streams (set by `parse` on every
    parser of the tree; None: the process's)."""

    stdout: TextIO | None = None
    stderr: TextIO | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No prefix matching: `--nnode 3` is a mistake to name, not `--nnodes 3` (nor, once a
        # new flag shares the prefix, a different one).
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            stream = self.stderr if file is sys.stderr else self.stdout
            (stream or file or sys.stdout).write(message)

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("clusterkit").strip()  # main prints "clusterkit: "
        hint = self._suggestion(message) or f"see `{self.prog} --help`"
        raise UsageError(f"{command}: {message}" if command else message, hint=hint)

    def _suggestion(self, message: str) -> str | None:
        """A "did you mean" for a mistyped command or step (`chek`) or flag (`--nnode`), from
        this parser's own."""
        unknown = re.match(r"unrecognized arguments: (-[^ =]*)", message)
        if unknown:
            flags = [
                flag
                for flag, action in self._option_string_actions.items()
                if flag.startswith("--") and action.help is not argparse.SUPPRESS
            ]
            close = difflib.get_close_matches(unknown.group(1), flags, n=1, cutoff=0.6)
            return f"did you mean `{close[0]}`?" if close else None
        stray = re.match(r"unrecognized arguments: ([^-]\S*)", message)
        if stray and self.prog.endswith(" launch"):
            return f"the job goes after --: {self.prog} [INVENTORY] -- {stray.group(1)} [ARGS]"
        for action in self._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            typed = re.search(rf"argument {action.metavar}: invalid choice: '?([^' ]*)", message)
            close = difflib.get_close_matches(typed.group(1), action.choices, n=1) if typed else []
            if close:
                return f"did you mean `{self.prog} {close[0]}`?"
        return None


def _stage_list(text: str) -> frozenset[StageName]:
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(SKIPPABLE))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown stage {', '.join(unknown)} (stages: {', '.join(SKIPPABLE)})"
        )
    return frozenset(stage for stage in SKIPPABLE if stage in names)


class _AddStages(argparse.Action):
    """`--skip network --skip bench` skips both: each use adds to the set, like a list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, frozenset)  # _stage_list made it
        setattr(namespace, self.dest, frozenset(getattr(namespace, self.dest) or ()) | values)


class _Deprecated(argparse.Action):
    """An old spelling kept for one release: it still works, hidden from help and completion,
    and says on stderr what replaces it."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        replacement: str,
        value: object = None,
        *,
        type: Callable[[str], object] | None = None,
        choices: Iterable[object] | None = None,
        default: object = None,
    ) -> None:
        self.replacement, self.value = replacement, value
        nargs = 0 if value is not None else None
        super().__init__(
            option_strings,
            dest,
            nargs=nargs,
            help=argparse.SUPPRESS,
            type=type,
            choices=choices,
            default=default,
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(
            f"clusterkit: warning: {option_string} is deprecated; use {self.replacement}",
            file=getattr(parser, "stderr", None) or sys.stderr,
        )
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _count_or_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1000: {text}")
    return value


def _node_count(text: str) -> NodeCount:
    try:
        return NodeCount.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


HANG_TIMEOUT = 1800.0  # torch's default process-group timeout for gloo: a job stuck longer dies


def _hang_seconds(text: str) -> float | None:
    """--hang-timeout: positive SECONDS, or 0 for off."""
    if text.strip() in ("0", "0.0", "off"):
        return None
    return _positive_float(text)


def _add_seconds(
    group: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    help_text: str,
    *,
    default: float | None = None,
) -> None:
    """A duration flag (a deadline, a grace, an age): a positive number of SECONDS."""
    group.add_argument(
        flag, type=_positive_float, default=default, metavar="SECONDS", help=help_text
    )


def _add_python_option(parser: argparse.ArgumentParser, interpreter: str) -> None:
    """--python: the interpreter the job runs, whose torch the checks look at."""
    parser.add_argument(
        "--python",
        type=_interpreter,
        default=None,
        metavar="PATH",
        help=f"the Python the job runs (default: {interpreter}, else python3 on PATH): "
        "torch is checked for it",
    )


def _add_nproc_per_node(group: argparse._ArgumentGroup, default: str) -> None:
    """--nproc-per-node, torchrun's ranks per node; `default` says where it comes from."""
    group.add_argument(
        "--nproc-per-node",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"ranks per node (default: {default})",
    )


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that reaches nodes over SSH."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--forks",
        type=_positive_int,
        default=None,
        help="hosts contacted at once (default: all of them, like clush -f N; a bound for "
        "a site that limits parallel SSH logins)",
    )
    group.add_argument(
        "--host-key-policy",
        choices=("strict", "accept-new", "off"),
        default=None,
        help="like OpenSSH StrictHostKeyChecking: strict (default) rejects unknown hosts, "
        "accept-new records them, off trusts anyone (loudly)",
    )
    group.add_argument(
        "--known-hosts",
        action="append",
        default=[],
        metavar="FILE",
        help="extra known_hosts file (repeatable); ~/.ssh/known_hosts is always read",
    )
    group.add_argument(
        "--ssh-config",
        default=None,
        metavar="FILE",
        help="OpenSSH client config to apply (default: ~/.ssh/config)",
    )
    _add_seconds(
        group,
        "--connect-timeout",
        "deadline for TCP connect, banner, key exchange and auth "
        "(default: ansible_ssh_timeout or 10)",
    )
    group.add_argument(
        "--limit",
        default=None,
        metavar="HOSTS",
        help="only these hosts or groups (comma-separated), like ansible --limit",
    )


def _add_inventory_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """The inventory: a positional source and/or -i sources, merged in order like Ansible."""
    parser.add_argument(
        "inventory",
        nargs="?",
        help=f"Ansible inventory: YAML or INI file, or a directory {default}",
    )
    group = parser.add_argument_group("inventory")
    group.add_argument(
        "-i",
        "--inventory",
        dest="inventory_sources",
        action="append",
        default=[],
        metavar="SOURCE",
        help="another inventory source (repeatable; read after the positional one, in order)",
    )
    group.add_argument(
        "--inventory-via-ansible",
        action="store_true",
        help="resolve the inventory with ansible-inventory instead of the built-in readers "
        "(needed for inventory plugins and scripts: runs their code on this machine)",
    )


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("report")
    group.add_argument("--format", choices=REPORT_FORMATS, default="text", help="output format")
    group.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="write the report to FILE"
    )
    _add_only_problems(group, short=True)


def _add_only_problems(group: argparse._ArgumentGroup, *, short: bool) -> None:
    flags = ("--only-problems", "-q") if short else ("--only-problems",)
    group.add_argument(
        *flags,
        action="store_true",
        help="text report: only failures, errors and warnings, and a count of the rest "
        "(JSON and JUnit stay complete)",
    )


def _add_check(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "check",
        help="decide whether a multi-node torchrun job can go ahead",
        description="Probe every node of an Ansible inventory and check parity, health, "
        "network paths and all-reduce bandwidth. Without an inventory, checks this machine.",
    )
    _add_inventory_arguments(parser, "(default: this machine)")
    _add_check_run_options(parser, strict_help="warnings fail the verdict too")
    parser.add_argument(
        "--fix-plan",
        action="store_true",
        help="print the provisioning commands that fix the current findings",
    )
    parser.add_argument(
        "--dcgm-level",
        type=int,
        choices=(0, 1, 2, 3),
        default=None,
        metavar="{1,2,3}",
        help="also run NVIDIA DCGM's `dcgmi diag -r N` on every node (1 quick, 2 medium, "
        "3 long; 0 off; default: clusterkit.dcgm_level, else off; docs/checks.md)",
    )
    _add_bench_gate_options(parser)
    _add_python_option(parser, "ansible_python_interpreter")
    _add_slurm_options(parser)
    _add_connection_options(parser)
    _add_report_options(parser)
    _add_baseline_options(parser)
    parser.set_defaults(handler="clusterkit.commands.check:run")


def _add_baseline_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("baseline (docs/report.md)")
    group.add_argument(
        "--save-baseline",
        metavar="FILE",
        help="record this run's known-good state (versions, GPUs, VBIOS, MTUs, bus "
        "bandwidth) in FILE; written only when the verdict is pass",
    )
    group.add_argument(
        "--baseline",
        metavar="FILE",
        help="name every difference from the baseline in FILE (baseline.drift: a warning, "
        "unless clusterkit.expect pins the value)",
    )


def _add_check_run_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, strict_help: str
) -> None:
    """How the check runs, the same for `check` and the gate of `launch`."""
    parser.add_argument(
        "--skip",
        type=_stage_list,
        action=_AddStages,
        default=frozenset(),
        metavar="STAGE[,STAGE]",
        help=f"skip check stages: {', '.join(SKIPPABLE)} (repeatable)",
    )
    parser.add_argument("--strict", action="store_true", help=strict_help)
    parser.add_argument(
        "--mesh",
        choices=("full", "auto"),
        default=None,
        help="network stage: test every node pair (full), or every pair up to "
        "clusterkit.network.full_mesh_up_to nodes and a covering set beyond (auto, the "
        "default; clusterkit.network.mesh)",
    )
    _add_seconds(
        parser,
        "--timeout",
        f"deadline for each host's probe (default: {PROBE_SECONDS:g})",
        default=PROBE_SECONDS,
    )


def _add_slurm_options(parser: argparse.ArgumentParser, *, exclude_file: bool = True) -> None:
    group = parser.add_argument_group("slurm (see docs/slurm.md)")
    group.add_argument(
        "--slurm",
        action="store_true",
        help="check the nodes of this Slurm allocation (SLURM_JOB_NODELIST)",
    )
    group.add_argument(
        "--slurm-nodes",
        default=None,
        metavar="HOSTLIST",
        help="check these Slurm nodes (hostlist syntax, e.g. gpu[001-004,007])",
    )
    group.add_argument(
        "--slurm-partition",
        default=None,
        metavar="PARTITION",
        help="check every node of a Slurm partition",
    )
    group.add_argument(
        "--settings",
        default=None,
        metavar="FILE",
        help="YAML file with a `clusterkit:` mapping (pins, ports, bench), for --slurm*",
    )
    group.add_argument(
        "--transport",
        choices=("ssh", "srun"),
        default=None,
        help="how to reach Slurm nodes: srun job steps (default inside an allocation) or ssh "
        "(default outside one)",
    )
    if not exclude_file:  # launch: it leaves failing nodes out itself, and may drain them
        group.add_argument(
            "--slurm-drain",
            action="store_true",
            help="drain a node the launch leaves out (a node fault), with the reason, where "
            "this user may (default: print the admin's scontrol command)",
        )
        return
    group.add_argument(
        "--exclude-file",
        default=None,
        metavar="FILE",
        help="on failure, write the failing nodes there, comma-separated (for sbatch --exclude)",
    )


def _fail_if_stale(parser: argparse.ArgumentParser, help_text: str) -> None:
    """--fail-if-stale, and its old spelling --check (hidden, warns) for one release."""
    parser.add_argument("--fail-if-stale", action="store_true", help=help_text)
    parser.add_argument(
        "--check",
        dest="fail_if_stale",
        action=_Deprecated,
        value=True,
        replacement="--fail-if-stale",
    )


def _interpreter(value: str) -> str:
    """A Python to run: a path or a name on PATH, never an option or a control character."""
    if not value or value.startswith("-") or not value.isprintable():
        raise argparse.ArgumentTypeError(f"{value!r} is not a Python interpreter path")
    return value


def _add_node_check(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "node-check",
        help="this node's own health checks, for Slurm's HealthCheckProgram or Prolog",
        description="Run the single-node checks (GPU health, driver/CUDA, expected pins, "
        "/dev/shm, memlock, clock, NCCL debug variables) on this machine, in well under a "
        "second. Exit status as `check`.",
    )
    parser.add_argument(
        "--settings",
        default=None,
        metavar="FILE",
        help="YAML file with a `clusterkit:` mapping (expected pins), as in an inventory",
    )
    parser.add_argument(
        "--slurm-drain",
        action="store_true",
        help="on failure drain this node (reason `clusterkit: <check ids>`); resume it once "
        "it passes, only if clusterkit drained it",
    )
    parser.add_argument(
        "--node-name",
        default=None,
        metavar="NAME",
        help="Slurm's name for this node (default: $SLURMD_NODENAME, else hostname -s)",
    )
    _add_python_option(parser, "the settings' ansible_python_interpreter")
    parser.add_argument("--strict", action="store_true", help="warnings fail the verdict too")
    _add_seconds(
        parser,
        "--timeout",
        "deadline for the probe (default: 30; Slurm kills a health check at 60)",
        default=30.0,
    )
    _add_report_options(parser)
    parser.set_defaults(handler="clusterkit.commands.nodecheck:run")


def _add_bench_gate_options(parser: argparse.ArgumentParser) -> None:
    """Bench options `check` shares with `bench`; `bench` adds the sweep flags."""
    group = parser.add_argument_group("bench")
    group.add_argument(
        "--min-busbw",
        type=_positive_float,
        default=None,
        metavar="GB/S",
        help="all-reduce busbw threshold (overrides NCCL_TESTS_MIN_BW and the inventory)",
    )


def _add_bench(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "bench",
        help="collective bandwidth test on every node (nccl-tests compatible output)",
        description="Run all_reduce (and all_gather, reduce_scatter, alltoall with "
        "--collective) across every node of the inventory (torchrun, one rank per GPU) and "
        "print nccl-tests style bus bandwidth per size; fail when a collective's busbw at the "
        "gate size is under its threshold. With --per-node, every node is also measured alone "
        "(all at once) against an intra-node threshold; with --find-slow, groups of nodes are "
        "measured in rounds to name a slow node. Exit status: 0 pass, 1 below a threshold or a "
        "rank failed, 2 bad input, 3 a node could not run.",
    )
    _add_inventory_arguments(parser, "(default: this machine)")
    _add_bench_sweep_options(parser)
    run = parser.add_argument_group("run")
    _add_bench_run_options(run)
    _add_bench_rounds_options(run)
    _add_bench_gate_options(parser)
    _add_slurm_options(parser)
    _add_connection_options(parser)
    _add_report_options(parser)
    parser.set_defaults(handler="clusterkit.commands.bench:run")


def _add_bench_sweep_options(parser: argparse.ArgumentParser) -> None:
    """The nccl-tests *_perf flags, with their short names. Defaults: the inventory's
    clusterkit.bench, else BenchSettings (shared with `check`)."""
    sweep = parser.add_argument_group(
        "sweep (nccl-tests *_perf flags; defaults: clusterkit.bench in the inventory)"
    )
    sweep.add_argument("-b", "--minbytes", help=f"smallest size (default {BenchSettings.minbytes})")
    sweep.add_argument("-e", "--maxbytes", help=f"largest size (default {BenchSettings.maxbytes})")
    sweep.add_argument(
        "-f",
        "--stepfactor",
        type=_positive_int,
        help=f"size factor (default {BenchSettings.stepfactor})",
    )
    sweep.add_argument(
        "-n",
        "--iters",
        type=_positive_int,
        help=f"timed iterations (default {BenchSettings.iters})",
    )
    sweep.add_argument(
        "-w",
        "--warmup-iters",
        type=int,
        help=f"warmup iterations (default {BenchSettings.warmup_iters})",
    )
    sweep.add_argument(
        "-c",
        "--validate",
        type=int,
        choices=(0, 1),
        default=1,
        help="verify the collectives' results (nccl-tests -c; default 1)",
    )
    sweep.add_argument(
        "--check",
        dest="validate",
        type=int,
        choices=(0, 1),
        action=_Deprecated,
        replacement="--validate",
    )
    sweep.add_argument(
        "-d", "--datatype", help=f"float, half, bfloat16, ... (default {BenchSettings.datatype})"
    )
    sweep.add_argument(
        "--collective",
        default=None,
        metavar="NAME[,NAME...]",
        help="all_reduce, all_gather, reduce_scatter, alltoall: each with its own table and "
        "gate (default: clusterkit.bench.collectives, else all_reduce)",
    )


def _add_bench_run_options(run: argparse._ArgumentGroup) -> None:
    """How the ranks run: backend, ranks, port, image, deadlines and the result file."""
    run.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    _add_nproc_per_node(run, "clusterkit.expect.gpus_per_node, GPUs found, else 1")
    run.add_argument(
        "--gate-size", default=None, metavar="SIZE", help="size the gate reads (default: -e)"
    )
    run.add_argument("--master-port", type=_positive_int, default=None, metavar="PORT")
    run.add_argument(
        "--image",
        default=None,
        help="run inside this image (default: clusterkit.image); '' uses the node interpreter",
    )
    _add_seconds(
        run,
        "--timeout",
        "deadline for the whole run; everything is killed after it "
        f"(default: {BenchSettings.timeout:g})",
    )
    _add_seconds(
        run,
        "--join-timeout",
        f"how long ranks wait for each other to arrive (default: {BenchSettings.join_timeout:g})",
    )
    run.add_argument(
        "-J", "--result-json", default=None, metavar="FILE", help="nccl-tests style JSON result"
    )


def _add_bench_rounds_options(run: argparse._ArgumentGroup) -> None:
    """The runs after the global one: every node alone, and groups of nodes in rounds."""
    run.add_argument(
        "--find-slow",
        action="store_const",
        const=True,
        default=None,
        help="after the all-reduce, measure groups of nodes in rounds and name a slow node "
        "(default: clusterkit.bench.find_slow)",
    )
    run.add_argument(
        "--per-node",
        action="store_true",
        help="after the global run, bench every node alone (its own ranks, all nodes at once) "
        "and name a node below its intra-node threshold or the others' median; needs 2+ "
        "ranks per node",
    )
    run.add_argument(
        "--group-size",
        type=_positive_int,
        default=None,
        metavar="K",
        help=f"nodes per group with --find-slow (default {BenchSettings.find_slow_group})",
    )


def _add_image(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser("image", help="lock, render, build, push and verify pinned images")
    parser.set_defaults(handler="clusterkit.commands.image:run")
    steps = parser.add_subparsers(dest="image_command", metavar="STEP", parser_class=_Parser)
    _add_image_file_steps(steps)
    _add_image_engine_steps(steps)
    for name, step in steps.choices.items():
        step.epilog = _examples_epilog(IMAGE_EXAMPLES[name])
        step.formatter_class = _ExamplesFormatter


def _add_image_file_steps(steps: argparse._SubParsersAction[_Parser]) -> None:
    """lock and render: the files beside the spec, for every spec when none is named."""
    spec_help = "spec folder or image.yaml (default: every images/*/image.yaml)"
    lock = steps.add_parser(
        "lock",
        help="resolve the base digest and hashed requirements",
        description="Resolve the spec's base image to a digest and its Python requirements to "
        "exact, hashed versions for the image's platform; write image.lock.json beside it.",
    )
    lock.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
    _fail_if_stale(lock, "write nothing; exit 1 when a lock is stale")
    lock.add_argument(
        "--offline", action="store_true", help="take the base digest from the spec's pin"
    )
    render = steps.add_parser(
        "render",
        help="generate the Dockerfile and pip files",
        description="Generate the Dockerfile and the hashed requirements file from the spec "
        "and its lock; --fail-if-stale fails when the committed files differ from what it would "
        "write.",
    )
    render.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
    _fail_if_stale(render, "write nothing; exit 1 on drift")


def _add_image_engine_steps(steps: argparse._SubParsersAction[_Parser]) -> None:
    """build, push and verify: one spec's image, through the Docker Engine API."""
    for name, text, description in (
        (
            "build",
            "build through the Docker Engine API",
            "Build the rendered Dockerfile through the Docker Engine API with OCI labels and "
            "the spec-hash tag; an unchanged spec reuses the cached image.",
        ),
        (
            "push",
            "push every tag; print and record the digest",
            "Push every tag of the built image to its registry and print the digest, the "
            "reference that nodes should run (repository@sha256:...).",
        ),
        (
            "verify",
            "run the image and compare it with the lock",
            "Run the image once and compare its torch, CUDA, NCCL and Python with the lock.",
        ),
    ):
        step = steps.add_parser(name, help=text, description=description)
        step.add_argument("specs", nargs=1, metavar="SPEC", help="spec folder or image.yaml")
        step.add_argument("--repository", help="override the spec's repository")
        step.add_argument("--quiet", "-q", action="store_true", help="no progress output")
        if name != "verify":
            step.add_argument("--tag", action="append", default=[], help="extra tag (repeatable)")
    build, push, verify = (steps.choices[name] for name in ("build", "push", "verify"))
    build.add_argument("--no-cache", action="store_true", help="ignore the layer cache")
    build.add_argument("--revision", help="org.opencontainers.image.revision (default: git)")
    build.add_argument(
        "--network",
        default="host",
        help="network for RUN steps (default: host, reaching registries as the host does)",
    )
    push.add_argument("--digest-file", metavar="FILE", help="write the pushed digest as JSON")
    verify.add_argument("--reference", help="image to run (default: the spec-hash tag)")
    _add_seconds(verify, "--timeout", "run deadline", default=120.0)


def _add_cost(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "cost",
        help="spot vs on-demand cost for a multi-node job",
        description="Expected cost, time and risk of a synchronous multi-node job on spot "
        "capacity with checkpoint/restart vs on-demand (Young/Daly model and a Monte Carlo). "
        "Flags override the inventory's `clusterkit.cost` settings. "
        "`clusterkit cost prices update` refreshes the price catalog (see docs/cost.md).",
    )
    parser.add_argument(
        "inventory", nargs="?", help="Ansible inventory: file or directory (node count, prices)"
    )
    _add_cost_job(parser)
    _add_cost_interruptions(parser)
    _add_cost_prices(parser)
    _add_cost_output(parser)
    parser.set_defaults(handler="clusterkit.commands.cost:run")


def _add_cost_job(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("job")
    job.add_argument("--nodes", type=int, help="nodes (default: the inventory's hosts)")
    job.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: catalog or 8)")
    job.add_argument("--hours", type=float, help="failure-free compute time in hours")
    job.add_argument("--checkpoint-min", type=float, help="blocking checkpoint cost (default 5)")
    job.add_argument("--restart-min", type=float, help="restart cost, billed (default 10)")
    job.add_argument(
        "--interval",
        type=float,
        metavar="MIN",
        help="checkpoint every MIN minutes (default: Daly's optimum)",
    )
    job.add_argument("--deadline", type=float, metavar="HOURS", help="wall-time deadline")


def _add_cost_interruptions(parser: argparse.ArgumentParser) -> None:
    """What stops the job: spot preemptions (a rate, a share, a bucket or a trace), the wait
    for capacity, hardware failures."""
    risk = parser.add_argument_group("interruptions")
    risk.add_argument(
        "--preempt-rate",
        metavar="RATE|SHARE%|BUCKET",
        help="spot preemptions per node-hour (at most 100, e.g. 0.02); or the share of "
        "instances interrupted per month (e.g. 5%%); or an AWS Spot Instance Advisor bucket "
        "('<5%%', '5-10%%', '10-15%%', '15-20%%', '>20%%'): the advisor's monthly "
        "interruption frequency, converted as -ln(1 - p) / 730 per hour",
    )
    risk.add_argument(
        "--trace",
        metavar="FILE",
        help="observed interruptions, `TIME [NODE]` per line (see docs/cost.md)",
    )
    risk.add_argument(
        "--correlation",
        type=float,
        help="mean nodes taken per preemption event (1 = independent, the default)",
    )
    risk.add_argument(
        "--capacity-wait-median",
        metavar="HOURS|off",
        help="time to get N nodes back after a preemption (default 0.4)",
    )
    risk.add_argument("--capacity-wait-mean", metavar="HOURS|off", help="its mean (default 1.5)")
    risk.add_argument(
        "--hardware-rate",
        type=float,
        metavar="RATE",
        help="hardware failures per node-hour (default 2e-5 per GPU)",
    )
    risk.add_argument(
        "--hazard",
        metavar="KIND",
        help="preemption hazard: exponential (default), weibull:K, preemptible24h",
    )


def _add_cost_prices(parser: argparse.ArgumentParser) -> None:
    prices = parser.add_argument_group("prices (USD per node-hour)")
    prices.add_argument("--on-demand-price", type=float, metavar="USD")
    prices.add_argument("--spot-price", type=float, metavar="USD")
    prices.add_argument("--instance", help="instance type from the price catalog")
    prices.add_argument("--region", help="region in the price catalog")
    prices.add_argument(
        "--catalog",
        metavar="FILE",
        help="price catalog JSON (default: the user catalog `clusterkit cost prices update` "
        "wrote, else the bundled snapshot)",
    )
    prices.add_argument(
        "--max-price-age-days",
        type=float,
        metavar="DAYS",
        help="warn when a catalog price used is older (default 180)",
    )


def _add_cost_output(parser: argparse.ArgumentParser) -> None:
    sim = parser.add_argument_group("simulation and output")
    sim.add_argument(
        "--trials",
        type=int,
        default=10_000,
        help="Monte Carlo trials (default 10000, 0 = none; at most 1,000,000, run in chunks "
        "of 100,000; fewer when each run expects so many interruptions that the simulation "
        "would draw over 20 million lifetimes, which the output then says)",
    )
    sim.add_argument("--seed", type=int, default=1, help="random seed, 0 to 4294967295 (default 1)")
    sim.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    sim.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE")
    sim.add_argument("--plot", metavar="FILE", help="write a PNG of cost vs preemption rate")


def cost_prices_parser() -> argparse.ArgumentParser:
    """`clusterkit cost prices update`: its own parser, since `cost` takes an optional
    inventory positional that would swallow a sub-command word."""
    parser = _Parser(
        prog="clusterkit cost prices",
        description="Manage the price catalog that `clusterkit cost` reads.",
        epilog=_examples_epilog(PRICES_EXAMPLES),
        formatter_class=_ExamplesFormatter,
    )
    steps = parser.add_subparsers(dest="prices_command", metavar="STEP", parser_class=_Parser)
    update = steps.add_parser(
        "update",
        help="refresh prices from the providers' public endpoints",
        description="Fetch AWS on-demand list prices (Price List offer files), AWS Spot "
        "Advisor interruption buckets and Azure on-demand and spot prices (Retail Prices "
        "API), merge them into a copy of the catalog (rows added, prices replaced, each "
        "dated and sourced) and write it. AWS spot prices need credentials and are kept; "
        "GCP has no keyless endpoint and is kept. Exit 3 when an endpoint cannot be reached "
        "before the deadline.",
        epilog=_examples_epilog(PRICES_EXAMPLES),
        formatter_class=_ExamplesFormatter,
    )
    update.add_argument(
        "--catalog", metavar="FILE", help="catalog to start from (default: the one `cost` reads)"
    )
    update.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="where to write (default: $XDG_DATA_HOME/clusterkit/prices.json, else "
        "~/.local/share/clusterkit/prices.json; never the packaged catalog)",
    )
    update.add_argument(
        "--provider", action="append", choices=("aws", "azure"), help="only these (repeatable)"
    )
    update.add_argument(
        "--region", action="append", metavar="REGION", help="AWS regions (repeatable)"
    )
    _add_seconds(
        update, "--timeout", "deadline for all requests together (default 120)", default=120.0
    )
    update.add_argument(
        "--aws-url", metavar="URL", help="AWS Price List base (env CLUSTERKIT_AWS_PRICING_URL)"
    )
    update.add_argument(
        "--spot-advisor-url",
        metavar="URL",
        help="Spot Advisor data file (env CLUSTERKIT_AWS_SPOT_ADVISOR_URL)",
    )
    update.add_argument(
        "--azure-url",
        metavar="URL",
        help="Azure Retail Prices API (env CLUSTERKIT_AZURE_PRICES_URL)",
    )
    update.set_defaults(handler="clusterkit.commands.cost_prices:run")
    _add_verbosity(parser)
    return parser


def _add_provision(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "provision",
        help="run the Ansible playbooks on the inventory",
        description="Run ansible-playbook -i INVENTORY playbooks/site.yml: the roles bring "
        "nodes to what `check` demands.",
    )
    parser.add_argument("inventory", help="Ansible inventory (the one `check` reads)")
    parser.add_argument(
        "--tags",
        default=None,
        metavar="TAG[,TAG]",
        help="only these roles (tags: playbooks/README.md)",
    )
    parser.add_argument("--skip-tags", default=None, metavar="TAG[,TAG]", help="not these roles")
    parser.add_argument(
        "--limit", default=None, metavar="HOSTS", help="only these hosts or groups, as ansible"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="report what would change, change nothing"
    )
    parser.add_argument(
        "--check", dest="dry_run", action=_Deprecated, value=True, replacement="--dry-run"
    )
    parser.add_argument("--diff", action="store_true", help="show the changes to files")
    _add_seconds(
        parser,
        "--timeout",
        "deadline for the whole playbook run (default: 7200)",
        default=7200.0,
    )
    parser.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="passed to ansible-playbook -e (repeatable), e.g. shm_size=64g",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="ansible-playbook verbosity (-vvv); -vv also shows clusterkit's debug logs",
    )
    parser.set_defaults(handler="clusterkit.commands.provision:run")


def _add_launch(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "launch",
        help="check, then run torchrun on every node with the checked settings",
        description="Run the check and, only when it passes, start the job after `--` with "
        "torchrun on every node (static rendezvous, the checked master, port and interface), "
        "stream every rank's output as host/rank, stop everything on the first failure, a hang "
        "or Ctrl-C. Exit status: the job's (0 every rank succeeded; a failed rank's own status, "
        "128+N for a signal), 124 hung, 3 a node was lost, 130/143 Ctrl-C/SIGTERM; the check's "
        "status when it did not pass. Example: clusterkit launch inv.yaml -- train.py --epochs 3",
    )
    _add_inventory_arguments(parser, "(default: this machine)")
    _add_launch_gate(parser)
    _add_launch_job(parser)
    _add_resilience(parser)
    _add_supervision(parser)
    _add_bench_gate_options(parser)
    _add_slurm_options(parser, exclude_file=False)
    _add_connection_options(parser)
    parser.set_defaults(handler="clusterkit.commands.launch:run", output=None, fix_plan=False)


def _add_launch_gate(parser: argparse.ArgumentParser) -> None:
    """The check before the job: `check`'s own options, or a saved report of it."""
    gate = parser.add_argument_group("gate")
    _add_check_run_options(gate, strict_help="warnings refuse the launch too")
    gate.add_argument("--no-check", action="store_true", help="launch without checking (loudly)")
    gate.add_argument(
        "--lint",
        choices=("warn", "strict", "off"),
        default="warn",
        help="lint the job's script first (clusterkit lint, docs/lint.md): print the findings "
        "and go ahead (warn, the default), refuse a failing lint (strict; with --strict, a "
        "warning too), or skip it (off)",
    )
    gate.add_argument(
        "--check-report",
        metavar="FILE",
        help="reuse this passing JSON report of `check` instead of checking again",
    )
    _add_seconds(
        gate,
        "--max-age",
        "--check-report must be younger than this (default: 3600)",
        default=3600.0,
    )
    gate.add_argument(
        "--check-output",
        metavar="FILE",
        help="write the check's report to FILE (--format picks json, junit or html)",
    )
    gate.add_argument(
        "--format", choices=(*FORMATS, "html"), default="text", help="the check report format"
    )
    _add_only_problems(gate, short=True)


def _add_launch_job(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("job")
    _add_nproc_per_node(job, "the GPUs per node when torch can use them, else 1")
    _add_seconds(
        job,
        "--join-timeout",
        "how long nodes wait for each other at the rendezvous (default: 300)",
        default=300.0,
    )
    job.add_argument("--workdir", metavar="DIR", help="run the job from DIR on every node")
    job.add_argument(
        "--print",
        action="store_true",
        help="print each node's env file and command instead of running them",
    )
    job.add_argument(
        "--print-dir", metavar="DIR", help="like --print, and write HOST.env and HOST.sh to DIR"
    )


def _add_supervision(parser: argparse.ArgumentParser) -> None:
    """How `launch` watches the running job: logs, hangs, stops and time limits."""
    watch = parser.add_argument_group("supervision")
    watch.add_argument(
        "--log-dir", metavar="DIR", help="rank logs and stack dumps, DIR/attempt-N/ per attempt"
    )
    watch.add_argument(
        "--hang-timeout",
        type=_hang_seconds,
        default=HANG_TIMEOUT,
        metavar="SECONDS",
        help="no rank advanced for this long (no collective completed on any rank, no rank "
        "computing outside one; what the ranks print does not count): dump every rank's "
        f"stack and flight record and stop; 0 turns it off (default: {HANG_TIMEOUT:g}, "
        "torch's own gloo timeout)",
    )
    watch.add_argument(
        "--straggler-fault",
        action="store_true",
        help="a node named as a straggler during the run stops the job as a node fault (with "
        "spares, the job moves off it); without it the straggler is only named",
    )
    watch.add_argument(
        "--no-hardware-watch",
        action="store_true",
        help="do not re-read each node's kernel log (new Xids, OOM kills), RDMA ports and "
        "nvidia-smi while the job runs (by default a fault `check` fails a node for stops the "
        "job at once as a node fault)",
    )
    watch.add_argument(
        "--stacks",
        choices=("auto", "py-spy", "faulthandler"),
        default="auto",
        help="how a hang reads the ranks' stacks: py-spy on the node when it is there, else "
        "faulthandler (a SIGUSR1 handler installed in every rank) (default: auto)",
    )
    _add_seconds(
        watch,
        "--stop-grace",
        "after SIGTERM, ranks get this long before SIGKILL (default: 5)",
        default=5.0,
    )
    _add_seconds(
        watch,
        "--node-timeout",
        "a node silent this long (it speaks at least once a second) is lost (default: 10)",
        default=10.0,
    )
    _add_seconds(watch, "--time-limit", "stop the job after this long (default: none)")


def _add_resilience(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("resilience (docs/launch.md)")
    group.add_argument(
        "--nnodes",
        type=_node_count,
        default=None,
        metavar="N|MIN:MAX",
        help="run on N of the hosts (MAX when that many are healthy, down to MIN); the others "
        "are spares, and hosts that fail the check are left out (default: every host, all "
        "must pass)",
    )
    group.add_argument(
        "--max-restarts",
        type=_count_or_zero,
        default=0,
        metavar="K",
        help="after a node fault (a lost node, a kernel-killed rank, failing hardware): leave "
        "the node out, take a spare, re-check, run the job again; at most K times (default: 0)",
    )
    group.add_argument(
        "--max-restarts-on-errors",
        type=_count_or_zero,
        default=0,
        metavar="M",
        help="run the job again after a fault of its own (an exception) at most M times "
        "(default: 0: a bug is not retried)",
    )
    group.add_argument(
        "--recheck",
        choices=("fast", "bench"),
        default="fast",
        help="what a new node set passes before a restart: probe, static and network checks "
        "(fast), and the bandwidth test too (bench) (default: fast)",
    )
    group.add_argument(
        "--trace",
        metavar="FILE",
        help="write the node faults as a trace for `clusterkit cost --trace` (with the "
        "measured restart time)",
    )


def _add_lint(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "lint",
        help="find the training script's distributed mistakes before the job runs",
        description="Read the training script and the local modules it imports (never run "
        "them) and name the mistakes that break or slow a multi-node torchrun job: a "
        "localhost MASTER_ADDR, mp.spawn under torchrun, the GPU picked by the global rank, a "
        "--local_rank argument, samplers, collectives in except blocks, ... (docs/lint.md). "
        "With an inventory (or --nodes), rules are judged for that cluster. Exit status: 0 "
        "clean or warnings, 1 a failing rule (--strict: a warning too), 2 bad input.",
    )
    parser.add_argument("script", metavar="SCRIPT", help="the job's entry script")
    parser.add_argument(
        "script_args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the script's own arguments, as launch would pass them (options of lint go "
        "before SCRIPT)",
    )
    cluster = parser.add_argument_group("the cluster the script will run on")
    cluster.add_argument(
        "-i",
        "--inventory",
        dest="inventory_sources",
        action="append",
        default=[],
        metavar="SOURCE",
        help="Ansible inventory: its hosts are the nodes, clusterkit.expect.gpus_per_node the "
        "ranks per node (repeatable)",
    )
    cluster.add_argument(
        "--nodes", type=_positive_int, default=None, metavar="N", help="nodes the job runs on"
    )
    _add_nproc_per_node(cluster, "the inventory's expect.gpus_per_node, else not known")
    parser.add_argument("--strict", action="store_true", help="warnings fail too")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(handler="clusterkit.commands.lint:run")


def _add_completion(sub: argparse._SubParsersAction[_Parser]) -> None:
    parser = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print the completion script for your shell; load it from your shell's "
        "start-up file.",
    )
    parser.add_argument("shell", nargs="?", choices=SHELLS, help="bash, zsh or fish")
    parser.add_argument(  # what the scripts call to complete --limit: not for people
        "--hosts", metavar="INVENTORY", default=None, help=argparse.SUPPRESS
    )
    parser.set_defaults(handler="clusterkit.commands.completion:run")


# What `--help` of each command ends with: the commands people type most.
EXAMPLES = {
    "check": [
        "clusterkit check                                   # this machine",
        "clusterkit check inventory.yaml --skip bench       # parity, health and network",
        "clusterkit check -i hosts.ini -i extra.yml --limit 'gpu[01:04]'",
        "clusterkit check inventory.yaml --format junit -o report.xml   # for CI",
        "clusterkit check inventory.yaml --fix-plan         # the provision commands",
    ],
    "node-check": [
        "clusterkit node-check                              # this node, in well under a second",
        "clusterkit node-check --slurm-drain                # Slurm HealthCheckProgram",
    ],
    "bench": [
        "clusterkit bench inventory.yaml --min-busbw 40",
        "clusterkit bench inventory.yaml -J result.json     # nccl-tests compatible JSON",
    ],
    "launch": [
        "clusterkit launch inventory.yaml -- train.py --epochs 3",
        "clusterkit launch inventory.yaml --print -- train.py   # commands and env files",
    ],
    "image": [
        "clusterkit image lock images/cpu-torch && clusterkit image render images/cpu-torch",
        "clusterkit image build images/cpu-torch && clusterkit image push images/cpu-torch",
    ],
    "cost": [
        "clusterkit cost --nodes 4 --hours 72 --instance p5.48xlarge --region us-east-1",
        "clusterkit cost --nodes 16 --hours 200 --instance p5.48xlarge --preempt-rate '5-10%' "
        "--plot cost.png",
    ],
    "provision": [
        "clusterkit provision inventory.yaml --dry-run      # what would change",
        "clusterkit provision inventory.yaml --tags firewall --limit node4",
    ],
    "lint": [
        "clusterkit lint train.py                           # the script's distributed mistakes",
        "clusterkit lint -i inventory.yaml train.py --epochs 3   # judged for this cluster",
        "clusterkit lint --nodes 2 --nproc-per-node 8 --format json train.py",
    ],
    "completion": [
        'eval "$(clusterkit completion bash)"              # in ~/.bashrc',
        'eval "$(clusterkit completion zsh)"               # in ~/.zshrc',
        "clusterkit completion fish | source               # in ~/.config/fish/config.fish",
    ],
}


# `image STEP --help` and `cost prices --help` end with theirs too.
IMAGE_EXAMPLES = {
    "lock": [
        "clusterkit image lock images/cpu-torch             # write image.lock.json",
        "clusterkit image lock --fail-if-stale              # CI: every spec's lock is current",
    ],
    "render": [
        "clusterkit image render images/cpu-torch           # write the Dockerfile",
        "clusterkit image render --fail-if-stale            # CI: the committed files are current",
    ],
    "build": [
        "clusterkit image build images/cpu-torch",
        "clusterkit image build images/cpu-torch --no-cache --tag latest",
    ],
    "push": [
        "clusterkit image push images/cpu-torch --digest-file digest.json",
        "clusterkit image push images/cpu-torch --repository registry.example.com/ml/torch",
    ],
    "verify": [
        "clusterkit image verify images/cpu-torch           # the spec-hash tag",
        "clusterkit image verify images/cpu-torch --reference registry.example.com/ml/torch:2.5.1",
    ],
}
PRICES_EXAMPLES = [
    "clusterkit cost prices update",
    "clusterkit cost prices update --provider azure -o prices.json",
    "clusterkit cost --catalog prices.json --instance ND96isr_H100_v5 --region eastus "
    "--nodes 4 --hours 72 --preempt-rate 5%",
]


EXAMPLES_HEADING = "examples:\n"


def _examples_epilog(lines: list[str]) -> str:
    return EXAMPLES_HEADING + "\n".join(f"  {line}" for line in lines)


class _ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual but prints the examples block line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _add_examples(sub: argparse._SubParsersAction[_Parser]) -> None:
    for name, child in sub.choices.items():
        lines = EXAMPLES.get(name)
        if lines:
            child.epilog = _examples_epilog(lines)
            child.formatter_class = _ExamplesFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="clusterkit",
        description="Decide whether a multi-node PyTorch job can go ahead, and make it so. "
        "Exit status: 0 pass, 1 a check failed, 2 bad input, 3 incomplete, 130 interrupted "
        "(129 SIGHUP, 143 SIGTERM).",
    )
    parser.add_argument("--version", action="version", version=f"clusterkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (
        _add_check,
        _add_node_check,
        _add_bench,
        _add_launch,
        _add_image,
        _add_cost,
        _add_provision,
        _add_lint,
        _add_completion,
    ):
        add(sub)
    _add_examples(sub)
    _add_verbosity(parser)
    return parser


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    """-v / -vv on this parser and every command below it (where -v is not taken already:
    `provision -v` also raises ansible-playbook's verbosity)."""
    if "-v" not in parser._option_string_actions:
        parser.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=argparse.SUPPRESS,  # a command's absent -v must not undo `clusterkit -v`
            help="more: -v clusterkit's progress on stderr and every check and host of the "
            "report on a terminal, -vv debug logs of every library",
        )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_verbosity(child)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def _speaking_to(
    parser: argparse.ArgumentParser, env: Environment | None
) -> argparse.ArgumentParser:
    """`parser` with help, version and warnings going to `env`'s streams."""
    if env is not None:
        for each in _parsers(parser):
            if isinstance(each, _Parser):
                each.stdout, each.stderr = env.stdout, env.stderr
    return parser


def _parse_words(
    parser: argparse.ArgumentParser, words: list[str], env: Environment | None
) -> argparse.Namespace:
    """parse_args, but words no parser took are refused by the command they were given to,
    which knows its own flags for a "did you mean"."""
    args, extra = _speaking_to(parser, env).parse_known_args(words)
    if extra:
        _chosen(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)command parser the parsed `args` went through."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(getattr(args, action.dest, None) or "")
            if child is not None:
                return _chosen(child, args)
    return parser


def parse(argv: Sequence[str] | None = None, env: Environment | None = None) -> argparse.Namespace:
    """The command line as a Namespace; --help and --version print to `env`'s stdout (None:
    the process's) and exit with SystemExit, as argparse does."""
    words = list(sys.argv[1:] if argv is None else argv)
    job: list[str] = []
    if "--" in words:  # `launch INV -- train.py ARGS`: the job's words are not ours
        cut = words.index("--")
        words, job = words[:cut], words[cut + 1 :]
    lead = next((i for i, word in enumerate(words) if not word.startswith("-")), len(words))
    if words[lead : lead + 2] == ["cost", "prices"]:
        args = _parse_words(cost_prices_parser(), words[:lead] + words[lead + 2 :], env)
        if args.prices_command is None:
            raise UsageError("cost prices: give a step", hint="try `clusterkit cost prices update`")
        args.command = "cost"
    else:
        args = _parse_words(build_parser(), words, env)
    args.verbose = getattr(args, "verbose", 0)
    if args.command is None:
        raise UsageError("no command given", hint="try `clusterkit check`")
    if job and args.command not in ("launch", "lint"):
        raise UsageError(f"{args.command}: unexpected arguments after --")
    args.job = job
    if args.command == "lint":  # `lint train.py -- --epochs 3`: the script's words too
        args.script_args = [*args.script_args, *job]
    return args


# Files a command writes when it ends: refused at the start (exit 2), not after the run.
OUTPUT_FLAGS = {
    "output": "-o",
    "result_json": "-J",
    "plot": "--plot",
    "digest_file": "--digest-file",
    "check_output": "--check-output",
    "exclude_file": "--exclude-file",
    "save_baseline": "--save-baseline",
}
# Written by one command only: `cost --trace` is a file read, `launch --trace` one written.
COMMAND_OUTPUT_FLAGS = {"launch": {"trace": "--trace"}}


def dispatch(args: argparse.Namespace, env: Environment) -> ExitStatus | int:
    """The command's exit status: an ExitStatus, or (launch) the job's own status. Every
    command runs as `run(args, env)`, with the run's streams, variables and folder."""
    from clusterkit.report import ensure_writable

    outputs = {**OUTPUT_FLAGS, **COMMAND_OUTPUT_FLAGS.get(getattr(args, "command", ""), {})}
    for dest, flag in outputs.items():
        if getattr(args, dest, None):
            ensure_writable(getattr(args, dest), flag)
    module_name, _, function_name = args.handler.partition(":")
    handler: Callable[[argparse.Namespace, Environment], ExitStatus | int] = getattr(
        importlib.import_module(module_name), function_name
    )
    status = handler(args, env)
    return ExitStatus(status) if status in set(ExitStatus) else int(status)
