"""`clusterkit lint`'s rules over the example scripts in tests/fixtures/lint: each wrong script
fires its rule (and no other), each right one, written in another common style, stays silent,
and the rules that depend on the cluster judge with the planned node count and world size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.lint import RULES, Context, Severity, lint_script

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "lint"
DOC = Path(__file__).resolve().parents[3] / "docs" / "lint.md"
TWO_NODES = Context(nodes=2, nproc_per_node=4)
ONE_NODE = Context(nodes=1, nproc_per_node=8)
UNKNOWN = Context()

# Each wrong script and what it fires, as (rule, severity, line) on two 4-GPU nodes.
WRONG = {
    "ddp_tutorial.py": [
        ("lint.master-localhost", Severity.FAIL, 15),
        ("lint.world-size-device-count", Severity.FAIL, 17),
        ("lint.spawn-under-torchrun", Severity.FAIL, 38),
    ],
    "master_tcp.py": [("lint.master-localhost", Severity.FAIL, 4)],
    "global_rank_device.py": [
        ("lint.device-global-rank", Severity.FAIL, 11),
        ("lint.device-global-rank", Severity.FAIL, 13),
    ],
    "global_rank_env.py": [("lint.device-global-rank", Severity.FAIL, 9)],
    "local_rank_arg.py": [("lint.local-rank-argument", Severity.FAIL, 9)],
    "shuffle_no_sampler.py": [("lint.shuffle-no-sampler", Severity.WARN, 10)],
    "sampler_and_shuffle.py": [("lint.sampler-and-shuffle", Severity.FAIL, 10)],
    "no_set_epoch.py": [("lint.sampler-no-set-epoch", Severity.WARN, 19)],
    "barrier_except.py": [
        ("lint.collective-in-except", Severity.WARN, 14),
        ("lint.collective-in-except", Severity.WARN, 17),
    ],
    "collective_rank0.py": [("lint.collective-on-one-rank", Severity.FAIL, 8)],
    "no_destroy.py": [("lint.no-destroy-process-group", Severity.WARN, 7)],
    "data_parallel.py": [("lint.data-parallel", Severity.FAIL, 5)],
}
RIGHT = [
    "torchrun_env.py",
    "modulo_rank.py",
    "hf_barrier.py",
    "lightning_style.py",
    "accelerate_style.py",
    "torchtitan_style.py",
    "imagenet_style.py",
    "examples_multinode.py",
    "nanogpt_style.py",
    "hf_trainer_style.py",
    "helpers_project/train.py",
]


def found(path: Path, context: Context = TWO_NODES) -> list[tuple[str, Severity, int]]:
    result = lint_script(str(path), Path.cwd(), context)
    return [(f.rule, f.severity, f.line) for f in result.findings]


@pytest.mark.parametrize("name", sorted(WRONG))
def test_each_wrong_script_fires_its_rule_at_its_line(name: str) -> None:
    assert found(FIXTURES / "wrong" / name) == WRONG[name]


@pytest.mark.parametrize("context", [TWO_NODES, ONE_NODE, UNKNOWN], ids=["2x4", "1x8", "none"])
@pytest.mark.parametrize("name", RIGHT)
def test_a_correct_script_in_any_common_style_is_silent(name: str, context: Context) -> None:
    assert found(FIXTURES / "right" / name, context) == []


def test_every_rule_fires_on_some_script() -> None:
    fired = {rule for rows in WRONG.values() for rule, _, _ in rows}
    tested_elsewhere = {"lint.world-size-hardcoded", "lint.unreadable", "lint.limit"}
    assert fired | tested_elsewhere == set(RULES)


def test_localhost_is_fine_on_one_node_fails_on_two_and_warns_unknown() -> None:
    script = FIXTURES / "wrong" / "master_tcp.py"
    assert found(script, ONE_NODE) == []
    assert found(script, TWO_NODES) == [("lint.master-localhost", Severity.FAIL, 4)]
    assert found(script, UNKNOWN) == [("lint.master-localhost", Severity.WARN, 4)]


def test_global_rank_as_gpu_is_fine_on_one_node_only() -> None:
    script = FIXTURES / "wrong" / "global_rank_env.py"
    assert found(script, ONE_NODE) == []
    assert [severity for _, severity, _ in found(script, UNKNOWN)] == [Severity.WARN]


def test_a_written_world_size_is_judged_against_the_planned_one() -> None:
    script = FIXTURES / "wrong" / "world_size_literal.py"
    assert found(script, Context(nodes=2, nproc_per_node=4)) == []  # 8 ranks: as written
    mismatch = found(script, Context(nodes=2, nproc_per_node=8))
    assert mismatch == [("lint.world-size-hardcoded", Severity.FAIL, 7)]
    message = lint_script(str(script), Path.cwd(), Context(2, 8)).findings[0].message
    assert "world size 8" in message and "16 ranks" in message
    assert found(script, UNKNOWN) == [("lint.world-size-hardcoded", Severity.WARN, 7)]


def test_device_count_world_size_is_fine_on_one_node(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "n = torch.cuda.device_count()\n"
        "dist.init_process_group('nccl', world_size=n)\n"
        "dist.destroy_process_group()\n"
    )
    assert found(script, ONE_NODE) == []
    assert found(script, TWO_NODES) == [("lint.world-size-device-count", Severity.FAIL, 3)]


def test_world_size_env_written_in_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os\nos.environ.update({'WORLD_SIZE': '4'})\n")
    assert found(script, Context(1, 4)) == []
    assert found(script, TWO_NODES) == [("lint.world-size-hardcoded", Severity.FAIL, 2)]


def test_a_name_shadowed_by_a_parameter_is_not_the_global_rank(tmp_path: Path) -> None:
    """`rank` bound to dist.get_rank() at module level, but a function's own `rank`
    parameter (a local rank passed in) picks the GPU: silent."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "rank = dist.get_rank()\n"
        "def place(model, rank):\n"
        "    return model.to(rank)\n"
        "torch.cuda.set_device(rank)\n"
    )
    assert found(script) == [("lint.device-global-rank", Severity.FAIL, 5)]


