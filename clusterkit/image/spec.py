"""Image specs (images/<name>/image.yaml): the versions that matter, validated on load.

A spec names what a person decides (base, python, torch and its CUDA variant, extra
requirements, runtime flags); the lock next to it records everything resolved from it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusterkit.errors import ConfigError

SPEC_FILE = "image.yaml"
LOCK_FILE = "image.lock.json"
DOCKERFILE = "Dockerfile"
REQUIREMENTS_FILE = "requirements.lock.txt"
CONSTRAINTS_FILE = "constraints.txt"
NETWORKS = ("socket", "infiniband")
DEFAULT_INDEX = "https://pypi.org/simple"
_VARIANT = re.compile(r"^(cpu|cu\d{3,4})$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_SIZE = re.compile(r"^\d+[kmg]?$", re.IGNORECASE)


@dataclass(frozen=True)
class Runtime:
    """Flags nodes must run the image with; NCCL breaks without enough shm or memlock."""

    shm_size: str | None = "16g"
    ipc_host: bool = False
    network_host: bool = True
    memlock_unlimited: bool = True
    gpus: str | None = "all"

    def docker_args(self) -> list[str]:
        args: list[str] = []
        if self.ipc_host:
            args += ["--ipc", "host"]
        elif self.shm_size:
            args += ["--shm-size", self.shm_size]
        if self.network_host:
            args += ["--network", "host"]
        if self.memlock_unlimited:
            args += ["--ulimit", "memlock=-1:-1"]
        return args


@dataclass(frozen=True)
class ImageSpec:
    name: str
    directory: Path
    repository: str
    base_image: str  # repo:tag, as people write it
    base_digest: str | None  # sha256:..., when the spec pins it
    python: str  # "3.11": the distribution's python3, checked by verify
    torch_version: str
    torch_variant: str  # "cpu" or "cu124"
    torch_index: str
    nccl: str | None  # expected NCCL; the lock fails when the wheel pins another
    requirements: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    network: str = "socket"
    runtime: Runtime = field(default_factory=Runtime)
    wheelhouse: str | None = None  # directory next to the spec, used as --find-links
    glibc: str = "2.28"  # newest manylinux tag the base's glibc accepts
    tags: tuple[str, ...] = ()
    source: str | None = None
    description: str | None = None
    created_epoch: int = 0

    @property
    def spec_path(self) -> Path:
        return self.directory / SPEC_FILE

    @property
    def lock_path(self) -> Path:
        return self.directory / LOCK_FILE

    @property
    def is_cuda(self) -> bool:
        return self.torch_variant != "cpu"

    def canonical(self) -> dict[str, Any]:
        """Everything that determines the image, without where the spec happens to lie."""
        data = asdict(self)
        data.pop("directory")
        return data

    def sha256(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def spec_directory(path: str | Path) -> Path:
    """Accept images/<name> or images/<name>/image.yaml."""
    path = Path(path)
    return path.parent if path.name == SPEC_FILE or path.suffix in (".yaml", ".yml") else path


def _require(data: dict[str, Any], key: str, where: str, kind: type = str) -> Any:
    value = data.get(key)
    if value is None:
        raise ConfigError(f"{where}: `{key}` is required")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: `{key}` must be a {kind.__name__}, got {value!r}")
    return value


def _string_list(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(value)


def _runtime(data: Any, where: str) -> Runtime:
    if data is None:
        return Runtime()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: `runtime` must be a mapping")
    unknown = sorted(set(data) - {"shm_size", "ipc", "network", "memlock", "gpus"})
    if unknown:
        raise ConfigError(f"{where}: runtime: unknown keys {', '.join(unknown)}")
    shm = data.get("shm_size", "16g")
    if shm is not None and not _SIZE.match(str(shm)):
        raise ConfigError(f"{where}: runtime.shm_size must look like 16g, got {shm!r}")
    memlock = str(data.get("memlock", "unlimited"))
    if memlock not in ("unlimited", "default"):
        raise ConfigError(f"{where}: runtime.memlock must be unlimited or default")
    return Runtime(
        shm_size=None if shm is None else str(shm),
        ipc_host=data.get("ipc", "private") == "host",
        network_host=data.get("network", "host") == "host",
        memlock_unlimited=memlock == "unlimited",
        gpus=data.get("gpus", "all"),
    )


def load_spec(path: str | Path) -> ImageSpec:
    """Read and validate a spec; every error names the file and the key."""
    directory = spec_directory(path)
    where = str(directory / SPEC_FILE)
    try:
        data = yaml.safe_load((directory / SPEC_FILE).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: no image spec there", hint="see docs/images.md") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{where}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the spec must be a mapping")
    base = _require(data, "base", where, dict)
    torch = _require(data, "torch", where, dict)
    base_image = _require(base, "image", f"{where}: base")
    if "@" in base_image:
        raise ConfigError(f"{where}: base.image takes repo:tag; put the digest in base.digest")
    digest = base.get("digest")
    if digest is not None and not _DIGEST.match(str(digest)):
        raise ConfigError(f"{where}: base.digest must be sha256:<64 hex>, got {digest!r}")
    variant = str(torch.get("variant", "cpu"))
    if not _VARIANT.match(variant):
        raise ConfigError(f"{where}: torch.variant must be cpu or cuXYZ, got {variant!r}")
    network = str(data.get("network", "socket"))
    if network not in NETWORKS:
        raise ConfigError(f"{where}: network must be one of {', '.join(NETWORKS)}")
    python = str(_require(data, "python", where, (str, float)))
    if not re.match(r"^3\.\d+$", python):
        raise ConfigError(f"{where}: python must be like 3.11, got {python!r}")
    wheelhouse = data.get("wheelhouse")
    if wheelhouse is not None and (Path(str(wheelhouse)).is_absolute() or ".." in str(wheelhouse)):
        raise ConfigError(f"{where}: wheelhouse must be a directory inside the spec folder")
    nccl = torch.get("nccl")
    return ImageSpec(
        name=_require(data, "name", where),
        directory=directory,
        repository=_require(data, "repository", where),
        base_image=base_image,
        base_digest=digest,
        python=python,
        torch_version=str(_require(torch, "version", f"{where}: torch", (str, float))),
        torch_variant=variant,
        torch_index=str(torch.get("index", DEFAULT_INDEX)),
        nccl=None if nccl is None else str(nccl),
        requirements=_string_list(data, "requirements", where),
        apt=_string_list(data, "apt", where),
        network=network,
        runtime=_runtime(data.get("runtime"), where),
        wheelhouse=None if wheelhouse is None else str(wheelhouse),
        glibc=str(data.get("glibc", "2.28")),
        tags=_string_list(data, "tags", where),
        source=data.get("source"),
        description=data.get("description"),
        created_epoch=int(data.get("created_epoch", 0)),
    )


def find_specs(root: str | Path = "images") -> list[Path]:
    """Every spec directory under root, sorted."""
    return sorted(path.parent for path in Path(root).glob(f"*/{SPEC_FILE}"))
