"""Docs that run: every `clusterkit ...` command in README.md and docs/*.md is run as written
(here, or against the test cluster in tests/cluster/test_doc_commands_cluster.py) or listed
with the reason it cannot be (tests/support/doc_commands.py, USES). A command the docs gain
unlisted fails here, and so does a listed one they no longer show, so the list cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit import cli
from clusterkit.errors import UsageError
from tests.support.cli import cli_environment, run_cli
from tests.support.doc_commands import (
    SYNOPSIS,
    USES,
    Here,
    commands_of_line,
    doc_commands,
    doc_folder,
    shell_lines,
)

DOCUMENTED = doc_commands()
HERE = [command for command, use in USES.items() if isinstance(use, Here)]


def test_every_documented_command_is_run_or_listed() -> None:
    unlisted = {command: DOCUMENTED[command] for command in DOCUMENTED.keys() - USES.keys()}
    assert not unlisted, f"add to USES in tests/support/doc_commands.py: {unlisted}"


def test_every_listed_command_is_still_documented() -> None:
    gone = sorted(USES.keys() - DOCUMENTED.keys())
    assert not gone, f"no doc shows these any more: take them out of USES: {gone}"


def test_the_docs_show_commands_of_every_kind() -> None:
    """The reader finds what a user pastes: a guard against an extractor that finds nothing."""
    assert len(DOCUMENTED) >= 40
    pages = {command: [where.split(":")[0] for where in at] for command, at in DOCUMENTED.items()}
    assert pages["check inventory.yaml"] == ["README.md", "docs/inventory.md"]
    assert pages["cost inventory.yaml --format json -o cost.json"] == ["docs/cost.md"]
    assert pages["check"] == ["README.md"]  # `... && .venv/bin/clusterkit check` in the set-up


@pytest.mark.parametrize(
    "command", sorted(USES.keys() - {k for k, v in USES.items() if v == SYNOPSIS})
)
def test_every_documented_command_parses(command: str) -> None:
    """A documented command the parser refuses (exit 2: a renamed flag, a literal `...`) is
    a doc bug, whether or not it can run here."""
    try:
        cli.parse(command.split(" "), cli_environment())
    except (UsageError, SystemExit) as refused:
        pytest.fail(f"clusterkit {command}: refused by the parser: {refused}")


@pytest.mark.parametrize("command", HERE)
def test_documented_command_runs_here(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as written, relative paths and all: from the folder a user would be in."""
    use = USES[command]
    assert isinstance(use, Here)
    monkeypatch.chdir(doc_folder(tmp_path))
    done = run_cli(command.split(" "))
    assert done.status == use.status, f"clusterkit {command}: {done.stdout[-3000:]}{done.stderr}"
    assert "Traceback" not in done.stderr
    if "-o" in command.split(" "):
        written = tmp_path / command.split(" ")[command.split(" ").index("-o") + 1]
        assert json.loads(written.read_text())  # the report it promised, complete
    if "--plot" in command:
        assert (tmp_path / "cost.png").read_bytes().startswith(b"\x89PNG")


DOC = """\
Prose with `clusterkit check inline.yaml` is not a block.

```sh
$ clusterkit check a.yaml --skip bench   # a comment, with 'quotes
clusterkit cost --nodes 4 \\
    --hours 72
python3 -m venv .venv && .venv/bin/clusterkit check; clusterkit lint x.py | less
sbatch job.sbatch   # not clusterkit
```

```
clusterkit: error: a.yaml:3: output, not a command
  remedy: clusterkit provision a.yaml --tags nvidia
clusterkit bench a.yaml -b 8M
```

```yaml
command: clusterkit check yaml.yaml
```

````md
```sh
clusterkit check nested.yaml
```
````
"""


def test_commands_are_read_as_a_shell_reads_them() -> None:
    lines = list(shell_lines(DOC))
    found = [" ".join(words) for _, line in lines for words in commands_of_line(line)]
    assert found == [
        "check a.yaml --skip bench",
        "cost --nodes 4 --hours 72",
        "check",
        "lint x.py",
        "bench a.yaml -b 8M",
    ]
    assert [number for number, line in lines if "--hours" in line] == [5]  # where it starts


def test_a_doc_that_gains_a_command_fails_until_it_is_listed(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("```sh\nclusterkit check inventory.yaml\n```\n")
    (tmp_path / "docs" / "new.md").write_text("```\nclusterkit check --new-flag\n```\n")
    found = doc_commands(tmp_path)
    assert found == {
        "check inventory.yaml": ["README.md:2"],
        "check --new-flag": ["docs/new.md:2"],
    }
    assert found.keys() - USES.keys() == {"check --new-flag"}


def test_a_usage_error_in_a_doc_is_caught_by_the_parse() -> None:
    """What test_every_documented_command_parses relies on: a flag's prefix or a flag of
    another command is refused, not taken."""
    for words in (["launch", "inventory.yaml", "--nnode", "4", "--", "train.py"],
                  ["cost", "inventory.yaml", "--skip", "bench"]):  # fmt: skip
        with pytest.raises(UsageError):
            cli.parse(words, cli_environment())