def test_a_collective_on_rank_zero_is_silent_when_the_other_branch_calls_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    body = "if dist.get_rank() == 0:\n    dist.broadcast(t, 0)\n"
    script.write_text(f"import torch.distributed as dist\n{body}else:\n    dist.broadcast(t, 0)\n")
    assert found(script) == []
    script.write_text(f"import torch.distributed as dist\n{body}")
    assert found(script) == [("lint.collective-on-one-rank", Severity.FAIL, 3)]


def test_spawn_in_a_branch_warns_and_a_fallback_data_parallel_is_silent(tmp_path: Path) -> None:
    """`if args.spawn: mp.spawn(...)` may be the single-machine path: a warning. DataParallel
    in the other branch of DistributedDataParallel is the fallback (imagenet_style.py); alone,
    with DDP nowhere, it fails on two nodes."""
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch.multiprocessing as mp, torch.distributed as dist\n"
        "def work(i):\n    dist.init_process_group('nccl')\n    dist.destroy_process_group()\n"
        "if '--spawn' in sys.argv:\n    mp.spawn(work, nprocs=2)\nelse:\n    work(0)\n"
    )
    assert found(script) == [("lint.spawn-under-torchrun", Severity.WARN, 6)]
    script.write_text("import torch\nif cpu:\n    m = torch.nn.DataParallel(m)\n")
    assert found(script) == [("lint.data-parallel", Severity.FAIL, 3)]


def test_an_unguarded_default_master_addr_fires_and_a_guarded_one_does_not(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    write = "os.environ['MASTER_ADDR'] = 'localhost'\n"
    script.write_text(f"import os\nif os.environ.get('MASTER_ADDR') is None:\n    {write}")
    assert found(script) == []
    script.write_text(f"import os\nif verbose:\n    {write}")
    assert found(script) == [("lint.master-localhost", Severity.FAIL, 3)]


def test_a_transformers_model_in_a_raw_ddp_loop_still_needs_a_sampler(tmp_path: Path) -> None:
    """Importing transformers is not the Trainer: the script owns its loader."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "from torch.utils.data import DataLoader\n"
        "from transformers import AutoModel\n"
        "dist.init_process_group('nccl')\n"
        "loader = DataLoader(data, shuffle=True)\n"
        "dist.destroy_process_group()\n"
    )
    assert found(script) == [("lint.shuffle-no-sampler", Severity.WARN, 5)]


def _documented() -> dict[str, str]:
    """rule id -> its Source cell, from docs/lint.md's table."""
    rows = re.findall(r"^\| `(lint\.[a-z-]+)` \|(.*)\|$", DOC.read_text(), re.M)
    return {rule: cells.rsplit("|", 1)[-1].strip() for rule, cells in rows}


def test_docs_list_every_rule_with_a_source_and_no_other() -> None:
    documented = _documented()
    assert set(documented) == set(RULES)
    assert all(source for source in documented.values())
