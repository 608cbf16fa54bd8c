"""An image with python and torch for jobs launched in containers, made from this machine's
own files in seconds: no base image to pull, no apt, no pip.

The one layer holds the interpreter the tests run under (its real file, its standard
library, the shared libraries `ldd` names for it and for every extension module), and the
virtual environment's torch with the distributions torch requires, at their paths here. The
image is written as a `docker save` archive whose config has no timestamp, so every engine
that loads it holds the same image id (the image stage compares ids across nodes). The layer
is cached under the Docker test state folder, keyed by what went into it.

Left out on purpose: torch's C++ headers, test binaries and test data (the job imports
torch, it does not build against it), and the standard library's tests and GUI toolkits.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import resource
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from tests.support.docker_env import STATE_DIR, _locked

REPOSITORY = "clusterkit-test/torch-job"
RUN_ARGS_LABEL = "io.clusterkit.run-args"
SHM_SIZE = "1g"  # the image stage fails below 1 GiB
TORCH_SKIPPED = ("torch/include/", "torch/test/", "torch/bin/", "torch/share/")
TORCH_KEPT = ("torch/bin/torch_shm_manager",)  # DataLoader workers' shared memory
STDLIB_SKIPPED = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages"}
SYSTEM_FILES = ("/bin/sh", "/etc/ld.so.cache")
PASSWD = "root:x:0:0:root:/root:/bin/sh\n"
GROUP = "root:x:0:\n"
STALE_SECONDS = 3600.0  # another variant's layer unused this long is removed
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}
LAYOUT = 2  # bumped when the layer's layout changes: a cached layer of another is not reused


@dataclass(frozen=True)
class JobImage:
    """A loadable image: `reference` once loaded, `image_id` on every engine alike."""

    reference: str
    image_id: str
    layer: Path
    config: bytes
    diff_id: str
    run_args: tuple[str, ...]

    def archive(self, out: io.BufferedWriter) -> None:
        """Write the `docker load` archive (manifest, config, layer) to a stream."""
        config_name = f"{self.image_id.split(':', 1)[1]}.json"
        layer_name = f"{self.diff_id.split(':', 1)[1]}/layer.tar"
        manifest = json.dumps(
            [{"Config": config_name, "RepoTags": [self.reference], "Layers": [layer_name]}]
        ).encode()
        with tarfile.open(fileobj=out, mode="w|") as tar:
            for name, data in (("manifest.json", manifest), (config_name, self.config)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            with open(self.layer, "rb") as layer:
                info = tar.gettarinfo(arcname=layer_name, fileobj=layer)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, layer)


def torch_distributions() -> list[importlib.metadata.Distribution]:
    """torch and everything it requires here (markers evaluated for this interpreter)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = ["torch"]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[key] for key in sorted(found)]


def _skipped(path: str) -> bool:
    """Tests, benchmarks and optimised bytecode no job imports."""
    parts = path.split("/")
    return (
        "tests" in parts
        or "benchmarks" in parts
        or path.endswith((".opt-1.pyc", ".opt-2.pyc", "_test.so"))
    )


def _stdlib_files() -> Iterator[str]:
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    roots = {paths["stdlib"], paths["platstdlib"]}
    for top in sorted(roots):
        for folder, dirs, names in os.walk(top):
            if folder == top:
                dirs[:] = [name for name in dirs if name not in STDLIB_SKIPPED]
            dirs[:] = [name for name in dirs if not name.startswith("config-")]
            for name in names:
                path = os.path.join(folder, name)
                if not name.startswith("_tkinter") and not _skipped(path):
                    yield path


def _package_files() -> Iterator[str]:
    for dist in torch_distributions():
        for relative in dist.files or []:
            text = str(relative)
            if text.startswith(TORCH_SKIPPED) and text not in TORCH_KEPT:
                continue
            if _skipped(text):
                continue
            path = Path(str(dist.locate_file(relative)))
            if path.is_file():
                yield os.path.abspath(path)


