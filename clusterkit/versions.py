"""Version numbers, `expect:` constraints and the CUDA -> driver table (clusterkit/data)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

_NUMBER = re.compile(r"\d+")
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<|~=)?\s*([0-9][0-9A-Za-z.+\-]*)\s*$")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """Numeric release parts: '550.54.15' -> (550, 54, 15); '2.5.1+cu124' -> (2, 5, 1)."""
    if not text:
        return None
    release = str(text).split("+", 1)[0]
    parts = _NUMBER.findall(release.split("rc")[0].split("a")[0])
    return tuple(int(p) for p in parts) if parts else None


def compare(left: str, right: str) -> int:
    """-1, 0 or 1, comparing release numbers with missing parts as zero."""
    a, b = parse_version(left) or (), parse_version(right) or ()
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


@dataclass(frozen=True)
class Constraint:
    """A pin like '>=550', '12.4', '==2.5.1' or '>=2.4,<2.6'.

    A bare version matches at its own precision: '550' matches driver 550.54.15 and
    '2.5.1' matches torch 2.5.1+cu124 (a local label is ignored unless the pin has one).
    """

    text: str

    def __post_init__(self) -> None:
        for clause in self.text.split(","):
            if not _CLAUSE.match(clause):
                raise ValueError(f"not a version constraint: {self.text!r}")

    def matches(self, value: str | None) -> bool:
        if value is None:
            return False
        return all(self._clause(clause, str(value)) for clause in self.text.split(","))

    @staticmethod
    def _clause(clause: str, value: str) -> bool:
        match = _CLAUSE.match(clause)
        assert match is not None
        op, wanted = match.group(1) or "=", match.group(2)
        if op in ("=", "==", "~="):
            if "+" in wanted and op != "~=":
                return value == wanted
            want, have = parse_version(wanted) or (), parse_version(value) or ()
            if op == "~=":  # compatible release: same prefix, not older
                return have[: len(want) - 1] == want[:-1] and compare(value, wanted) >= 0
            return have[: len(want)] == want
        if op == "!=":
            return not Constraint._clause(f"=={wanted}", value)
        order = compare(value, wanted)
        return {">=": order >= 0, "<=": order <= 0, ">": order > 0, "<": order < 0}[op]


@cache
def _table(name: str) -> dict[str, Any]:
    return json.loads(resources.files("clusterkit.data").joinpath(name).read_text())


@dataclass(frozen=True)
class DriverRequirement:
    cuda: str
    full: str | None  # below this: minor-version compatibility only (warn)
    floor: str | None  # below this: the CUDA build cannot run (fail)
    # Why the requirement is incomplete (a CUDA release or major the table does not list),
    # or None when the table knows this release.
    unknown: str | None = None


def driver_requirement(cuda: str) -> DriverRequirement:
    """The drivers a CUDA build needs, from NVIDIA's table (shipped in clusterkit/data)."""
    table = _table("cuda_driver.json")
    parts = parse_version(cuda) or ()
    minor = ".".join(str(p) for p in parts[:2])
    releases = table["min_driver"].get(minor)
    floor = table["floor"].get(str(parts[0])) if parts else None
    unknown = None
    if releases is None or floor is None:
        unknown = f"CUDA {cuda} is not in the table (dated {table.get('date', 'undated')})"
    return DriverRequirement(
        cuda=cuda, full=(releases or {}).get("GA"), floor=floor, unknown=unknown
    )


def table_source(name: str) -> str:
    data = _table(name)
    return f"{data.get('source', name)} ({data.get('date', 'undated')})"
