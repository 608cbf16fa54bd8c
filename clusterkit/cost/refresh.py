"""`clusterkit cost prices update` as one step: read the catalog, fetch the providers' prices
(clusterkit/cost/prices_update.py), merge them into a copy, write it and read it back as
`clusterkit cost` will. The command only prints the outcome."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from clusterkit.cost import catalog as price_catalog
from clusterkit.cost import prices_update as update

PROVIDERS = ("aws", "azure")


@dataclass(frozen=True)
class RefreshRequest:
    """The update's flags: which catalog, which providers and regions, where to write."""

    catalog: str | None = None  # None: the user's catalog, else the packaged one
    output: str | None = None  # None: the user's catalog (never the packaged one)
    providers: tuple[str, ...] = ()  # (): every provider
    regions: tuple[str, ...] = ()  # AWS regions; (): update.AWS_REGIONS
    timeout: float = update.DEFAULT_DEADLINE  # for all requests together
    aws_url: str | None = None
    spot_advisor_url: str | None = None
    azure_url: str | None = None


@dataclass(frozen=True)
class Refreshed:
    merged: update.Merged
    warnings: list[str]  # the merge's, then what reading the written catalog says
    output: Path


def refresh(request: RefreshRequest, environ: Mapping[str, str]) -> Refreshed:
    source = request.catalog or price_catalog.default_path(environ)
    document = update.read_document(source)
    endpoints = update.Endpoints.from_env(
        environ, aws=request.aws_url, spot_advisor=request.spot_advisor_url, azure=request.azure_url
    )
    fetch = update.Fetcher(request.timeout)
    providers = set(request.providers or PROVIDERS)
    quotes: list[update.Quote] = []
    interruptions: dict[tuple[str, str], str] = {}
    if "aws" in providers:
        regions = request.regions or update.AWS_REGIONS
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
    output = Path(request.output) if request.output else price_catalog.user_path(environ)
    update.write_document(merged.document, output, environ)
    checked = price_catalog.load(str(output), today=today)
    return Refreshed(merged, [*merged.warnings, *checked.warnings], output)
