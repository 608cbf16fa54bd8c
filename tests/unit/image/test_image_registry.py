"""`image lock` resolves the base digest through the registry's HTTP API, without Docker:
against the real docker-registry on loopback (an image pushed to it over the same API), and
the anonymous Bearer token flow public registries use (a real HTTP server on loopback that
answers as Docker Hub's registry and token service do)."""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clusterkit.errors import ConfigError, StageError
from clusterkit.image import lock as lockmod
from clusterkit.image import registry
from clusterkit.image.spec import load_spec
from tests.support import docker_env


def _put(url: str, body: bytes, content_type: str) -> None:
    request = urllib.request.Request(url, data=body, method="PUT",
                                     headers={"Content-Type": content_type})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status in (201, 202), answer.status


def _push_manifest(base: str, repository: str, tag: str) -> str:
    """Upload a config blob and an image manifest (no layers) with the distribution API;
    return the manifest's digest as Docker would compute it."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs":
                         {"type": "layers", "diff_ids": []}}).encode()  # fmt: skip
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    start = urllib.request.Request(f"{base}/v2/{repository}/blobs/uploads/", method="POST")
    with urllib.request.urlopen(start, timeout=30) as answer:
        location = answer.headers["Location"]
    if location.startswith("/"):
        location = base + location
    separator = "&" if "?" in location else "?"
    _put(f"{location}{separator}digest={config_digest}", config, "application/octet-stream")
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": config_digest,
            },
            "layers": [],
        }
    ).encode()
    _put(f"{base}/v2/{repository}/manifests/{tag}", manifest,
         "application/vnd.docker.distribution.manifest.v2+json")  # fmt: skip
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


@pytest.fixture(scope="module")
def local_registry() -> Iterator[docker_env.Registry]:
    try:
        started = docker_env.ensure_registry(docker_env.free_port())
    except docker_env.DockerUnavailable as reason:
        pytest.skip(str(reason))
    yield started
    docker_env.stop_registry(started)


def test_lock_resolves_the_base_digest_from_the_registry_without_docker(
    local_registry, tmp_path, monkeypatch
) -> None:
    base = f"http://{local_registry.address}"
    expected = _push_manifest(base, "clusterkit/base", "bookworm")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # no engine at all
    reference = f"{local_registry.address}/clusterkit/base:bookworm"
    assert registry.manifest_digest(reference) == expected
    (tmp_path / "image.yaml").write_text(
        f"name: t\nrepository: {local_registry.address}/t\nbase:\n  image: {reference}\n"
        'python: "3.11"\ntorch:\n  version: "2.13.0"\n'
    )
    spec = load_spec(tmp_path)
    assert lockmod.resolve_base(spec, registry.manifest_digest) == (expected, "registry")
    with pytest.raises(ConfigError, match="no such image or tag"):
        registry.manifest_digest(f"{local_registry.address}/clusterkit/base:missing")


def test_an_unreachable_registry_is_could_not_run() -> None:
    port = docker_env.free_port()  # nothing listens there
    with pytest.raises(StageError, match="cannot reach the registry") as error:
        registry.manifest_digest(f"127.0.0.1:{port}/a/b:c", timeout=5)
    assert int(error.value.exit_status) == 3


def test_references_resolve_to_registry_repository_and_tag() -> None:
    parse = registry.Reference.parse
    assert parse("ubuntu:22.04") == registry.Reference(registry.DOCKER_HUB, "library/ubuntu",
                                                       "22.04")  # fmt: skip
    assert parse("nvidia/cuda:12.4.1-base-ubuntu22.04").repository == "nvidia/cuda"
    assert parse("127.0.0.1:5000/a/b:t").base_url == "http://127.0.0.1:5000"
    assert parse("ghcr.io/org/img").tag == "latest"
    assert parse("ghcr.io/org/img").base_url == "https://ghcr.io"


class _PublicRegistry(BaseHTTPRequestHandler):
    """Docker Hub's shape: manifests need a Bearer token, which the realm hands out to
    anyone for a pull scope."""

    digest = "sha256:" + "ab" * 32
    token = "anonymous-token-123"
    seen: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/token?"):
            self.seen.append(self.path)
            body = json.dumps({"token": self.token}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.end_headers()

    def do_HEAD(self) -> None:
        port = self.server.server_address[1]
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate",
                f'Bearer realm="http://127.0.0.1:{port}/token",service="registry.test",'
                'scope="repository:library/ubuntu:pull"',
            )
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", self.digest)
        self.end_headers()


def test_anonymous_token_flow_of_public_registries(monkeypatch) -> None:
    monkeypatch.delenv("CLUSTERKIT_REGISTRY_USERNAME", raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PublicRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        digest = registry.manifest_digest(f"127.0.0.1:{port}/library/ubuntu:22.04", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert digest == _PublicRegistry.digest
    assert (
        _PublicRegistry.seen
        and "scope=repository%3Alibrary%2Fubuntu%3Apull" in (_PublicRegistry.seen[0])
    )
    assert "service=registry.test" in _PublicRegistry.seen[0]
