"""The control side is typed strictly; the node side is the one named exception.

`scripts/test.sh` runs mypy with pyproject.toml's settings; this holds those settings, so a
module cannot quietly leave strict mode (docs/architecture.md, "Typed facts").
"""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+, where the suite runs

ROOT = Path(__file__).resolve().parents[3]
RELAXED = {
    "disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_calls",
    "disallow_any_generics", "warn_return_any", "check_untyped_defs", "ignore_errors",
    "strict", "disallow_untyped_decorators", "disallow_subclassing_any", "no_implicit_reexport",
    "strict_equality", "warn_unused_ignores", "warn_redundant_casts", "extra_checks",
}  # fmt: skip


def _mypy() -> dict[str, object]:
    config: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return config


def test_clusterkit_is_checked_strictly_with_the_closed_facts_plugin() -> None:
    config = _mypy()
    assert config["strict"] is True
    assert config["files"] == ["clusterkit"]
    assert config["plugins"] == ["scripts/mypy_closed_facts.py"]
    assert (ROOT / "scripts" / "mypy_closed_facts.py").is_file()


def test_only_the_node_side_is_checked_less_strictly() -> None:
    relaxed = {
        module
        for override in _mypy().get("overrides", [])  # type: ignore[attr-defined]
        if RELAXED & set(override)
        for module in override["module"]
    }
    assert relaxed == {"clusterkit.node.*"}
