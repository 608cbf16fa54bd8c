"""The HTML report's GPU health grid: per node, per GPU, what the probe's facts show.

Apart from the page: it reads the GPU facts and the Xid grouping of checks/xid.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterkit.checks.gpu_health import SLOWDOWN_REASONS
from clusterkit.checks.model import Status
from clusterkit.checks.xid import group_events
from clusterkit.facts import GpuDevice, collected
from clusterkit.report.heatmap import LABELLED_UP_TO, bad_mark, legend
from clusterkit.report.markup import NAME_MAX, text
from clusterkit.report.model import Report


def gpu_section(report: Report, marks: Mapping[str, Status]) -> str:
    """Per node, per GPU: Xid events since the driver's load (as checks/xid.py judged them),
    row remaps and retired pages, uncorrected ECC, PCIe width below its maximum, an active
    slowdown reason. From the probe's facts; nodes without GPUs are left out."""
    grid = gpu_grid(report)
    if not grid:
        return ""
    columns = max(len(gpus) for gpus in grid.values())
    labelled = len(grid) <= LABELLED_UP_TO
    rows = "".join(
        f'<tr><th class="{bad_mark(host, marks).strip()}" title="{text(host, NAME_MAX)}">'
        f"{text(host, 24) if labelled else ''}</th>"
        + "".join(gpu_cell(host, cell, labelled) for cell in gpus)
        + "</tr>"
        for host, gpus in grid.items()
    )
    head = "<tr><th></th>" + "".join(f"<th>GPU {n}</th>" for n in range(columns)) + "</tr>"
    return (
        '<section id="gpus"><h2>GPU health</h2>'
        + legend(
            [("o", "healthy"), ("w", "degraded (PCIe width, slowdown)"), ("x", "failing")],
            f'<table class="hm{"" if labelled else " small"}">{head}{rows}</table>',
        )
        + "</section>\n"
    )


def gpu_grid(report: Report) -> dict[str, list[tuple[str, str, list[str]]]]:
    """host -> per GPU (index, class, problems)."""
    grid: dict[str, list[tuple[str, str, list[str]]]] = {}
    for host, entry in report.hosts.items():
        facts = entry.get("facts")
        devices = collected(facts.get("gpus")).get("devices") if facts else None
        if not facts or not devices:
            continue
        xids: dict[str, list[tuple[str, str]]] = {}
        for group in group_events(facts, "xid"):
            if group["counted"] and group["status"] != "ok":
                xids.setdefault(str(group["index"]), []).append(
                    (f"Xid {group['code']} x{group['count']}", group["status"])
                )
        grid[host] = [
            gpu_state(device, xids.get(str(device.get("index")), [])) for device in devices
        ]
    return grid


def gpu_state(device: GpuDevice, xids: list[tuple[str, str]]) -> tuple[str, str, list[str]]:
    fields: Mapping[str, Any] = device
    failing = [what for what, status in xids if status == "fail"]
    degraded = [what for what, status in xids if status != "fail"]
    for field, what in _FAILING_FIELDS:
        if _count(fields.get(field)):
            failing.append(f"{what} {text(fields.get(field), 16)}")
    width, widest = (
        _count(fields.get("pcie.link.width.current")),
        _count(fields.get("pcie.link.width.max")),
    )
    if width and widest and width < widest:
        degraded.append(f"PCIe x{width} of x{widest}")
    mask = _mask(fields.get("clocks_event_reasons.active"))
    degraded += [name for bit, name in SLOWDOWN_REASONS.items() if mask & bit]
    cls = "x" if failing else "w" if degraded else "o"
    return text(device.get("index"), 8), cls, failing + degraded


_FAILING_FIELDS = (
    ("remapped_rows.uncorrectable", "rows remapped (uncorrectable)"),
    ("remapped_rows.pending", "row remap pending"),
    ("remapped_rows.failure", "row remapping failed"),
    ("retired_pages.double_bit.count", "pages retired (double-bit)"),
    ("retired_pages.pending", "page retirement pending"),
    ("ecc.errors.uncorrected.volatile.total", "uncorrected ECC errors"),
)


def gpu_cell(host: str, cell: tuple[str, str, list[str]], labelled: bool) -> str:
    index, cls, problems = cell
    what = "; ".join(problems) or "healthy"
    label = ("!" if problems else "") if labelled else ""
    return f'<td class="g {cls}" title="{text(host, NAME_MAX)} GPU {index}: {what}">{label}</td>'


def _count(value: object) -> int:
    """nvidia-smi's counts and Yes/No flags as numbers; 0 for [N/A], absent or unreadable."""
    word = str(value).strip() if value is not None else ""
    if word in ("Yes", "No"):
        return int(word == "Yes")
    return int(word) if word.isdigit() else 0


def _mask(value: object) -> int:
    try:
        return int(str(value).strip(), 16) if value else 0
    except ValueError:
        return 0
