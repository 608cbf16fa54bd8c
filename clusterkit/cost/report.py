"""The estimate as a terminal table (plain text when piped) or a JSON document."""

from __future__ import annotations

import io
import json
import math

from rich import box
from rich.console import Console
from rich.table import Table

from clusterkit.cost.estimate import Estimate, Provenance, to_dict
from clusterkit.words import counted


def render_json(result: Estimate) -> str:
    return json.dumps(to_dict(result), indent=2) + "\n"


def render_text(
    result: Estimate, *, color: bool = False, terminal: bool | None = None, width: int = 100
) -> str:
    """Rich table on a terminal; the same layout in plain ASCII otherwise. The layout follows
    `terminal` (default: `color`), the colour only `color`: NO_COLOR and FORCE_COLOR change
    the colour, never the table's lines."""
    terminal = color if terminal is None else terminal
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
        soft_wrap=True,
    )
    console.print(_heading(result))
    console.print(_table(result, terminal))
    _summary(console, result)
    style = "bold green" if result.advice.choice == "spot" else "bold yellow"
    console.print(f"\n[{style}]Recommendation: {result.advice.headline}[/{style}]")
    _bullets(console, "Reasons", result.advice.reasons)
    _bullets(console, "Assumptions", result.assumptions)
    _bullets(console, "Warnings", result.warnings, style="yellow")
    return buffer.getvalue()


def _heading(result: Estimate) -> str:
    """The job, and where its prices come from."""
    scenario, prov = result.scenario, result.provenance
    where = prov.instance or "prices from flags"
    if prov.region:
        where += f" in {prov.region}"
    return (
        f"[bold]clusterkit cost[/bold]: {counted(scenario.nodes, 'node')} x "
        f"{counted(scenario.gpus_per_node, 'GPU')}, "
        f"{scenario.hours:g} h of compute, {where}"
    )


def _table(result: Estimate, terminal: bool) -> Table:
    """Spot and on-demand side by side: the model's figures, then the simulation's."""
    spot, demand, prov = result.spot, result.on_demand, result.provenance
    table = Table(box=box.SIMPLE_HEAD if terminal else box.ASCII, show_edge=terminal)
    table.add_column("")
    table.add_column("spot", justify="right")
    table.add_column("on-demand", justify="right")
    rows = [
        ("price per node-hour", _money(spot.price, 2), _money(demand.price, 2)),
        (
            "price dated",
            _dated(prov, "spot", prov.spot_date),
            _dated(prov, "on-demand", prov.on_demand_date),
        ),
        ("job stops every", _hours(spot.mtbi_h), _hours(demand.mtbi_h)),
        ("checkpoint every", _hours(spot.interval_h), _hours(demand.interval_h)),
        ("expected interruptions", _count(spot.interruptions), _count(demand.interruptions)),
        ("expected billed time", _hours(spot.busy_h), _hours(demand.busy_h)),
        ("+ capacity waits (unbilled)", _hours(spot.wait_h), _hours(demand.wait_h)),
        ("expected wall time", _hours(spot.wall_h), _hours(demand.wall_h)),
        ("expected cost", _money(spot.cost), _money(demand.cost)),
        *_simulated_rows(result),
    ]
    for label, *cells in rows:
        table.add_row(label, *cells)
    return table


def _simulated_rows(result: Estimate) -> list[tuple[str, str, str]]:
    """The Monte Carlo's spread of both options (none without a simulation)."""
    mc, deadline = result.monte_carlo, result.scenario.deadline_h
    if mc is None:
        return []
    rows = [
        (
            "p50 / p90 wall time (MC)",
            f"{_hours(mc.spot.p50_wall_h)} / {_hours(mc.spot.p90_wall_h)}",
            f"{_hours(mc.on_demand.p50_wall_h)} / {_hours(mc.on_demand.p90_wall_h)}",
        ),
        (
            "p50 / p90 cost (MC)",
            f"{_money(mc.spot.p50_cost)} / {_money(mc.spot.p90_cost)}",
            f"{_money(mc.on_demand.p50_cost)} / {_money(mc.on_demand.p90_cost)}",
        ),
    ]
    if deadline is not None:
        rows.append(
            (
                f"P(miss {deadline:g} h deadline)",
                f"{mc.spot.p_miss_deadline:.1%}",
                f"{mc.on_demand.p_miss_deadline:.1%}",
            )
        )
    return rows


def _summary(console: Console, result: Estimate) -> None:
    """Spot over on-demand in one line, and how the simulation ran."""
    spot, demand, mc = result.spot, result.on_demand, result.monte_carlo
    console.print(
        f"spot / on-demand: cost {_share(spot.cost / demand.cost)}, "
        f"time {_share(spot.wall_h / demand.wall_h)}; "
        f"break-even preemption rate {_rate(result.break_even_rate)}"
        + (f"; P(spot costs more) {mc.p_spot_costs_more:.1%}" if mc else "")
    )
    if result.simulation_note:
        console.print(f"Monte Carlo: {result.simulation_note}")
    elif mc:
        console.print(
            f"Monte Carlo: {mc.trials:,} trials, seed {mc.seed}, hazard {result.scenario.hazard}"
        )


def _bullets(console: Console, title: str, lines: tuple[str, ...], style: str = "") -> None:
    if not lines:
        return
    console.print(f"{title}:", style=style or None)
    for line in lines:
        console.print(f"  - {line}", markup=False)


def _dated(provenance: Provenance, what: str, day: str | None) -> str:
    """A price's date, or where it came from when it has none."""
    if provenance.catalog_path is None or what in provenance.flag_prices:
        return "given"
    return day or "undated"


def _money(value: float, digits: int = 0) -> str:
    return f"${value:,.{digits}f}" if math.isfinite(value) else "unbounded"


def _hours(hours: float) -> str:
    if math.isinf(hours):
        return "never" if hours > 0 else "-"
    if hours == 0:
        return "0"
    if hours < 1:
        return f"{hours * 60:.3g} min"
    return f"{hours:,.1f} h" if hours >= 100 else f"{hours:.3g} h"


def _count(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else "unbounded"


def _share(ratio: float) -> str:
    return f"{ratio:.0%}" if math.isfinite(ratio) else "unbounded"


def _rate(rate: float) -> str:
    if rate == 0:
        return "none (spot is never cheaper)"
    if math.isinf(rate):
        return "none (spot is always cheaper)"
    return f"{rate:.3g}/node-h"
