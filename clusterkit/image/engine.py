"""The Docker Engine API as `image` uses it: clients, credentials, progress.

Build and push stream their logs through the low-level APIClient (the high-level client
swallows the stream until the end). Credentials come from the Docker config, which the SDK
reads itself, or from CLUSTERKIT_REGISTRY_USERNAME / CLUSTERKIT_REGISTRY_PASSWORD; they are
handed to the engine and never printed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import docker
import docker.errors
from docker.utils import kwargs_from_env
from rich.console import Console

from clusterkit.errors import StageError

API_TIMEOUT = 900  # seconds per engine request once connected; a torch layer push is long
# Connect, version negotiation and ping: an engine that answers at all answers in well under
# this, and a DOCKER_HOST pointing at a silent port must not hold the command for minutes.
CONNECT_TIMEOUT = 5


class EngineUnavailable(StageError):
    """No Docker engine answered: the step could not run (exit 3), nothing was decided."""


def api_client(
    timeout: int = API_TIMEOUT,
    connect_timeout: int = CONNECT_TIMEOUT,
    environ: Mapping[str, str] | None = None,
) -> docker.APIClient:
    """Engine from DOCKER_HOST in `environ` (None: this process's; or the default socket),
    reached and pinged within `connect_timeout`; only then are requests allowed `timeout`
    seconds. An engine that cannot be reached is exit 3 (could not run), naming where it
    looked."""
    options = kwargs_from_env(environment=None if environ is None else dict(environ))
    where = options.get("base_url") or "unix:///var/run/docker.sock"
    try:
        client = docker.APIClient(timeout=connect_timeout, version="auto", **options)
        client.ping()
    except Exception as error:  # any failure to reach the engine is one error for the user
        detail = " ".join(str(error).split())[:300]
        raise EngineUnavailable(
            f"cannot reach the Docker engine at {where} within {connect_timeout:g}s: {detail}",
            hint="start dockerd or set DOCKER_HOST",
        ) from None
    client.timeout = timeout
    return client


def docker_client(api: docker.APIClient) -> docker.DockerClient:
    client = docker.DockerClient.__new__(docker.DockerClient)
    client.api = api
    return client


def env_auth(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """Credentials from the environment (None: this process's); None lets the SDK use the
    Docker config."""
    environ = os.environ if environ is None else environ
    user = environ.get("CLUSTERKIT_REGISTRY_USERNAME")
    password = environ.get("CLUSTERKIT_REGISTRY_PASSWORD")
    if user and password:
        return {"username": user, "password": password}
    return None


def chunk_error(chunk: dict[str, Any]) -> str | None:
    """The in-band error of a stream chunk (registries report failures with HTTP 200)."""
    if "error" in chunk:
        return str(chunk["error"]).strip()
    detail = chunk.get("errorDetail")
    if detail:
        return str(detail.get("message", detail) if isinstance(detail, dict) else detail).strip()
    return None


def console(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> Console:
    """Build and push progress on `stream` (None: this process's stderr)."""
    return Console(file=stream or sys.stderr, highlight=False, _environ=environ)
