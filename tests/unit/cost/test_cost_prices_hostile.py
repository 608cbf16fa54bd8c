"""`clusterkit cost prices update` against hostile price endpoints, served by a real HTTP server
on loopback: NaN, infinite, negative and absurd prices; a NextPageLink or a redirect that
leaves the endpoint (`file:///etc/passwd`, `file:///dev/zero`, another host); an endless
answer; a server that drips one byte a second; documents of the wrong shape. Each once wrote
non-JSON prices over good rows, opened local files, ran out of memory, hung past --timeout,
or ended in a traceback."""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clusterkit.cost import catalog
from clusterkit.cost.fetch import MAX_DOCUMENT_BYTES
from tests.support.cli import CliRun, run_cli

REPO = Path(__file__).resolve().parents[3]
INDEX = "/aws/offers/v1.0/aws/AmazonEC2/current/region_index.json"
OFFER = "/aws/offer/us-east-1.json"
ADVISOR = "/advisor.json"
AZURE = "/api/retail/prices"
Route = Callable[["_Server"], None]


class _Server(BaseHTTPRequestHandler):
    """Answers each path with its route; records every request."""

    routes: dict[str, Route]
    requests: list[str]
    stop: threading.Event
    base: str
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        route = self.routes.get(urllib.parse.urlsplit(self.path).path)
        if route is None:
            self.send_error(404)
        else:
            route(self)

    def log_message(self, *args: object) -> None:
        pass


def body(text: str | bytes) -> Route:
    data = text.encode() if isinstance(text, str) else text

    def send(handler: _Server) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return send


def page(items: list[Any], next_link: Any = None) -> Route:
    return body(json.dumps({"Items": items, "NextPageLink": next_link}))


def azure_item(region: str, price: Any, spot: bool = False, sku: str = "ND96isr_H100_v5") -> dict:
    return {
        "currencyCode": "USD", "retailPrice": price, "armRegionName": region,
        "effectiveStartDate": "2026-10-01T00:00:00Z", "type": "Consumption",
        "meterName": sku.replace("_", "") + (" Spot" if spot else ""),
        "productName": "Virtual Machines NDsr v5 Series", "unitOfMeasure": "1 Hour",
        "armSkuName": f"Standard_{sku}",
    }  # fmt: skip


def aws_offer(usd: Any) -> dict[str, Any]:
    attributes = {"instanceType": "p5.48xlarge", "gpu": "8", "tenancy": "Shared",
                  "operatingSystem": "Linux", "capacitystatus": "Used", "preInstalledSw": "NA",
                  "regionCode": "us-east-1"}  # fmt: skip
    dimension = {"unit": "Hrs", "pricePerUnit": {"USD": usd}}
    return {
        "publicationDate": "2026-11-01T00:00:00Z",
        "products": {"SKU1": {"attributes": attributes}},
        "terms": {"OnDemand": {"SKU1": {"SKU1.T": {"priceDimensions": {"SKU1.T.R": dimension}}}}},
    }


@pytest.fixture
def server() -> Iterator[type[_Server]]:
    handler = type("Handler", (_Server,), {"routes": {}, "requests": [],
                                           "stop": threading.Event()})  # fmt: skip
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    handler.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    index = {"regions": {"us-east-1": {"currentVersionUrl": "/offer/us-east-1.json"}}}
    handler.routes.update({
        INDEX: body(json.dumps(index)),
        OFFER: body(json.dumps(aws_offer("40.0"))),
        ADVISOR: body(json.dumps({"spot_advisor": {}, "ranges": []})),
        AZURE: page([azure_item("eastus", 98.32)]),
    })  # fmt: skip
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler
    handler.stop.set()
    httpd.shutdown()
    httpd.server_close()


def update(server: type[_Server], *args: str, timeout: float = 60) -> CliRun:
    flags = ["--aws-url", server.base + "/aws", "--spot-advisor-url", server.base + ADVISOR,
             "--azure-url", server.base + AZURE, "--region", "us-east-1"]  # fmt: skip
    return run_cli(["cost", "prices", "update", *flags, *args], cwd=REPO, timeout=timeout)


def one_line_error(done: CliRun, status: int = 3) -> str:
    assert done.status == status, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def strict(path: Path) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} on disk")

    return json.loads(path.read_text(), parse_constant=refuse)


# -- prices ----------------------------------------------------------------------------------


