"""`clusterkit cost prices update`: refresh the price catalog from the providers' public,
keyless endpoints, and merge the answers into a copy of the catalog.

What comes from where (nothing here needs credentials):
- AWS on-demand list prices: the Price List bulk files. `region_index.json` names each
  region's current AmazonEC2 offer file; the offer's `products` (Linux, shared tenancy, no
  pre-installed software, capacity status Used) and `terms.OnDemand` give USD per hour.
- AWS interruption buckets: the Spot Instance Advisor's `spot-advisor-data.json` (`r` is the
  index into `ranges`: <5%, 5-10%, ...). AWS spot prices themselves come only from the
  authenticated DescribeSpotPriceHistory API, so AWS spot ranges are kept as they were.
- Azure on-demand and spot: the Retail Prices API (`$filter` by SKU, every `NextPageLink`
  followed); Linux rows only, `... Spot` meters are spot, `Low Priority` ones are skipped.
GCP has no keyless price endpoint (its Cloud Billing Catalog API needs a key): GCP rows stay.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from clusterkit.cost import catalog as price_catalog
from clusterkit.errors import ClusterkitError, UsageError
from clusterkit.status import ExitStatus

AWS_PRICING_URL = "https://pricing.us-east-1.amazonaws.com"
AWS_REGION_INDEX = "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
AWS_SPOT_ADVISOR_URL = "https://spot-bids.s3.amazonaws.com/spot-advisor-data.json"
AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
ENV_URLS = {
    "aws": "CLUSTERKIT_AWS_PRICING_URL",
    "spot_advisor": "CLUSTERKIT_AWS_SPOT_ADVISOR_URL",
    "azure": "CLUSTERKIT_AZURE_PRICES_URL",
}
AWS_INSTANCES = ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
AWS_REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-north-1", "ap-northeast-1")
AZURE_SKUS = ("ND96isr_H100_v5", "ND96isr_H200_v5")
DEFAULT_DEADLINE = 120.0
MAX_PAGES = 200  # Azure pages of 100 items; a loop guard, far above what two SKUs return
AWS_PRICE_PAGE = "https://aws.amazon.com/ec2/pricing/on-demand/"
AWS_ADVISOR_PAGE = "https://aws.amazon.com/ec2/spot/instance-advisor/"


class Unreachable(ClusterkitError):
    """An endpoint did not answer in time, or answered with something unusable."""

    exit_status = ExitStatus.INCOMPLETE


@dataclass
class Endpoints:
    aws: str = AWS_PRICING_URL
    spot_advisor: str = AWS_SPOT_ADVISOR_URL
    azure: str = AZURE_PRICES_URL

    @classmethod
    def from_env(cls, **given: str | None) -> Endpoints:
        """Option over environment over the public default."""
        values = {}
        for name, variable in ENV_URLS.items():
            values[name] = given.get(name) or os.environ.get(variable) or getattr(cls, name)
        return cls(**values)


@dataclass
class Fetcher:
    """GETs JSON under one deadline for the whole update."""

    deadline: float
    started: float = field(default_factory=time.monotonic)

    def json(self, url: str) -> Any:
        left = self.deadline - (time.monotonic() - self.started)
        if left <= 0:
            raise Unreachable(f"price update: deadline of {self.deadline:g}s passed before {url}")
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=left) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            raise Unreachable(f"price update: {url}: HTTP {error.code} {error.reason}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            raise Unreachable(f"price update: {url} unreachable: {reason}") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise Unreachable(f"price update: {url}: not JSON: {error}") from None


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


def aws_quotes(
    fetch: Fetcher, base: str, instances: tuple[str, ...], regions: tuple[str, ...]
) -> list[Quote]:
    """On-demand Linux prices from each region's current AmazonEC2 offer file."""
    index_url = base.rstrip("/") + AWS_REGION_INDEX
    index = fetch.json(index_url)
    known = index.get("regions") if isinstance(index, dict) else None
    if not isinstance(known, dict):
        raise Unreachable(f"price update: {index_url}: no `regions` (not a region index)")
    quotes: list[Quote] = []
    for region in regions:
        entry = known.get(region)
        if not isinstance(entry, dict) or not entry.get("currentVersionUrl"):
            continue
        # currentVersionUrl is absolute on the pricing host: keep the base's own path
        url = base.rstrip("/") + "/" + str(entry["currentVersionUrl"]).lstrip("/")
        offer = fetch.json(url)
        day = str(offer.get("publicationDate", ""))[:10] or date.today().isoformat()
        for sku, instance, gpus in _aws_products(offer, region, instances):
            quotes.append(
                Quote("aws", instance, region, _aws_on_demand(offer, sku), url, day, gpus=gpus)
            )
    return quotes


def _aws_products(offer: dict[str, Any], region: str, instances: tuple[str, ...]):
    wanted = {name.lower() for name in instances}
    for sku, product in (offer.get("products") or {}).items():
        attributes = product.get("attributes") or {}
        if str(attributes.get("instanceType", "")).lower() not in wanted:
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
        yield sku, attributes["instanceType"], int(gpus) if gpus.isdigit() else None