def _libraries(files: Iterable[str]) -> set[str]:
    """Every shared library `ldd` says these executables and modules load."""
    objects = [f for f in files if ".so" in os.path.basename(f) or os.access(f, os.X_OK)]
    found: set[str] = set()
    for start in range(0, len(objects), 200):
        done = subprocess.run(
            ["ldd", *objects[start : start + 200]],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            if line.endswith(":"):  # the header before each file's list
                continue
            target = line.split("=>", 1)[1] if "=>" in line else line
            path = target.strip().split(" (", 1)[0].strip()
            if path.startswith("/"):
                found.add(path)
    return found


def image_files() -> list[str]:
    """Absolute paths that go into the layer (links are followed and kept as links)."""
    interpreter = os.path.realpath(sys.executable)
    files = {interpreter, *_stdlib_files(), *_package_files()}
    files |= _libraries([interpreter, *(f for f in files if f.endswith(".so") or ".so." in f)])
    files.update(path for path in SYSTEM_FILES if os.path.exists(path))
    # The venv as it is here: `python3` on PATH is its link to the interpreter.
    venv_bin = Path(sys.prefix) / "bin"
    for name in ("python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        if (venv_bin / name).exists():
            files.add(str(venv_bin / name))
    if sys.prefix != sys.base_prefix:
        files.add(str(Path(sys.prefix) / "pyvenv.cfg"))
    return sorted(files)


class _Layer:
    """A tar of host paths with their parent folders and every link on the way. Each path
    is written once: `docker load` refuses a layer that names a path twice (the checkout, and
    so the venv, may live under /tmp, whose entry the layer also writes itself)."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.added: set[str] = set()

    def _entry(self, path: str) -> tarfile.TarInfo:
        info = self.tar.gettarinfo(path, arcname=path.lstrip("/"))
        info.uname = info.gname = ""
        return info

    def _claim(self, path: str) -> bool:
        """True the first time a path is seen: the caller writes its entry."""
        if path in self.added or path == "/":
            return False
        self.added.add(path)
        return True

    def add(self, path: str, depth: int = 0) -> None:
        if path in self.added or path == "/" or depth > 40:
            return
        parent = os.path.dirname(path)
        self.add(parent, depth + 1)
        self._claim(path)
        info = self._entry(path)
        if info.issym():
            self.tar.addfile(info)
            self.add(os.path.normpath(os.path.join(parent, os.readlink(path))), depth + 1)
        elif info.isdir():
            self.tar.addfile(info)
        elif info.isfile():
            with open(path, "rb") as handle:
                self.tar.addfile(info, handle)

    def add_text(self, path: str, text: str, mode: int = 0o644) -> None:
        self.add(os.path.dirname(path))
        if not self._claim(path):
            raise ValueError(f"{path} is in the layer already")
        data = text.encode()
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode = len(data), mode
        self.tar.addfile(info, io.BytesIO(data))

    def add_dir(self, path: str, mode: int) -> None:
        """A folder with a fixed mode; call it before any path below it is added."""
        if not self._claim(path):
            raise ValueError(f"{path} is in the layer already")
        info = tarfile.TarInfo(path.lstrip("/"))
        info.type, info.mode = tarfile.DIRTYPE, mode
        self.tar.addfile(info)


def write_layer(files: Iterable[str], tar: tarfile.TarFile) -> None:
    """The job image's layer: its own /tmp, users and groups, then the host files."""
    builder = _Layer(tar)
    builder.add_dir("/tmp", 0o1777)
    builder.add_text("/etc/passwd", PASSWD)
    builder.add_text("/etc/group", GROUP)
    for path in files:
        builder.add(path)


class _Hashing(io.RawIOBase):
    """A write-only file that hashes what goes through it to another file."""

    def __init__(self, target: io.BufferedWriter) -> None:
        self.target, self.digest = target, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.digest.update(data)
        self.target.write(data)
        return len(data)


def run_args() -> tuple[str, ...]:
    """The image's own `docker run` flags: host network, enough shm, and memlock at this
    machine's hard limit (a container cannot raise it above the engine's own)."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    limit = "-1" if hard == resource.RLIM_INFINITY else str(hard)
    return ("--shm-size", SHM_SIZE, "--network", "host", "--ulimit", f"memlock={limit}:{limit}")


def ensure_job_image() -> JobImage:
    """Build the layer once per content (cached across test sessions), return the image."""
    files = image_files()
    args = run_args()
    key = hashlib.sha256()
    for path in files:
        status = os.stat(path)
        key.update(f"{path}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    key.update(json.dumps(args).encode())
    key.update(f"layout {LAYOUT}".encode())
    tag = key.hexdigest()[:16]
    folder = STATE_DIR / "job-image"
    folder.mkdir(parents=True, exist_ok=True)
    layer, digest_file = folder / f"{tag}.tar", folder / f"{tag}.sha256"
    with _locked("job-image"):
        for stale in folder.glob("*"):  # other variants (worktrees, versions) unused a while
            if stale.stem != tag and time.time() - stale.stat().st_mtime > STALE_SECONDS:
                stale.unlink(missing_ok=True)
        if not digest_file.exists():
            partial = folder / f"{tag}.partial"
            with open(partial, "wb") as out:
                hashing = _Hashing(out)
                with tarfile.open(fileobj=hashing, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    write_layer(files, tar)
            partial.rename(layer)
            digest_file.write_text(hashing.digest.hexdigest())
        for used in (layer, digest_file):
            os.utime(used)  # in use: not stale for the others
    diff_id = "sha256:" + digest_file.read_text().strip()
    venv_bin = str(Path(sys.prefix) / "bin")
    config = {
        "architecture": ARCHITECTURES.get(platform.machine(), platform.machine()),
        "os": "linux",
        "config": {
            "Env": [f"PATH={venv_bin}:/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
            "Labels": {
                RUN_ARGS_LABEL: json.dumps(list(args)),
                "org.opencontainers.image.title": "torch job image for launch tests",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    return JobImage(f"{REPOSITORY}:{tag}", image_id, layer, config_bytes, diff_id, args)


def load(image: JobImage, docker_host: str, timeout: float = 300.0) -> None:
    """`docker load` the image into one engine (a no-op when it holds it already)."""
    env = {**os.environ, "DOCKER_HOST": docker_host}
    held = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", image.reference],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    if held.returncode == 0 and held.stdout.strip() == image.image_id:
        return
    with tempfile.TemporaryFile() as errors:
        loader = subprocess.Popen(
            ["docker", "load", "-q"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors, env=env,
        )  # fmt: skip
        failure: list[BaseException] = []

        def feed() -> None:
            assert loader.stdin is not None
            try:
                image.archive(loader.stdin)  # type: ignore[arg-type]
            except (OSError, ValueError) as error:  # docker load died: its stderr says why
                failure.append(error)
            finally:
                with contextlib.suppress(OSError):
                    loader.stdin.close()

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            loader.wait(timeout)
        except subprocess.TimeoutExpired:
            loader.kill()
            loader.wait(30)
            raise RuntimeError(f"docker load into {docker_host} took over {timeout:g} s") from None
        writer.join(30)
        errors.seek(0)
        said = errors.read().decode(errors="replace")[-600:]
    if loader.returncode != 0 or failure:
        raise RuntimeError(f"docker load into {docker_host} failed: {said or failure}")
    inspected = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", image.reference],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    if inspected.stdout.strip() != image.image_id:
        raise RuntimeError(
            f"{docker_host} holds {image.reference} as {inspected.stdout.strip()!r}, "
            f"not {image.image_id}"
        )
