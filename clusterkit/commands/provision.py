"""`clusterkit provision`: validate the inventory, then run the playbooks on it."""

from __future__ import annotations

import argparse

from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.inventory import load_inventory, select_hosts
from clusterkit.provision.playbook import (
    PlaybookRun,
    ansible_playbook,
    build_argv,
    find_playbook,
    run_playbook,
)
from clusterkit.provision.remedy import TAGS
from clusterkit.redact import redact_text
from clusterkit.status import ExitStatus


def split_tags(text: str | None, flag: str) -> tuple[str, ...]:
    """Comma-separated playbook tags, each one the playbooks define."""
    if not text:
        return ()
    tags = tuple(tag.strip() for tag in text.split(",") if tag.strip())
    unknown = [tag for tag in tags if tag not in TAGS]
    if unknown:
        raise UsageError(
            f"{flag}: unknown tag {', '.join(unknown)}", hint=f"tags: {', '.join(TAGS)}"
        )
    return tags


def plan(args: argparse.Namespace, env: Environment) -> PlaybookRun:
    """The run the arguments ask for, after the same inventory checks `check` makes."""
    # ansible-playbook connects, not clusterkit: it runs the inventory's plugins and scripts
    # anyway, and honours become.
    inventory = load_inventory(args.inventory, for_ansible=True, environ=env.environ)
    for warning in inventory.warnings:
        print(f"clusterkit: warning: {redact_text(warning)}", file=env.stderr)
    if args.limit:
        select_hosts(inventory, args.limit)  # a limit naming no host is an error, as in check
    extra = [item for value in args.extra_vars for item in ("-e", value)]
    if args.verbose:
        extra.append("-" + "v" * args.verbose)
    return PlaybookRun(
        inventory=args.inventory,
        playbook=find_playbook(env.environ),
        tags=split_tags(args.tags, "--tags"),
        skip_tags=split_tags(args.skip_tags, "--skip-tags"),
        limit=args.limit,
        check=args.dry_run,
        diff=args.diff,
        extra=tuple(extra),
    )


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    playbook_run = plan(args, env)
    argv = build_argv(playbook_run, ansible_playbook(env.environ))
    status = run_playbook(argv, timeout=args.timeout, environ=env.environ)
    return ExitStatus.PASSED if status == 0 else ExitStatus.FAILED
