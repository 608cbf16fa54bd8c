"""No function in clusterkit/ is longer than MAX_LINES: a longer one is split into named
steps. The exceptions are named here, each to be removed once its function is split."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "clusterkit"
MAX_LINES = 100
# file (relative to the repository) -> functions still over the limit, by qualified name
TEMPORARY: dict[str, set[str]] = {}


def function_lengths(source: str) -> Iterator[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function and method in
    `source`, nested ones too; a function's lines run from its first decorator to its end."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = child.end_lineno or child.lineno
                yield name, first, end - first + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def too_long() -> dict[str, dict[str, str]]:
    """file -> {function: "line N: M lines"} for every function over MAX_LINES."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        for name, line, length in function_lengths(path.read_text(encoding="utf-8")):
            if length > MAX_LINES:
                found.setdefault(relative, {})[name] = f"line {line}: {length} lines"
    return found


def test_no_function_is_over_the_limit() -> None:
    new = {
        path: {
            name: where for name, where in functions.items() if name not in TEMPORARY.get(path, ())
        }
        for path, functions in too_long().items()
    }
    new = {path: functions for path, functions in new.items() if functions}
    assert not new, f"split these into named steps (at most {MAX_LINES} lines each): {new}"


def test_every_exception_is_still_needed() -> None:
    """An exception whose function got short is removed, so the list only shrinks."""
    over = too_long()
    stale = {
        path: sorted(names - set(over.get(path, {})))
        for path, names in TEMPORARY.items()
        if names - set(over.get(path, {}))
    }
    assert not stale, f"these are no longer over {MAX_LINES} lines: drop them from TEMPORARY"


def test_the_measure_counts_decorators_nested_functions_and_methods() -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_LINES - 2))
    source = (
        "import functools\n"
        "@functools.cache\n"
        f"def long():\n{body}\n"
        "    def inner():\n        return 1\n"
        "class Shape:\n    def area(self):\n        return 0\n"
    )
    lengths = {name: length for name, _, length in function_lengths(source)}
    assert lengths == {"long": MAX_LINES + 2, "long.inner": 2, "Shape.area": 2}
