"""Node scripts as a node gets them: composed with the prelude, runnable without clusterkit."""

from __future__ import annotations

from pathlib import Path

from clusterkit.transport.nodescript import node_script


def write_composed(program: str, folder: Path) -> Path:
    """The composed text of the node program `program` (clusterkit/node/PROGRAM.py, e.g.
    "collector") written as FOLDER/PROGRAM.py: importable under `python -S` with
    PYTHONPATH=FOLDER, or run as a file, with no clusterkit on the path, as on a node."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{program}.py"
    path.write_text(node_script(program))
    return path
