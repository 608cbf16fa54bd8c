"""docs/security.md names the test behind every claim: each one named must exist.

A claim whose test was renamed or removed would otherwise stand in the threat model with
nothing behind it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "security.md"
# `tests/x/test_y.py::test_z`, and `::test_w` after it (the same file as the last one named).
REFERENCE = re.compile(r"(tests/[\w/]+\.py)?::(test_\w+)")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


def references() -> list[tuple[str, str]]:
    found, current = [], None
    for match in REFERENCE.finditer(DOC.read_text()):
        current = match[1] or current
        assert current, f"::{match[2]} names no file before it"
        found.append((current, match[2]))
    return found


def test_every_test_the_security_page_names_exists() -> None:
    named = references()
    assert len(named) >= 40  # the page backs its claims; a page that names none fails here
    missing = []
    for file, test in named:
        path = ROOT / file
        if not path.is_file() or test not in _test_names(path):
            missing.append(f"{file}::{test}")
    assert missing == []


def test_every_test_file_the_page_names_exists() -> None:
    text = DOC.read_text()
    files = set(re.findall(r"`(tests/[\w/]+\.py)`", text))
    assert files, "the page names its test files"
    assert sorted(f for f in files if not (ROOT / f).is_file()) == []
