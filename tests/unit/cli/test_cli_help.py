"""--help shows working examples; the completion script completes what the parser knows."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import cli
from clusterkit.commands.completion import completion_script
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[3]


def example_argvs() -> list[list[str]]:
    """Every example of every command, as argv after `clusterkit` (comments and `eval`s out,
    `a && b` split)."""
    argvs = []
    every = [*cli.EXAMPLES.values(), *cli.IMAGE_EXAMPLES.values(), cli.PRICES_EXAMPLES]
    for lines in every:
        for line in lines:
            if line.startswith("eval "):
                continue
            command = line.split("  #", 1)[0].split(" | ", 1)[0]  # `... | source` too
            for part in command.split("&&"):
                words = shlex.split(part)
                assert words[0] == "clusterkit", line
                argvs.append(words[1:])
    return argvs


@pytest.mark.parametrize("argv", example_argvs(), ids=shlex.join)
def test_every_example_parses(argv: list[str]) -> None:
    args = cli.parse(argv)
    assert args.command == argv[0]


def test_every_command_ends_its_help_with_examples() -> None:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(commands) == set(cli.EXAMPLES)
    for name, command in commands.items():
        text = command.format_help()
        assert "\nexamples:\n" in text, name
        assert text.rstrip().endswith(cli.EXAMPLES[name][-1].rstrip()), name


def test_image_steps_have_descriptions() -> None:
    parser = cli.build_parser()
    image = next(a for a in parser._actions if a.dest == "command").choices["image"]
    steps = next(a for a in image._actions if a.dest == "image_command").choices
    for name, step in steps.items():
        assert step.description and len(step.description) > 40, name


@pytest.mark.parametrize(
    ("argv", "last_example"),
    [
        *[(["image", step], lines[-1]) for step, lines in cli.IMAGE_EXAMPLES.items()],
        (["cost", "prices"], cli.PRICES_EXAMPLES[-1]),
        (["cost", "prices", "update"], cli.PRICES_EXAMPLES[-1]),
    ],
    ids=" ".join,
)
def test_image_steps_and_cost_prices_end_their_help_with_examples(
    argv: list[str], last_example: str
) -> None:
    done = run_cli([*argv, "--help"])
    assert done.status == 0, done.stderr
    assert "\nexamples:\n" in done.stdout
    assert done.stdout.rstrip().endswith(last_example)


def test_bench_help_says_what_it_does() -> None:
    done = run_cli(["bench", "--help"])
    text = " ".join(done.stdout.split())
    assert "Run all_reduce (and all_gather, reduce_scatter, alltoall with --collective)" in text
    assert "across every node" in text and "--min-busbw" in text and "--per-node" in text


def test_provision_help_points_to_where_the_tags_are() -> None:
    done = run_cli(["provision", "--help"])
    assert "playbooks/README.md" in " ".join(done.stdout.split())
    tags = (REPO / "playbooks" / "README.md").read_text()
    assert "--tags" in tags and "firewall" in tags


@pytest.mark.parametrize(
    ("argv", "dest", "value", "new"),
    [
        (["provision", "inv.yaml", "--check"], "dry_run", True, "--dry-run"),
        (["image", "lock", "--check"], "fail_if_stale", True, "--fail-if-stale"),
        (["image", "render", "--check"], "fail_if_stale", True, "--fail-if-stale"),
        (["bench", "--check", "0"], "validate", 0, "--validate"),
    ],
)
def test_old_check_spellings_still_work_and_say_what_replaces_them(
    argv: list[str], dest: str, value: object, new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert getattr(cli.parse(argv), dest) == value
    assert f"--check is deprecated; use {new}" in capsys.readouterr().err
    program = argv[0] if argv[0] != "image" else " ".join(argv[:2])
    assert "--check " not in run_cli([*program.split(), "--help"]).stdout
    assert (
        getattr(cli.parse([*argv[:-1], new] if value is True else [argv[0], new, "0"]), dest)
        == value
    )


def test_new_spellings_are_the_ones_help_shows() -> None:
    assert cli.parse(["provision", "inv.yaml", "--dry-run"]).dry_run is True
    assert cli.parse(["bench", "-c", "0"]).validate == 0
    assert cli.parse(["bench"]).validate == 1
    assert cli.parse(["image", "render"]).fail_if_stale is False


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["im"], ["image"]),
        (["image", "b"], ["build"]),
        (["image", "build", "--no"], ["--no-cache"]),
        (["check", "inventory.yaml", "--sk"], ["--skip"]),
        (["-v", "co"], ["completion", "cost"]),
        (["completion", "z"], ["zsh"]),
        (["cost", "pr"], ["prices"]),
        (["cost", "prices", "u"], ["update"]),
        (["cost", "prices", "update", "--prov"], ["--provider"]),
        (["cost", "prices", "update", "--provider", ""], ["aws", "azure"]),
        (["check", "--format", ""], ["html", "json", "junit", "prometheus", "text"]),
        (["check", "inventory.yaml", "--format", "j"], ["json", "junit"]),
        (["image", "lock", "--"], ["--fail-if-stale", "--help", "--offline", "--verbose"]),
        (["provision", "inv.yaml", "--d"], ["--diff", "--dry-run"]),
        (["check", "--skip", ""], ["bench", "dcgm", "image", "network"]),
        (["launch", "inv.yaml", "--skip", "n"], ["network"]),
        (["bench", "--collective", "all_"], ["all_gather", "all_reduce"]),
        (["provision", "inv.yaml", "--tags", "fi"], ["firewall"]),
        (["provision", "inv.yaml", "--skip-tags", "con"], ["container-toolkit"]),
        (["cost", "--instance", "p5."], ["p5.48xlarge"]),
        (["cost", "--region", "us-east-"], ["us-east-1", "us-east-2"]),
    ],
)
def test_bash_completion(words: list[str], expected: list[str]) -> None:
    program = completion_script("bash") + (
        f"COMP_WORDS=(clusterkit {shlex.join(words)}); COMP_CWORD={len(words)}\n"
        '_clusterkit; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("clusterkit ch", ["check"]),
        ("clusterkit image b", ["build"]),
        ("clusterkit check --sk", ["--skip"]),
        ("clusterkit check --skip ", ["bench", "dcgm", "image", "network"]),
        ("clusterkit provision inv.yaml --tags fire", ["firewall"]),
        ("clusterkit cost --instance p5.", ["p5.48xlarge"]),
        ("clusterkit completion f", ["fish"]),
    ],
)
def test_fish_completion(line: str, expected: list[str], tmp_path: Path) -> None:
    fish = shutil.which("fish")
    if fish is None:
        pytest.skip("fish is not installed")
    program = completion_script("fish") + f"complete --do-complete {shlex.quote(line)}\n"
    done = subprocess.run(
        [fish, "--no-config", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,  # no files to offer beside the words
    )
    assert done.returncode == 0, done.stderr
    assert sorted(row.split("\t")[0] for row in done.stdout.splitlines()) == expected


def test_zsh_script_loads_bashcompinit() -> None:
    text = completion_script("zsh")
    assert "'cost prices'" in text
    assert "bashcompinit" in text and "complete -o filenames -F _clusterkit clusterkit" in text


@pytest.mark.parametrize("command", ["check", "launch"])
def test_skip_accumulates_for_the_check_and_the_launch_gate(command: str) -> None:
    args = cli.parse([command, "--skip", "network", "--skip", "bench,image"])
    assert args.skip == frozenset({"network", "bench", "image"})


def test_limit_completes_the_inventorys_hosts_and_only_plain_names(tmp_path: Path) -> None:
    """`--limit` offers the hosts of the inventory named on the line; a name the shell would
    expand never reaches it (compgen -W expands what it is given)."""
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  hosts:\n    node1:\n    node2:\n    gpu07:\n")
    clusterkit = Path(sys.executable).parent / "clusterkit"  # the script the shell calls back
    if not clusterkit.exists():
        pytest.skip("no installed clusterkit script to call back")
    words = ["launch", "-i", str(inventory), "--skip", "bench", "--limit", "no"]
    script = completion_script("bash") + (
        f"COMP_WORDS=({shlex.quote(str(clusterkit))} {shlex.join(words)}); "
        f"COMP_CWORD={len(words)}\n"
        '_clusterkit; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["node1", "node2"]
    listed = run_cli(["completion", "--hosts", str(inventory)])
    assert (listed.status, listed.stdout.split()) == (0, ["node1", "node2", "gpu07"])
    missing = run_cli(["completion", "--hosts", str(tmp_path / "none.yaml")])
    assert (missing.status, missing.stdout) == (0, "")
