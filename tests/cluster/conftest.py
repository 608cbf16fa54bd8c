"""Fixtures for tests against real hosts: one namespace cluster per test session.

`cluster` is the shared 4-node cluster, reset to healthy before each test (open firewalls,
sshd up, 8x H100 on driver 550.54.15 / CUDA 12.4, default /etc/hosts and MTU, no leftover
processes); a test breaks what it needs and never has to repair it. `cluster_inventory` is
an Ansible inventory of it in the test's tmp_path. Every test here carries the `cluster` mark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.netcluster import NetCluster, unavailable_reason

CLUSTER_DIR = Path(__file__).parent
NODES = 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def netcluster() -> Iterator[NetCluster]:
    """The session's cluster as built; prefer `cluster`, which resets it first."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"real test cluster unavailable: {reason}")
    built = NetCluster(NODES)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def cluster(netcluster: NetCluster) -> NetCluster:
    """The shared cluster, healthy."""
    netcluster.reset()
    return netcluster


@pytest.fixture
def cluster_inventory(cluster: NetCluster, tmp_path: Path) -> Path:
    """An Ansible YAML inventory of the healthy cluster (python with torch, master node1)."""
    return cluster.inventory(tmp_path / "inventory.yaml")
