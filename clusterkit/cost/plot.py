"""A picture of expected cost (and wall time) of both options against the preemption rate,
with the break-even point and the user's rate marked. matplotlib is imported only here."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from clusterkit.cost import analytic, simulate
from clusterkit.cost.estimate import Estimate
from clusterkit.cost.scenario import Scenario
from clusterkit.errors import UsageError
from clusterkit.safefiles import why, write_file
from clusterkit.words import counted

SPOT_COLOR, DEMAND_COLOR, MARK_COLOR = "#1f77b4", "#d62728", "#444444"
# The band: this many rates, each simulated with at most this many trials.
BAND_POINTS, BAND_TRIALS = 20, 1000


# clusterkit is installed from a checkout (there is no PyPI release under this name).
PLOT_HINT = "install matplotlib beside clusterkit (in a checkout: .venv/bin/pip install '.[plot]')"


def rate_range(result: Estimate) -> tuple[float, float]:
    """Two decades either side of the interesting rates (the user's and break-even)."""
    marks = [
        rate
        for rate in (result.scenario.preempt_rate, result.break_even_rate)
        if 0 < rate < math.inf
    ] or [1e-3]
    return min(marks) / 100.0, max(marks) * 20.0


def curves(result: Estimate, points: int = 200) -> dict[str, np.ndarray]:
    low, high = rate_range(result)
    rates = np.geomspace(low, high, points)
    options = [analytic.spot(result.scenario, float(rate)) for rate in rates]
    return {
        "rate": rates,
        "spot_cost": np.array([o.cost for o in options]),
        "spot_wall": np.array([o.wall_h for o in options]),
        "infeasible": np.array([o.infeasible is not None for o in options]),
    }


def band(result: Estimate, points: int = BAND_POINTS) -> dict[str, np.ndarray] | None:
    """The Monte Carlo's p10-p90 spread of spot's cost and wall time across the plotted
    rates (a smaller simulation at each point, same seed); None without a simulation."""
    if result.monte_carlo is None:
        return None
    low, high = rate_range(result)
    trials = min(BAND_TRIALS, result.monte_carlo.trials)
    rows = []
    for rate in np.geomspace(low, high, points):
        spread = simulate.spot_band(result.scenario, float(rate), trials, result.monte_carlo.seed)
        if spread is not None:
            rows.append((float(rate), *spread))
    if len(rows) < 2:
        return None
    table = np.array(rows)
    names = ("rate", "cost_p10", "cost_p90", "wall_p10", "wall_p90")
    return {name: table[:, index] for index, name in enumerate(names)}


def write_png(result: Estimate, path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib", hint=PLOT_HINT) from None

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure = draw(result)
    image = io.BytesIO()
    try:
        figure.savefig(image, format="png", dpi=130)
        write_file(path, image.getvalue())
    except OSError as error:
        raise UsageError(f"--plot {path}: cannot write: {why(error, path)}") from None
    finally:
        pyplot.close(figure)


def draw(result: Estimate) -> Any:
    """The figure (matplotlib must be importable): cost above, wall time below, sharing the
    rate axis, which is set once both panels are drawn."""
    from matplotlib import pyplot

    data = curves(result)
    figure, (cost_axis, time_axis) = pyplot.subplots(
        2, 1, figsize=(9, 6.8), sharex=True, gridspec_kw={"height_ratios": [2.2, 1]}
    )
    spread = band(result)
    _cost_panel(cost_axis, result, data, spread)
    _time_panel(time_axis, result, data, spread)
    cost_axis.set_xscale("log")
    cost_axis.set_xlim(data["rate"][0], data["rate"][-1])
    figure.text(
        0.99,
        0.005,
        f"Recommendation: {result.advice.headline}"[:130],
        ha="right",
        va="bottom",
        fontsize=8,
        color=MARK_COLOR,
    )
    figure.tight_layout(rect=(0, 0.02, 1, 1))
    return figure


def _cost_panel(
    axis: Any, result: Estimate, data: dict[str, np.ndarray], spread: dict[str, np.ndarray] | None
) -> None:
    """Expected cost of both options against the rate, break-even and the user's rate
    marked, each side of break-even named."""
    from matplotlib.ticker import FuncFormatter

    scenario = result.scenario
    finite = [cost for cost in (result.on_demand.cost, result.spot.cost) if math.isfinite(cost)]
    ceiling = 3.0 * max(finite) if finite else 1.0
    if spread is not None and result.monte_carlo is not None:
        axis.fill_between(
            spread["rate"],
            spread["cost_p10"],
            spread["cost_p90"],
            color=SPOT_COLOR,
            alpha=0.25,
            lw=0,
            label=f"spot p10-p90 (Monte Carlo, {min(BAND_TRIALS, result.monte_carlo.trials):,}"
            " runs per rate)",
        )
    axis.plot(
        data["rate"],
        np.minimum(data["spot_cost"], 10 * ceiling),
        color=SPOT_COLOR,
        lw=2.2,
        label=f"spot (${scenario.spot_price:g}/node-h)",
    )
    axis.axhline(
        result.on_demand.cost,
        color=DEMAND_COLOR,
        lw=2.2,
        label=f"on-demand (${scenario.on_demand_price:g}/node-h)",
    )
    _style(axis, data)
    if _break_even_shown(result):
        axis.axvline(result.break_even_rate, color=MARK_COLOR, lw=1.2, ls=":")
        _mark_break_even(axis, result)
    if _user_rate_shown(result):
        axis.axvline(scenario.preempt_rate, color=SPOT_COLOR, lw=1.2, ls="--", alpha=0.8)
        _mark_user_rate(axis, result)
    if _break_even_shown(result):
        _name_sides(axis, result)
    axis.set_ylim(0, ceiling)
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"${value:,.0f}"))
    axis.set_ylabel("expected cost (USD)")
    axis.set_title(_title(scenario), fontsize=11, loc="left")
    axis.legend(loc="upper left", frameon=False)


