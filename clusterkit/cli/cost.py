"""`clusterkit cost` and its step `cost prices update`: their arguments, and the typed
requests they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    add_seconds,
)
from clusterkit.cli.parser import (
    ExamplesFormatter,
    Parser,
    add_leading_steps,
    examples_epilog,
)
from clusterkit.cost.inputs import CostRequest
from clusterkit.cost.refresh import RefreshRequest
from clusterkit.inventory.model import CostSettings

PRICES_EXAMPLES = [
    "clusterkit cost prices update",
    "clusterkit cost prices update --provider azure -o prices.json",
    "clusterkit cost --catalog prices.json --instance ND96isr_H100_v5 --region eastus "
    "--nodes 4 --hours 72 --preempt-rate 5%",
]


@dataclass(frozen=True)
class CostCommand:
    """The command line of `clusterkit cost`, read once: the inputs, and where they go."""

    inputs: CostRequest
    inventory: str | None = None  # the positional inventory: node count and cost block
    format: str = "text"
    output: str | None = None  # None: stdout
    plot: str | None = None  # --plot FILE: the picture too


def request(args: argparse.Namespace) -> CostCommand | RefreshRequest:
    """`cost`'s own request, or its step's (`cost prices update`)."""
    if vars(args).get("cost_command") == "prices":
        return refresh_request(args)
    return cost_command(args)


def cost_command(args: argparse.Namespace) -> CostCommand:
    """The flags, each read once: those named like the inventory's keys as CostSettings."""
    flags = CostSettings(
        instance=args.instance,
        region=args.region,
        gpus_per_node=args.gpus_per_node,
        hours=args.hours,
        checkpoint_min=args.checkpoint_min,
        restart_min=args.restart_min,
        preempt_rate=args.preempt_rate,
        trace=args.trace,
        correlation=args.correlation,
        capacity_wait_median=args.capacity_wait_median,
        capacity_wait_mean=args.capacity_wait_mean,
        hardware_rate=args.hardware_rate,
        on_demand_price=args.on_demand_price,
        spot_price=args.spot_price,
        deadline=args.deadline,
        interval=args.interval,
        hazard=args.hazard,
        catalog=args.catalog,
        max_price_age_days=args.max_price_age_days,
    )
    inputs = CostRequest(flags, nodes=args.nodes, trials=args.trials, seed=args.seed)
    return CostCommand(inputs, args.inventory, args.format, args.output, args.plot)


