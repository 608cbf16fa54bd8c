"""`clusterkit cost prices update`: fetch, merge, validate, write; one line per outcome."""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

from clusterkit.cost import catalog as price_catalog
from clusterkit.cost import prices_update as update
from clusterkit.environment import Environment
from clusterkit.report.escape import printable
from clusterkit.status import ExitStatus


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    source = args.catalog or price_catalog.default_path(env.environ)
    document = update.read_document(source)
    endpoints = update.Endpoints.from_env(
        env.environ, aws=args.aws_url, spot_advisor=args.spot_advisor_url, azure=args.azure_url
    )
    fetch = update.Fetcher(args.timeout)
    providers = set(args.provider or ("aws", "azure"))
    quotes: list[update.Quote] = []
    interruptions: dict[tuple[str, str], str] = {}
    if "aws" in providers:
        regions = tuple(args.region or update.AWS_REGIONS)
        instances = tuple(
            dict.fromkeys(
                [*update.AWS_INSTANCES]
                + [str(r["instance"]) for r in document["instances"] if r.get("provider") == "aws"]
            )
        )
        quotes += update.aws_quotes(fetch, endpoints.aws, instances, regions)
        interruptions = update.aws_interruptions(fetch, endpoints.spot_advisor)
    if "azure" in providers:
        quotes += update.azure_quotes(fetch, endpoints.azure, update.AZURE_SKUS)
    today = date.today()
    merged = update.merge(
        document,
        quotes,
        interruptions,
        endpoints.spot_advisor if "aws" in providers else None,
        today,
    )
    output = Path(args.output) if args.output else price_catalog.user_path(env.environ)
    update.write_document(merged.document, output, env.environ)
    checked = price_catalog.load(str(output), today=today)
    warnings = [*merged.warnings, *checked.warnings]
    for warning in warnings:
        print(f"warning: {printable(warning)}", file=env.stderr)
    for what, names in (("added", merged.added), ("changed", merged.changed)):
        for name in names:
            print(f"{what}: {name}", file=env.stdout)
    print(
        f"{len(merged.added)} added, {len(merged.changed)} changed, "
        f"{len(merged.unchanged)} unchanged, {len(warnings)} warnings; wrote {output}",
        file=env.stdout,
    )
    return ExitStatus.PASSED
