"""The option groups several commands share (inventory, connection, Slurm, report, the
check's run), each defined once so a flag means the same wherever it appears."""

from __future__ import annotations

import argparse

from clusterkit.cli.parser import (
    AddStages,
    Deprecated,
    positive_float,
    positive_int,
    python_path,
    stage_list,
)
from clusterkit.contract.names import SKIPPABLE
from clusterkit.probe import PROBE_SECONDS

FORMATS = ("text", "json", "junit")


REPORT_FORMATS = (*FORMATS, "prometheus", "html")  # check, node-check, bench (docs/report.md)


def add_seconds(
    group: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    help_text: str,
    *,
    default: float | None = None,
) -> None:
    """A duration flag (a deadline, a grace, an age): a positive number of SECONDS."""
    group.add_argument(
        flag, type=positive_float, default=default, metavar="SECONDS", help=help_text
    )


def add_python_option(parser: argparse.ArgumentParser, interpreter: str) -> None:
    """--python: the interpreter the job runs, whose torch the checks look at."""
    parser.add_argument(
        "--python",
        type=python_path,
        default=None,
        metavar="PATH",
        help=f"the Python the job runs (default: {interpreter}, else python3 on PATH): "
        "torch is checked for it",
    )


def add_nproc_per_node(group: argparse._ArgumentGroup, default: str) -> None:
    """--nproc-per-node, torchrun's ranks per node; `default` says where it comes from."""
    group.add_argument(
        "--nproc-per-node",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"ranks per node (default: {default})",
    )


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that reaches nodes over SSH."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--forks",
        type=positive_int,
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
    add_seconds(
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


def add_inventory_arguments(parser: argparse.ArgumentParser, default: str) -> None:
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


def add_report_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("report")
    group.add_argument("--format", choices=REPORT_FORMATS, default="text", help="output format")
    group.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="write the report to FILE"
    )
    add_only_problems(group, short=True)


def add_only_problems(group: argparse._ArgumentGroup, *, short: bool) -> None:
    flags = ("--only-problems", "-q") if short else ("--only-problems",)
    group.add_argument(
        *flags,
        action="store_true",
        help="text report: only failures, errors and warnings, and a count of the rest "
        "(JSON and JUnit stay complete)",
    )


def add_check_run_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, strict_help: str
) -> None:
    """How the check runs, the same for `check` and the gate of `launch`."""
    parser.add_argument(
        "--skip",
        type=stage_list,
        action=AddStages,
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
    add_seconds(
        parser,
        "--timeout",
        f"deadline for each host's probe (default: {PROBE_SECONDS:g})",
        default=PROBE_SECONDS,
    )


def add_slurm_options(parser: argparse.ArgumentParser, *, exclude_file: bool = True) -> None:
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


def add_bench_gate_options(parser: argparse.ArgumentParser) -> None:
    """Bench options `check` shares with `bench`; `bench` adds the sweep flags."""
    group = parser.add_argument_group("bench")
    group.add_argument(
        "--min-busbw",
        type=positive_float,
        default=None,
        metavar="GB/S",
        help="all-reduce busbw threshold (overrides NCCL_TESTS_MIN_BW and the inventory)",
    )


def fail_if_stale(parser: argparse.ArgumentParser, help_text: str) -> None:
    """--fail-if-stale, and its old spelling --check (hidden, warns) for one release."""
    parser.add_argument("--fail-if-stale", action="store_true", help=help_text)
    parser.add_argument(
        "--check",
        dest="fail_if_stale",
        action=Deprecated,
        value=True,
        replacement="--fail-if-stale",
    )