def refresh_request(args: argparse.Namespace) -> RefreshRequest:
    """`cost prices update`'s flags: which catalog, providers and regions, where to write."""
    return RefreshRequest(
        catalog=args.catalog,
        output=args.output,
        providers=tuple(args.provider or ()),
        regions=tuple(args.region or ()),
        timeout=args.timeout,
        aws_url=args.aws_url,
        spot_advisor_url=args.spot_advisor_url,
        azure_url=args.azure_url,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser(
        "cost",
        help="spot vs on-demand cost for a multi-node job",
        description="Expected cost, time and risk of a synchronous multi-node job on spot "
        "capacity with checkpoint/restart vs on-demand (Young/Daly model and a Monte Carlo). "
        "Flags override the inventory's `clusterkit.cost` settings. "
        "`clusterkit cost prices update` refreshes the price catalog (see docs/cost.md).",
    )
    parser.add_argument(
        "inventory", nargs="?", help="Ansible inventory: file or directory (node count, prices)"
    )
    _add_cost_job(parser)
    _add_cost_interruptions(parser)
    _add_cost_prices(parser)
    _add_cost_output(parser)
    parser.set_defaults(handler="clusterkit.commands.cost:run")
    _add_prices(parser)


def _add_cost_job(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("job")
    job.add_argument("--nodes", type=int, help="nodes (default: the inventory's hosts)")
    job.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: catalog or 8)")
    job.add_argument("--hours", type=float, help="failure-free compute time in hours")
    job.add_argument("--checkpoint-min", type=float, help="blocking checkpoint cost (default 5)")
    job.add_argument("--restart-min", type=float, help="restart cost, billed (default 10)")
    job.add_argument(
        "--interval",
        type=float,
        metavar="MIN",
        help="checkpoint every MIN minutes (default: Daly's optimum)",
    )
    job.add_argument("--deadline", type=float, metavar="HOURS", help="wall-time deadline")


def _add_cost_interruptions(parser: argparse.ArgumentParser) -> None:
    """What stops the job: spot preemptions (a rate, a share, a bucket or a trace), the wait
    for capacity, hardware failures."""
    risk = parser.add_argument_group("interruptions")
    risk.add_argument(
        "--preempt-rate",
        metavar="RATE|SHARE%|BUCKET",
        help="spot preemptions per node-hour (at most 100, e.g. 0.02); or the share of "
        "instances interrupted per month (e.g. 5%%); or an AWS Spot Instance Advisor bucket "
        "('<5%%', '5-10%%', '10-15%%', '15-20%%', '>20%%'): the advisor's monthly "
        "interruption frequency, converted as -ln(1 - p) / 730 per hour",
    )
    risk.add_argument(
        "--trace",
        metavar="FILE",
        help="observed interruptions, `TIME [NODE]` per line (see docs/cost.md)",
    )
    risk.add_argument(
        "--correlation",
        type=float,
        help="mean nodes taken per preemption event (1 = independent, the default)",
    )
    risk.add_argument(
        "--capacity-wait-median",
        metavar="HOURS|off",
        help="time to get N nodes back after a preemption (default 0.4)",
    )
    risk.add_argument("--capacity-wait-mean", metavar="HOURS|off", help="its mean (default 1.5)")
    risk.add_argument(
        "--hardware-rate",
        type=float,
        metavar="RATE",
        help="hardware failures per node-hour (default 2e-5 per GPU)",
    )
    risk.add_argument(
        "--hazard",
        metavar="KIND",
        help="preemption hazard: exponential (default), weibull:K, preemptible24h",
    )


def _add_cost_prices(parser: argparse.ArgumentParser) -> None:
    prices = parser.add_argument_group("prices (USD per node-hour)")
    prices.add_argument("--on-demand-price", type=float, metavar="USD")
    prices.add_argument("--spot-price", type=float, metavar="USD")
    prices.add_argument("--instance", help="instance type from the price catalog")
    prices.add_argument("--region", help="region in the price catalog")
    prices.add_argument(
        "--catalog",
        metavar="FILE",
        help="price catalog JSON (default: the user catalog `clusterkit cost prices update` "
        "wrote, else the bundled snapshot)",
    )
    prices.add_argument(
        "--max-price-age-days",
        type=float,
        metavar="DAYS",
        help="warn when a catalog price used is older (default 180)",
    )


def _add_cost_output(parser: argparse.ArgumentParser) -> None:
    sim = parser.add_argument_group("simulation and output")
    sim.add_argument(
        "--trials",
        type=int,
        default=10_000,
        help="Monte Carlo trials (default 10000, 0 = none; at most 1,000,000, run in chunks "
        "of 100,000; fewer when each run expects so many interruptions that the simulation "
        "would draw over 20 million lifetimes, which the output then says)",
    )
    sim.add_argument("--seed", type=int, default=1, help="random seed, 0 to 4294967295 (default 1)")
    sim.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    sim.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE")
    sim.add_argument("--plot", metavar="FILE", help="write a PNG of cost vs preemption rate")


def _add_prices(cost: Parser) -> None:
    """`clusterkit cost prices update`: a step of `cost` named by its first word only, since
    `cost` takes an optional inventory positional that would swallow any other."""
    parser = add_leading_steps(cost, "cost_command").add_parser(
        "prices",
        help="manage the price catalog",
        description="Manage the price catalog that `clusterkit cost` reads.",
        epilog=examples_epilog(PRICES_EXAMPLES),
        formatter_class=ExamplesFormatter,
    )
    steps = parser.add_subparsers(dest="prices_command", metavar="STEP", parser_class=Parser)
    update = steps.add_parser(
        "update",
        help="refresh prices from the providers' public endpoints",
        description="Fetch AWS on-demand list prices (Price List offer files), AWS Spot "
        "Advisor interruption buckets and Azure on-demand and spot prices (Retail Prices "
        "API), merge them into a copy of the catalog (rows added, prices replaced, each "
        "dated and sourced) and write it. AWS spot prices need credentials and are kept; "
        "GCP has no keyless endpoint and is kept. Exit 3 when an endpoint cannot be reached "
        "before the deadline.",
        epilog=examples_epilog(PRICES_EXAMPLES),
        formatter_class=ExamplesFormatter,
    )
    update.add_argument(
        "--catalog", metavar="FILE", help="catalog to start from (default: the one `cost` reads)"
    )
    update.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="where to write (default: $XDG_DATA_HOME/clusterkit/prices.json, else "
        "~/.local/share/clusterkit/prices.json; never the packaged catalog)",
    )
    update.add_argument(
        "--provider", action="append", choices=("aws", "azure"), help="only these (repeatable)"
    )
    update.add_argument(
        "--region", action="append", metavar="REGION", help="AWS regions (repeatable)"
    )
    add_seconds(
        update, "--timeout", "deadline for all requests together (default 120)", default=120.0
    )
    update.add_argument(
        "--aws-url", metavar="URL", help="AWS Price List base (env CLUSTERKIT_AWS_PRICING_URL)"
    )
    update.add_argument(
        "--spot-advisor-url",
        metavar="URL",
        help="Spot Advisor data file (env CLUSTERKIT_AWS_SPOT_ADVISOR_URL)",
    )
    update.add_argument(
        "--azure-url",
        metavar="URL",
        help="Azure Retail Prices API (env CLUSTERKIT_AZURE_PRICES_URL)",
    )
    update.set_defaults(handler="clusterkit.commands.cost_prices:run")
