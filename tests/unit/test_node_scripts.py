"""The scripts clusterkit ships to nodes: valid for the oldest Python the nodes are promised
(3.8, see the ruff per-file ignores), and framing their result with framing.py's markers.

They are shipped alone over stdin (stdlib only), so each carries its own copy of the
markers; this test is what keeps the copies equal to the reference."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clusterkit import framing

PACKAGE = Path(__file__).resolve().parents[2] / "clusterkit"
NODE_PYTHON = (3, 8)
# Files run on nodes as a whole.
NODE_FILES = (
    "probe/collector.py",
    "net/node.py",
    "image/node.py",
    "bench/worker.py",
    "launch/node.py",
    "slurm/relay.py",
    "nodescript/prelude.py",
)
# Node scripts kept as a string constant inside a control-side module: (file, name).
NODE_STRINGS = (("probe/shared.py", "NODE_SCRIPT"),)
# Files that frame a result, with the names their markers go by.
FRAMED = {
    "nodescript/prelude.py": ("BEGIN", "END"),
    "probe/collector.py": ("BEGIN", "END"),
    "net/node.py": ("BEGIN", "END"),
    "image/node.py": ("BEGIN", "END"),
    "bench/worker.py": ("FRAME_BEGIN", "FRAME_END"),
}


def constants(tree: ast.Module) -> dict[str, object]:
    """Module-level NAME = <literal> assignments."""
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def as_bytes(value: object) -> bytes:
    return value.encode() if isinstance(value, str) else value  # type: ignore[return-value]


@pytest.mark.parametrize("name", NODE_FILES)
def test_node_file_parses_as_python_3_8(name: str) -> None:
    source = (PACKAGE / name).read_text()
    ast.parse(source, filename=name, feature_version=NODE_PYTHON)


@pytest.mark.parametrize(("name", "constant"), NODE_STRINGS)
def test_embedded_node_script_parses_as_python_3_8(name: str, constant: str) -> None:
    script = constants(ast.parse((PACKAGE / name).read_text()))[constant]
    assert isinstance(script, str)
    tree = ast.parse(script, filename=f"{name}:{constant}", feature_version=NODE_PYTHON)
    strings = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert framing.BEGIN.decode() in strings and framing.END.decode() in strings


@pytest.mark.parametrize(("name", "markers"), FRAMED.items())
def test_frame_markers_match_framing(name: str, markers: tuple[str, str]) -> None:
    values = constants(ast.parse((PACKAGE / name).read_text()))
    begin, end = markers
    assert as_bytes(values[begin]) == framing.BEGIN
    assert as_bytes(values[end]) == framing.END


def test_modern_syntax_is_refused() -> None:
    """The check has teeth: a 3.10 match statement does not parse as 3.8."""
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=NODE_PYTHON)
