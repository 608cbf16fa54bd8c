"""The HTML report's heat-map drawing: node x node tables, node cells and their key.

Apart from the page (html.py) and from what each map shows (mesh_map.py, bench_map.py,
gpu_map.py): they draw with these same cells, sizes and colours.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from clusterkit.checks.model import Status
from clusterkit.report.markup import NAME_MAX, text

LABELLED_UP_TO = 32  # heat maps of more nodes: no text in cells, names on hover only
Pair = tuple[str, str]
# A node cell's colour class by its worst status; OK and anything else read "o".
MARK_CLASS = {Status.FAIL: "x", Status.ERROR: "e", Status.WARN: "w", Status.SKIP: "o"}


def cell_px(count: int) -> int:
    """Cell size that keeps a heat map of `count` nodes near 800 pixels, 18 at most."""
    return max(2, min(18, 800 // max(count, 1)))


def heat_table(hosts: Sequence[str], cells: Iterable[str], marks: Mapping[str, Status]) -> str:
    """A node x node table: `cells` gives each row's <td>s in `hosts` order."""
    px = cell_px(len(hosts))
    labelled = len(hosts) <= LABELLED_UP_TO
    head = ""
    if labelled:
        head = "<tr><th></th>" + "".join(
            f'<th class="col{bad_mark(host, marks)}">{text(host, 24)}</th>' for host in hosts
        )
    rows = "".join(
        f'<tr><th class="{bad_mark(host, marks).strip()}" title="{text(host, NAME_MAX)}">'
        f"{text(host, 24) if labelled else ''}</th>{row}</tr>"
        for host, row in zip(hosts, cells)
    )
    lines = "" if px >= 6 else "border:0;"  # below 6 pixels a cell, white lines drown it
    cell = f"table.hm{px} td{{width:{px}px;height:{px}px;{lines}}}.hm{px} th{{min-width:6px}}"
    style = f"<style>{cell}</style>"
    return f'{style}<table class="hm hm{px}">{head}{rows}</table>'


def bad_mark(host: str, marks: Mapping[str, Status]) -> str:
    mark = marks.get(host)
    return " bad" if mark is Status.FAIL else " err" if mark is Status.ERROR else ""


def legend(items: Sequence[tuple[str, str]], picture: str) -> str:
    """The picture under a key of the colours it uses (a passing cluster's page shows no
    failure colour, not even in a key)."""
    used = [(cls, what) for cls, what in items if re.search(f'class="(g )?{cls}"', picture)]
    return (
        '<p class="note legend">'
        + "".join(f'<span class="{cls}"></span>{what}' for cls, what in used)
        + "</p>"
        + picture
    )
