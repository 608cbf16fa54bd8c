"""Our parser of Slurm's hostlist syntax (compared with real scontrol in tests/slurm)."""

from __future__ import annotations

import pytest

from clusterkit.errors import UsageError
from clusterkit.hostlist import (
    HostlistError,
    check_node_name,
    expand_hostlist,
    parse_hostlist,
)

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


def test_expand_uses_the_parser() -> None:
    assert expand_hostlist("gpu[1-2]") == ["gpu1", "gpu2"]
    with pytest.raises(HostlistError, match="empty"):
        expand_hostlist(" , ")


def test_a_number_of_thousands_of_digits_is_one_clear_error() -> None:
    """Past 4,300 digits int() itself refuses (a ValueError and a traceback once)."""
    with pytest.raises(HostlistError, match="more than 18 digits") as caught:
        parse_hostlist("n[" + "7" * 5000 + "]")
    assert len(str(caught.value)) < 200  # one line, not the 5,000 digits


def test_many_ranges_in_one_bracket_are_capped_as_they_grow() -> None:
    with pytest.raises(HostlistError, match="more than"):
        parse_hostlist("n[" + ",".join(["1-60000"] * 200) + "]")


def test_the_largest_allowed_range_expands_in_process() -> None:
    hosts = expand_hostlist("n[0-65535]")
    assert len(hosts) == 65536 and hosts[-1] == "n65535"


@pytest.mark.parametrize(
    "name", ["gpu[01-64]", "a,b", "a b", "a/b", "-oProxyCommand=x", "a\x00b", "a\nb", "", "é"]
)
def test_a_node_name_is_one_node(name: str) -> None:
    with pytest.raises(UsageError, match=r"SLURMD_NODENAME: .* is not a single node name"):
        check_node_name(name, "SLURMD_NODENAME")


def test_plain_node_names_pass() -> None:
    for name in ("node1", "gpu-01.rack2", "A100_7"):
        assert check_node_name(name, "x") == name
