"""Node scripts as a node gets them: composed with the prelude, runnable without clusterkit."""

from __future__ import annotations

from pathlib import Path

from clusterkit.nodescript.compose import node_script


def write_composed(module: str, folder: Path) -> Path:
    """The composed text of `module` (e.g. "clusterkit.probe.collector") written as
    FOLDER/NAME.py: importable under `python -S` with PYTHONPATH=FOLDER, or run as a file,
    with no clusterkit on the path, as on a node."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (module.rpartition(".")[2] + ".py")
    path.write_text(node_script(module))
    return path
