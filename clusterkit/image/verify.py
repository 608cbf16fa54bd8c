"""`image verify`: run the image and compare what is inside with the lock (no GPU needed)."""

from __future__ import annotations

import json
import math
from typing import Any

import docker
import docker.errors

from clusterkit.errors import ExternalToolError
from clusterkit.node.image import CONTAINER_PROBE

MARK = "CLUSTERKIT-PROBE "


def probe_image(api: docker.APIClient, reference: str, timeout: float = 120.0) -> dict[str, Any]:
    """torch / CUDA / NCCL / python as the image itself reports them."""
    try:
        container = api.create_container(
            reference, command=["python3", "-c", CONTAINER_PROBE], network_disabled=True
        )
    except docker.errors.APIError as error:
        raise ExternalToolError(f"cannot run {reference}: {error.explanation}") from None
    try:
        api.start(container)
        try:
            status = api.wait(container, timeout=math.ceil(timeout))
        except Exception:  # the engine's wait timed out: the container is killed below
            raise ExternalToolError(
                f"{reference}: probe did not finish in {timeout:.0f}s"
            ) from None
        logs = api.logs(container, stdout=True, stderr=True).decode(errors="replace")
    finally:
        api.remove_container(container, force=True)
    for line in logs.splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK) :]))
    raise ExternalToolError(
        f"{reference}: probe exited {status.get('StatusCode')}: {logs.strip()[-400:]}"
    )


def differences(lock: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """What differs between the lock and the running image, one line each."""
    torch = lock["torch"]
    out = []
    if "torch_error" in found:
        out.append(f"torch does not import: {found['torch_error']}")
    for key in ("version", "cuda", "nccl"):
        name = "torch" if key == "version" else key
        if found.get(name) != torch.get(key):
            out.append(f"{name}: lock {torch.get(key)}, image {found.get(name)}")
    python = str(found.get("python", ""))
    if not python.startswith(lock["python"] + "."):
        out.append(f"python: lock {lock['python']}, image {python}")
    return out
