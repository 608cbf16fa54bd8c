"""Image specs (images/<name>/image.yaml): the versions that matter, validated on load.

A spec names what a person decides (base, python, torch and its CUDA variant, extra
requirements, runtime flags); the lock next to it records everything resolved from it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from clusterkit.errors import SpecError
from clusterkit.image import grammar

SPEC_FILE = "image.yaml"
LOCK_FILE = "image.lock.json"
DOCKERFILE = "Dockerfile"
REQUIREMENTS_FILE = "requirements.lock.txt"
CONSTRAINTS_FILE = "constraints.txt"
NETWORKS = ("socket", "infiniband")
DEFAULT_INDEX = "https://pypi.org/simple"
_VARIANT = re.compile(r"cpu|cu\d{3,4}")
_SIZE = re.compile(r"\d{1,12}[kmg]?", re.IGNORECASE)
MAX_SPEC_BYTES = 256 * 1024
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z
SPEC_KEYS = (
    "name", "description", "repository", "source", "base", "python", "glibc", "torch",
    "requirements", "apt", "wheelhouse", "network", "runtime", "tags", "created_epoch",
    "url", "licenses", "vendor",
)  # fmt: skip
# OCI label defaults when the spec names none: the Dockerfile and the recipe are this
# project's (Apache-2.0); `url` falls back to `source`.
DEFAULT_LICENSES = "Apache-2.0"
DEFAULT_VENDOR = "clusterkit"
BASE_KEYS = ("image", "digest")
TORCH_KEYS = ("version", "variant", "index", "nccl")
RUNTIME_KEYS = ("shm_size", "ipc", "network", "memlock", "gpus")


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
    url: str | None = None  # org.opencontainers.image.url; defaults to source
    licenses: str = DEFAULT_LICENSES  # SPDX expression, org.opencontainers.image.licenses
    vendor: str = DEFAULT_VENDOR  # org.opencontainers.image.vendor

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


class _Reader:
    """The spec's mapping and the line of every key, so that each error names the file, the
    key and the line. Every value is checked against its grammar before anything uses it."""

    def __init__(self, where: str, data: dict[str, Any], lines: dict[str, int]) -> None:
        self.where, self.data, self.lines = where, data, lines

    def fail(self, key: str, message: str, *, hint: str | None = None) -> NoReturn:
        line = self.lines.get(key) or self.lines.get(key.split("[")[0].split(".")[0])
        raise SpecError(self.where, message, key=key, line=line, hint=hint)

    def raw(self, key: str) -> Any:
        section, _, name = key.rpartition(".")
        holder = self.data if not section else self.data.get(section)
        return holder.get(name) if isinstance(holder, dict) else None

    def mapping(self, key: str, known: tuple[str, ...], *, required: bool) -> dict[str, Any]:
        value = self.data.get(key)
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            self.fail(key, "is required, a mapping" if value is None else "must be a mapping")
        unknown = sorted(str(name) for name in value if name not in known)
        if unknown:
            self.fail(f"{key}.{unknown[0]}", f"unknown key (known: {', '.join(known)})", hint=None)
        return value

    def string(
        self,
        key: str,
        check: Callable[[str], str | None] | None,
        *,
        required: bool = False,
        default: str | None = None,
    ) -> str | None:
        value = self.raw(key)
        if value is None:
            if required:
                self.fail(key, "is required")
            return default
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self.fail(
                key,
                f"must be a quoted string, got the number {value!r}",
                hint=f'write it in quotes, e.g. "{value}"'
                if isinstance(value, int)
                else 'write it in quotes as you meant it, e.g. "3.10": YAML reads an unquoted '
                "3.10 as the number 3.1",
            )
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {type(value).__name__}")
        return self.checked(key, value, check)

    def checked(self, key: str, value: str, check: Callable[[str], str | None] | None) -> str:
        problem = grammar.control_characters(value) or (check(value) if check else None)
        if not value.strip():
            problem = "is empty"
        if problem:
            self.fail(key, f"{_show(value)} {problem}")
        return value

    def strings(self, key: str, check: Callable[[str], str | None]) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(key, "must be a list of strings")
        items = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.fail(f"{key}[{index}]", f"must be a string, got {type(item).__name__}")
            items.append(self.checked(f"{key}[{index}]", item, check))
        return tuple(items)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.string(key, None, default=default)
        if value not in choices:
            self.fail(key, f"{_show(value)} must be one of {', '.join(choices)}")
        return str(value)


def _show(value: Any, limit: int = 60) -> str:
    """A value as it can be printed on one line: repr escapes newlines and escapes."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_yaml(path: Path, where: str) -> tuple[Any, dict[str, int]]:
    """The document and the line of each key (two levels deep, where spec values live).
    Any unreadable, oversized, non-UTF-8 or malformed file is one SpecError."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(where, "no image spec there", hint="see docs/images.md") from None
    except OSError as error:
        raise SpecError(where, f"cannot read: {error.strerror or error}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(where, f"larger than {MAX_SPEC_BYTES // 1024} KiB: not an image spec")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(where, f"not UTF-8 (byte {error.start})") from None
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # its reader already refuses unprintable characters
        node = loader.get_single_node()
        data = None if node is None else loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = None if mark is None else mark.line + 1
        problem = " ".join(str(error.problem or error.context or "malformed").split())
        raise SpecError(where, f"not valid YAML: {problem}", line=line) from None
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        detail = " ".join(str(error).split())[:200] or type(error).__name__
        raise SpecError(where, f"not valid YAML: {detail}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, _key_lines(node, where)


def _key_lines(node: Any, where: str) -> dict[str, int]:
    """`key`, `key.sub` and `key[i]` -> line. A key given twice is an error: YAML would
    silently keep the last one."""
    lines: dict[str, int] = {}

    def record(name: str, at: Any) -> None:
        line = at.start_mark.line + 1
        if name in lines:
            raise SpecError(
                where, f"given twice (lines {lines[name]} and {line})", key=name, line=line
            )
        lines[name] = line

    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        record(key.value, key)
        if isinstance(value, yaml.MappingNode):
            for sub, _ in value.value:
                if isinstance(sub, yaml.ScalarNode):
                    record(f"{key.value}.{sub.value}", sub)
        elif isinstance(value, yaml.SequenceNode):
            for index, item in enumerate(value.value):
                lines[f"{key.value}[{index}]"] = item.start_mark.line + 1
    return lines


def _runtime(spec: _Reader) -> Runtime:
    section = spec.mapping("runtime", RUNTIME_KEYS, required=False)
    shm = section.get("shm_size", "16g")
    if isinstance(shm, bool) or (shm is not None and not _SIZE.fullmatch(str(shm))):
        spec.fail("runtime.shm_size", f"{_show(shm)} must look like 16g")
    memlock = spec.choice("runtime.memlock", ("unlimited", "default"), "unlimited")
    gpus = section.get("gpus", "all")
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        gpus = str(gpus)
    return Runtime(
        shm_size=None if shm is None else str(shm),
        ipc_host=spec.choice("runtime.ipc", ("private", "host"), "private") == "host",
        network_host=spec.choice("runtime.network", ("host", "bridge"), "host") == "host",
        memlock_unlimited=memlock == "unlimited",
        gpus=None if gpus is None else spec.checked("runtime.gpus", str(gpus), grammar.gpus),
    )


def _python(spec: _Reader) -> str:
    python = spec.string("python", None, required=True)
    if not re.fullmatch(r"3\.\d{1,2}", str(python)):
        spec.fail("python", f'{_show(python)} must be like "3.11" (the base\'s python3)')
    return str(python)


def _glibc(spec: _Reader) -> str:
    glibc = str(spec.string("glibc", None, default="2.28"))
    match = re.fullmatch(r"2\.(\d{1,3})", glibc)
    if not match or int(match.group(1)) < 5:
        spec.fail("glibc", f"{_show(glibc)} must be the base's glibc, 2.x with x >= 5 (e.g. 2.35)")
    return glibc


def _created_epoch(spec: _Reader) -> int:
    value = spec.raw("created_epoch")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        spec.fail("created_epoch", f"{_show(value)} must be whole seconds since 1970 (UTC)")
    if not 0 <= value <= MAX_EPOCH:
        spec.fail("created_epoch", f"{value} must lie between 0 and {MAX_EPOCH} (year 9999)")
    return value


def load_spec(path: str | Path) -> ImageSpec:
    """Read and validate a spec; every error names the file, the key and its line."""
    directory = spec_directory(path)
    where = str(directory / SPEC_FILE)
    data, lines = _read_yaml(directory / SPEC_FILE, where)
    if not isinstance(data, dict):
        raise SpecError(where, "the spec must be a mapping")
    spec = _Reader(where, data, lines)
    unknown = sorted(str(key) for key in data if key not in SPEC_KEYS)
    if unknown:
        spec.fail(unknown[0], f"unknown key (known: {', '.join(SPEC_KEYS)})")
    spec.mapping("base", BASE_KEYS, required=True)
    spec.mapping("torch", TORCH_KEYS, required=True)
    variant = spec.string("torch.variant", None, default="cpu")
    if not _VARIANT.fullmatch(str(variant)):
        spec.fail("torch.variant", f"{_show(variant)} must be cpu or cuXYZ (e.g. cu124)")
    return ImageSpec(
        name=str(spec.string("name", grammar.image_name, required=True)),
        directory=directory,
        repository=str(spec.string("repository", grammar.repository, required=True)),
        base_image=str(spec.string("base.image", grammar.tagged_image, required=True)),
        base_digest=spec.string("base.digest", grammar.digest_reference),
        python=_python(spec),
        torch_version=str(spec.string("torch.version", grammar.version, required=True)),
        torch_variant=str(variant),
        torch_index=str(spec.string("torch.index", grammar.url, default=DEFAULT_INDEX)),
        nccl=spec.string("torch.nccl", grammar.nccl_version),
        requirements=spec.strings("requirements", grammar.requirement),
        apt=spec.strings("apt", grammar.apt_package),
        network=spec.choice("network", NETWORKS, "socket"),
        runtime=_runtime(spec),
        wheelhouse=spec.string("wheelhouse", grammar.wheelhouse),
        glibc=_glibc(spec),
        tags=spec.strings("tags", grammar.tag),
        source=spec.string("source", grammar.url),
        description=spec.string("description", grammar.text),
        created_epoch=_created_epoch(spec),
        url=spec.string("url", grammar.url) or spec.string("source", grammar.url),
        licenses=str(spec.string("licenses", grammar.spdx_expression, default=DEFAULT_LICENSES)),
        vendor=str(spec.string("vendor", grammar.text, default=DEFAULT_VENDOR)),
    )


def find_specs(root: str | Path = "images") -> list[Path]:
    """Every spec directory under root, sorted."""
    return sorted(path.parent for path in Path(root).glob(f"*/{SPEC_FILE}"))
