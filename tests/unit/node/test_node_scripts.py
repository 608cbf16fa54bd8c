"""The programs clusterkit ships to nodes, all in clusterkit/node/: valid for the oldest
Python the nodes are promised (3.8, see the ruff per-file ignores), sharing one runtime
(node/prelude.py) whose markers are framing.py's, and composed into one stdlib-only text
each."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from clusterkit import framing
from clusterkit.transport.nodescript import (
    LIBRARIES,
    compose,
    library_source,
    node_script,
)

PACKAGE = Path(__file__).resolve().parents[3] / "clusterkit"
NODE = PACKAGE / "node"
NODE_PYTHON = (3, 8)
PRELUDE = "prelude.py"
# Programs that run on nodes with the prelude in place of their import of it.
COMPOSED = (
    "collector.py",
    "storage.py",
    "net.py",
    "image.py",
    "launch.py",
    "srun_relay.py",
    "entry.py",
)
# Programs that frame a result with markers of their own, and the names those go by: the
# bench worker, which torchrun starts (torch, not composed with the prelude).
OWN_MARKERS = {"bench_worker.py": ("FRAME_BEGIN", "FRAME_END")}
# Libraries: code programs share, inserted after the prelude into each program importing it.
LIBRARY_FILES = tuple(f"{name}.py" for name in LIBRARIES)
NODE_FILES = (*COMPOSED, PRELUDE, *LIBRARY_FILES, *OWN_MARKERS)


def constants(tree: ast.Module) -> dict[str, object]:
    """Module-level NAME = <literal> assignments."""
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def defined(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level: functions, classes, assignments."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def imported_modules(tree: ast.AST) -> set[str]:
    """Top-level package of every import anywhere in the tree."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


def prelude_imports(tree: ast.Module) -> list[str]:
    return [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "clusterkit.node.prelude"
        for alias in node.names
    ]


def as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def source(name: str) -> str:
    return (NODE / name).read_text()


def shipped(name: str) -> str:
    """What a node is sent for the program."""
    return node_script(name.removesuffix(".py"))


SCRIPTS = COMPOSED
PRELUDE_TREE = ast.parse(source(PRELUDE))


def test_every_node_program_is_named_here() -> None:
    """A new file in clusterkit/node/ is held to these tests, composed or with its own
    markers; nothing else there but the package's docstring."""
    files = {path.name for path in NODE.glob("*.py")} - {"__init__.py"}
    assert files == set(NODE_FILES)
    assert not [n for n in ast.parse(source("__init__.py")).body[1:]], "code in node/__init__"


def test_node_script_names_only_a_node_program() -> None:
    for name in ("prelude", "../probe/runner", "Collector", "collector.py", ""):
        with pytest.raises(ValueError, match="not a node program"):
            node_script(name)


@pytest.mark.parametrize("name", NODE_FILES)
def test_node_file_parses_as_python_3_8(name: str) -> None:
    ast.parse(source(name), filename=name, feature_version=NODE_PYTHON)


@pytest.mark.parametrize("name", SCRIPTS)
def test_shipped_script_is_one_stdlib_file_for_python_3_8(name: str) -> None:
    """The composed text parses as 3.8, holds the prelude once, and imports no clusterkit."""
    text = shipped(name)
    tree = ast.parse(text, filename=name, feature_version=NODE_PYTHON)
    assert text.count("\ndef run_tool(") == 1 and text.count("\nBEGIN = ") == 1
    modules = imported_modules(tree)
    assert modules <= sys.stdlib_module_names | {"__future__"}, modules - sys.stdlib_module_names


@pytest.mark.parametrize("name", SCRIPTS)
def test_node_script_uses_the_prelude_and_keeps_no_copy_of_it(name: str) -> None:
    """It imports from the prelude only what exists there, defines none of the prelude's
    names (they share one namespace once composed) and carries no markers of its own."""
    tree = ast.parse(source(name))
    runtime = defined(PRELUDE_TREE)
    wanted = prelude_imports(tree)
    assert wanted and set(wanted) <= runtime
    assert not defined(tree) & runtime, defined(tree) & runtime
    assert not {"which", "read", "kill", "parent_of", "interfaces"} & defined(tree)
    assert framing.BEGIN.strip().decode() not in source(name)


