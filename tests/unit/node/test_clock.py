"""env.clock checks the offset, not only the synchronised flag: a node 7200 s fast whose
chrony leap status was Normal once passed as OK."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit import framing
from clusterkit.checks.health import CLOCK_FAIL_SECONDS, CLOCK_WARN_SECONDS, clock_problem
from clusterkit.checks.model import Status
from clusterkit.node.probe_host import parse_chronyc_tracking
from tests.support.nodescripts import write_composed
from tests.unit.checks.test_checks import healthy, run

CHRONYC = Path(__file__).parent.parent.parent / "fixtures" / "chronyc"


# parse_chronyc_tracking over its recordings: tests/fixtures/parsers/ (test_parser_cases.py)


def clock(offset: Any, synchronized: bool = True) -> dict[str, Any]:
    return {"synchronized": synchronized, "source": "chronyc", "offset_seconds": offset}


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (clock(7200.0), (Status.FAIL, "offset +7200.000 s, more than 5 s")),
        (clock(-6.0), (Status.FAIL, "offset -6.000 s, more than 5 s")),
        (clock(-0.75), (Status.WARN, "offset -0.750 s, more than 0.5 s")),
        (clock(0.4), None),
        (clock(1.2e-05), None),
        (clock(7200.0, False),
         (Status.FAIL, "not synchronised (offset +7200.000 s, more than 5 s)")),
        (clock(-2.5, False), (Status.WARN, "not synchronised (offset -2.500 s)")),
        (clock(None, False), (Status.WARN, "not synchronised")),
        (clock("7200"), None),  # a node's facts are data: not a number is no offset
        (clock(float("inf")), None),
    ],
)  # fmt: skip
def test_clock_problem_bounds_the_offset(facts, expected) -> None:
    assert clock_problem(facts) == expected


def test_the_bounds_are_ordered() -> None:
    assert 0 < CLOCK_WARN_SECONDS < CLOCK_FAIL_SECONDS


def test_a_synchronised_clock_7200_s_fast_fails_env_clock() -> None:
    hosts = healthy(3)
    hosts["node2"]["clock"] = parse_chronyc_tracking(
        (CHRONYC / "tracking-7200s-fast.txt").read_text()
    )
    hosts["node3"]["clock"] = parse_chronyc_tracking(
        (CHRONYC / "tracking-0.75s-slow.txt").read_text()
    )
    finding = run(hosts)["env.clock"]
    assert finding.status is Status.FAIL
    assert finding.found == {"node2": "offset +7200.000 s, more than 5 s",
                             "node3": "offset -0.750 s, more than 0.5 s"}  # fmt: skip
    assert finding.remedy.endswith("--tags time --limit node2,node3"), finding.remedy


def test_small_offsets_stay_ok() -> None:
    assert run(healthy(2))["env.clock"].status is Status.OK


def test_the_probe_reads_chronyc_7200_s_fast(tmp_path: Path) -> None:
    """The probe itself, with a chronyc on PATH that prints the recorded output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "chronyc"
    tool.write_text(f"#!/bin/sh\ncat '{CHRONYC / 'tracking-7200s-fast.txt'}'\n")
    tool.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-S", str(write_composed("collector", tmp_path))],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, capture_output=True, timeout=60,
        check=True,
    )  # fmt: skip
    facts = framing.decode(done.stdout)["facts"]
    assert facts["clock"]["offset_seconds"] == 7200.0 and facts["clock"]["synchronized"]
    assert clock_problem(facts["clock"]) == (Status.FAIL, "offset +7200.000 s, more than 5 s")
