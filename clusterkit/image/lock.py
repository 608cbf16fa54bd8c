"""`image lock`: pin the base by digest and every Python package by version and hash.

Resolution runs pip's own resolver for the image's platform (`pip install --dry-run --report`
with --platform/--python-version, isolated from this machine's pip config), so the lock holds
exactly the wheels the image will install. CUDA, cuDNN and NCCL come from the resolved torch
wheel's Requires-Dist, the driver minimum from the shipped CUDA table.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterkit.errors import ConfigError, ExternalToolError
from clusterkit.image.spec import DEFAULT_INDEX, ImageSpec
from clusterkit.versions import driver_requirement, parse_version

LOCK_FORMAT = 1
RESOLVE_TIMEOUT = 900.0
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\(?\s*==\s*([A-Za-z0-9.+!]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def manylinux_platforms(glibc: str) -> list[str]:
    """pip takes --platform literally: list every manylinux tag the base's glibc accepts."""
    major, minor = (int(part) for part in glibc.split(".")[:2])
    if major != 2 or minor < 5:
        raise ConfigError(f"glibc {glibc}: expected 2.x with x >= 5")
    tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    return tags + [tag for m, tag in legacy.items() if minor >= m]


def pip_resolve_command(spec: ImageSpec, target: str) -> list[str]:
    abi = "cp" + spec.python.replace(".", "")
    argv = [
        sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed",
        "--quiet", "--report", "-", "--only-binary", ":all:", "--target", target,
        "--python-version", spec.python, "--implementation", "cp", "--abi", abi,
        "--index-url", spec.torch_index,
    ]  # fmt: skip
    for platform in manylinux_platforms(spec.glibc):
        argv += ["--platform", platform]
    if spec.torch_index != DEFAULT_INDEX:
        argv += ["--extra-index-url", DEFAULT_INDEX]
    if spec.wheelhouse:
        argv += ["--find-links", str(spec.directory / spec.wheelhouse)]
    return [*argv, f"torch=={spec.torch_version}", *spec.requirements]


def resolve_packages(spec: ImageSpec, timeout: float = RESOLVE_TIMEOUT) -> list[dict[str, Any]]:
    """The resolver's install report: one entry per wheel, metadata and hash included."""
    with tempfile.TemporaryDirectory(prefix="ck-lock-") as target:
        argv = pip_resolve_command(spec, target)
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ExternalToolError(
                f"{spec.spec_path}: pip did not resolve in {timeout:.0f}s"
            ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line]
        detail = " | ".join(line.strip() for line in lines if "notice" not in line)[-600:]
        raise ExternalToolError(f"{spec.spec_path}: resolving requirements failed: {detail}")
    try:
        return list(json.loads(done.stdout)["install"])
    except (ValueError, KeyError) as error:
        raise ExternalToolError(f"pip returned no install report: {error}") from None


def _locked_package(entry: dict[str, Any], wheelhouse: Path | None) -> dict[str, str]:
    info = entry["download_info"]
    hashes = info.get("archive_info", {}).get("hashes", {})
    digest = hashes.get("sha256")
    if not digest and "=" in info.get("archive_info", {}).get("hash", ""):
        kind, _, value = info["archive_info"]["hash"].partition("=")
        digest = value if kind == "sha256" else None
    name = entry["metadata"]["name"]
    if not digest:
        raise ExternalToolError(f"the index gave no sha256 for {name}: cannot lock it by hash")
    url: str = info["url"]
    from_wheelhouse = wheelhouse is not None and url.startswith("file:")
    return {
        "name": normalize(name),
        "version": entry["metadata"]["version"],
        "sha256": digest,
        "file": url.rsplit("/", 1)[-1].replace("%2B", "+"),
        "source": "wheelhouse" if from_wheelhouse else "index",
    }


