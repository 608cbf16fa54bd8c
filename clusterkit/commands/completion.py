"""`clusterkit completion SHELL`: print the shell completion script."""

from __future__ import annotations

import argparse
import sys

from clusterkit.completion import script
from clusterkit.status import ExitStatus


def run(args: argparse.Namespace) -> ExitStatus:
    from clusterkit.cli import build_parser

    sys.stdout.write(script(build_parser(), args.shell))
    return ExitStatus.PASSED
