"""`clusterkit provision`: its arguments, and the typed request they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    add_seconds,
)
from clusterkit.cli.parser import Deprecated, Parser


@dataclass(frozen=True)
class ProvisionRequest:
    """`clusterkit provision`, as its flags ask for it."""

    inventory: str
    tags: str | None = None  # TAG[,TAG]
    skip_tags: str | None = None
    limit: str | None = None
    dry_run: bool = False
    diff: bool = False
    timeout: float = 7200.0
    extra_vars: tuple[str, ...] = ()  # each passed to ansible-playbook -e
    verbose: int = 0  # ansible-playbook's -v count


def request(args: argparse.Namespace) -> ProvisionRequest:
    return ProvisionRequest(
        inventory=args.inventory,
        tags=args.tags,
        skip_tags=args.skip_tags,
        limit=args.limit,
        dry_run=args.dry_run,
        diff=args.diff,
        timeout=args.timeout,
        extra_vars=tuple(args.extra_vars),
        verbose=args.verbose,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
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
        "--check", dest="dry_run", action=Deprecated, value=True, replacement="--dry-run"
    )
    parser.add_argument("--diff", action="store_true", help="show the changes to files")
    add_seconds(
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
