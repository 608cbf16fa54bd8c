"""`clusterkit lint` as a user runs it (text, JSON, exit statuses, the inventory's plan), what
it does with hostile files in the script's tree, and `launch --lint` before the job."""

from __future__ import annotations

import ast
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from clusterkit.lint import Context, lint_script
from clusterkit.lint.project import MAX_FILE_BYTES, MAX_FILES
from tests.support.cli import run_cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "lint"
INVENTORY = """\
all:
  hosts:
    n1: {ansible_host: 10.0.0.1}
    n2: {ansible_host: 10.0.0.2}
  vars:
    clusterkit:
      expect: {gpus_per_node: 4}
"""


def copy(name: str, folder: Path) -> Path:
    target = folder / Path(name).name
    shutil.copy(FIXTURES / name, target)
    return target


def test_text_names_path_line_rule_why_and_fix_and_fails(tmp_path: Path) -> None:
    copy("wrong/ddp_tutorial.py", tmp_path)
    done = run_cli(["lint", "ddp_tutorial.py"], cwd=tmp_path)
    assert done.status == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ddp_tutorial.py:15: warn lint.master-localhost: ")
    assert lines[1].startswith("  why: ") and lines[2].startswith("  fix: delete the line")
    assert "ddp_tutorial.py:38: fail lint.spawn-under-torchrun" in done.stdout
    assert lines[-1] == (
        "lint: 1 failing finding, 2 warnings in 1 file (no cluster given: node-count rules warn)"
    )


def test_json_has_path_and_line_on_every_finding(tmp_path: Path) -> None:
    copy("wrong/barrier_except.py", tmp_path)
    done = run_cli(["lint", "--format", "json", "barrier_except.py"], cwd=tmp_path)
    document = json.loads(done.stdout)
    assert done.status == 0 and document["exit_status"] == 0  # warnings only
    assert [(f["path"], f["line"], f["rule"]) for f in document["findings"]] == [
        ("barrier_except.py", 14, "lint.collective-in-except"),
        ("barrier_except.py", 17, "lint.collective-in-except"),
    ]
    assert all(f["why"] and f["fix"] for f in document["findings"])


def test_strict_makes_a_warning_fail(tmp_path: Path) -> None:
    copy("wrong/no_set_epoch.py", tmp_path)
    assert run_cli(["lint", "no_set_epoch.py"], cwd=tmp_path).status == 0
    assert run_cli(["lint", "--strict", "no_set_epoch.py"], cwd=tmp_path).status == 1


def test_a_clean_script_passes_and_script_arguments_are_taken(tmp_path: Path) -> None:
    copy("right/torchrun_env.py", tmp_path)
    done = run_cli(["lint", "torchrun_env.py", "--epochs", "3", "--strict"], cwd=tmp_path)
    assert done.status == 0 and "0 failing findings, 0 warnings" in done.stdout
    assert run_cli(["lint", "torchrun_env.py", "--", "--lr", "1"], cwd=tmp_path).status == 0


def test_the_inventory_gives_the_plan(tmp_path: Path) -> None:
    """Two hosts of four GPUs: localhost fails, and world_size=8 is right."""
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(INVENTORY)
    copy("wrong/master_tcp.py", tmp_path)
    copy("wrong/world_size_literal.py", tmp_path)
    done = run_cli(["lint", "-i", inventory, "master_tcp.py"], cwd=tmp_path)
    assert done.status == 1 and "fail lint.master-localhost" in done.stdout
    assert "judged for 2 nodes x 4 ranks" in done.stdout
    done = run_cli(["lint", "-i", inventory, "world_size_literal.py"], cwd=tmp_path)
    assert done.status == 0 and "lint.world-size" not in done.stdout
    done = run_cli(["lint", "--nodes", "1", "master_tcp.py"], cwd=tmp_path)
    assert done.status == 0 and "lint.master-localhost" not in done.stdout


