"""`clusterkit completion SHELL`: print the shell completion script."""

from __future__ import annotations

import re

from clusterkit.cli.completion import CompletionRequest
from clusterkit.completion import SHELLS, script
from clusterkit.contract.names import SKIPPABLE
from clusterkit.cost import catalog
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.node.bench_common import COLLECTIVES
from clusterkit.provision.remedy import TAGS
from clusterkit.status import ExitStatus

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:%-]*")


def known_values() -> dict[str, list[str]]:
    """Values of free-text options that have known answers: stages, collectives, playbook
    tags, and the bundled price catalog's instances and regions."""
    prices = catalog.load(catalog.packaged_path())
    values: dict[str, list[str]] = {
        "--skip": list(SKIPPABLE),
        "--collective": list(COLLECTIVES),
        "--tags": list(TAGS),
        "--skip-tags": list(TAGS),
        "--instance": sorted({entry.instance for entry in prices.entries}),
        "--region": sorted({entry.region for entry in prices.entries}),
    }
    commands = {
        "--skip": ("check", "launch"),
        "--collective": ("bench",),
        "--tags": ("provision",),
        "--skip-tags": ("provision",),
        "--instance": ("cost",),
        "--region": ("cost",),
    }
    return {f"{c} {flag}": values[flag] for flag, names in commands.items() for c in names}


def completion_script(shell: str) -> str:
    """The whole command line's script, every command and step included."""
    from clusterkit.cli import build_parser

    return script(build_parser(), shell, None, known_values())


def run(request: CompletionRequest, env: Environment) -> ExitStatus:
    if request.hosts is not None:
        env.stdout.write("".join(f"{name}\n" for name in inventory_hosts(request.hosts, env)))
        return ExitStatus.PASSED
    if request.shell is None:
        raise UsageError("completion: give a shell", hint=f"one of: {', '.join(SHELLS)}")
    env.stdout.write(completion_script(request.shell))
    return ExitStatus.PASSED


def inventory_hosts(path: str, env: Environment) -> list[str]:
    """The inventory's host names, for `--limit` completion: read by the built-in readers
    (no plugin or script runs), nothing on any error, and only plain names (the shell
    expands what completion offers)."""
    from clusterkit.errors import ClusterkitError
    from clusterkit.settings.loader import load_inventory

    try:
        inventory = load_inventory(path, environ=env.environ)
    except (ClusterkitError, OSError):
        return []
    return [host.name for host in inventory.hosts if PLAIN_NAME.fullmatch(host.name)]
