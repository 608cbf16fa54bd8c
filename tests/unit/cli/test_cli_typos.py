"""What a user who mistypes gets: no prefix matching, a "did you mean", the job's place after
`--`, and `launch -q` as `check -q` (issue 37, item 13)."""

from __future__ import annotations

import pytest

from clusterkit import cli
from clusterkit.errors import UsageError
from tests.support.cli import run_cli


def one_line_error(argv: list[str]) -> str:
    done = run_cli(argv)
    lines = done.stderr.strip().splitlines()
    assert done.status == 2 and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["launch", "inv.yaml", "--nnode", "3", "--", "train.py"], "--nnodes"),
        (["check", "--skp", "bench"], "--skip"),
        (["check", "--fix"], "--fix-plan"),
        (["image", "lock", "--ofline"], "--offline"),
        (["cost", "--instnce", "p5.48xlarge"], "--instance"),
        (["cost", "prices", "update", "--provder", "aws"], "--provider"),
    ],
)
def test_a_mistyped_flag_is_refused_with_the_flag_meant(argv: list[str], meant: str) -> None:
    line = one_line_error(argv)
    assert "unrecognized arguments" in line and f"did you mean `{meant}`?" in line, line


@pytest.mark.parametrize(
    "argv",
    [
        ["launch", "--nnode", "3", "--", "train.py"],  # argparse would read --nnodes 3
        ["check", "--only", "--skip", "bench"],  # ... --only-problems
        ["bench", "--min-bus", "10"],  # ... --min-busbw
    ],
)
def test_a_prefix_of_a_flag_is_not_that_flag(argv: list[str]) -> None:
    with pytest.raises(UsageError, match="unrecognized arguments"):
        cli.parse(argv)


def test_a_hidden_old_spelling_is_never_suggested() -> None:
    # `--check` is provision's deprecated spelling of --dry-run: not shown, not offered.
    line = one_line_error(["provision", "inv.yaml", "--chec"])
    assert "--check" not in line.replace("--chec ", "")


def test_launch_without_the_separator_says_where_the_job_goes() -> None:
    line = one_line_error(["launch", "train.py"])
    assert "train.py was read as the inventory" in line
    assert "the job goes after --: clusterkit launch [INVENTORY] -- train.py" in line
    line = one_line_error(["launch", "inv.yaml", "train.py", "--epochs", "3"])
    assert "the job goes after --: clusterkit launch [INVENTORY] -- train.py" in line


def test_launch_q_is_only_problems_as_for_check() -> None:
    assert cli.parse(["launch", "-q", "--", "train.py"]).only_problems is True
    assert cli.parse(["check", "-q"]).only_problems is True
