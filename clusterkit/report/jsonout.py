"""JSON report (schema in docs/report.md)."""

from __future__ import annotations

import json

from clusterkit.report.model import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, default=str) + "\n"
