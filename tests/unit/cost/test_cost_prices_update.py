"""`clusterkit cost prices update` against recorded endpoint responses (tests/fixtures/prices)
served by a real HTTP server on loopback, through the real command line."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clusterkit.cost import catalog
from tests.support.cli import CliRun, run_cli

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "prices"
AZURE_HOST = "https://prices.azure.com:443"
INDEX = "/offers/v1.0/aws/AmazonEC2/current/region_index.json"


class _Handler(BaseHTTPRequestHandler):
    """Serves the fixtures at the endpoints' own paths; counts every request."""

    requests: list[str]
    base: str
    stall: threading.Event | None = None

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if self.stall is not None:
            self.stall.wait(30)
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path.startswith("/aws/"):
            path = FIXTURES / url.path.removeprefix("/")
        elif url.path == "/spot-advisor-data.json":
            path = FIXTURES / "spot-advisor-data.json"
        elif url.path == "/api/retail/prices" and "$filter" in query:
            path = FIXTURES / "azure" / ("page-2.json" if "$skip" in query else "page-1.json")
        else:
            self.send_error(404)
            return
        if not path.is_file():
            self.send_error(404)
            return
        body = path.read_text().replace(AZURE_HOST, self.base).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[type[_Handler]]:
    handler = type("Handler", (_Handler,), {"requests": [], "stall": None})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler
    if handler.stall is not None:
        handler.stall.set()
    httpd.shutdown()
    httpd.server_close()