def test_bad_prices_leave_the_rows_as_they_were_with_a_warning(server, tmp_path: Path):
    """NaN, Infinity, negative, 1e308 and 1e-300 over good rows: the old prices stay."""
    server.routes[AZURE] = body(
        json.dumps({"Items": [
            azure_item("eastus", float("nan")), azure_item("eastus", -5.0, spot=True),
            azure_item("uksouth", 1e308), azure_item("uksouth", float("inf"), spot=True),
            azure_item("polandcentral", 1e-300, sku="ND96isr_H200_v5"),
            azure_item("westus", 2000.0),  # 8 GPUs at $250 an hour each: implausible
        ], "NextPageLink": None})
    )  # fmt: skip
    server.routes[OFFER] = body(json.dumps(aws_offer("NaN")))
    out = tmp_path / "prices.json"
    done = update(server, "-o", str(out))
    assert done.status == 0, done.stderr
    rows = {(r["instance"], r["region"]): r for r in strict(out)["instances"]}
    packaged = json.loads(Path(catalog.packaged_path()).read_text())["instances"]
    for old in packaged:
        row = rows[(old["instance"], old["region"])]
        assert (row["on_demand"], row.get("spot")) == (old["on_demand"], old.get("spot"))
        assert row.get("date") == old.get("date")
    assert ("ND96isr_H100_v5", "westus") not in rows
    for line in [
        "p5.48xlarge (us-east-1): fetched on-demand price nan is not a finite number; kept 55.04",
        "ND96isr_H100_v5 (eastus): fetched on-demand price nan is not a finite number; kept 98.32",
        "ND96isr_H100_v5 (eastus): fetched spot price -5.0 is a placeholder",
        "ND96isr_H100_v5 (uksouth): fetched on-demand price 1e+308 is implausible",
        "ND96isr_H100_v5 (uksouth): fetched spot price inf is not a finite number",
        "ND96isr_H200_v5 (polandcentral): fetched on-demand price 1e-300 is below 0.01",
        "ND96isr_H100_v5 (westus): fetched on-demand price 2000.0 is implausible",
    ]:
        assert f"warning: {line}" in done.stderr, done.stderr


def test_a_catalog_with_nan_is_refused_not_copied(server, tmp_path: Path):
    document = json.loads(Path(catalog.packaged_path()).read_text())
    text = json.dumps(document).replace('"on_demand": 55.04', '"on_demand": NaN')
    source = tmp_path / "in.json"
    source.write_text(text)
    done = update(server, "--catalog", str(source), "-o", str(tmp_path / "out.json"))
    assert "NaN is not a price" in one_line_error(done, status=2)


def test_a_good_update_leaves_no_temporary_file(server, tmp_path: Path):
    out = tmp_path / "prices.json"
    out.write_text("old")
    done = update(server, "-o", str(out))
    assert done.status == 0, done.stderr
    assert strict(out)["instances"] and os.listdir(tmp_path) == ["prices.json"]


# -- where links lead ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "link",
    ["file:///etc/passwd", "file:///dev/zero", "https://127.0.0.1:{port}/api/retail/prices",
     "http://localhost:{port}/api/retail/prices?$skip=100", "/api/retail/prices?$skip=100", 5],
)  # fmt: skip
def test_next_page_link_is_followed_only_on_the_same_origin(server, tmp_path: Path, link):
    port = server.base.rsplit(":", 1)[1]
    server.routes[AZURE] = page([azure_item("eastus", 98.32)], next_link=link)
    if isinstance(link, str):
        link = link.format(port=port)
        server.routes[AZURE] = page([azure_item("eastus", 98.32)], next_link=link)
    out = tmp_path / "p.json"
    started = time.monotonic()
    error = one_line_error(update(server, "--provider", "azure", "-o", str(out)))
    assert "NextPageLink" in error and ("not followed" in error or "not a URL" in error)
    assert time.monotonic() - started < 30 and not out.exists()
    assert len(server.requests) == 1  # the first page only


def test_a_next_page_on_the_same_origin_is_followed(server, tmp_path: Path):
    server.routes[AZURE] = page([azure_item("eastus", 98.32)],
                                next_link=server.base + "/page2")  # fmt: skip
    server.routes["/page2"] = page([azure_item("eastus", 18.0, spot=True)])
    out = tmp_path / "p.json"
    done = update(server, "--provider", "azure", "-o", str(out))
    assert done.status == 0, done.stderr
    rows = {(r["instance"], r["region"]): r for r in strict(out)["instances"]}
    assert rows[("ND96isr_H100_v5", "eastus")]["spot"] == 18.0


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "http://localhost:{port}/elsewhere", "ftp://127.0.0.1/x"]
)
def test_redirects_stay_on_the_origin(server, tmp_path: Path, target: str):
    location = target.format(port=server.base.rsplit(":", 1)[1])

    def redirect(handler: _Server) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    server.routes[AZURE] = redirect
    server.routes["/elsewhere"] = page([azure_item("eastus", 98.32)])
    error = one_line_error(update(server, "--provider", "azure", "-o", str(tmp_path / "p.json")))
    assert "a redirect" in error and "not followed" in error
    assert not any(path.startswith("/elsewhere") for path in server.requests)


