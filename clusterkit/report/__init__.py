"""Reports: text (rich on a terminal), JSON (documented schema), JUnit, Prometheus, HTML.

Layer: report. Start at: model.py.
"""

from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from clusterkit.checks.model import verdict_status
from clusterkit.errors import UsageError
from clusterkit.redact import redact
from clusterkit.report.html import render_html
from clusterkit.report.jsonout import render_json
from clusterkit.report.junit import render_junit
from clusterkit.report.model import Report
from clusterkit.report.prometheus import render_prometheus
from clusterkit.report.terminal import wants_color
from clusterkit.report.text import render_plain, render_rich
from clusterkit.safefiles import check_writable, why, write_file

if TYPE_CHECKING:
    from clusterkit.environment import Environment

__all__ = ["Report", "emit", "ensure_writable", "verdict_status"]


def ensure_writable(path: str, flag: str) -> None:
    """Refuse an output file that cannot be written before any work starts, as `write_whole`
    would refuse it, changing nothing (clusterkit/safefiles.py: check_writable)."""
    try:
        check_writable(path)
    except OSError as error:
        raise UsageError(f"{flag} {path}: cannot write the report: {why(error, path)}") from None


def emit(
    report: Report,
    fmt: str,
    output: str | None,
    env: Environment,
    *,
    only_problems: bool = False,
    verbose: bool = False,
) -> None:
    """Write the report to --output (or `env`'s stdout); rich tables only on an interactive
    terminal, colour where wanted (NO_COLOR, FORCE_COLOR pick the colour, never the layout).
    `only_problems` shortens the text report only: JSON and JUnit stay complete. A terminal
    gets one screen (checks that pass counted per stage) unless `verbose`; a pipe or a file
    gets every line, as scripts and logs expect.
    Secret-looking values are redacted first, whatever the format or destination."""
    report = redacted(report)
    if fmt == "json":
        text = render_json(report)
    elif fmt == "junit":
        text = render_junit(report)
    elif fmt == "prometheus":
        text = render_prometheus(report, now=time.time())
    elif fmt == "html":
        text = render_html(report)
    else:
        text = None
    if output:
        if text is None:
            buffer = io.StringIO()
            render_plain(report, buffer, only_problems=only_problems)
            text = buffer.getvalue()
        try:
            write_whole(output, text.encode())
        except OSError as error:
            raise UsageError(
                f"{output}: cannot write the report: {why(error, output)}"
                + ("; the previous report is left as it was" if Path(output).is_file() else "")
            ) from None
        if fmt != "text":  # still give the person at the terminal the verdict
            render_plain_summary(report, env.stderr)
        return
    color = wants_color(env.environ, env.stdout_isatty)
    if text is not None:
        env.stdout.write(text)
    elif env.stdout_isatty:
        render_rich(
            report,
            env.stdout,
            color=color,
            only_problems=only_problems,
            verbose=verbose,
            environ=env.environ,
        )
    else:
        render_plain(report, env.stdout, color=color, only_problems=only_problems)


def write_whole(path: str, data: bytes) -> None:
    """The whole of `data` at `path`, or nothing changed: a full disk must not leave an empty
    or cut report where a good one was, and a link or file another user planted at `path` is
    refused, never written through (clusterkit/safefiles.py: write_file)."""
    write_file(path, data)


def redacted(report: Report) -> Report:
    """The report as it may be shown: findings, host facts and stage details redacted."""
    findings = [
        dataclasses.replace(
            f,
            message=redact(f.message),
            expected=redact(f.expected),
            found=redact(f.found),
            remedy=redact(f.remedy),
        )
        for f in report.findings
    ]
    return dataclasses.replace(
        report,
        findings=findings,
        hosts=redact(report.hosts),
        details=redact(report.details),
        text_blocks=redact(report.text_blocks),
    )


def render_plain_summary(report: Report, stream: TextIO) -> None:
    from clusterkit.report.text import _summary

    print(_summary(report), file=stream)
