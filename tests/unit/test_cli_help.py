"""--help shows working examples; the completion script completes what the parser knows."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from clusterkit import cli
from clusterkit.completion import script


def example_argvs() -> list[list[str]]:
    """Every example of every command, as argv after `clusterkit` (comments and `eval`s out,
    `a && b` split)."""
    argvs = []
    for lines in cli.EXAMPLES.values():
        for line in lines:
            if line.startswith("eval "):
                continue
            command = line.split("  #", 1)[0]
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
    ],
)
def test_bash_completion(words: list[str], expected: list[str]) -> None:
    program = script(cli.build_parser(), "bash") + (
        f"COMP_WORDS=(clusterkit {shlex.join(words)}); COMP_CWORD={len(words)}\n"
        '_clusterkit; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == expected


def test_zsh_script_loads_bashcompinit() -> None:
    text = script(cli.build_parser(), "zsh")
    assert "bashcompinit" in text and "complete -o filenames -F _clusterkit clusterkit" in text


@pytest.mark.parametrize("command", ["check", "launch"])
def test_skip_accumulates_for_the_check_and_the_launch_gate(command: str) -> None:
    args = cli.parse([command, "--skip", "network", "--skip", "bench,image"])
    assert args.skip == frozenset({"network", "bench", "image"})
