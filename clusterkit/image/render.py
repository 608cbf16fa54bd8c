"""`image render`: spec + lock -> Dockerfile, hashed requirements and pip constraints.

Byte-identical output for identical inputs (no clock, no paths of this machine), in
classic-builder syntax: the Docker Engine API that `image build` drives has no BuildKit.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clusterkit.errors import SpecError
from clusterkit.image import grammar
from clusterkit.image.lock import HEADER, dumps, requirements_text
from clusterkit.image.spec import (
    CONSTRAINTS_FILE,
    DEFAULT_INDEX,
    DOCKERFILE,
    REQUIREMENTS_FILE,
    ImageSpec,
)
from clusterkit.safefiles import write_file

LABEL_PREFIX = "io.clusterkit."
SPEC_HASH_LABEL = LABEL_PREFIX + "spec-hash"
RUN_ARGS_LABEL = LABEL_PREFIX + "run-args"
VENV = "/opt/venv"
CONSTRAINT_PATH = "/etc/pip/constraint.txt"
# The image runs as this unprivileged user; everything that needs root happens before USER.
RUN_USER = "clusterkit"
RUN_UID = 1000
INFINIBAND_APT = ("ibverbs-providers", "libibverbs1", "librdmacm1", "rdma-core")
# Installer leftovers that carry build-time timestamps or machine state.
CLEANUP = (
    "/var/lib/apt/lists/*",
    "/var/cache/apt/*.bin",
    "/var/log/apt",
    "/var/log/dpkg.log",
    "/var/log/alternatives.log",
    "/var/cache/ldconfig/aux-cache",
    "/var/cache/debconf/*-old",
)


def image_hash(spec: ImageSpec, lock: dict[str, Any]) -> str:
    """Identity of everything that determines the image: the spec and its whole lock."""
    return hashlib.sha256((spec.sha256() + "\n" + dumps(lock)).encode()).hexdigest()


def spec_tag(spec: ImageSpec, lock: dict[str, Any]) -> str:
    return "spec-" + image_hash(spec, lock)[:12]


def labels(spec: ImageSpec, lock: dict[str, Any]) -> dict[str, str]:
    torch = lock["torch"]
    created = datetime.fromtimestamp(spec.created_epoch, tz=timezone.utc)
    values: dict[str, str | None] = {
        "org.opencontainers.image.created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.source": spec.source,
        "org.opencontainers.image.url": spec.url,
        "org.opencontainers.image.licenses": spec.licenses,
        "org.opencontainers.image.vendor": spec.vendor,
        "org.opencontainers.image.version": spec_tag(spec, lock),
        "org.opencontainers.image.base.name": spec.base_image,
        "org.opencontainers.image.base.digest": lock["base"]["digest"],
        SPEC_HASH_LABEL: image_hash(spec, lock),
        LABEL_PREFIX + "torch": torch["version"],
        LABEL_PREFIX + "torch-variant": torch["variant"],
        LABEL_PREFIX + "cuda": torch["cuda"],
        LABEL_PREFIX + "cudnn": torch["cudnn"],
        LABEL_PREFIX + "nccl": torch["nccl"],
        LABEL_PREFIX + "python": spec.python,
        LABEL_PREFIX + "min-driver": torch["min_driver"],
        LABEL_PREFIX + "driver-floor": torch["driver_floor"],
        LABEL_PREFIX + "network": spec.network,
        LABEL_PREFIX + "gpus": spec.runtime.gpus,
        RUN_ARGS_LABEL: json.dumps(spec.runtime.docker_args()),
    }
    return {key: value for key, value in values.items() if value is not None}


def constraints_text(lock: dict[str, Any]) -> str:
    """The lock without hashes: pip refuses hashes in constraints files."""
    pins = [f"{p['name']}=={p['version']}" for p in lock["packages"]]
    return HEADER + "\n".join(pins) + "\n"


def apt_packages(spec: ImageSpec) -> list[str]:
    """What apt installs: the packages every image needs (and InfiniBand's userspace), each
    taking the spec's `name=version` pin when the spec names it, plus the spec's extras."""
    needed = ["ca-certificates", "python3", "python3-venv"]
    if spec.network == "infiniband":
        needed += INFINIBAND_APT
    named = {_apt_name(entry): entry for entry in spec.apt}
    chosen = {name: named.get(name, name) for name in needed}
    chosen.update(named)
    return sorted(chosen.values())


def _apt_name(entry: str) -> str:
    """`python3=3.11.2-1+b1` or `libfoo:amd64/bookworm` -> the package name."""
    for mark in ("=", "/", ":"):
        entry = entry.split(mark, 1)[0]
    return entry


def _continued(lines: list[str]) -> str:
    return " \\\n    ".join(lines)


def _checked(spec: ImageSpec, what: str, value: Any, check: Callable[[str], str | None]) -> str:
    """The last guard before a value is written into the Dockerfile: the spec was checked on
    load, but the lock is a file too, and hand edits reach render through it."""
    text = str(value)
    problem = grammar.control_characters(text) or check(text)
    if problem:
        raise SpecError(str(spec.lock_path), f"{text[:60]!r} {problem}", key=what)
    return text


def _label_value(spec: ImageSpec, key: str, value: str) -> str:
    return json.dumps(_checked(spec, f"label {key}", value, grammar.label_value))


WHEELHOUSE = "/opt/clusterkit/wheelhouse"  # in the throw-away install stage only


def dockerfile_text(spec: ImageSpec, lock: dict[str, Any]) -> str:
    """The Dockerfile: a system stage, a throw-away stage that installs the lock into a
    venv, and the final image. Every value from the spec or lock is checked first."""
    base = _checked(
        spec, "base", f"{lock['base']['image']}@{lock['base']['digest']}", grammar.pinned_image
    )
    index = _checked(spec, "torch.index", lock["torch"]["index"], grammar.url)
    apt = [
        shlex.quote(_checked(spec, "apt", name, grammar.apt_package)) for name in apt_packages(spec)
    ]
    pip_sources, copy_wheelhouse = _pip_sources(spec, index)
    label_lines = [
        f"{key}={_label_value(spec, key, value)}"
        for key, value in sorted(labels(spec, lock).items())
    ]
    return (
        HEADER
        + _system_stage(base, apt)
        + "\n"
        + _venv_stage(pip_sources, copy_wheelhouse)
        + "\n"
        + _final_stage(label_lines)
    )


def _pip_sources(spec: ImageSpec, index: str) -> tuple[list[str], str]:
    """Where pip finds the locked wheels, and the COPY that brings the wheelhouse in ("" for
    none): the wheelhouse alone when the spec names one (`image lock` fills it), else the
    torch index and PyPI."""
    if spec.wheelhouse:
        folder = _checked(spec, "wheelhouse", spec.wheelhouse, grammar.wheelhouse)
        # Root's own folder, not /tmp: nothing another user could have made first.
        return [
            "--no-index",
            "--find-links",
            WHEELHOUSE,
        ], f"COPY {folder.rstrip('/')}/ {WHEELHOUSE}/\n"
    pip_sources = ["--index-url", shlex.quote(index)]
    if index != DEFAULT_INDEX:
        pip_sources += ["--extra-index-url", DEFAULT_INDEX]
    return pip_sources, ""


def _system_stage(base: str, apt: list[str]) -> str:
    """The base, the system packages and the unprivileged user."""
    apt_note = (
        "# Unpinned: these follow the base's archive; pin them in the spec as name=version.\n"
        "# hadolint ignore=DL3008\n"
        if any("=" not in package for package in apt)
        else "# Pinned by the spec (name=version): a rebuild installs the same packages.\n"
    )
    return (
        "# Classic-builder syntax: built through the Docker Engine API, without BuildKit.\n"
        + f"FROM {base} AS system\n"
        + 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
        + "ENV "
        + _continued(
            [
                "DEBIAN_FRONTEND=noninteractive",
                "LANG=C.UTF-8",
                "PYTHONDONTWRITEBYTECODE=1",
                "PIP_NO_CACHE_DIR=1",
                "PIP_DISABLE_PIP_VERSION_CHECK=1",
            ]
        )
        + "\n"
        + apt_note
        + "RUN "
        + _continued(
            [
                "apt-get update",
                "&& apt-get install -y --no-install-recommends " + " ".join(apt),
                "&& apt-get clean",
                "&& rm -rf " + " ".join(CLEANUP),
            ]
        )
        + "\n"
        + f"# The unprivileged user the image runs as (uid {RUN_UID}).\n"
        + f"RUN useradd --create-home --uid {RUN_UID} --user-group --shell /bin/bash {RUN_USER}\n"
    )


def _venv_stage(pip_sources: list[str], copy_wheelhouse: str) -> str:
    """The lock installed into a venv, hashes required, in a stage of its own."""
    return (
        "# Install the lock into a venv in a throw-away stage: the wheelhouse never reaches\n"
        + "# the final image's layers.\n"
        + "FROM system AS venv\n"
        + f"COPY {REQUIREMENTS_FILE} /opt/clusterkit/{REQUIREMENTS_FILE}\n"
        + copy_wheelhouse
        + "RUN "
        + _continued(
            [
                f"python3 -m venv {VENV}",
                f"&& {VENV}/bin/python -m pip install --no-cache-dir --no-deps --require-hashes"
                " --only-binary :all: --no-compile "
                + " ".join(pip_sources)
                + f" -r /opt/clusterkit/{REQUIREMENTS_FILE}",
                f"&& find {VENV} -depth -name __pycache__ -type d -exec rm -rf {{}} +",
                f"&& rm -f {VENV}/lib/python*/site-packages/*.dist-info/direct_url.json",
            ]
        )
        + "\n"
    )


def _final_stage(label_lines: list[str]) -> str:
    """The system stage with the venv copied in, pinned against later installs, labelled."""
    return (
        "FROM system\n"
        + f"COPY --from=venv {VENV} {VENV}\n"
        + f"COPY {REQUIREMENTS_FILE} /opt/clusterkit/{REQUIREMENTS_FILE}\n"
        + "# Later `pip install` in the image cannot move torch or NCCL (NGC pattern).\n"
        + f"COPY {CONSTRAINTS_FILE} {CONSTRAINT_PATH}\n"
        + "ENV "
        + _continued(
            [
                f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                f"VIRTUAL_ENV={VENV}",
                f"PIP_CONSTRAINT={CONSTRAINT_PATH}",
            ]
        )
        + "\n"
        + "LABEL "
        + _continued(label_lines)
        + "\n"
        + f"USER {RUN_UID}:{RUN_UID}\n"
        + f"WORKDIR /home/{RUN_USER}\n"
        + "# The commit is known only at build time; it goes last so it never busts the cache.\n"
        + "ARG CLUSTERKIT_REVISION=unknown\n"
        + "LABEL org.opencontainers.image.revision=$CLUSTERKIT_REVISION\n"
    )


def rendered_files(spec: ImageSpec, lock: dict[str, Any]) -> dict[str, str]:
    return {
        DOCKERFILE: dockerfile_text(spec, lock),
        REQUIREMENTS_FILE: requirements_text(lock),
        CONSTRAINTS_FILE: constraints_text(lock),
    }


def drifted(spec: ImageSpec, lock: dict[str, Any]) -> list[str]:
    """Generated files whose checked-in content differs from a fresh render."""
    out: list[str] = []
    for name, text in rendered_files(spec, lock).items():
        path: Path = spec.directory / name
        if not path.exists() or path.read_text() != text:
            out.append(name)
    return out


def write_rendered(spec: ImageSpec, lock: dict[str, Any]) -> list[Path]:
    written = []
    for name, text in rendered_files(spec, lock).items():
        path = spec.directory / name
        if not path.exists() or path.read_text() != text:
            write_file(path, text)
            written.append(path)
    return written
