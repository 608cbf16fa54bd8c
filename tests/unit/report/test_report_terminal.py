"""Output as a CI log and a person see it: colour switches, phase lines, each skip said once."""

from __future__ import annotations

import io
import re

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.environment import Environment
from clusterkit.report import emit
from clusterkit.report.model import Report
from clusterkit.report.progress import Progress
from clusterkit.report.terminal import wants_color
from clusterkit.report.text import render_plain


@pytest.mark.parametrize(
    ("env", "terminal", "expected"),
    [
        ({}, False, False),
        ({}, True, True),
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": ""}, False, False),  # set but empty: not asked for
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, True, False),  # NO_COLOR wins
    ],
)
def test_wants_color(env: dict[str, str], terminal: bool, expected: bool) -> None:
    assert wants_color(env, terminal) is expected


def small_report() -> Report:
    return Report(
        command="check",
        inventory=None,
        findings=[
            Finding("torch.present", Status.OK, "torch everywhere", hosts=["a", "b"]),
            Finding("bench.busbw", Status.SKIP, "bench not run: single host", stage="bench"),
        ],
        hosts={"a": {"address": "a", "reachable": True, "facts": None}},
        stages={"network": "a single host", "bench": "single host"},
    )


def test_force_color_colours_the_report_when_piped() -> None:
    forced = Environment(environ={"FORCE_COLOR": "1"})
    emit(small_report(), "text", None, forced)
    assert "\x1b[" in forced.stdout.getvalue()  # ANSI colour, although stdout is a pipe
    plain = Environment(environ={})
    emit(small_report(), "text", None, plain)
    assert "\x1b[" not in plain.stdout.getvalue()


def test_a_skipped_stage_with_findings_is_said_once() -> None:
    stream = io.StringIO()
    render_plain(small_report(), stream)
    text = stream.getvalue()
    assert text.count("bench not run: single host") == 1
    assert "bench: skipped" not in text  # its SKIP finding says it
    assert "network: skipped: a single host" in text  # no finding of its own: said here


def test_piped_progress_prints_a_line_per_phase_as_it_finishes() -> None:
    log = io.StringIO()
    bar = Progress(enabled=False, log=log)
    bar.phase("connect", 3)
    for host in ("n1", "n2"):
        bar.done(host)
    bar.done("n3", "timeout")
    assert log.getvalue() == ""  # nothing until the phase ends
    bar.phase("network", 1)
    lines = log.getvalue().splitlines()
    assert re.fullmatch(
        r"clusterkit: connect: 2 of 3 hosts ok in \d+\.\d s \(n3: timeout\)", lines[0]
    )
    bar.finish()
    lines = log.getvalue().splitlines()
    assert re.fullmatch(r"clusterkit: network: finished in \d+\.\d s", lines[1])
    bar.finish()  # idempotent: the phase is not reported twice
    assert len(log.getvalue().splitlines()) == 2


def test_piped_progress_escapes_and_caps_problems() -> None:
    log = io.StringIO()
    bar = Progress(enabled=False, log=log)
    bar.phase("probe", 5)
    for index in range(5):
        bar.done(f"n{index}\nverdict: PASS", "down")
    bar.finish()
    (line,) = log.getvalue().splitlines()
    assert "+2 more" in line and "\\n" in line