def test_a_non_http_endpoint_option_is_a_usage_error(server, tmp_path: Path):
    done = update(server, "--azure-url", "file:///etc/passwd", "-o", str(tmp_path / "p.json"))
    assert "--azure-url file:///etc/passwd: only http and https" in one_line_error(done, 2)


# -- how much and how long -------------------------------------------------------------------


def test_an_endless_answer_is_cut_at_the_cap(server, tmp_path: Path):
    def endless(handler: _Server) -> None:  # no Content-Length: the body runs to the close
        handler.send_response(200)
        handler.end_headers()
        chunk = b"[" * 65536
        for _ in range(MAX_DOCUMENT_BYTES // len(chunk) + 64):
            if handler.stop.is_set():
                return
            handler.wfile.write(chunk)

    server.routes[AZURE] = endless
    error = one_line_error(update(server, "--provider", "azure", "-o", str(tmp_path / "p.json")))
    assert f"answer is over {MAX_DOCUMENT_BYTES} bytes" in error


def test_a_declared_huge_answer_is_refused_before_reading(server, tmp_path: Path):
    def huge(handler: _Server) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(10**12))
        handler.end_headers()

    server.routes[AZURE] = huge
    error = one_line_error(update(server, "--provider", "azure", "-o", str(tmp_path / "p.json")))
    assert f"answer of {10**12} bytes is over {MAX_DOCUMENT_BYTES}" in error


def _drip(data: bytes, headers_too: bool) -> Route:
    def send(handler: _Server) -> None:
        head = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data)
        if not headers_too:
            handler.wfile.write(head)
            head = b""
        for byte in head + data:
            if handler.stop.wait(1.0):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    return send


@pytest.mark.parametrize("headers_too", [False, True])
def test_a_one_byte_a_second_server_cannot_outlast_the_timeout(server, tmp_path, headers_too):
    server.routes[AZURE] = _drip(json.dumps({"Items": [], "NextPageLink": None}).encode() * 4,
                                 headers_too)  # fmt: skip
    started = time.monotonic()
    done = update(server, "--provider", "azure", "--timeout", "3", "-o", str(tmp_path / "p"))
    assert "timed out" in one_line_error(done)
    assert time.monotonic() - started < 3 + 5  # the deadline, and the interpreter's start


# -- shapes ----------------------------------------------------------------------------------


def _regions(value: Any) -> dict[str, Any]:
    return {"regions": {"us-east-1": value}}


def _offer_with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    offer = copy.deepcopy(aws_offer("40.0"))
    target = offer
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return offer


@pytest.mark.parametrize(
    ("path", "document", "said"),
    [
        (AZURE, {"Items": [1, 2]}, "Items[0] is a number, not an object"),
        (AZURE, {"Items": [azure_item("eastus", "98.32")]},
         "Items[0].retailPrice is a string, not a number"),
        (AZURE, {"Items": [azure_item("eastus", None)]},
         "Items[0].retailPrice is null, not a number"),
        (AZURE, {"Items": [], "NextPageLink": {"a": 1}}, "NextPageLink is not a URL string"),
        (AZURE, [], "no `Items`"),
        (INDEX, _regions([]), "regions.us-east-1 is a list, not an object"),
        (INDEX, _regions({"currentVersionUrl": 7}), "regions.us-east-1.currentVersionUrl is a"),
        (OFFER, [1], "the offer file is a list, not an object"),
        (OFFER, _offer_with(("products",), []), "products is a list, not an object"),
        (OFFER, _offer_with(("products", "SKU1"), "x"), "products.SKU1 is a string"),
        (OFFER, _offer_with(("terms", "OnDemand", "SKU1"), [1]), "terms.OnDemand.SKU1 is a list"),
        (OFFER, _offer_with(("terms", "OnDemand", "SKU1", "SKU1.T", "priceDimensions", "SKU1.T.R",
                             "pricePerUnit", "USD"), "forty"), "is a string, not a decimal price"),
        (ADVISOR, {"spot_advisor": {"us-east-1": {"Linux": []}}}, "Linux is a list"),
        (ADVISOR, {"spot_advisor": {}, "ranges": {"a": 1}}, "ranges is an object, not a list"),
        (ADVISOR, {"spot_advisor": {"us-east-1": {"Linux": {"p5.48xlarge": {"r": [1]}}}},
                   "ranges": [{"index": 0, "label": "<5%"}, "x"]}, "ranges[1] is a string"),
    ],
)  # fmt: skip
def test_a_wrongly_typed_document_is_one_line(server, tmp_path: Path, path, document, said):
    server.routes[path] = body(json.dumps(document))
    provider = "azure" if path == AZURE else "aws"
    done = update(server, "--provider", provider, "-o", str(tmp_path / "p.json"))
    assert said in one_line_error(done)
    assert not (tmp_path / "p.json").exists()
