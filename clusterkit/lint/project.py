"""The script and the local modules it imports: read, bounded and parsed, never run.

Only files inside the entry script's folder tree are read (after links are resolved), only
regular files, at most MAX_FILES of at most MAX_FILE_BYTES each: a script's imports may name
anything, and the user's own tree may hold a FIFO, a link out or a huge generated file. A file
that cannot be read or parsed is a finding (`lint.unreadable`), never a traceback.
"""

from __future__ import annotations

import ast
import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from clusterkit.lint.model import Context, LintFinding, Severity
from clusterkit.lint.rules import judge
from clusterkit.lint.scan import Source, scan_source

MAX_FILES = 500
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024


class LintInputError(Exception):
    """The entry script is not a file that can be linted (bad input: exit 2)."""


@dataclass(frozen=True)
class _File:
    path: Path  # resolved, inside root
    module: str  # dotted name below root ("__main__" for the entry script)
    package: bool  # an __init__.py


@dataclass(frozen=True)
class LintResult:
    files: tuple[str, ...]  # the files read, as shown
    findings: tuple[LintFinding, ...]


def lint_script(script: str, cwd: Path, context: Context) -> LintResult:
    """Every finding of the script at `script` (as the user wrote it, relative to `cwd`) and
    of the local modules it imports, sorted by file and line."""
    entry = (cwd / script).resolve()
    if not entry.is_file():
        what = "no such file" if not entry.exists() else "not a regular file"
        raise LintInputError(f"{script}: {what}")
    root = entry.parent
    shown_root = os.path.dirname(script)
    sources, problems = _load(_File(entry, "__main__", False), root, shown_root)
    findings = sorted(
        problems + judge(sources, context),
        key=lambda f: (f.path != script, f.path, f.line, f.rule),
    )
    return LintResult(tuple(s.shown for s in sources), tuple(findings))


def _shown(root: Path, shown_root: str, path: Path) -> str:
    return os.path.join(shown_root, path.relative_to(root).as_posix())


def _load(entry: _File, root: Path, shown_root: str) -> tuple[list[Source], list[LintFinding]]:
    """Breadth first from the entry script over its local imports, within the bounds."""
    queue, seen = deque([entry]), {entry.path}
    sources: list[Source] = []
    problems: list[LintFinding] = []
    total = 0
    while queue:
        file = queue.popleft()
        shown = _shown(root, shown_root, file.path)
        if len(sources) >= MAX_FILES or total > MAX_TOTAL_BYTES:
            problems.append(
                _limit(shown, f"more than {MAX_FILES} files or {_mib(MAX_TOTAL_BYTES)}")
            )
            break
        data = _read(file.path)
        if isinstance(data, _Oversize):  # a generated module, maybe: not read, not wrong
            problems.append(_limit(shown, data))
            continue
        if isinstance(data, str):
            problems.append(_unreadable(shown, 1, data))
            continue
        total += len(data)
        tree = _parse(data, shown)
        if isinstance(tree, LintFinding):
            problems.append(tree)
            continue
        source = scan_source(tree, shown)
        sources.append(source)
        for found in _local_imports(source.import_nodes, file, root):
            if found.path not in seen:
                seen.add(found.path)
                queue.append(found)
    return sources, problems


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"


class _Oversize(str):
    """Why a file was not read: it is larger than MAX_FILE_BYTES."""


def _read(path: Path) -> bytes | str:
    """The file's bytes, or why not: never blocks on a FIFO, never reads past the bound."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        return error.strerror or str(error)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > MAX_FILE_BYTES:
            return _Oversize(f"larger than {_mib(MAX_FILE_BYTES)}")
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return _Oversize(f"larger than {_mib(MAX_FILE_BYTES)}")
        return data
    except OSError as error:
        return error.strerror or str(error)
    finally:
        os.close(fd)


def _parse(data: bytes, shown: str) -> ast.Module | LintFinding:
    try:
        return ast.parse(data, filename=shown)
    except SyntaxError as error:
        return _unreadable(shown, error.lineno or 1, f"syntax error: {error.msg}")
    except (ValueError, RecursionError, MemoryError) as error:  # null bytes, deep nesting
        return _unreadable(shown, 1, f"cannot be parsed: {type(error).__name__}")


def _unreadable(shown: str, line: int, why: str) -> LintFinding:
    return LintFinding(
        "lint.unreadable",
        Severity.FAIL,
        shown,
        line,
        f"cannot be read as Python: {why}",
        "fix the file so `python -m py_compile` accepts it",
    )


def _limit(shown: str, why: str) -> LintFinding:
    return LintFinding(
        "lint.limit",
        Severity.WARN,
        shown,
        1,
        f"not linted: {why}",
        "lint the part that runs on the cluster: its entry script and the modules it imports",
    )


def _local_imports(
    nodes: list[ast.Import | ast.ImportFrom], file: _File, root: Path
) -> Iterator[_File]:
    """The files of `root` that a file's imports (anywhere in it) would load."""
    here = file.module.split(".") if file.module != "__main__" else []
    package = here if file.package else here[:-1]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _candidates(alias.name.split("."), root)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if file.module == "__main__" or node.level - 1 > len(package):
                    continue
                base = package[: len(package) - (node.level - 1)]
            else:
                base = []
            parts = base + (node.module.split(".") if node.module else [])
            yield from _candidates(parts, root)
            for alias in node.names:
                if alias.name != "*":
                    yield from _candidates([*parts, alias.name], root, last_only=True)


def _candidates(parts: list[str], root: Path, *, last_only: bool = False) -> Iterator[_File]:
    """The package __init__ files and the module a dotted name loads, where they are files
    inside `root` (a link out of it is not followed)."""
    if not parts or not all(part.isidentifier() for part in parts):
        return
    start = len(parts) if last_only else 1
    for end in range(start, len(parts) + 1):
        base = root.joinpath(*parts[:end])
        for path, package in ((base / "__init__.py", True), (base.with_suffix(".py"), False)):
            if not path.is_file():  # a stat: most names are installed packages, not files
                continue
            resolved = path.resolve()
            if resolved.is_relative_to(root) and resolved.is_file():
                yield _File(resolved, ".".join(parts[:end]), package)
                break
