"""Each command turns its parsed command line into one typed request (clusterkit/cli/<command>.py),
and `cost prices` is a step of `cost` in the one parser tree."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from clusterkit import cli
from clusterkit.cli import check, image, launch, main
from clusterkit.errors import UsageError

PACKAGE = Path(__file__).resolve().parents[3] / "clusterkit"


def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_no_module_reads_a_flag_with_getattr() -> None:
    """A flag read as getattr(args, "name", default) hides a renamed or missing flag behind
    its default; the requests read each attribute, so a missing one fails at once."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bgetattr\(\s*args\b", line)
    ]
    assert not found, f"read the flag from the typed request instead: {found}"


def test_every_command_has_a_typed_request() -> None:
    commands = set(_commands())
    assert set(main.REQUESTS) == commands


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["bench"],
        ["launch", "--", "train.py"],
        ["cost"],
        ["cost", "prices", "update"],
        ["node-check"],
        *(["image", step, "spec"] for step in ("lock", "render", "build", "push", "verify")),
        ["image"],
        ["provision", "inventory.yaml"],
        ["lint", "train.py"],
        ["completion", "bash"],
    ],
)
def test_the_shortest_command_line_makes_a_frozen_request(argv: list[str]) -> None:
    """Every attribute a request reads exists on every command line its command accepts: an
    image step lacking another step's flag gets that flag's default."""
    args = cli.parse(argv)
    made = main.REQUESTS[args.command](args)
    assert dataclasses.is_dataclass(made)
    field = dataclasses.fields(made)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, field, None)


def test_check_request_carries_every_flag() -> None:
    args = cli.parse(
        ["check", "inv.yaml", "-i", "more.ini", "--python", "python3.11", "--dcgm-level", "2",
         "--skip", "bench", "--mesh", "full", "--forks", "3", "--limit", "n1", "--format",
         "json", "-o", "out.json", "-q", "--fix-plan", "--strict"]
    )  # fmt: skip
    made = check.request(args)
    assert made.target.sources == ("inv.yaml", "more.ini")
    assert (made.target.python, made.target.limit) == ("python3.11", "n1")
    assert (made.run.dcgm_level, made.run.mesh, made.run.skip) == (2, "full", {"bench"})
    assert (made.run.connection.forks, made.run.strict) == (3, True)
    assert (made.report.format, made.report.output, made.report.only_problems) == (
        "json",
        "out.json",
        True,
    )
    assert made.fix_plan is True


def test_an_image_step_without_a_flag_gets_its_default() -> None:
    made = image.request(cli.parse(["image", "lock", "--offline"]))
    assert (made.step, made.offline, made.tags, made.network) == ("lock", True, (), "host")
    made = image.request(cli.parse(["image", "build", "spec", "--tag", "a", "--tag", "b"]))
    assert (made.step, made.specs, made.tags, made.offline) == (
        "build",
        ("spec",),
        ("a", "b"),
        False,
    )


def test_cost_prices_is_a_step_of_cost() -> None:
    """One parser tree: `cost prices update` is cost's step, so completion, help and "did you
    mean" walk it like any other; `cost`'s own positional still takes any other word."""
    cost = _commands()["cost"]
    (steps,) = (a for a in cost._actions if isinstance(a, argparse._SubParsersAction))
    assert list(steps.choices) == ["prices"]
    updated = cli.parse(["cost", "prices", "update", "--provider", "aws", "-o", "p.json"])
    assert updated.handler == "clusterkit.commands.cost_prices:run"
    assert (updated.provider, updated.output) == (["aws"], "p.json")
    plain = cli.parse(["cost", "inventory.yaml", "--nodes", "4"])
    assert (plain.handler, plain.inventory, plain.nodes) == (
        "clusterkit.commands.cost:run",
        "inventory.yaml",
        4,
    )
    assert cli.parse(["cost", "--nodes", "2", "prices"]).inventory == "prices"  # a positional
    with pytest.raises(UsageError, match="cost prices: give a step"):
        cli.parse(["cost", "prices"])
    with pytest.raises(UsageError, match="unrecognized arguments: --nodes") as raised:
        cli.parse(["cost", "prices", "update", "--nodes", "3"])
    assert "cost prices update --help" in str(raised.value.hint)


def test_launch_lint_and_entry_check_read_launchs_flags() -> None:
    """The script's lint and pre-flight take their own small requests of launch's flags."""
    args = cli.parse(
        ["launch", "inv.yaml", "--lint", "strict", "--strict", "--workdir", "/w", "--forks", "2",
         "--", "train.py", "--epochs", "3"]
    )  # fmt: skip
    job = ("train.py", "--epochs", "3")
    assert launch.launch_lint(args) == launch.LaunchLint(job, mode="strict", strict=True)
    assert launch.entry_check(args) == launch.EntryCheck(job, workdir="/w", forks=2)
