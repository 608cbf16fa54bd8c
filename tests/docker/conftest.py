"""Fixtures for image tests against a real Docker engine and a registry on loopback.

The CPU spec is copied into the session's tmp dir with its base pointing at this session's
registry, locked and rendered with the real commands, and built once per session; tests
that rebuild or push reuse that build. Every test here carries the `docker` mark.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import yaml

from tests.support import docker_env
from tests.support.cli import run_cli

DOCKER_DIR = Path(__file__).parent
REPO = DOCKER_DIR.parents[1]
CPU_SPEC = REPO / "images" / "cpu-torch" / "image.yaml"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if DOCKER_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.docker)


def clusterkit(
    *args: str, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`clusterkit ARGS` run from the repository, in-process. With `env` (variables over this
    process's) it is a process of its own: the Docker SDK reads DOCKER_CONFIG, where the
    logins are, from the process's environment, not from the run's."""
    if env is not None:
        return subprocess.run(
            [sys.executable, "-m", "clusterkit", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=REPO,
            env={**os.environ, **env},
        )
    done = run_cli(args, cwd=REPO, timeout=timeout)
    return subprocess.CompletedProcess(["clusterkit", *args], done.status, done.stdout, done.stderr)


@pytest.fixture(scope="session")
def engine() -> str:
    try:
        return docker_env.ensure_dockerd()
    except docker_env.DockerUnavailable as reason:
        pytest.skip(f"no Docker engine: {reason}")


@pytest.fixture(scope="session")
def api(engine: str) -> Iterator[docker.APIClient]:
    client = docker.APIClient(base_url=engine, timeout=900)
    yield client
    client.close()


@pytest.fixture(scope="session")
def client(engine: str) -> Iterator[docker.DockerClient]:
    high_level = docker.DockerClient(base_url=engine, timeout=900)
    yield high_level
    high_level.close()


@pytest.fixture(scope="session")
def registry(engine: str) -> Iterator[docker_env.Registry]:
    started = docker_env.ensure_registry(docker_env.free_port())
    yield started
    started.stop()


@dataclass
class BuiltImage:
    spec_dir: Path
    reference: str  # repository:spec-tag
    image_id: str
    cold_seconds: float


@pytest.fixture(scope="session")
def cpu_spec_dir(tmp_path_factory: pytest.TempPathFactory, api: docker.APIClient, registry) -> Path:
    """images/cpu-torch, based on this session's registry, locked and rendered for real."""
    base = docker_env.ensure_base_image()
    base_repo = f"{registry.address}/clusterkit/debian-base"
    api.tag(base, base_repo, "bookworm")
    pushed = None
    for chunk in api.push(base_repo, tag="bookworm", stream=True, decode=True):
        assert "error" not in chunk, chunk
        pushed = (chunk.get("aux") or {}).get("Digest") or pushed
    assert pushed, "the registry reported no digest for the pushed base"
    folder = tmp_path_factory.mktemp("cpu-torch")
    spec = yaml.safe_load(CPU_SPEC.read_text())
    # The shipped spec pins the public base by digest; the copy pins the local one, so that
    # `image lock` checks the registry's answer against a pin here too.
    assert spec["base"]["digest"].startswith("sha256:"), "the shipped base must be pinned"
    spec["base"] = {"image": f"{base_repo}:bookworm", "digest": pushed}
    spec["repository"] = f"{registry.address}/clusterkit/cpu-torch"
    (folder / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "torch==2.13.0", "--no-deps", "-d",
         str(folder / "wheelhouse")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert download.returncode == 0, download.stderr
    for step in ("lock", "render"):
        done = clusterkit("image", step, str(folder))
        assert done.returncode == 0, done.stdout + done.stderr
    return folder


@pytest.fixture(scope="session")
def built_cpu_image(cpu_spec_dir: Path) -> BuiltImage:
    """The CPU image, built once per session through `clusterkit image build`."""
    started = time.monotonic()
    done = clusterkit("image", "build", str(cpu_spec_dir), "--revision", "test", "-q")
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    words = done.stdout.split()
    image_id = words[words.index("built") + 1]
    reference = done.stdout.strip().rsplit(": ", 1)[1].split(", ")[0]
    return BuiltImage(cpu_spec_dir, reference, image_id, seconds)
