"""Real Docker facilities for tests: an engine, a locally made base image, a local registry,
and a second engine (its own data root and socket) standing in for another node.

Public registries are unreachable here, so the base image is made with debootstrap and
`docker import`, and images are pushed to `docker-registry` on loopback. Every helper is
idempotent and safe to call from several pytest sessions at once (a file lock serialises the
starts); every wait is bounded. The default engine and the base image are shared and left in
place; registries and second engines are stopped by their stop functions.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

STATE_DIR = Path(os.environ.get("CLUSTERKIT_DOCKER_STATE", "/tmp/clusterkit-docker"))
DEFAULT_SOCKET = "/var/run/docker.sock"
BASE_IMAGE = "clusterkit/debian-base:bookworm"
DEBIAN_MIRROR = os.environ.get("CLUSTERKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")


class DockerUnavailable(RuntimeError):
    """The facility cannot be provided on this machine (binary missing, not root)."""


@contextlib.contextmanager
def _locked(name: str, timeout: float = 900.0) -> Iterator[None]:
    """A cross-process lock so two test sessions never start the same thing twice."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / f"{name}.lock", "w") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lock {name} held for more than {timeout:.0f}s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _engine_answers(base_url: str, timeout: float = 3.0) -> bool:
    try:
        client = docker.DockerClient(base_url=base_url, timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # any failure means "not answering"
        return False


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "(no log)"


def _start_dockerd(args: list[str], base_url: str, log: Path, pidfile: Path, wait: float) -> None:
    """Start dockerd detached (own session: it outlives the test process) and wait for it."""
    if shutil.which("dockerd") is None:
        raise DockerUnavailable("dockerd not installed (apt-get install docker.io)")
    if os.geteuid() != 0:
        raise DockerUnavailable("dockerd needs root")
    with open(log, "ab") as out:
        process = subprocess.Popen(
            ["dockerd", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if _engine_answers(base_url):
            return
        if process.poll() is not None:
            raise RuntimeError(f"dockerd exited with {process.returncode}: {_tail(log)}")
        time.sleep(0.3)
    process.terminate()
    raise TimeoutError(f"dockerd did not answer on {base_url} within {wait:.0f}s: {_tail(log)}")


def ensure_dockerd(wait: float = 60.0) -> str:
    """Make sure the default engine answers; start one in the background if none does.
    Returns its base URL. The engine is shared by every test session and left running."""
    base_url = f"unix://{DEFAULT_SOCKET}"
    if _engine_answers(base_url):
        return base_url
    with _locked("dockerd"):
        if _engine_answers(base_url):
            return base_url
        pidfile = STATE_DIR / "dockerd.pid"
        if _pid_alive(pidfile):  # ours, still starting up or wedged: give it the wait
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if _engine_answers(base_url):
                    return base_url
                time.sleep(0.3)
            raise TimeoutError(f"dockerd (pid file {pidfile}) does not answer on {base_url}")
        _start_dockerd(
            ["--pidfile", str(pidfile), "--host", base_url],
            base_url,
            STATE_DIR / "dockerd.log",
            pidfile,
            wait,
        )
    return base_url


def _stop_pid(pidfile: Path, wait: float = 20.0) -> None:
    pid = _pid_alive(pidfile)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _pid_alive(pidfile) == pid:
        time.sleep(0.2)
    if _pid_alive(pidfile) == pid:
        os.kill(pid, signal.SIGKILL)


def stop_dockerd() -> None:
    """Stop the default engine only if these helpers started it (its pidfile is ours)."""
    with _locked("dockerd"):
        _stop_pid(STATE_DIR / "dockerd.pid")


def image_exists(name: str, base_url: str | None = None) -> bool:
    client = docker.DockerClient(base_url=base_url or f"unix://{DEFAULT_SOCKET}", timeout=30)
    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


def ensure_base_image(name: str = BASE_IMAGE, suite: str = "bookworm", wait: float = 900.0) -> str:
    """Build a minimal Debian image once (debootstrap + docker import); cached afterwards."""
    base_url = ensure_dockerd()
    if image_exists(name, base_url):
        return name
    if shutil.which("debootstrap") is None:
        raise DockerUnavailable("debootstrap not installed (apt-get install debootstrap)")
    with _locked("base-image", timeout=wait):
        if image_exists(name, base_url):
            return name
        with tempfile.TemporaryDirectory(prefix="ck-rootfs-", dir="/var/tmp") as root:
            log = STATE_DIR / "debootstrap.log"
            with open(log, "wb") as out:
                done = subprocess.run(
                    ["debootstrap", "--variant=minbase", suite, root, DEBIAN_MIRROR],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=wait,
                    check=False,
                )
            if done.returncode != 0:
                raise RuntimeError(f"debootstrap failed ({done.returncode}): {_tail(log)}")
            tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
            imported = subprocess.run(
                ["docker", "-H", base_url, "import", "-", name],
                stdin=tar.stdout,
                capture_output=True,
                timeout=wait,
                check=False,
            )
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
            if imported.returncode != 0:
                raise RuntimeError(f"docker import failed: {imported.stderr.decode()[-500:]}")
    return name


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Registry:
    """A docker-registry process on loopback; `address` is what image references start with."""

    port: int
    root: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_registry(self)


def ensure_registry(
    port: int = 5000, *, htpasswd: Path | None = None, wait: float = 30.0
) -> Registry:
    """Start `docker-registry serve` on 127.0.0.1:port with a filesystem root in a temp dir
    (docker allows plain HTTP to 127.0.0.1). With `htpasswd`, the registry requires auth."""
    if shutil.which("docker-registry") is None:
        raise DockerUnavailable("docker-registry not installed (apt-get install docker-registry)")
    if _port_open(port):
        raise RuntimeError(f"127.0.0.1:{port} is already taken; pass another port")
    root = Path(tempfile.mkdtemp(prefix=f"ck-registry-{port}-"))
    auth = ""
    if htpasswd is not None:
        auth = f"auth:\n  htpasswd:\n    realm: clusterkit-test\n    path: {htpasswd}\n"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"{auth}"
    )
    log = open(root / "registry.log", "wb")  # noqa: SIM115 - lives as long as the process
    process = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    registry = Registry(port=port, root=root, process=process)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if _port_open(port):
            return registry
        if process.poll() is not None:
            break
        time.sleep(0.2)
    stop_registry(registry)
    raise RuntimeError(f"docker-registry did not listen on {port}: {_tail(root / 'registry.log')}")


def stop_registry(registry: Registry, *, keep_data: bool = False) -> None:
    if registry.process.poll() is None:
        registry.process.terminate()
        try:
            registry.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            registry.process.kill()
            registry.process.wait(timeout=10)
    if not keep_data:
        shutil.rmtree(registry.root, ignore_errors=True)


@dataclass
class SecondEngine:
    """Another dockerd with its own data root, exec root, pidfile and unix socket."""

    name: str
    docker_host: str  # unix://... for DOCKER_HOST
    root: Path
    process: subprocess.Popen[bytes] | None

    def stop(self) -> None:
        stop_second_engine(self)


def start_second_engine(name: str, wait: float = 60.0) -> SecondEngine:
    """Start a second engine (no bridge, no iptables: it must not fight the default one over
    docker0 or the FORWARD chain). Its DOCKER_HOST selects it per node in tests."""
    ensure_dockerd()
    root = STATE_DIR / f"engine-{name}"
    root.mkdir(parents=True, exist_ok=True)
    sock = root / "docker.sock"
    docker_host = f"unix://{sock}"
    pidfile = root / "dockerd.pid"
    with _locked(f"engine-{name}"):
        if not _engine_answers(docker_host):
            _stop_pid(pidfile)
            exec_root = Path(f"/run/ck-engine-{name}")  # short: containerd socket paths limit
            _start_dockerd(
                [
                    "--host",
                    docker_host,
                    "--data-root",
                    str(root / "data"),
                    "--exec-root",
                    str(exec_root),
                    "--pidfile",
                    str(pidfile),
                    "--bridge",
                    "none",
                    "--iptables=false",
                    "--ip6tables=false",
                ],
                docker_host,
                root / "dockerd.log",
                pidfile,
                wait,
            )
    return SecondEngine(name=name, docker_host=docker_host, root=root, process=None)


def stop_second_engine(engine: SecondEngine, *, remove_data: bool = False) -> None:
    with _locked(f"engine-{engine.name}"):
        _stop_pid(engine.root / "dockerd.pid")
    if remove_data:
        shutil.rmtree(engine.root, ignore_errors=True)


def copy_image(reference: str, source_host: str, target_host: str, timeout: float = 600) -> None:
    """`docker save | docker load` between two engines (no registry needed)."""
    save = subprocess.Popen(
        ["docker", "-H", source_host, "save", reference], stdout=subprocess.PIPE
    )
    load = subprocess.run(
        ["docker", "-H", target_host, "load", "-q"],
        stdin=save.stdout,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert save.stdout is not None
    save.stdout.close()
    save.wait(timeout=60)
    if load.returncode != 0 or save.returncode != 0:
        raise RuntimeError(f"copying {reference} failed: {load.stderr.decode()[-500:]}")
