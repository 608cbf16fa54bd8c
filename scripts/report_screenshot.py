"""Makes docs/img/report-html.png, the picture docs/report.md shows: the HTML report of a
failing 16-node cluster (node05 drops the mesh ports, node11 is slow in the bench, GPU 0 of
node03 logged Xid 62), from tests/support/fleet_report.py, in Debian's headless Chromium,
cropped to the page. Run as root or wherever /usr/bin/chromium is installed:

    .venv/bin/python scripts/report_screenshot.py [--output docs/img/report-html.png]
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clusterkit.report.html import render_html  # noqa: E402
from tests.support.browser import Image, read_png, screenshot, serve  # noqa: E402
from tests.support.fleet_report import fleet_report  # noqa: E402

WIDTH, HEIGHT, MARGIN = 1280, 3000, 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "img" / "report-html.png")
    args = parser.parse_args()
    report = fleet_report(16, blocked="node05", slow="node11", xid="node03")
    with (
        tempfile.TemporaryDirectory() as folder,
        serve({"/report.html": render_html(report).encode()}) as server,
    ):
        shot = Path(folder) / "page.png"
        screenshot(server.url("/report.html"), server.port, shot, WIDTH, HEIGHT)
        image = read_png(shot)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(png(cropped(image)))
    print(f"{args.output}: {image.width} x {len(cropped(image).rows)}")


def cropped(image: Image) -> Image:
    """The page without the blank window below it."""
    blank = b"\xff" * (4 * image.width)
    last = max(y for y, row in enumerate(image.rows) if row != blank)
    rows = image.rows[: min(last + MARGIN, image.height)]
    return Image(image.width, len(rows), rows)


def png(image: Image) -> bytes:
    """An RGB PNG (filter 0 on every row), zlib and struct only."""
    raw = b"".join(b"\x00" + _rgb(row) for row in image.rows)
    header = struct.pack(">IIBBBBB", image.width, image.height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        _chunk(kind, body)
        for kind, body in ((b"IHDR", header), (b"IDAT", zlib.compress(raw, 9)), (b"IEND", b""))
    )


def _rgb(rgba: bytes) -> bytes:
    return b"".join(rgba[i : i + 3] for i in range(0, len(rgba), 4))


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


if __name__ == "__main__":
    main()
