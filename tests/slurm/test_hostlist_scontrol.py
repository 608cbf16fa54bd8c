"""Our hostlist parser against the real `scontrol show hostnames` of Slurm 22.05."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from clusterkit.hostlist import parse_hostlist
from clusterkit.slurm.target import SlurmRequest, slurm_target
from tests.support.slurmcluster import SlurmCluster
from tests.unit.slurm.test_slurm_hostlist import INVALID, VALID

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


def scontrol_hostnames(text: str, env: Mapping[str, str]) -> list[str] | None:
    """`scontrol show hostnames TEXT`, or None when scontrol rejects it (22.05 prints
    "Invalid hostlist" and still exits 0)."""
    done = subprocess.run(
        ["scontrol", "show", "hostnames", text],
        capture_output=True,
        text=True,
        timeout=10,
        env=dict(env),
        check=False,
    )
    names = done.stdout.split()
    if done.returncode != 0 or "Invalid hostlist" in done.stdout + done.stderr or not names:
        return None
    return names


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


def test_a_range_too_long_for_one_argument_is_expanded_here(
    slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """65,536 names joined are over Linux's 128 KiB for one argument: `scontrol show node`
    once failed with "Argument list too long" and a traceback. The real nodes among them
    still get their addresses from Slurm."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    given = SlurmRequest(nodes="node[1-3],n[3-65535]")
    hosts = slurm_target(given, None, slurm.env).inventory.hosts
    assert len(hosts) == 65536 and hosts[-1].name == "n65535"
    assert hosts[0].address == slurm.net["node1"].address
    assert hosts[-1].address == "n65535"  # not a Slurm node: its own name
