"""Spec -> lock -> render -> build -> verify -> push against a real engine and registry."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import bcrypt
import pytest

from clusterkit.image.build import build_image
from clusterkit.image.lock import read_lock
from clusterkit.image.render import image_hash
from clusterkit.image.spec import load_spec
from tests.docker.conftest import BuiltImage, clusterkit
from tests.support import docker_env


def test_lock_pins_the_registry_digest_and_the_local_wheel(built_cpu_image: BuiltImage, client):
    spec = load_spec(built_cpu_image.spec_dir)
    lock = read_lock(spec)
    pushed_base = client.images.get_registry_data(spec.base_image)
    assert lock["base"] == {
        "image": spec.base_image,
        "digest": pushed_base.id,
        "resolved_from": "registry",
    }
    torch = next(p for p in lock["packages"] if p["name"] == "torch")
    assert torch["version"] == "2.13.0+cpu" and torch["source"] == "wheelhouse"
    assert lock["torch"]["cuda"] is None and lock["torch"]["nccl"] is None
    for step in ("lock", "render"):
        done = clusterkit("image", step, "--fail-if-stale", str(built_cpu_image.spec_dir))
        assert done.returncode == 0, done.stdout


def test_built_image_carries_its_facts_as_labels(built_cpu_image: BuiltImage, api):
    spec = load_spec(built_cpu_image.spec_dir)
    labels = api.inspect_image(built_cpu_image.reference)["Config"]["Labels"]
    assert labels["io.clusterkit.spec-hash"] == image_hash(spec, read_lock(spec))
    assert labels["io.clusterkit.torch"] == "2.13.0+cpu"
    assert labels["org.opencontainers.image.created"] == "1970-01-01T00:00:00Z"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.vendor"] == "clusterkit"
    env = api.inspect_image(built_cpu_image.reference)["Config"]["Env"]
    assert "PIP_CONSTRAINT=/etc/pip/constraint.txt" in env


def test_image_runs_as_a_user_with_the_pinned_packages(built_cpu_image: BuiltImage, client):
    """Not root, and apt installed exactly the versions the spec pins."""
    spec = load_spec(built_cpu_image.spec_dir)
    pins = dict(entry.split("=", 1) for entry in spec.apt)
    query = "id -u; id -un; dpkg-query -W -f '${Package}=${Version}\\n' " + " ".join(pins)
    output = client.containers.run(
        built_cpu_image.reference, ["bash", "-c", query], remove=True, network_mode="host"
    ).decode()
    uid, user, *installed = output.split()
    assert (uid, user) == ("1000", "clusterkit")
    assert dict(line.split("=", 1) for line in installed) == pins


def test_verify_runs_the_image_and_compares_with_the_lock(built_cpu_image: BuiltImage):
    done = clusterkit("image", "verify", str(built_cpu_image.spec_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "matches the lock" in done.stdout and "torch 2.13.0+cpu" in done.stdout


def test_verify_fails_when_the_image_differs_from_the_lock(
    built_cpu_image: BuiltImage, tmp_path: Path
):
    for name in ("image.yaml", "image.lock.json"):
        shutil.copy(built_cpu_image.spec_dir / name, tmp_path / name)
    lock = json.loads((tmp_path / "image.lock.json").read_text())
    lock["torch"]["version"] = "2.12.0+cpu"
    (tmp_path / "image.lock.json").write_text(json.dumps(lock))
    done = clusterkit("image", "verify", str(tmp_path), "--reference", built_cpu_image.reference)
    assert done.returncode == 1
    assert "torch: lock 2.12.0+cpu, image 2.13.0+cpu" in done.stdout


def test_no_change_rebuild_uses_the_layer_cache(built_cpu_image: BuiltImage, api):
    started = time.monotonic()
    again = build_image(
        api, load_spec(built_cpu_image.spec_dir), [built_cpu_image.reference], quiet=True,
        revision="test",
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert again.image_id == built_cpu_image.image_id
    # every RUN and COPY step came from the cache (FROM, ENV, SHELL, ARG, LABEL never report)
    assert again.cached_steps >= 7, again
    assert seconds < max(15.0, 0.25 * built_cpu_image.cold_seconds)


def test_push_records_the_digest_the_registry_serves(
    built_cpu_image: BuiltImage, client, tmp_path: Path
):
    record = tmp_path / "digest.json"
    done = clusterkit(
        "image", "push", str(built_cpu_image.spec_dir), "-q", "--digest-file", str(record)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pushed = json.loads(record.read_text())
    remote = client.images.get_registry_data(built_cpu_image.reference)
    assert pushed["digest"] == remote.id
    assert pushed["image"].endswith("@" + remote.id)
    assert f"@{remote.id}" in done.stdout


def test_push_to_a_stopped_registry_fails_with_its_message(built_cpu_image: BuiltImage, api):
    dead = docker_env.ensure_registry(docker_env.free_port())
    dead.stop()
    repository = f"{dead.address}/clusterkit/cpu-torch"
    done = clusterkit(
        "image", "push", str(built_cpu_image.spec_dir), "-q", "--repository", repository
    )
    # the image is only tagged there by build; tag it so the failure is the registry's own
    assert done.returncode == 1
    api.tag(built_cpu_image.image_id, repository, built_cpu_image.reference.rsplit(":", 1)[1])
    done = clusterkit(
        "image", "push", str(built_cpu_image.spec_dir), "-q", "--repository", repository
    )
    try:
        assert done.returncode == 1
        assert "push of" in done.stderr and "connection refused" in done.stderr.lower()
    finally:
        api.remove_image(f"{repository}:{built_cpu_image.reference.rsplit(':', 1)[1]}")


@pytest.fixture
def auth_registry(tmp_path: Path):
    secret = "s3cret-" + tmp_path.name[-6:]
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("ck:" + bcrypt.hashpw(secret.encode(), bcrypt.gensalt(5)).decode() + "\n")
    started = docker_env.ensure_registry(docker_env.free_port(), htpasswd=htpasswd)
    yield started, secret
    started.stop()


def test_push_refused_without_credentials_and_accepted_with_them(
    built_cpu_image: BuiltImage, api, auth_registry, tmp_path: Path
):
    registry, secret = auth_registry
    repository = f"{registry.address}/clusterkit/cpu-torch"
    tag = built_cpu_image.reference.rsplit(":", 1)[1]
    api.tag(built_cpu_image.image_id, repository, tag)
    args = ("image", "push", str(built_cpu_image.spec_dir), "-q", "--repository", repository)
    isolated = {"DOCKER_CONFIG": str(tmp_path)}  # no stored logins
    try:
        refused = clusterkit(*args, env=isolated)
        assert refused.returncode == 1
        assert "push of" in refused.stderr
        assert any(w in refused.stderr.lower() for w in ("auth", "unauthorized", "credentials"))
        creds = {
            **isolated,
            "CLUSTERKIT_REGISTRY_USERNAME": "ck",
            "CLUSTERKIT_REGISTRY_PASSWORD": secret,
        }
        accepted = clusterkit(*args, env=creds)
        assert accepted.returncode == 0, accepted.stderr
        assert secret not in accepted.stdout + accepted.stderr + refused.stderr
    finally:
        api.remove_image(f"{repository}:{tag}")


def test_build_failure_exits_non_zero_with_the_builders_message(
    built_cpu_image: BuiltImage, tmp_path: Path
):
    folder = tmp_path / "broken"
    shutil.copytree(built_cpu_image.spec_dir, folder, ignore=shutil.ignore_patterns("wheelhouse"))
    (folder / "wheelhouse").mkdir()  # the lock's wheels are gone: pip must refuse
    done = clusterkit("image", "build", str(folder), "-q")
    assert done.returncode == 1
    assert "build of" in done.stderr and "returned a non-zero code" in done.stderr