def update(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CliRun:
    argv = ["cost", "prices", "update", *args]
    return run_cli(argv, cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def endpoints(base: str) -> list[str]:
    return [
        "--aws-url", f"{base}/aws",
        "--spot-advisor-url", f"{base}/spot-advisor-data.json",
        "--azure-url", f"{base}/api/retail/prices",
    ]  # fmt: skip


def test_update_merges_new_and_changed_rows_dated_and_sourced(server, tmp_path: Path):
    out = tmp_path / "prices.json"
    done = update(*endpoints(server.base), "--region", "us-east-1", "--region", "us-west-2",
                  "-o", str(out))  # fmt: skip
    assert done.status == 0, done.stderr
    rows = {(r["instance"], r["region"]): r for r in json.loads(out.read_text())["instances"]}
    east = f"{server.base}/aws/offers/v1.0/aws/AmazonEC2/20261101000000/us-east-1/index.json"
    p5 = rows[("p5.48xlarge", "us-east-1")]
    # Changed: the Linux/shared/Used row's price, not Windows (80), dedicated (44) or reserved.
    assert (p5["on_demand"], p5["date"], p5["source"]) == (40.0, "2026-11-01", east)
    assert p5["spot"] == [17.63, 25.75] and p5["spot_date"] == "2025-01-01"  # AWS spot kept
    assert p5["interruption"] == "15-20%"
    assert p5["interruption_source"].endswith("/spot-advisor-data.json")
    assert rows[("p5.48xlarge", "us-west-2")]["interruption"] == "5-10%"  # added, advised
    assert rows[("p5en.48xlarge", "us-east-1")]["on_demand"] == 50.0
    assert rows[("p5en.48xlarge", "us-east-1")]["gpus"] == 8
    assert rows[("g5.xlarge", "us-east-1")]["interruption"] == "<5%"
    h100 = rows[("ND96isr_H100_v5", "eastus")]
    assert (h100["on_demand"], h100["spot"], h100["date"]) == (98.32, 18.169536, "2026-09-01")
    assert h100["source"].startswith(f"{server.base}/api/retail/prices?%24filter=")
    assert rows[("ND96isr_H200_v5", "swedencentral")]["on_demand"] == 110.0  # from page 2
    assert ("a3-highgpu-8g", "us-central1") in rows  # GCP: no keyless endpoint, kept
    assert any("%24skip=100" in path or "$skip=100" in path for path in server.requests)
    lines = done.stdout.splitlines()
    assert "changed: p5.48xlarge (us-east-1)" in lines and "added: p5.48xlarge (us-west-2)" in lines
    assert "changed: p5en.48xlarge (us-east-1)" in lines  # packaged since 2026-08-06
    assert lines[-1].startswith("3 added, 3 changed, 1 unchanged,")  # eastus H100: same
    # A fetched placeholder price is refused (the new row is not added), with a warning; a
    # spot price above on-demand is warned about by the catalog's own checks.
    assert ("p6-b200.48xlarge (us-east-1): fetched on-demand price 0.0 is a placeholder "
            "(zero or negative); not added") in done.stderr  # fmt: skip
    assert ("p6-b200.48xlarge", "us-east-1") not in rows
    assert "ND96isr_H100_v5 (westeurope): spot $130 is not below on-demand $120" in done.stderr
    loaded = catalog.load(str(out), today=date(2026, 11, 23))
    assert loaded.lookup("p5.48xlarge", "us-east-1").day == date(2026, 11, 1)
    assert loaded.lookup("ND96isr_H100_v5", "westeurope").spot is None


def test_update_writes_the_user_catalog_and_cost_reads_it(server, tmp_path: Path):
    env = {"XDG_DATA_HOME": str(tmp_path), "CLUSTERKIT_AWS_PRICING_URL": f"{server.base}/aws",
           "CLUSTERKIT_AWS_SPOT_ADVISOR_URL": f"{server.base}/spot-advisor-data.json",
           "CLUSTERKIT_AZURE_PRICES_URL": f"{server.base}/api/retail/prices"}  # fmt: skip
    done = update("--region", "us-east-1", env=env)
    user = tmp_path / "clusterkit" / "prices.json"
    assert done.status == 0 and f"wrote {user}" in done.stdout, done.stderr
    packaged = json.loads(Path(catalog.packaged_path()).read_text())
    assert all(r.get("on_demand") != 40.0 for r in packaged["instances"])  # untouched
    job = ["cost", "--nodes", "2", "--hours", "10", "--region", "us-east-1", "--trials", "0"]
    given = ["--instance", "p5en.48xlarge", "--spot-price", "20", "--preempt-rate", "5-10%"]
    cost = run_cli([*job, *given, "--format", "json"], cwd=REPO, env={**os.environ, **env})
    assert cost.status == 0, cost.stderr
    document = json.loads(cost.stdout)
    assert document["catalog"]["date"] == "2026-11-01"
    assert document["catalog"]["source"].endswith("/us-east-1/index.json")
    # No --preempt-rate: the row's Spot Advisor bucket (15-20% for p5 in us-east-1) is used.
    given = ["--instance", "p5.48xlarge"]
    cost = run_cli([*job, *given, "--format", "json"], cwd=REPO, env={**os.environ, **env})
    assert cost.status == 0, cost.stderr
    inputs = json.loads(cost.stdout)["inputs"]
    assert (
        inputs["preempt_rate_origin"]
        == "advisor bucket 15-20% (the catalog row's, AWS Spot Advisor)"
    )


def test_update_refuses_to_write_over_the_packaged_catalog(server):
    done = update(*endpoints(server.base), "--provider", "azure", "-o", catalog.packaged_path())
    assert done.status == 2
    assert "that is the packaged catalog" in done.stderr and "Traceback" not in done.stderr


def test_unreachable_endpoint_is_one_line_and_exit_3(tmp_path: Path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = update(*endpoints(f"http://127.0.0.1:{port}"), "-o", str(tmp_path / "p.json"))
    assert done.status == 3
    assert done.stderr.count("\n") == 1 and "unreachable" in done.stderr
    assert not (tmp_path / "p.json").exists()


def test_a_silent_endpoint_hits_the_deadline(server, tmp_path: Path):
    server.stall = threading.Event()
    done = update(*endpoints(server.base), "--timeout", "1", "-o", str(tmp_path / "p.json"))
    assert done.status == 3 and "timed out" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


def test_a_wrong_document_is_refused_not_merged(server, tmp_path: Path):
    done = update(
        "--provider", "aws", "--aws-url", f"{server.base}/aws",
        "--spot-advisor-url", server.base + "/aws" + INDEX,
        "-o", str(tmp_path / "p.json"),
    )  # fmt: skip
    assert done.status == 3 and "no `spot_advisor`" in done.stderr


def test_prices_without_a_step_is_a_usage_error_and_cost_flags_still_parse():
    from clusterkit import cli

    done = run_cli(["cost", "prices"], cwd=REPO)
    assert done.status == 2 and "cost prices update" in done.stderr
    assert done.stderr.count("\n") == 1
    args = cli.parse(["-v", "cost", "prices", "update", "--provider", "azure", "-o", "x.json"])
    assert (args.handler, args.provider, args.output, args.verbose) == (
        "clusterkit.commands.cost_prices:run", ["azure"], "x.json", 1)  # fmt: skip
    args = cli.parse(["cost", "inv.yaml", "--nodes", "4", "--catalog", "prices.json"])
    assert (args.handler, args.inventory, args.nodes) == (
        "clusterkit.commands.cost:run",
        "inv.yaml",
        4,
    )
