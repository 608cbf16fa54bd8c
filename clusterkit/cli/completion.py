"""`clusterkit completion`: its arguments, and the typed request they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.parser import Parser
from clusterkit.completion import SHELLS


@dataclass(frozen=True)
class CompletionRequest:
    """`clusterkit completion`, as its arguments ask for it."""

    shell: str | None = None  # None: not given
    hosts: str | None = None  # --hosts INVENTORY: its host names, for the scripts' --limit


def request(args: argparse.Namespace) -> CompletionRequest:
    return CompletionRequest(shell=args.shell, hosts=args.hosts)


def add(sub: argparse._SubParsersAction[Parser]) -> None:
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
