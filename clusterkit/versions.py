"""Version numbers, `expect:` constraints and the CUDA -> driver table (clusterkit/data)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_NUMBER = re.compile(r"\d+")


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


# NVIDIA's NGC containers ship torch built from a commit ahead of a release and call it an
# alpha of it: "2.5.0a0+872d972e41" is what the 24.xx images hold where 2.5.0 is meant. As a
# PEP 440 pre-release it would satisfy no plain pin (not even ">=2.4"), so a version of exactly
# that shape, alpha 0 with a local label, is read as the release it precedes (2.5.0+872d972e41).
_NGC_BUILD = re.compile(r"^(?P<release>\d+(?:\.\d+)*)a0\+(?P<local>[A-Za-z0-9][A-Za-z0-9.]*)$")
_OPERATOR = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)?\s*(.*?)\s*$")


def as_version(text: str | None) -> Version | None:
    """A reported version as PEP 440 sees it (with the NGC exception), None when it is not
    one (a missing tool, "N/A")."""
    if text is None:
        return None
    cleaned = str(text).strip()
    ngc = _NGC_BUILD.match(cleaned)
    if ngc:
        cleaned = f"{ngc['release']}+{ngc['local']}"
    try:
        return Version(cleaned)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Constraint:
    """A pin: PEP 440 specifiers (`>=550`, `==2.5.*`, `~=2.4`, `>=2.4,<2.6`) via `packaging`,
    plus a bare version, which matches at its own precision: `550` is `==550.*` (driver
    550.54.15 matches), `2.5.1` matches torch 2.5.1+cu124, and a bare version with a local label
    (`2.5.1+cu124`) must match exactly. A pre-release or dev build (2.6.0rc1, 2.6.0.dev0)
    satisfies only a pin that names a pre-release; NGC's `X.Y.Za0+local` builds count as X.Y.Z.
    """

    text: str
    specifiers: SpecifierSet = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        clauses = [self._clause(part) for part in self.text.split(",")]
        specifiers = SpecifierSet(",".join(clauses))
        object.__setattr__(self, "specifiers", specifiers)

    def _clause(self, part: str) -> str:
        match = _OPERATOR.match(part)
        operator, version = (match[1], match[2]) if match else (None, "")
        # PEP 440 tolerates a leading "v"; a pin is clearer without one.
        if not version[:1].isdigit():
            raise ValueError(f"not a version constraint: {self.text!r}")
        if operator is None:  # a bare version: at its own precision, or exact with a label
            operator = "=="
            if "+" not in version and not version.endswith(".*"):
                version += ".*"
        try:
            return str(Specifier(f"{operator}{version}"))
        except InvalidSpecifier:
            raise ValueError(f"not a version constraint: {self.text!r}") from None

    def matches(self, value: str | None) -> bool:
        version = as_version(value)
        if version is None:
            return False
        named_pre = any(spec.prereleases for spec in self.specifiers)
        return self.specifiers.contains(version, prereleases=named_pre)


@cache
def _table(name: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads(
        resources.files("clusterkit.data").joinpath(name).read_text()
    )
    return table


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


def _release_matches(version: str, keys: list[str]) -> bool:
    """`2.5` covers every 2.5.x, `2.6.0` that release alone (never 2.10 for 2.1)."""
    return any(version == key or version.startswith(key + ".") for key in keys)


def torch_wheels(version: str) -> tuple[str | None, tuple[str, ...] | None]:
    """(the CUDA of the default PyPI wheel, the CUDA variants the release publishes on its
    own indexes) for a torch release, from clusterkit/data/torch_versions.json; None where
    the table does not record it."""
    table = _table("torch_versions.json")
    release = version.split("+", 1)[0]
    default = next(
        (
            str(row["cuda"])
            for row in table["default_wheel"]
            if _release_matches(release, row["torch"])
        ),
        None,
    )
    variants = next(
        (
            tuple(row["cuda"])
            for row in table["variants"]
            if _release_matches(release, row["torch"])
        ),
        None,
    )
    return default, variants
