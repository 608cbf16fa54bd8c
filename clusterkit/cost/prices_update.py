"""`clusterkit cost prices update`: refresh the price catalog from the providers' public,
keyless endpoints, and merge the answers into a copy of the catalog.

What comes from where (nothing here needs credentials):
- AWS on-demand list prices: the Price List bulk files. `region_index.json` names each
  region's current AmazonEC2 offer file; the offer's `products` (Linux, shared tenancy, no
  pre-installed software, capacity status Used) and `terms.OnDemand` give USD per hour.
- AWS interruption buckets: the Spot Instance Advisor's `spot-advisor-data.json` (`r` is the
  index into `ranges`: <5%, 5-10%, ...). AWS spot prices themselves come only from the
  authenticated DescribeSpotPriceHistory API, so AWS spot ranges are kept as they were.
- Azure on-demand and spot: the Retail Prices API (`$filter` by SKU, each `NextPageLink` on
  the first page's origin followed); Linux rows only, `... Spot` meters are spot, `Low
  Priority` ones are skipped.
Every fetched price is checked before it replaces one (finite, positive, plausible for the
instance: `price_problem`); a bad one leaves the row as it was, with a warning.
GCP has no keyless price endpoint (its Cloud Billing Catalog API needs a key): GCP rows stay.
"""

from __future__ import annotations

import json
import math
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from clusterkit.cost import catalog as price_catalog
from clusterkit.cost.fetch import MAX_OFFER_BYTES, Fetcher, Unreachable, check_link, url_problem
from clusterkit.errors import UsageError
from clusterkit.safefiles import why, write_file

__all__ = ["Endpoints", "Fetcher", "Merged", "Quote", "Unreachable", "merge"]

AWS_PRICING_URL = "https://pricing.us-east-1.amazonaws.com"
AWS_REGION_INDEX = "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
AWS_SPOT_ADVISOR_URL = "https://spot-bids.s3.amazonaws.com/spot-advisor-data.json"
AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
ENV_URLS = {
    "aws": "CLUSTERKIT_AWS_PRICING_URL",
    "spot_advisor": "CLUSTERKIT_AWS_SPOT_ADVISOR_URL",
    "azure": "CLUSTERKIT_AZURE_PRICES_URL",
}
OPTIONS = {"aws": "--aws-url", "spot_advisor": "--spot-advisor-url", "azure": "--azure-url"}
AWS_INSTANCES = ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
AWS_REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-north-1", "ap-northeast-1")
AZURE_SKUS = ("ND96isr_H100_v5", "ND96isr_H200_v5")
DEFAULT_DEADLINE = 120.0
MAX_PAGES = 200  # Azure pages of 100 items; a loop guard, far above what two SKUs return
AWS_PRICE_PAGE = "https://aws.amazon.com/ec2/pricing/on-demand/"
AWS_ADVISOR_PAGE = "https://aws.amazon.com/ec2/spot/instance-advisor/"
# A fetched price (USD per node-hour) replaces the catalog's only when it is plausible. The
# dearest cloud GPUs list at about $10-15 per GPU-hour on demand (8-GPU H200 and B200 nodes at
# $80-130 an hour): $100 per GPU-hour leaves room for growth and odd SKUs, yet refuses a price
# in the wrong unit (per month, in cents) or a sentinel. A row of unknown GPU count is bounded
# by the catalog's own sentinel (clusterkit.cost.catalog.SENTINEL_PRICE).
MAX_USD_PER_GPU_HOUR = 100.0
# Nothing rents for less than a cent an hour: a smaller positive number is a unit or parsing
# error (1e-300), not a price.
MIN_USD_PER_NODE_HOUR = 0.01


@dataclass
class Endpoints:
    aws: str = AWS_PRICING_URL
    spot_advisor: str = AWS_SPOT_ADVISOR_URL
    azure: str = AZURE_PRICES_URL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: str | None) -> Endpoints:
        """Option over environment (`environ`; None: this process's) over the public
        default; each an http(s) URL."""
        environ = os.environ if environ is None else environ
        values = {}
        for name, variable in ENV_URLS.items():
            value = given.get(name) or environ.get(variable) or getattr(cls, name)
            problem = url_problem(value)
            if problem:
                named = OPTIONS[name] if given.get(name) else variable
                raise UsageError(f"{named} {value[:200]}: {problem}")
            values[name] = value
        return cls(**values)


@dataclass(frozen=True)
class Quote:
    """One fetched price row, before it meets the catalog."""

    provider: str
    instance: str
    region: str
    on_demand: float | None
    source: str
    day: str
    spot: float | None = None  # Azure only: AWS spot needs credentials
    interruption: str | None = None  # AWS advisor bucket
    gpus: int | None = None


