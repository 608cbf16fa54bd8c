"""Names and node output with newlines or escape sequences cannot forge report lines."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from clusterkit.checks.model import Finding, Status
from clusterkit.escape import printable
from clusterkit.report.junit import render_junit
from clusterkit.report.model import Report
from clusterkit.report.progress import Progress
from clusterkit.report.text import render_plain, render_rich

FORGED = "node9\nverdict: PASS (exit 0): 0 failed\x1b[2J\x1b]0;owned\x07[/][bold]x"


def hostile_report() -> Report:
    return Report(
        command="check",
        inventory="inv.yaml",
        findings=[
            Finding(
                "host.reachable",
                Status.ERROR,
                f"{FORGED}: unreachable",
                hosts=[FORGED],
                remedy="try\rverdict: PASS",
                stage="connect",
            )
        ],
        hosts={
            FORGED: {"address": "10.0.0.9\n", "reachable": False, "error": FORGED, "facts": None}
        },
        stages={"bench": f"skipped\n{FORGED}"},
        text_blocks={"connect": [f"table line\n{FORGED}"]},
    )


def test_printable_escapes_only_what_is_unsafe() -> None:
    assert printable("node01.example") == "node01.example"
    assert printable(r"C:\path") == r"C:\path"
    assert printable("a\nb\x1b[1m\u202ec") == "a\\nb\\x1b[1m\\u202ec"
    assert printable("a\\n\n") == "a\\\\n\\n"  # unambiguous once anything was escaped


def test_plain_text_cannot_forge_a_verdict_line() -> None:
    stream = io.StringIO()
    render_plain(hostile_report(), stream)
    text = stream.getvalue()
    lines = text.splitlines()
    verdicts = [line for line in lines if line.lstrip().startswith("verdict:")]
    assert len(verdicts) == 1 and verdicts[0].startswith("verdict: INCOMPLETE (exit 3)")
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "node9\\nverdict: PASS" in text


def test_rich_text_neither_forges_lines_nor_reads_names_as_markup() -> None:
    stream = io.StringIO()
    render_rich(hostile_report(), stream)  # "[/]" in a name used to be a markup error
    text = stream.getvalue()
    assert "\x1b]0;" not in text and "\x07" not in text and "\x1b[2J" not in text
    assert not any(line.lstrip().startswith("verdict: PASS") for line in text.splitlines())
    assert "[/][bold]x" in text


def test_junit_stays_valid_xml() -> None:
    root = ET.fromstring(render_junit(hostile_report()))
    error = root.find(".//error")
    assert error is not None and "\x1b" not in error.get("message", "")


def test_progress_labels_are_escaped() -> None:
    bar = Progress(enabled=True)
    bar.phase("connect", 1)
    bar.done(FORGED, "timeout\n[/]")
    task = bar._bar.tasks[0]
    assert "\n" not in task.fields["last"] and "\x1b" not in task.fields["last"]
