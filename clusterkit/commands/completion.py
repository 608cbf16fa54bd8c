"""`clusterkit completion SHELL`: print the shell completion script."""

from __future__ import annotations

import argparse

from clusterkit.completion import script
from clusterkit.environment import Environment
from clusterkit.status import ExitStatus


def completion_script(shell: str) -> str:
    """The whole command line's script, `cost prices` (a parser of its own) included."""
    from clusterkit.cli import build_parser, cost_prices_parser

    return script(build_parser(), shell, {"cost prices": cost_prices_parser()})


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    env.stdout.write(completion_script(args.shell))
    return ExitStatus.PASSED
