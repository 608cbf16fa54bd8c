"""Every node-side parser over its recorded cases, one test for all: a case is a file
tests/fixtures/parsers/MODULE.FUNCTION/CASE.json holding what the tool printed (or the
files it read), where that came from, and the section the parser must make of it (or the
error it must raise). A new recording is a new file, no new test code.

A case holds `source` (where the recording comes from) and one input:
  "output": the tool's text, or "output_file": a recording under tests/fixtures/ (which
      keeps its own source note in its folder's README), passed first, then "args";
  "files": a tree of files (path -> text, a path ending in "/" a folder) written under a
      temporary root, with "{root}" in "args" standing for that root;
and what it must give: "expected" (compared as JSON: tuples are lists), or "raises":
{"error": class name, "match": a regex}.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"
CASES = FIXTURES / "parsers"
CASE_FILES = sorted(CASES.glob("*/*.json"))
KEYS = {"source", "output", "output_file", "files", "args", "expected", "raises"}


def parser(folder: str) -> Any:
    """clusterkit.node.MODULE's FUNCTION, for the folder named MODULE.FUNCTION."""
    module, function = folder.rsplit(".", 1)
    return getattr(importlib.import_module(f"clusterkit.node.{module}"), function)


def with_root(value: Any, root: str) -> Any:
    """`value` with every "{root}" in its strings replaced by `root`."""
    if isinstance(value, str):
        return value.replace("{root}", root)
    if isinstance(value, list):
        return [with_root(item, root) for item in value]
    if isinstance(value, dict):
        return {key: with_root(item, root) for key, item in value.items()}
    return value


def arguments(case: dict[str, Any], root: Path) -> list[Any]:
    """The parser's arguments: the recorded output first, or the files written under root."""
    args = with_root(case.get("args", []), str(root))
    if "output_file" in case:
        return [(FIXTURES / case["output_file"]).read_text(), *args]
    if "output" in case:
        return [case["output"], *args]
    for name, text in case["files"].items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return args


def test_there_are_cases_and_each_is_well_formed() -> None:
    """A misspelled key would make a case check nothing: every case has a source, exactly
    one input and exactly one outcome, and names a parser that exists."""
    assert len(CASE_FILES) >= 30
    for path in CASE_FILES:
        case = json.loads(path.read_text())
        assert set(case) <= KEYS, (path, set(case) - KEYS)
        assert case.get("source"), path
        assert len({"output", "output_file", "files"} & set(case)) == 1, path
        assert len({"expected", "raises"} & set(case)) == 1, path
        assert callable(parser(path.parent.name)), path


@pytest.mark.parametrize("path", CASE_FILES, ids=[f"{p.parent.name}/{p.stem}" for p in CASE_FILES])
def test_parser_case(path: Path, tmp_path: Path) -> None:
    case = json.loads(path.read_text())
    function = parser(path.parent.name)
    args = arguments(case, tmp_path)
    if "raises" in case:
        with pytest.raises(Exception, match=case["raises"]["match"]) as raised:
            function(*args)
        assert type(raised.value).__name__ == case["raises"]["error"]
        return
    assert json.loads(json.dumps(function(*args))) == case["expected"]


def test_a_case_that_does_not_hold_fails(tmp_path: Path) -> None:
    """The runner has teeth: a wrong expected section, or an error that is not raised."""
    case = json.loads((CASES / "probe_gpu.parse_banner" / "driver-535.json").read_text())
    function = parser("probe_gpu.parse_banner")
    assert function(*arguments(case, tmp_path)) != dict(case["expected"], cuda="12.3")
    with pytest.raises(pytest.fail.Exception), pytest.raises(Exception, match="x"):
        function(*arguments(case, tmp_path))