def test_prelude_markers_match_framing() -> None:
    values = constants(PRELUDE_TREE)
    assert values["BEGIN"] == framing.BEGIN and values["END"] == framing.END


def test_prelude_is_stdlib_only_and_insertable() -> None:
    """Inserted mid-file, it may hold no `from __future__` (those must come first)."""
    assert imported_modules(PRELUDE_TREE) <= sys.stdlib_module_names
    assert not [n for n in ast.walk(PRELUDE_TREE) if isinstance(n, ast.ImportFrom)]


@pytest.mark.parametrize(("name", "markers"), OWN_MARKERS.items())
def test_own_markers_match_framing(name: str, markers: tuple[str, str]) -> None:
    values = constants(ast.parse(source(name)))
    begin, end = (values[marker] for marker in markers)
    assert isinstance(begin, str | bytes) and isinstance(end, str | bytes)
    assert as_bytes(begin) == framing.BEGIN and as_bytes(end) == framing.END


def test_compose_wants_exactly_one_top_level_import() -> None:
    line = "from clusterkit.node.prelude import emit\n"
    with pytest.raises(ValueError, match="not 0"):
        compose("import os\n")
    with pytest.raises(ValueError, match="not 2"):
        compose(line + line)
    with pytest.raises(ValueError, match="not 0"):  # inside a function: not composed
        compose("def f():\n    " + line)
    multi = "import os\n" + line.replace("emit", "(\n    emit,\n    run_tool,\n)") + "x = 1\n"
    text = compose(multi)
    assert "from clusterkit" not in text and "emit,\n" not in text
    assert text.startswith("import os\n# --- ") and text.endswith("x = 1\n")
    ast.parse(text)


@pytest.mark.parametrize("name", LIBRARY_FILES)
def test_a_node_library_is_insertable_and_shares_no_name(name: str) -> None:
    """A library is stdlib only, has no `from __future__` but annotations (it lands
    mid-file: that line is dropped, the program starts with it), and defines none of the
    prelude's names nor any name of a program it is composed into: once composed, they
    share one namespace."""
    tree = ast.parse(source(name))
    assert imported_modules(tree) <= sys.stdlib_module_names | {"clusterkit"}
    futures = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    assert all([a.name for a in n.names] == ["annotations"] for n in futures)
    assert set(prelude_imports(tree)) <= defined(PRELUDE_TREE)
    assert not defined(tree) & defined(PRELUDE_TREE)
    module = name.removesuffix(".py")
    marker = f"# --- clusterkit.node.{module} (inserted"
    users = [p for p in (*COMPOSED, *OWN_MARKERS) if marker in shipped(p)]
    assert users, f"no program is composed with {module}"
    for program in users:
        assert not defined(tree) & defined(ast.parse(source(program))), program
        assert shipped(program).count(marker) == 1


def test_compose_inserts_a_library_after_the_prelude_and_refuses_others() -> None:
    """The probe and the launch runner parse the kernel log with the one parser: composed,
    each holds it once, after the prelude, with no import of clusterkit left."""
    for program in ("collector", "launch"):
        text = shipped(program)
        assert text.count("\ndef parse_kernel_event(") == 1
        assert text.index("# --- end of clusterkit.node.prelude") < text.index(
            "def parse_kernel_event("
        )
        assert "from clusterkit" not in text
    line = "from clusterkit.node.prelude import emit\n"
    with pytest.raises(ValueError, match="not a node library"):
        compose(line + "from clusterkit.node.collector import probe\n")
    with pytest.raises(ValueError, match="twice"):
        compose(line + "from clusterkit.node.kernellog import re\n" * 2)
    with pytest.raises(ValueError, match="not a node program"):
        node_script("kernellog")
    assert "from clusterkit" not in library_source("kernellog")


def test_modern_syntax_is_refused() -> None:
    """The check has teeth: a 3.10 match statement does not parse as 3.8."""
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=NODE_PYTHON)