@pytest.mark.parametrize("argv", [["nothere.py"], ["."], []], ids=["missing", "folder", "none"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    done = run_cli(["lint", *argv], cwd=tmp_path)
    assert done.status == 2 and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_syntax_error_in_an_imported_module_is_a_finding(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import helpers\nhelpers.build()\n")
    (tmp_path / "helpers.py").write_text("def build(:\n    pass\n")
    done = run_cli(["lint", "train.py"], cwd=tmp_path)
    assert done.status == 1
    assert "helpers.py:1: fail lint.unreadable: cannot be read as Python: syntax error" in (
        done.stdout
    )


@pytest.mark.parametrize(
    "text",
    [b"x = 1\0\n", b"x = " + b"(" * 300 + b"1" + b")" * 300 + b"\n", b"x = -" * 1 + b"-" * 200000],
    ids=["null-byte", "deep-parentheses", "deep-unary"],
)
def test_an_unparsable_file_is_a_finding_never_a_traceback(tmp_path: Path, text: bytes) -> None:
    (tmp_path / "train.py").write_bytes(text)
    done = run_cli(["lint", "train.py"], cwd=tmp_path)
    assert done.status == 1 and "lint.unreadable" in done.stdout, done.stderr


def test_a_deep_but_valid_file_is_linted_without_exhausting_the_stack(tmp_path: Path) -> None:
    """Long attribute and operator chains parse (no parentheses) yet are thousands deep; and
    names bound to each other in a loop are followed a few steps, not forever."""
    chain = "x = a" + ".b" * 1500 + "()\ny = 1" + " + a.b" * 300 + "\n"
    loop = "a = b\nb = a\ndist.init_process_group('nccl', world_size=a)\n"
    try:
        ast.parse(chain)
    except (RecursionError, SyntaxError, MemoryError):
        pytest.skip("this interpreter's parser refuses the chain itself")
    (tmp_path / "train.py").write_text(f"import torch.distributed as dist\n{chain}{loop}")
    result = lint_script("train.py", tmp_path, Context(nodes=2, nproc_per_node=1))
    assert [f.rule for f in result.findings] == ["lint.no-destroy-process-group"]


def test_nothing_outside_the_scripts_tree_is_read(tmp_path: Path) -> None:
    """A link out of the tree, `from .. import`, and a module beside the tree are not read:
    their mistakes (a DataParallel each) never show."""
    outside, tree = tmp_path / "outside", tmp_path / "job"
    outside.mkdir()
    (tree / "pkg").mkdir(parents=True)
    (outside / "secret.py").write_text("import torch\ntorch.nn.DataParallel(m)\n")
    (tmp_path / "beside.py").write_text("import torch\ntorch.nn.DataParallel(m)\n")
    (tree / "linked.py").symlink_to(outside / "secret.py")
    (tree / "pkg" / "__init__.py").write_text("from .. import beside\nfrom ... import x\n")
    (tree / "train.py").write_text("import linked\nimport pkg\nimport beside\nimport outside\n")
    result = lint_script(str(tree / "train.py"), tmp_path, Context())
    assert result.findings == ()
    assert result.files == (str(tree / "train.py"), str(tree / "pkg" / "__init__.py"))


def test_a_fifo_named_like_a_module_is_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "stuck.py")
    (tmp_path / "train.py").write_text("import stuck\n")
    done: dict[str, object] = {}
    worker = threading.Thread(
        target=lambda: done.update(result=lint_script("train.py", tmp_path, Context())),
        daemon=True,
    )
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "lint blocked on a FIFO"
    assert done["result"].files == ("train.py",)  # type: ignore[attr-defined]


def test_a_file_over_the_size_bound_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import big\n")
    with (tmp_path / "big.py").open("wb") as big:
        big.truncate(MAX_FILE_BYTES + 1)
    result = lint_script("train.py", tmp_path, Context())
    assert [(f.rule, f.path) for f in result.findings] == [("lint.limit", "big.py")]
    assert result.findings[0].message == "not linted: larger than 4 MiB"


def test_the_file_count_is_bounded(tmp_path: Path) -> None:
    count = MAX_FILES + 5
    for n in range(count):
        (tmp_path / f"m{n}.py").write_text(f"import m{n + 1}\n")
    result = lint_script("m0.py", tmp_path, Context())
    assert len(result.files) == MAX_FILES
    assert [f.rule for f in result.findings] == ["lint.limit"]


def test_printed_text_from_the_tree_is_escaped(tmp_path: Path) -> None:
    name = "evil\nverdict: PASS\x1b[2J.py"
    (tmp_path / name).write_text("import torch\ntorch.nn.DataParallel(m)\n")
    done = run_cli(["lint", name], cwd=tmp_path)
    assert "\nverdict: PASS" not in done.stdout and "\x1b" not in done.stdout
    assert "evil\\nverdict: PASS\\x1b[2J.py:2: warn lint.data-parallel" in done.stdout


# --- launch --lint --------------------------------------------------------------------------


def launch(tmp_path: Path, *flags: str, script: str = "ddp_tutorial.py") -> tuple[int, str, str]:
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    copy(f"wrong/{script}", tmp_path)
    argv = [
        "launch",
        tmp_path / "inv.yaml",
        "--no-check",
        "--print",
        *flags,
        "--",
        script,
        "--epochs",
        "3",
    ]
    done = run_cli(argv, cwd=tmp_path)
    return done.status, done.stdout, done.stderr


def test_launch_prints_the_findings_and_goes_ahead(tmp_path: Path) -> None:
    status, out, err = launch(tmp_path)
    assert status == 0, err
    assert "clusterkit: lint: ddp_tutorial.py:15: fail lint.master-localhost" in err
    assert "clusterkit: lint:   fix: " in err
    assert "3 findings in ddp_tutorial.py (judged for 2 nodes x 4 ranks): going ahead" in err
    assert out.count("torchrun") >= 2  # the plan was printed


def test_launch_lint_strict_refuses_and_starts_nothing(tmp_path: Path) -> None:
    status, out, err = launch(tmp_path, "--lint", "strict")
    assert status == 1
    assert "nothing was started (--lint strict)" in err and "torchrun" not in out


def test_launch_lint_strict_goes_ahead_on_warnings_unless_strict(tmp_path: Path) -> None:
    status, _, err = launch(tmp_path, "--lint", "strict", script="no_set_epoch.py")
    assert status == 0 and "lint.sampler-no-set-epoch" in err
    status, out, _ = launch(tmp_path, "--lint", "strict", "--strict", script="no_set_epoch.py")
    assert status == 1 and "torchrun" not in out


def test_launch_lint_off_skips_it(tmp_path: Path) -> None:
    status, _, err = launch(tmp_path, "--lint", "off")
    assert status == 0 and "lint" not in err


def test_launch_names_a_script_that_is_not_a_file_here(tmp_path: Path) -> None:
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    argv = ["launch", tmp_path / "inv.yaml", "--no-check", "--print", "--", "on_nodes.py"]
    done = run_cli(argv, cwd=tmp_path)
    assert done.status == 0 and "lint: on_nodes.py is not a file here: not linted" in done.stderr
