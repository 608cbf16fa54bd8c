"""Version constraints (`expect:` pins), comparison, and the CUDA -> driver table."""

from __future__ import annotations

import itertools
import json
from importlib import resources

import pytest

from clusterkit.versions import Constraint, compare, driver_requirement, parse_version

TABLE = resources.files("clusterkit.data").joinpath("cuda_driver.json")


@pytest.mark.parametrize(
    ("pin", "value", "ok"),
    [
        # a bare version matches at its own precision
        ("550", "550.54.15", True),
        ("550", "555.42.02", False),
        ("550.54", "550.54.15", True),
        ("550.54.15", "550.54.14", False),
        ("12.4", "12.4", True),
        ("12", "12.4", True),
        ("12.4", "12.40", False),
        # local labels are ignored unless the pin has one
        ("2.5.1", "2.5.1+cu124", True),
        ("2.5.1+cu124", "2.5.1+cu124", True),
        ("2.5.1+cu124", "2.5.1+cu121", False),
        ("2.5.1+cu124", "2.5.1", False),
        ("==2.5.1", "2.5.1+cpu", True),
        # ranges
        (">=550", "550.54.15", True),
        (">=550", "535.183.01", False),
        (">550", "550", False),
        (">550", "550.0.1", True),
        ("<=2.5", "2.5.0", True),
        ("<2.6", "2.6.0", False),
        (">=2.4,<2.6", "2.5.1+cu124", True),
        (">=2.4,<2.6", "2.6.0", False),
        (">=2.4, <2.6", "2.3.1", False),
        # exclusions
        ("!=2.5.0", "2.5.1", True),
        ("!=2.5.0", "2.5.0+cu124", False),
        ("!=2.5", "2.5.1", True),  # PEP 440: != excludes that version, 2.5.0
        ("!=2.5.*", "2.5.1", False),  # ... and a prefix excludes the series
        ("!=2.5.*", "2.6.0", True),
        # compatible release
        ("~=2.4.0", "2.4.1", True),
        ("~=2.4.0", "2.5.0", False),
        ("~=2.4", "2.9.1", True),
        ("~=2.4", "3.0", False),
        ("~=2.4.1", "2.4.0", False),
        # prefix matching (PEP 440 `.*`)
        ("==2.5.*", "2.5.1+cu124", True),
        ("==2.5.*", "2.5.0", True),
        ("==2.5.*", "2.6.0", False),
        ("==2.5.*", "2.50.0", False),
        ("550.*", "550.54.15", True),
        # a pre-release or dev build satisfies only a pin that names a pre-release
        (">=2.6", "2.6.0.dev0", False),
        (">=2.6", "2.6.0rc1", False),
        (">=2.5", "2.6.0rc1", False),
        ("<2.6", "2.6.0.dev0", False),
        ("2.6", "2.6.0rc1", False),
        (">=2.6rc1", "2.6.0rc2", True),
        (">=2.6.0.dev0", "2.6.0.dev3", True),
        # NGC's X.Y.Za0+commit builds count as the release X.Y.Z
        (">=2.4", "2.5.0a0+872d972e41", True),
        (">=2.5", "2.5.0a0+872d972e41", True),
        ("2.5.0", "2.5.0a0+872d972e41", True),
        ("==2.5.*", "2.5.0a0+872d972e41", True),
        ("<2.5", "2.5.0a0+872d972e41", False),
        ("2.5.0+cu124", "2.5.0a0+872d972e41", False),
        # ... that exact shape only: a later alpha, or one without a local label, is not
        (">=2.5", "2.5.0a1+872d972e41", False),
        (">=2.5", "2.5.0a0", False),
        # values that are not versions match nothing
        (">=0", "N/A", False),
        ("550", "", False),
    ],
)
def test_constraint_semantics(pin: str, value: str, ok: bool) -> None:
    assert Constraint(pin).matches(value) is ok


def test_nothing_matches_a_missing_value() -> None:
    assert Constraint(">=0").matches(None) is False


@pytest.mark.parametrize(
    "pin",
    ["", "latest", ">=", "550 or 555", ">=2.4;<2.6", "=>550", "v2.5", ">=v2.5", ">=2.5.*", "2.*.1"],
)
def test_malformed_constraints_are_rejected(pin: str) -> None:
    with pytest.raises(ValueError, match="not a version constraint"):
        Constraint(pin)


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("550.54.15", "550.54.14", 1),
        ("550.54", "550.54.0", 0),
        ("535.183.01", "550", -1),
        ("10.0", "9.9", 1),  # numeric, not lexical
        ("2.5.1+cu124", "2.5.1", 0),
        ("12.4", "12.10", -1),
    ],
)
def test_compare(left: str, right: str, order: int) -> None:
    assert compare(left, right) == order
    assert compare(right, left) == -order


def test_parse_version() -> None:
    assert parse_version("550.54.15") == (550, 54, 15)
    assert parse_version("2.5.1+cu124") == (2, 5, 1)
    assert parse_version(None) is None
    assert parse_version("none") is None


@pytest.mark.parametrize(
    ("cuda", "full", "floor"),
    [
        ("12.4", "550.54.14", "525"),
        ("12.4.1", "550.54.14", "525"),
        ("12.1", "530.30.02", "525"),
        ("11.8", "520.61.05", "450.80.02"),
        ("13.0", "580.65.06", "580"),
        ("13.3", "610.43.02", "580"),
        ("13.4", "615", "580"),
    ],
)
def test_driver_requirement_from_the_table(cuda: str, full: str, floor: str) -> None:
    need = driver_requirement(cuda)
    assert (need.cuda, need.full, need.floor) == (cuda, full, floor)


def test_driver_requirement_of_an_unknown_release() -> None:
    need = driver_requirement("99.1")
    assert need.full is None and need.floor is None
    assert need.unknown == "CUDA 99.1 is not in the table (dated 2026-09)"
    assert driver_requirement("13.3").unknown is None
    assert driver_requirement("12.7").full is None  # no 12.7 release: only the floor applies
    assert driver_requirement("12.7").floor == "525"


def test_table_is_ordered_like_the_releases() -> None:
    """A newer CUDA never needs an older driver (a typo in the table would break this)."""
    releases = sorted(json.loads(TABLE.read_text())["min_driver"], key=parse_version)
    assert releases[-2:] == ["13.3", "13.4"]
    fulls = [driver_requirement(r).full for r in releases]
    assert all(compare(a, b) <= 0 for a, b in itertools.pairwise(fulls)), fulls
    assert all(
        compare(driver_requirement(r).floor, driver_requirement(r).full) <= 0 for r in releases
    )


def test_table_says_where_it_comes_from_and_how_to_extend_it() -> None:
    table = json.loads(TABLE.read_text())
    assert table["source"] and table["date"] and "how_to_extend" in table
    assert {"13.3", "13.4"} <= set(table["sources"])