def torch_facts(spec: ImageSpec, report: list[dict[str, Any]]) -> dict[str, Any]:
    """CUDA / cuDNN / NCCL from the resolved torch wheel's own Requires-Dist."""
    torch = next((e for e in report if normalize(e["metadata"]["name"]) == "torch"), None)
    if torch is None:
        raise ExternalToolError(f"{spec.spec_path}: torch is missing from the resolution")
    version: str = torch["metadata"]["version"]
    pins: dict[str, str] = {}
    for requirement in torch["metadata"].get("requires_dist") or []:
        match = _PIN.match(requirement)
        if match and normalize(match.group(1)).startswith("nvidia-"):
            pins[normalize(match.group(1))] = match.group(2)

    def pinned(pattern: str) -> str | None:
        return next((v for n, v in sorted(pins.items()) if re.fullmatch(pattern, n)), None)

    runtime = pinned(r"nvidia-cuda-runtime(-cu\d+)?")
    local = version.partition("+")[2]
    if runtime:
        major, minor = (parse_version(runtime) or (0, 0))[:2]
        cuda: str | None = f"{major}.{minor}"
    elif local.startswith("cu"):
        cuda = f"{local[2:-1]}.{local[-1]}"
    else:
        cuda = None
    facts: dict[str, Any] = {
        "version": version,
        "variant": spec.torch_variant,
        "index": spec.torch_index,
        "cuda": cuda,
        "cudnn": pinned(r"nvidia-cudnn-cu\d+"),
        "nccl": pinned(r"nvidia-nccl-cu\d+"),
        "min_driver": None,
        "driver_floor": None,
    }
    where = str(spec.spec_path)
    if spec.is_cuda:
        wanted = f"{spec.torch_variant[2:-1]}.{spec.torch_variant[-1]}"
        if cuda != wanted:
            raise ConfigError(
                f"{where}: torch {version} from {spec.torch_index} is built for CUDA "
                f"{cuda or 'none'}, the spec asks for {spec.torch_variant}",
                hint="fix torch.index or torch.variant",
            )
        requirement = driver_requirement(cuda)
        if requirement.full is None or requirement.floor is None:
            raise ConfigError(f"{where}: CUDA {cuda} is not in clusterkit/data/cuda_driver.json")
        facts["min_driver"], facts["driver_floor"] = requirement.full, requirement.floor
    elif cuda is not None:
        raise ConfigError(
            f"{where}: torch {version} resolved to a CUDA {cuda} build but the variant is cpu",
            hint="use the CPU index or a wheelhouse with the +cpu wheel",
        )
    if spec.nccl and facts["nccl"] != spec.nccl:
        raise ConfigError(
            f"{where}: torch {version} pins NCCL {facts['nccl']}, the spec expects {spec.nccl}"
        )
    return facts


def build_lock(
    spec: ImageSpec,
    base_digest: str,
    base_source: str,
    report: list[dict[str, Any]],
) -> dict[str, Any]:
    wheelhouse = spec.directory / spec.wheelhouse if spec.wheelhouse else None
    packages = sorted(
        (_locked_package(entry, wheelhouse) for entry in report), key=lambda p: p["name"]
    )
    return {
        "lock_format": LOCK_FORMAT,
        "name": spec.name,
        "spec_sha256": spec.sha256(),
        "base": {"image": spec.base_image, "digest": base_digest, "resolved_from": base_source},
        "python": spec.python,
        "torch": torch_facts(spec, report),
        "packages": packages,
        "resolver": "pip install --dry-run --report (isolated, --only-binary :all:)",
    }


def resolve_base(
    spec: ImageSpec, registry_digest: Callable[[str], str], *, offline: bool = False
) -> tuple[str, str]:
    """The base tag's digest from its registry, checked against the spec's pin. Offline (no
    registry reachable), the spec's own pin is used and the lock says so."""
    if offline:
        if not spec.base_digest:
            raise ConfigError(f"{spec.spec_path}: --offline needs base.digest in the spec")
        return spec.base_digest, "spec"
    digest = registry_digest(spec.base_image)
    if spec.base_digest and digest != spec.base_digest:
        raise ConfigError(
            f"{spec.spec_path}: {spec.base_image} now resolves to {digest}, the spec pins "
            f"{spec.base_digest}",
            hint="the tag was re-pushed: review the new base, then update base.digest",
        )
    return digest, "registry"


def dumps(lock: dict[str, Any]) -> str:
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def read_lock(spec: ImageSpec) -> dict[str, Any]:
    try:
        lock = json.loads(spec.lock_path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{spec.lock_path}: no lock", hint=f"run `clusterkit image lock {spec.directory}`"
        ) from None
    except ValueError as error:
        raise ConfigError(f"{spec.lock_path}: not valid JSON: {error}") from None
    if not isinstance(lock, dict) or lock.get("lock_format") != LOCK_FORMAT:
        raise ConfigError(f"{spec.lock_path}: unknown lock format (expected {LOCK_FORMAT})")
    return lock


def stale_reason(spec: ImageSpec) -> str | None:
    """Why the lock no longer matches its spec, or None when it is current."""
    if not spec.lock_path.exists():
        return "no lock"
    lock = read_lock(spec)
    if lock.get("spec_sha256") != spec.sha256():
        return "the spec changed after the lock was written"
    if spec.base_digest and lock["base"]["digest"] != spec.base_digest:
        return f"the lock's base digest {lock['base']['digest']} differs from the spec's pin"
    return None
