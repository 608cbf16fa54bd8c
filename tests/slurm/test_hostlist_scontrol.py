"""Our hostlist parser against the real `scontrol show hostnames` of Slurm 22.05."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from clusterkit.slurm.hostlist import parse_hostlist, scontrol_hostnames
from tests.unit.test_slurm_hostlist import INVALID, VALID

REAL_WORLD = [
    "gpu[001-004,007],login1",
    "node[1-3]",
    "compute-[01-16]",
    "dgx[01-08,12,15-16]",
    "rack[1-4]-gpu[01-08]",
    "a100-[0001-0010],h100-[01-02]",
    "n[98-102]",
    "cn[0009-0011],cn[100-101]",
    "ib[1-2][1-3]",
    "node01,node02,node03",
    "x[7]",
]


@pytest.fixture
def slurm_env(tmp_path: Path) -> dict[str, str]:
    """scontrol reads a slurm.conf even to expand a hostlist; no daemon is needed."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol not installed (apt-get install slurm-client)")
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=hostlist\nSlurmctldHost=localhost\nNodeName=a\nPartitionName=p Nodes=a\n"
    )
    return {**os.environ, "SLURM_CONF": str(conf)}


@pytest.mark.parametrize("text", REAL_WORLD + [text for text, _ in VALID])
def test_parser_matches_scontrol(slurm_env: dict[str, str], text: str) -> None:
    expected = scontrol_hostnames(text, slurm_env)
    assert expected, f"scontrol could not expand {text!r}"
    assert parse_hostlist(text) == expected


@pytest.mark.parametrize("text", [t for t in INVALID if "[" in t and t.endswith("]")])
def test_scontrol_rejects_what_the_parser_rejects(slurm_env: dict[str, str], text: str) -> None:
    assert scontrol_hostnames(text, slurm_env) is None
