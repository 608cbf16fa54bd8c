"""A DOCKER_HOST that accepts connections and never answers (a stalled engine, a wrong port
behind a proxy) must fail in seconds, not after the 15-minute build timeout."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.image import engine
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A real TCP listener that completes handshakes (the kernel's backlog) but never
    accepts nor answers a byte."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_api_client_gives_up_on_a_silent_engine_within_its_connect_deadline(
    silent_port: int,
) -> None:
    environ = {"DOCKER_HOST": f"tcp://127.0.0.1:{silent_port}"}
    started = time.monotonic()
    with pytest.raises(engine.EngineUnavailable, match=f"127.0.0.1:{silent_port} within 1s"):
        engine.api_client(connect_timeout=1, environ=environ)
    assert time.monotonic() - started < 10  # version + ping: a few deadlines at most


def test_image_build_against_a_silent_engine_is_exit_3_in_seconds(silent_port: int) -> None:
    started = time.monotonic()
    done = run_cli(
        ["image", "build", REPO / "images" / "cpu-torch", "-q"],
        env={**os.environ, "DOCKER_HOST": f"tcp://127.0.0.1:{silent_port}"},
    )
    elapsed = time.monotonic() - started
    assert done.status == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "cannot reach the Docker engine" in lines[0], done.stderr
    assert f"127.0.0.1:{silent_port}" in lines[0]  # the run's DOCKER_HOST, not this process's
    assert elapsed < 3 * engine.CONNECT_TIMEOUT + 10, elapsed
