"""`launch --no-check --print`: with no facts, the plan follows --nproc-per-node, then the
inventory's expect.gpus_per_node, and says that nothing was checked. It used to plan one rank
per node (WORLD_SIZE=2 on two 8-GPU nodes), no `--gpus all`, and claim the check's values."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

INVENTORY = """\
all:
  hosts:
    n1: {ansible_host: 10.0.0.1}
    n2: {ansible_host: 10.0.0.2}
  vars:
    clusterkit:
      image: registry.example.com/ml/pytorch:2.4.1-cu124
      expect:
        gpus_per_node: 8
"""


def plan(tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY)
    done = run_cli(["launch", inventory, "--no-check", "--print", *flags, "--", "train.py"])
    return done.status, done.stdout, done.stderr


def test_expected_gpus_give_the_ranks_and_the_gpus(tmp_path: Path) -> None:
    status, out, err = plan(tmp_path)
    assert status == 0, err
    assert out.count("--nproc-per-node 8") == 2 and "--nproc-per-node 1 " not in out
    assert out.count("WORLD_SIZE=16") == 2 and out.count("NPROC_PER_NODE=8") == 2
    assert out.count("--gpus all") == 2
    assert out.count("# NOTHING WAS CHECKED (--no-check)") == 2
    assert "as the check resolved it" not in out
    assert "WITHOUT checking" in err and "expect.gpus_per_node" in err


def test_the_flag_wins_over_the_expectation(tmp_path: Path) -> None:
    status, out, err = plan(tmp_path, "--nproc-per-node", "2")
    assert status == 0, err
    assert out.count("--nproc-per-node 2") == 2 and out.count("WORLD_SIZE=4") == 2
