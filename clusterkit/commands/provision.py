"""`clusterkit provision`: validate the inventory, then run the playbooks on it."""

from __future__ import annotations

from clusterkit.cli.provision import ProvisionRequest
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.inventory import select_hosts
from clusterkit.provision.playbook import (
    PlaybookRun,
    ansible_playbook,
    build_argv,
    find_playbook,
    run_playbook,
)
from clusterkit.provision.remedy import TAGS
from clusterkit.redact import redact_text
from clusterkit.settings.loader import load_inventory
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


def plan(request: ProvisionRequest, env: Environment) -> PlaybookRun:
    """The run the arguments ask for, after the same inventory checks `check` makes."""
    # ansible-playbook connects, not clusterkit: it runs the inventory's plugins and scripts
    # anyway, and honours become.
    inventory = load_inventory(request.inventory, for_ansible=True, environ=env.environ)
    for warning in inventory.warnings:
        print(f"clusterkit: warning: {redact_text(warning)}", file=env.stderr)
    if request.limit:
        select_hosts(inventory, request.limit)  # a limit naming no host is an error, as in check
    extra = [item for value in request.extra_vars for item in ("-e", value)]
    if request.verbose:
        extra.append("-" + "v" * request.verbose)
    return PlaybookRun(
        inventory=request.inventory,
        playbook=find_playbook(env.environ),
        tags=split_tags(request.tags, "--tags"),
        skip_tags=split_tags(request.skip_tags, "--skip-tags"),
        limit=request.limit,
        check=request.dry_run,
        diff=request.diff,
        extra=tuple(extra),
    )


def run(request: ProvisionRequest, env: Environment) -> ExitStatus:
    playbook_run = plan(request, env)
    argv = build_argv(playbook_run, ansible_playbook(env.environ))
    status = run_playbook(argv, timeout=request.timeout, environ=env.environ)
    return ExitStatus.PASSED if status == 0 else ExitStatus.FAILED