def _time_panel(
    axis: Any, result: Estimate, data: dict[str, np.ndarray], spread: dict[str, np.ndarray] | None
) -> None:
    """Expected wall time of both options against the rate, with the job's deadline."""
    scenario, demand = result.scenario, result.on_demand
    if spread is not None and result.monte_carlo is not None:
        axis.fill_between(
            spread["rate"], spread["wall_p10"], spread["wall_p90"], color=SPOT_COLOR,
            alpha=0.25, lw=0,
        )  # fmt: skip
    axis.plot(data["rate"], data["spot_wall"], color=SPOT_COLOR, lw=2.2)
    axis.axhline(demand.wall_h, color=DEMAND_COLOR, lw=2.2)
    _style(axis, data)
    if _break_even_shown(result):
        axis.axvline(result.break_even_rate, color=MARK_COLOR, lw=1.2, ls=":")
    if _user_rate_shown(result):
        axis.axvline(scenario.preempt_rate, color=SPOT_COLOR, lw=1.2, ls="--", alpha=0.8)
    if scenario.deadline_h is not None:
        axis.axhline(scenario.deadline_h, color=MARK_COLOR, lw=1.0, ls="-.")
        axis.annotate(
            f"deadline {scenario.deadline_h:g} h",
            (data["rate"][0], scenario.deadline_h),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=8,
            color=MARK_COLOR,
        )
    walls = [wall for wall in (demand.wall_h, result.spot.wall_h) if math.isfinite(wall)]
    axis.set_ylim(0, 3.0 * min(max(walls), 10 * min(walls)) if walls else 1.0)
    axis.set_ylabel("expected wall time (h)")
    axis.set_xlabel("spot preemption rate (per node-hour, log scale)")


def _style(axis: Any, data: dict[str, np.ndarray]) -> None:
    """What both panels share: the infeasible rates shaded, a grid, no top or right frame."""
    _shade_infeasible(axis, data)
    axis.grid(True, which="major", alpha=0.35)
    axis.grid(True, which="minor", alpha=0.12)
    axis.spines[["top", "right"]].set_visible(False)


def _break_even_shown(result: Estimate) -> bool:
    return 0 < result.break_even_rate < math.inf


def _user_rate_shown(result: Estimate) -> bool:
    return result.scenario.preempt_rate > 0 and math.isfinite(result.spot.cost)


def _limited(result: Estimate) -> bool:
    """Break-even set by spot's feasibility rather than by its cost."""
    at = analytic.spot(result.scenario, result.break_even_rate).cost
    return not math.isclose(at, result.on_demand.cost, rel_tol=1e-3)


def _mark_break_even(axis: Any, result: Estimate) -> None:
    break_even, limited = result.break_even_rate, _limited(result)
    at = analytic.spot(result.scenario, break_even).cost
    mark = (break_even, at if limited else result.on_demand.cost)
    axis.plot(*([value] for value in mark), "o", color=MARK_COLOR, ms=8, zorder=5)
    words = "spot stops paying\n(infeasible beyond)" if limited else "break-even"
    axis.annotate(
        f"{words}\n{break_even:.3g}/node-h",
        mark,
        xytext=(10, 16) if limited else (10, -34),
        textcoords="offset points",
        fontsize=9,
        color=MARK_COLOR,
    )


def _mark_user_rate(axis: Any, result: Estimate) -> None:
    user_rate, cost = result.scenario.preempt_rate, result.spot.cost
    axis.plot([user_rate], [cost], "D", color=SPOT_COLOR, ms=8, zorder=5)
    axis.annotate(
        f"your rate {user_rate:.3g}/node-h\nspot ${cost:,.0f}",
        (user_rate, cost),
        xytext=(-12, 14),
        textcoords="offset points",
        ha="right",
        fontsize=9,
        color=SPOT_COLOR,
    )


def _name_sides(axis: Any, result: Estimate) -> None:
    """Which option pays off left and right of break-even, along the bottom."""
    break_even = result.break_even_rate
    for rate, words, align, color in (
        (break_even / 1.25, "spot cheaper", "right", SPOT_COLOR),
        (
            break_even * 1.25,
            "on-demand better" if _limited(result) else "on-demand cheaper",
            "left",
            DEMAND_COLOR,
        ),
    ):
        axis.text(
            rate,
            0.03,
            words,
            ha=align,
            fontsize=8,
            color=color,
            transform=axis.get_xaxis_transform(),
        )


def _title(scenario: Scenario) -> str:
    return (
        f"Spot vs on-demand: {counted(scenario.nodes, 'node')} x "
        f"{counted(scenario.gpus_per_node, 'GPU')}, "
        f"{scenario.hours:g} h of compute\n"
        f"checkpoint {scenario.checkpoint_h * 60:.3g} min, restart {scenario.restart_h * 60:.3g}"
        f" min, correlation {scenario.effective_correlation:g}"
    )


def _shade_infeasible(axis: Any, data: dict[str, np.ndarray]) -> None:
    mask = data["infeasible"]
    if mask.any():
        start = float(data["rate"][mask.argmax()])
        axis.axvspan(start, float(data["rate"][-1]), color="#999999", alpha=0.15, lw=0)
        axis.text(
            start * 1.1,
            0.95,
            "spot infeasible",
            transform=axis.get_xaxis_transform(),
            fontsize=8,
            color="#666666",
            va="top",
        )
