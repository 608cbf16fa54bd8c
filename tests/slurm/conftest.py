"""Fixtures for tests against a real Slurm 22.05 cluster: one per test session.

`slurm` is a 3-node Slurm (slurmctld, munged, a slurmd per namespace node, see
tests/support/slurmcluster.py) reset before each test: no job, every node idle, firewalls
open, GPUs healthy. Every test here carries the `cluster` and `slurm` marks and is skipped
with the reason when the machine cannot run Slurm (not root, packages missing).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import netcluster, slurmcluster
from tests.support.netcluster import NetCluster
from tests.support.slurmcluster import SlurmCluster

SLURM_DIR = Path(__file__).parent
NODES = 3


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLURM_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def slurm_built() -> Iterator[SlurmCluster]:
    reason = netcluster.unavailable_reason() or slurmcluster.unavailable_reason()
    if reason:
        pytest.skip(f"real Slurm cluster unavailable: {reason}")
    with NetCluster(NODES) as net, SlurmCluster(net) as built:
        yield built


@pytest.fixture
def slurm(slurm_built: SlurmCluster) -> SlurmCluster:
    """The shared Slurm cluster, healthy and idle."""
    slurm_built.reset()
    return slurm_built