def _aws_on_demand(offer: dict[str, Any], sku: str) -> float | None:
    """The hourly USD price of the SKU's on-demand term; None when it has none."""
    for term in ((offer.get("terms") or {}).get("OnDemand") or {}).get(sku, {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") == "Hrs":
                try:
                    return float(dimension["pricePerUnit"]["USD"])
                except (KeyError, TypeError, ValueError):
                    return None
    return None


def aws_interruptions(fetch: Fetcher, url: str) -> dict[tuple[str, str], str]:
    """(instance, region) -> the advisor's interruption-frequency label, Linux."""
    data = fetch.json(url)
    if not isinstance(data, dict) or not isinstance(data.get("spot_advisor"), dict):
        raise Unreachable(f"price update: {url}: no `spot_advisor` (not the advisor data)")
    labels = {r.get("index"): r.get("label") for r in data.get("ranges") or []}
    found: dict[tuple[str, str], str] = {}
    for region, systems in data["spot_advisor"].items():
        for instance, advice in ((systems or {}).get("Linux") or {}).items():
            label = labels.get((advice or {}).get("r"))
            if label:
                found[(instance.lower(), region)] = str(label)
    return found


def azure_quotes(fetch: Fetcher, base: str, skus: tuple[str, ...]) -> list[Quote]:
    """Linux consumption prices per region, on-demand and spot, following NextPageLink."""
    names = " or ".join(f"armSkuName eq 'Standard_{sku}'" for sku in skus)
    query = f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and ({names})"
    url: str | None = base + "?" + urllib.parse.urlencode({"$filter": query})
    rows: dict[tuple[str, str], dict[str, float]] = {}
    days: dict[tuple[str, str], str] = {}
    pages = 0
    while url:
        pages += 1
        if pages > MAX_PAGES:
            raise Unreachable(f"price update: {base}: more than {MAX_PAGES} pages; stopped")
        page = fetch.json(url)
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise Unreachable(f"price update: {url}: no `Items` (not a retail prices page)")
        for item in page["Items"]:
            _azure_row(item, rows, days)
        url = page.get("NextPageLink") or None
    source = base + "?" + urllib.parse.urlencode({"$filter": query})
    quotes = []
    for (sku, region), prices in sorted(rows.items()):
        quotes.append(
            Quote(
                "azure", sku, region, prices.get("on_demand"), source,
                days.get((sku, region)) or date.today().isoformat(), spot=prices.get("spot"),
            )
        )  # fmt: skip
    return quotes


def _azure_row(
    item: dict[str, Any], rows: dict[tuple[str, str], dict[str, float]], days: dict
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
    try:
        rows.setdefault((sku, region), {})[kind] = float(item["retailPrice"])
    except (KeyError, TypeError, ValueError):
        return
    start = str(item.get("effectiveStartDate") or "")[:10]
    if start:
        days[(sku, region)] = max(days.get((sku, region), ""), start)


@dataclass
class Merged:
    document: dict[str, Any]
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def merge(
    document: dict[str, Any],
    quotes: list[Quote],
    interruptions: dict[tuple[str, str], str],
    advisor_url: str | None,
    today: date,
) -> Merged:
    """The catalog with every quote applied: new rows added, prices replaced and re-dated,
    each row's source set to where its number came from. Rows nobody quoted stay as they are."""
    rows = [dict(row) for row in document.get("instances") or [] if isinstance(row, dict)]
    merged = Merged({**document, "instances": rows})
    by_key = {
        (str(r.get("instance", "")).lower(), str(r.get("region", "")).lower()): r for r in rows
    }
    for quote in quotes:
        if quote.on_demand is None and quote.spot is None:
            continue
        key = (quote.instance.lower(), quote.region.lower())
        row = by_key.get(key)
        name = f"{quote.instance} ({quote.region})"
        if row is None:
            row = {"provider": quote.provider, "instance": quote.instance, "region": quote.region}
            if quote.gpus:
                row["gpus"] = quote.gpus
            rows.append(row)
            by_key[key] = row
            merged.added.append(name)
        elif row.get("on_demand") != quote.on_demand or (
            quote.spot is not None and _spot_value(row) != quote.spot
        ):
            merged.changed.append(name)
        else:
            merged.unchanged.append(name)
        row["on_demand"] = quote.on_demand
        row["date"], row["source"] = quote.day, quote.source
        if quote.spot is not None:
            row["spot"] = quote.spot
            row["spot_date"], row["spot_source"] = quote.day, quote.source
    if advisor_url:
        for row in rows:
            if row.get("provider") != "aws":
                continue
            label = interruptions.get((str(row["instance"]).lower(), str(row.get("region"))))
            if label:
                row["interruption"] = label
                row["interruption_date"], row["interruption_source"] = (
                    today.isoformat(),
                    advisor_url,
                )
    merged.document["schema"] = price_catalog.SCHEMA
    merged.document["updated"] = today.isoformat()
    return merged


def _spot_value(row: dict[str, Any]) -> Any:
    spot = row.get("spot")
    return spot[0] if isinstance(spot, list) and len(spot) == 1 else spot


def read_document(path: str) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--catalog {path}: cannot read: {error.strerror or error}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"--catalog {path}: not valid JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise UsageError(f"--catalog {path}: expected an object with an `instances` list")
    return document


def write_document(document: dict[str, Any], output: Path) -> None:
    """Atomically, and never over the packaged snapshot."""
    packaged = Path(price_catalog.packaged_path()).resolve()
    if output.resolve() == packaged:
        raise UsageError(
            f"--output {output}: that is the packaged catalog; write a user catalog instead",
            hint=f"the default is {price_catalog.user_path()}",
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    partial.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    partial.replace(output)
