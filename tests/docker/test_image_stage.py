"""The `image` stage of `check` for real: nodes served by two Docker engines (the default one
and a second dockerd with its own data root and socket), selected per node by DOCKER_HOST."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import tarfile
from collections.abc import Iterator

import docker
import pytest

from clusterkit.checks.model import Status
from clusterkit.contract.session import Session
from clusterkit.image.stage import run_image_stage
from clusterkit.inventory.model import ClusterSettings, Host, Inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport
from tests.docker.conftest import BuiltImage
from tests.support import docker_env


@pytest.fixture(scope="module")
def second_engine(built_cpu_image: BuiltImage, engine: str) -> Iterator[str]:
    """A second engine holding the same image under the same tag (copied, not rebuilt)."""
    other = docker_env.start_second_engine("image-stage")
    try:
        docker_env.copy_image(built_cpu_image.reference, engine, other.docker_host)
        yield other.docker_host
    finally:
        docker_env.stop_second_engine(other, remove_data=True)


@pytest.fixture(scope="module")
def run_args(engine: str) -> list[str] | None:
    """None (use the image's label, memlock unlimited) where this machine lets containers
    raise memlock; else the same flags with memlock at dockerd's own hard limit, which a
    sandbox without CAP_SYS_RESOURCE cannot lift (then memlock is expected to warn)."""
    done = subprocess.run(
        ["docker", "-H", engine, "run", "--rm", "--network", "none", "--ulimit", "memlock=-1:-1",
         docker_env.BASE_IMAGE, "true"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode == 0:
        return None
    assert "rlimit" in done.stderr, done.stderr
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return ["--shm-size", "2g", "--network", "host", "--ulimit", f"memlock={hard}:{hard}"]


def _stage(image: str, hosts: dict[str, str], drivers=None, run_args=None):
    transports = {
        name: LocalTransport(name, env={**os.environ, "DOCKER_HOST": docker_host})
        for name, docker_host in hosts.items()
    }
    inventory = Inventory(
        path=None,
        hosts=tuple(Host(name=name, address=name, connection="local") for name in hosts),
        settings=ClusterSettings(
            image=image, image_run_args=None if run_args is None else tuple(run_args)
        ),
    )
    probe_facts = {host: {"gpus": {"driver": driver}} for host, driver in (drivers or {}).items()}
    result = run_image_stage(
        Session(inventory, transports=transports, facts=probe_facts), Deadline.after(120)
    )
    return {f.id: f for f in result.findings}, result.details


def test_same_image_on_both_engines_passes(
    built_cpu_image: BuiltImage, engine, second_engine, run_args
):
    findings, facts = _stage(
        built_cpu_image.reference,
        {"node-a": engine, "node-b": engine, "node-c": second_engine},
        run_args=run_args,
    )
    bad = {k: f.status for k, f in findings.items() if f.status not in (Status.OK, Status.SKIP)}
    assert bad == ({} if run_args is None else {"image.memlock": Status.WARN})
    assert facts["node-c"]["docker_host"] == second_engine
    inside = facts["node-c"]["run"]["facts"]
    assert inside["torch"] == "2.13.0+cpu" and inside["shm_bytes"] == 2 << 30
    if run_args is None:
        assert inside["memlock_soft"] is None  # unlimited, from the image's run-args label


def test_different_image_under_the_same_tag_is_named(
    built_cpu_image: BuiltImage, engine, second_engine, run_args
):
    """Rebuild on the second engine with one more label, under the same tag."""
    dockerfile = f"FROM {built_cpu_image.reference}\nLABEL io.clusterkit.spec-hash=tampered\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    other = docker.APIClient(base_url=second_engine, timeout=300)
    try:
        for chunk in other.build(
            fileobj=context, custom_context=True, tag=built_cpu_image.reference, decode=True,
            pull=False, network_mode="none", use_config_proxy=False,
        ):  # fmt: skip
            assert "error" not in chunk, chunk
        findings, facts = _stage(
            built_cpu_image.reference,
            {"node-a": engine, "node-b": engine, "node-c": second_engine},
            run_args=run_args,
        )
    finally:
        other.close()
    digest = findings["image.digest"]
    assert digest.status is Status.FAIL and digest.hosts == ["node-c"]
    assert "node-a, node-b:" in digest.message and "node-c:" in digest.message
    assert findings["image.spec-hash"].hosts == ["node-c"]
    assert facts["node-c"]["id"] != facts["node-a"]["id"]


def test_missing_image_and_unreachable_engine(built_cpu_image: BuiltImage, engine, tmp_path):
    absent = built_cpu_image.reference.rsplit(":", 1)[0] + ":not-built-anywhere"
    findings, _ = _stage(absent, {"node-a": engine})
    assert findings["image.present"].status is Status.FAIL
    findings, _ = _stage(
        built_cpu_image.reference,
        {"node-a": engine, "node-b": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert findings["image.inspect"].status is Status.ERROR
    assert findings["image.inspect"].hosts == ["node-b"]


def test_driver_below_the_floor_and_runtime_flags_that_break_nccl(
    built_cpu_image: BuiltImage, engine
):
    """CPU image: no CUDA label, so no driver finding; flags overridden from the inventory."""
    transports = {"node-a": LocalTransport("node-a", env={**os.environ, "DOCKER_HOST": engine})}
    inventory = Inventory(
        path=None,
        hosts=(Host(name="node-a", address="node-a", connection="local"),),
        settings=ClusterSettings(
            image=built_cpu_image.reference,
            image_run_args=("--shm-size", "64m", "--network", "none"),
        ),
    )
    session = Session(inventory, transports=transports, facts={"node-a": {"gpus": {}}})
    result = run_image_stage(session, Deadline.after(120))
    by_id, facts = {f.id: f for f in result.findings}, result.details
    assert by_id["image.shm"].status is Status.FAIL
    assert by_id["image.memlock"].status is Status.WARN
    assert "image.driver" not in by_id
    assert facts["node-a"]["run"]["facts"]["shm_bytes"] == 64 << 20
