"""The fleet view on the namespace cluster: a real Prometheus server scrapes the metrics a
real check wrote, and a baseline saved before a driver upgrade on every node names it."""

from __future__ import annotations

import datetime
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_check_spine import STATIC_ONLY, check, finding
from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster

SCRAPE_SECONDS = 60  # the server's start, its first scrape and the query, at most


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(folder: Path) -> Iterator[int]:
    """`folder` over HTTP on a loopback port, as any scrape target (the file is /metrics)."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def prometheus(tmp_path: Path, target_port: int) -> Iterator[str]:
    """A real Prometheus scraping the target every second, with its own storage under
    tmp_path; stopped (killed if it lingers) when done. Yields its API's base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus missing (apt-get install prometheus; scripts/test.sh does)")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: clusterkit\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    port = free_port()
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    with (tmp_path / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=20)


def query_until_found(base: str, query: str, deadline: float) -> list[dict[str, Any]]:
    """The query's result once it has one; [] when the deadline passed first."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                result: list[dict[str, Any]] = json.load(answer)["data"]["result"]
            if result:
                return result
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)  # poll interval while waiting for the condition
    return []


def test_a_real_prometheus_scrapes_the_failing_gpu_of_a_real_check(
    cluster: NetCluster, cluster_inventory: Path, tmp_path: Path
) -> None:
    cluster.nodes[1].set_gpus(overrides={3: {"remapped_rows.pending": "Yes"}})
    metrics = tmp_path / "served"
    metrics.mkdir()
    done = run_cli(
        ["check", str(cluster_inventory), *STATIC_ONLY, "--format", "prometheus",
         "-o", str(metrics / "metrics")],
        timeout=120,
    )  # fmt: skip
    assert done.status == 1, done.stderr
    with served(metrics) as target, prometheus(tmp_path, target) as base:
        deadline = time.monotonic() + SCRAPE_SECONDS
        status = query_until_found(
            base, 'clusterkit_check_status{check="gpu.row-remap",host="node2"}', deadline
        )
        pending = query_until_found(
            base, 'clusterkit_gpu_remapped_rows_pending{host="node2",gpu="3"}', deadline
        )
        healthy = query_until_found(
            base, 'clusterkit_gpu_remapped_rows_pending{host="node1",gpu="3"}', deadline
        )
        verdict = query_until_found(base, 'clusterkit_verdict{verdict="fail"}', deadline)
    log = (tmp_path / "prometheus.log").read_text(errors="replace")[-2000:]
    assert status and status[0]["value"][1] == "4", log
    assert pending[0]["value"][1] == "1" and healthy[0]["value"][1] == "0"
    assert verdict[0]["value"][1] == "1" and verdict[0]["metric"]["command"] == "check"


def test_a_driver_upgrade_on_every_node_is_named_as_drift_from_the_baseline(
    cluster: NetCluster, cluster_inventory: Path, tmp_path: Path
) -> None:
    baseline = tmp_path / "baseline.json"
    status, _, _ = check(cluster_inventory, "--save-baseline", str(baseline))
    assert status == 0 and json.loads(baseline.read_text())["hosts"]["node4"]["driver"] == (
        "550.54.15"
    )
    for node in cluster.nodes:
        node.set_gpus(driver="560.35.03")
    status, report, _ = check(cluster_inventory, "--baseline", str(baseline))
    assert finding(report, "parity.driver", "ok")  # every node changed together
    drift = finding(report, "baseline.drift", "warn")
    taken = json.loads(baseline.read_text())["taken"]  # the day it was saved (UTC)
    assert datetime.date.fromisoformat(taken) <= datetime.datetime.now(datetime.timezone.utc).date()
    assert drift["message"] == (
        f"driver 550.54.15 -> 560.35.03 on all 4 nodes since the baseline of {taken}"
    )
    assert drift["hosts"] == ["node1", "node2", "node3", "node4"]
    assert status == 0  # a warning: the job may still go ahead
