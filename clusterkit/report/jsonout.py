"""JSON report (schema in docs/report.md)."""

from __future__ import annotations

import io
import json

from clusterkit.report.model import Report

_BATCH = 4096  # encoder chunks joined at a time


def render_json(report: Report) -> str:
    """The report, indented. Built through a text buffer, not json.dumps: with an indent the
    encoder yields millions of small strings at a few hundred nodes (a full mesh's 65,280
    pairs), which json.dumps keeps in one list: three times the size of the text, 80 MB."""
    out, batch = io.StringIO(), []
    for chunk in json.JSONEncoder(indent=2, default=str).iterencode(report.to_dict()):
        batch.append(chunk)
        if len(batch) >= _BATCH:
            out.write("".join(batch))
            batch.clear()
    out.write("".join(batch) + "\n")
    return out.getvalue()
