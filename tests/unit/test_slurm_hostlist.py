"""Our parser of Slurm's hostlist syntax (compared with real scontrol in tests/slurm)."""

from __future__ import annotations

import pytest

from clusterkit.slurm.hostlist import HostlistError, expand_hostlist, parse_hostlist

# (hostlist, expansion) as Slurm 22.05's `scontrol show hostnames` prints them.
VALID = [
    ("login1", ["login1"]),
    ("gpu[001-004,007],login1", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu007", "login1"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("x[001-4]", ["x001", "x002", "x003", "x004"]),
    ("y[1-010]", ["y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9", "y10"]),
    ("a[009-011]", ["a009", "a010", "a011"]),
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("a[1-2][3-4]", ["a13", "a14", "a23", "a24"]),
    ("a,a,b", ["a", "a", "b"]),
    ("a[1,1]", ["a1", "a1"]),
    ("a[1-2],,b", ["a1", "a2", "b"]),
    (" a b", ["a", "b"]),
    ("[1-2]", ["1", "2"]),
    ("a[0-0]", ["a0"]),
]
INVALID = [
    "a[3-1]",
    "a[]",
    "a[x]",
    "a[01-3]x",
    "a[1-2]b[3-4]c",
    "a[[1-2]]",
    "a[1-2",
    "a]",
    "a[1-3:2]",
]


@pytest.mark.parametrize(("text", "hosts"), VALID)
def test_valid_forms_expand_as_slurm_does(text: str, hosts: list[str]) -> None:
    assert parse_hostlist(text) == hosts


@pytest.mark.parametrize("text", INVALID)
def test_invalid_forms_are_one_clear_error(text: str) -> None:
    with pytest.raises(HostlistError, match="hostlist"):
        parse_hostlist(text)


def test_a_huge_range_is_refused_before_expanding() -> None:
    with pytest.raises(HostlistError, match="more than"):
        parse_hostlist("n[1-99999999]")


def test_expand_without_scontrol_uses_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert expand_hostlist("gpu[1-2]") == ["gpu1", "gpu2"]
    with pytest.raises(HostlistError, match="empty"):
        expand_hostlist(" , ")
