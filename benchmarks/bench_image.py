"""Image build cache and lock check: a no-change rebuild against a cold build of the CPU spec
(target: ratio under 0.1), and the time of `clusterkit image lock --check`.

    python benchmarks/bench_image.py [--repeat 3]

Needs root and the tools tests/docker uses (dockerd, debootstrap, docker-registry). Builds
the CPU spec in a temp dir against a loopback registry, removes what it built, stops the
registry.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clusterkit.image.build import build_image, image_references  # noqa: E402
from clusterkit.image.spec import load_spec  # noqa: E402
from tests.support import docker_env  # noqa: E402


def _clusterkit(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "clusterkit", *args], check=True, timeout=900, capture_output=True
    )
    return time.perf_counter() - started


def _prepare(folder: Path, api: docker.APIClient, registry: docker_env.Registry) -> None:
    base_repo = f"{registry.address}/clusterkit/debian-base"
    api.tag(docker_env.ensure_base_image(), base_repo, "bookworm")
    for chunk in api.push(base_repo, tag="bookworm", stream=True, decode=True):
        if "error" in chunk:
            raise RuntimeError(chunk["error"])
    spec = yaml.safe_load((REPO / "images" / "cpu-torch" / "image.yaml").read_text())
    spec["base"]["image"] = f"{base_repo}:bookworm"
    spec["repository"] = f"{registry.address}/bench/cpu-torch"
    (folder / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "torch==2.13.0", "--no-deps", "-d",
         str(folder / "wheelhouse")],
        check=True, timeout=600,
    )  # fmt: skip
    _clusterkit("image", "lock", str(folder))
    _clusterkit("image", "render", str(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    engine = docker_env.ensure_dockerd()
    api = docker.APIClient(base_url=engine, timeout=900)
    registry = docker_env.ensure_registry(docker_env.free_port())
    folder = Path(tempfile.mkdtemp(prefix="ck-bench-image-"))
    built_ids: set[str] = set()
    try:
        _prepare(folder, api, registry)
        spec = load_spec(folder)
        references = image_references(spec, None, [])

        def build(no_cache: bool) -> float:
            started = time.perf_counter()
            built = build_image(api, spec, references, no_cache=no_cache, quiet=True)
            built_ids.add(built.image_id)
            return time.perf_counter() - started

        cold = build(no_cache=True)  # every step runs: apt, venv, pip from the wheelhouse
        warm = statistics.median(build(no_cache=False) for _ in range(args.repeat))
        check_cli = statistics.median(
            _clusterkit("image", "lock", "--check", str(folder)) for _ in range(args.repeat)
        )
        ratio = warm / cold
        print(f"cold build (--no-cache)        {cold:8.1f} s")
        print(f"no-change rebuild (median {args.repeat})  {warm:8.2f} s")
        print(f"rebuild / cold                 {ratio:8.3f}   target < 0.1: "
              f"{'met' if ratio < 0.1 else 'MISSED'}")  # fmt: skip
        print(f"image lock --check (CLI, median) {check_cli:6.2f} s")
    finally:
        for image_id in built_ids:
            with contextlib.suppress(docker.errors.APIError):
                api.remove_image(image_id, force=True)
        registry.stop()
        shutil.rmtree(folder, ignore_errors=True)
        api.close()


if __name__ == "__main__":
    main()