class _Document:
    """A fetched JSON document read field by field: a value of the wrong type is a one-line
    error naming the URL and where in the document it is, never a traceback."""

    def __init__(self, url: str) -> None:
        self.url = url

    def wrong(self, where: str, value: Any, expected: str) -> Unreachable:
        return Unreachable(f"price update: {self.url}: {where} is {_kind(value)}, not {expected}")

    def object(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.wrong(where, value, "an object")
        return value

    def list(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.wrong(where, value, "a list")
        return value

    def optional_object(self, parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        value = parent.get(key)
        return {} if value is None else self.object(value, f"{where}.{key}" if where else key)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else "a value")


def aws_quotes(
    fetch: Fetcher, base: str, instances: tuple[str, ...], regions: tuple[str, ...]
) -> list[Quote]:
    """On-demand Linux prices from each region's current AmazonEC2 offer file."""
    index_url = base.rstrip("/") + AWS_REGION_INDEX
    index, document = _Document(index_url), fetch.json(index_url)
    known = document.get("regions") if isinstance(document, dict) else None
    if not isinstance(known, dict):
        raise Unreachable(f"price update: {index_url}: no `regions` (not a region index)")
    quotes: list[Quote] = []
    for region in regions:
        entry = known.get(region)
        if entry is None:
            continue
        version = index.object(entry, f"regions.{region}").get("currentVersionUrl")
        if not isinstance(version, str) or not version:
            raise index.wrong(f"regions.{region}.currentVersionUrl", version, "a path")
        # currentVersionUrl is absolute on the pricing host: keep the base's own path
        url = check_link(base.rstrip("/") + "/" + version.lstrip("/"), base, "currentVersionUrl")
        quotes += _aws_offer_quotes(_Document(url), fetch.json(url, MAX_OFFER_BYTES), region,
                                    instances)  # fmt: skip
    return quotes


def _aws_offer_quotes(
    doc: _Document, offer: Any, region: str, instances: tuple[str, ...]
) -> list[Quote]:
    offer = doc.object(offer, "the offer file")
    day = str(offer.get("publicationDate") or "")[:10] or date.today().isoformat()
    on_demand = doc.optional_object(doc.optional_object(offer, "terms", ""), "OnDemand", "terms")
    return [
        Quote("aws", instance, region, _aws_on_demand(doc, on_demand, sku), doc.url, day,
              gpus=gpus)
        for sku, instance, gpus in _aws_products(doc, offer, region, instances)
    ]  # fmt: skip


def _aws_products(
    doc: _Document, offer: dict[str, Any], region: str, instances: tuple[str, ...]
) -> list[tuple[str, str, int | None]]:
    wanted = {name.lower() for name in instances}
    found = []
    for sku, product in doc.optional_object(offer, "products", "").items():
        attributes = doc.optional_object(doc.object(product, f"products.{sku}"), "attributes",
                                         f"products.{sku}")  # fmt: skip
        instance = attributes.get("instanceType")
        if not isinstance(instance, str) or instance.lower() not in wanted:
            continue
        if (
            attributes.get("operatingSystem") != "Linux"
            or attributes.get("tenancy") != "Shared"
            or attributes.get("preInstalledSw") != "NA"
            or attributes.get("capacitystatus") != "Used"
            or attributes.get("regionCode", region) != region
        ):
            continue
        gpus = str(attributes.get("gpu"))
        found.append((sku, instance, int(gpus) if gpus.isdigit() and len(gpus) < 4 else None))
    return found


def _aws_on_demand(doc: _Document, on_demand: dict[str, Any], sku: str) -> float | None:
    """The hourly USD price of the SKU's on-demand term (NaN and the like are checked at the
    merge); None when it has none."""
    where = f"terms.OnDemand.{sku}"
    for name, term in doc.optional_object(on_demand, sku, "terms.OnDemand").items():
        term = doc.object(term, f"{where}.{name}")
        dimensions = doc.optional_object(term, "priceDimensions", f"{where}.{name}")
        for rate, dimension in dimensions.items():
            at = f"{where}.{name}.priceDimensions.{rate}"
            dimension = doc.object(dimension, at)
            if dimension.get("unit") != "Hrs":
                continue
            usd = doc.optional_object(dimension, "pricePerUnit", at).get("USD")
            return _number(doc, usd, f"{at}.pricePerUnit.USD", strings=True)
    return None


def _number(doc: _Document, value: Any, where: str, strings: bool = False) -> float:
    """A JSON number (or, where the format writes prices as strings, a decimal string)."""
    if strings and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise doc.wrong(where, value, "a decimal price") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise doc.wrong(where, value, "a number")
    return float(value)


def aws_interruptions(fetch: Fetcher, url: str) -> dict[tuple[str, str], str]:
    """(instance, region) -> the advisor's interruption-frequency label, Linux."""
    doc, data = _Document(url), fetch.json(url)
    if not isinstance(data, dict) or not isinstance(data.get("spot_advisor"), dict):
        raise Unreachable(f"price update: {url}: no `spot_advisor` (not the advisor data)")
    labels = {}
    for number, entry in enumerate(doc.list(data.get("ranges") or [], "ranges")):
        entry = doc.object(entry, f"ranges[{number}]")
        if isinstance(entry.get("index"), int) and isinstance(entry.get("label"), str):
            labels[entry["index"]] = entry["label"]
    found: dict[tuple[str, str], str] = {}
    for region, systems in data["spot_advisor"].items():
        where = f"spot_advisor.{region}"
        linux = doc.optional_object(doc.object(systems or {}, where), "Linux", where)
        for instance, advice in linux.items():
            bucket = doc.object(advice or {}, f"{where}.Linux.{instance}").get("r")
            label = labels.get(bucket) if isinstance(bucket, int) else None
            if label:
                found[(instance.lower(), region)] = label
    return found


def azure_quotes(fetch: Fetcher, base: str, skus: tuple[str, ...]) -> list[Quote]:
    """Linux consumption prices per region, on-demand and spot, following NextPageLink on the
    same origin only."""
    names = " or ".join(f"armSkuName eq 'Standard_{sku}'" for sku in skus)
    query = f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and ({names})"
    source = base + "?" + urllib.parse.urlencode({"$filter": query})
    url: str | None = source
    rows: dict[tuple[str, str], dict[str, float]] = {}
    days: dict[tuple[str, str], str] = {}
    for _ in range(MAX_PAGES):
        if url is None:
            break
        page = fetch.json(url)
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise Unreachable(f"price update: {url}: no `Items` (not a retail prices page)")
        doc = _Document(url)
        for number, item in enumerate(page["Items"]):
            _azure_row(doc, doc.object(item, f"Items[{number}]"), number, rows, days)
        link = page.get("NextPageLink")
        url = check_link(link, source, "NextPageLink") if link else None
    else:
        raise Unreachable(f"price update: {base}: more than {MAX_PAGES} pages; stopped")
    return [
        Quote("azure", sku, region, prices.get("on_demand"), source,
              days.get((sku, region)) or date.today().isoformat(), spot=prices.get("spot"))
        for (sku, region), prices in sorted(rows.items())
    ]  # fmt: skip


def _azure_row(
    doc: _Document,
    item: dict[str, Any],
    number: int,
    rows: dict[tuple[str, str], dict[str, float]],
    days: dict[tuple[str, str], str],
) -> None:
    if item.get("currencyCode", "USD") != "USD" or item.get("unitOfMeasure") != "1 Hour":
        return
    if str(item.get("productName", "")).endswith("Windows") or item.get("type") != "Consumption":
        return
    meter = str(item.get("meterName", ""))
    if meter.endswith("Low Priority"):
        return
    sku = str(item.get("armSkuName", "")).removeprefix("Standard_")
    region = str(item.get("armRegionName", ""))
    if not sku or not region:
        return
    kind = "spot" if meter.endswith("Spot") else "on_demand"
    price = _number(doc, item.get("retailPrice"), f"Items[{number}].retailPrice")
    rows.setdefault((sku, region), {})[kind] = price
    start = str(item.get("effectiveStartDate") or "")[:10]
    if start:
        days[(sku, region)] = max(days.get((sku, region), ""), start)


@dataclass
class Merged:
    document: dict[str, Any]
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def price_problem(value: float, gpus: Any) -> str | None:
    """Why a fetched USD-per-node-hour price cannot be right, or None."""
    if not math.isfinite(value):
        return "not a finite number"
    if value <= 0:
        return "a placeholder (zero or negative)"
    if value < MIN_USD_PER_NODE_HOUR:
        return f"below {MIN_USD_PER_NODE_HOUR:g} per node-hour"
    plausible = isinstance(gpus, int) and not isinstance(gpus, bool) and 0 < gpus <= 64
    limit = min(
        price_catalog.SENTINEL_PRICE, MAX_USD_PER_GPU_HOUR * gpus if plausible else math.inf
    )
    if value >= limit:
        per = (
            f"{MAX_USD_PER_GPU_HOUR:g} per GPU-hour for {gpus} GPUs" if plausible else "a sentinel"
        )
        return f"implausible (at or above {limit:g} per node-hour: {per})"
    return None


def _usable(
    value: float | None, what: str, name: str, gpus: Any, row: dict[str, Any] | None,
    warnings: list[str],
) -> float | None:  # fmt: skip
    """`value` if it may replace the row's price; else None, with a warning when it was bad."""
    if value is None:
        return None
    problem = price_problem(value, gpus)
    if problem is None:
        return value
    old = None if row is None else row.get("spot" if what == "spot" else "on_demand")
    kept = "not added" if row is None else f"kept {json.dumps(old)}"
    warnings.append(f"{name}: fetched {what} price {value!r} is {problem}; {kept}")
    return None


def merge(
    document: dict[str, Any],
    quotes: list[Quote],
    interruptions: dict[tuple[str, str], str],
    advisor_url: str | None,
    today: date,
) -> Merged:
    """The catalog with every usable quote applied: new rows added, prices replaced and
    re-dated, each price's source set to where its number came from. Rows nobody quoted, and
    prices whose fetched value is not plausible (kept, with a warning), stay as they are."""
    rows = [dict(row) for row in document.get("instances") or [] if isinstance(row, dict)]
    merged = Merged({**document, "instances": rows})
    by_key = {
        (str(r.get("instance", "")).lower(), str(r.get("region", "")).lower()): r for r in rows
    }
    # An instance type has the same GPUs in every region: a new row's bound comes from them.
    gpus_of = {str(r.get("instance", "")).lower(): r.get("gpus") for r in rows if r.get("gpus")}
    for quote in quotes:
        key = (quote.instance.lower(), quote.region.lower())
        gpus = quote.gpus or gpus_of.get(key[0])
        row = _apply(merged, quote, by_key.get(key), gpus)
        if row is not None:
            by_key[key] = row
    if advisor_url:
        _apply_interruptions(rows, interruptions, advisor_url, today)
    merged.document["schema"] = price_catalog.SCHEMA
    merged.document["updated"] = today.isoformat()
    return merged


def _name(quote: Quote) -> str:
    return f"{quote.instance} ({quote.region})"


def _apply(
    merged: Merged, quote: Quote, row: dict[str, Any] | None, gpus: Any
) -> dict[str, Any] | None:
    """Apply the quote's usable prices to its row (added when new); the row, if any."""
    name = _name(quote)
    on_demand = _usable(quote.on_demand, "on-demand", name, gpus, row, merged.warnings)
    spot = _usable(quote.spot, "spot", name, gpus, row, merged.warnings)
    if row is None:
        if on_demand is None:
            return None  # a new row needs an on-demand price to be of use
        row = {"provider": quote.provider, "instance": quote.instance, "region": quote.region}
        if quote.gpus:
            row["gpus"] = quote.gpus
        merged.document["instances"].append(row)
        merged.added.append(name)
    elif (on_demand is not None and row.get("on_demand") != on_demand) or (
        spot is not None and _spot_value(row) != spot
    ):
        merged.changed.append(name)
    elif on_demand is not None or spot is not None:
        merged.unchanged.append(name)
    if on_demand is not None:
        row["on_demand"] = on_demand
        row["date"], row["source"] = quote.day, quote.source
    if spot is not None:
        row["spot"] = spot
        row["spot_date"], row["spot_source"] = quote.day, quote.source
    return row


def _apply_interruptions(
    rows: list[dict[str, Any]],
    interruptions: dict[tuple[str, str], str],
    advisor_url: str,
    today: date,
) -> None:
    for row in rows:
        if row.get("provider") != "aws":
            continue
        label = interruptions.get((str(row.get("instance")).lower(), str(row.get("region"))))
        if label:
            row["interruption"] = label
            row["interruption_date"], row["interruption_source"] = today.isoformat(), advisor_url


def _spot_value(row: dict[str, Any]) -> Any:
    spot = row.get("spot")
    return spot[0] if isinstance(spot, list) and len(spot) == 1 else spot


def read_document(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
        document = json.loads(text, parse_constant=_not_a_number)
    except OSError as error:
        raise UsageError(f"--catalog {path}: cannot read: {error.strerror or error}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise UsageError(f"--catalog {path}: not valid JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise UsageError(f"--catalog {path}: expected an object with an `instances` list")
    return document


def _not_a_number(constant: str) -> Any:
    raise ValueError(f"{constant} is not a price (strict JSON has no NaN or Infinity)")


def write_document(
    document: dict[str, Any], output: Path, environ: Mapping[str, str] | None = None
) -> None:
    """Strict JSON, written whole or not at all (a temporary file renamed over the target),
    and never over the packaged snapshot (the hint names the default in `environ`)."""
    packaged = Path(price_catalog.packaged_path()).resolve()
    if output.resolve() == packaged:
        raise UsageError(
            f"--output {output}: that is the packaged catalog; write a user catalog instead",
            hint=f"the default is {price_catalog.user_path(environ)}",
        )
    try:
        text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    except ValueError as error:  # merge keeps only finite prices: a bug, said plainly
        raise UsageError(f"--output {output}: not written: {error}") from None
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_file(output, text, 0o644)
    except OSError as error:
        raise UsageError(f"--output {output}: cannot write: {why(error, output)}") from None
