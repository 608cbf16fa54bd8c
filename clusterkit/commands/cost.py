"""`clusterkit cost`: its request (clusterkit/cli/cost.py), the inputs resolved and the estimate
made (clusterkit/cost/inputs.py), then the table, JSON and picture written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import date

from clusterkit.cli.cost import CostCommand
from clusterkit.cost.estimate import Estimate
from clusterkit.cost.inputs import InventoryCost
from clusterkit.cost.inputs import build as estimate_cost
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.report.terminal import wants_color
from clusterkit.safefiles import why, write_file
from clusterkit.status import ExitStatus


def run(request: CostCommand, env: Environment) -> ExitStatus:
    result = build(request, environ=env.environ)
    if request.plot:
        from clusterkit.cost.plot import write_png

        write_png(result, request.plot)
    _write(result, request, env)
    return ExitStatus.PASSED


def build(
    request: CostCommand,
    today: date | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Estimate:
    """The inventory read (its host count and cost block, checked as it is read), then
    every input resolved and the estimate made."""
    inputs = request.inputs
    if request.inventory:
        from clusterkit.settings.loader import load_inventory

        inventory = load_inventory(request.inventory, environ=environ or {})
        found = InventoryCost(request.inventory, len(inventory.hosts), inventory.settings.cost)
        inputs = replace(inputs, inventory=found)
    return estimate_cost(inputs, today, environ=environ)


def _write(result: Estimate, request: CostCommand, env: Environment) -> None:
    from clusterkit.cost.report import render_json, render_text

    if request.format == "json":
        text = render_json(result)
    else:
        color = request.output is None and wants_color(env.environ, env.stdout_isatty)
        terminal = request.output is None and env.stdout_isatty
        text = render_text(result, color=color, terminal=terminal)
    if request.output is None:
        env.stdout.write(text)
        return
    try:
        write_file(request.output, text)
    except OSError as error:
        raise UsageError(
            f"--output {request.output}: cannot write: {why(error, request.output)}"
        ) from None
