"""Debian's Chromium, headless, for the HTML report's tests and its docs screenshot.

Pages are served by a localhost http.server that records every path asked of it, and every
host name resolves to that server (`--host-resolver-rules`), so any request the page makes,
to any host, lands in the record instead of the network. Each run has a fresh profile, a
deadline, and is killed (its whole process group) when the deadline passes.
PNG screenshots are decoded with zlib and struct only.
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-color-profile=srgb",
    "--disable-features=NetworkTimeServiceQuerying",
)
# Chromium 156 still asks its component updater for one on-demand component whatever the
# flags (a POST to /service/update2/json); mapped like every host, it lands on the server too
# and is told apart by its Host header. Any other host is a request the page made.
OWN_HOSTS = ("update.googleapis.com",)
DEADLINE = 90.0  # seconds for one Chromium run


@dataclass
class Server:
    """Serves `pages` (path -> bytes); `requests` holds every path asked, in order."""

    pages: dict[str, bytes]
    port: int = 0
    requests: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # each request's Host header

    def page_requests(self) -> list[str]:
        """Every path asked but Chromium's own background requests (OWN_HOSTS)."""
        return [path for path, host in zip(self.requests, self.hosts) if host not in OWN_HOSTS]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def serve(pages: dict[str, bytes]) -> Iterator[Server]:
    server = Server(pages)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.requests.append(self.path)
            server.hosts.append(self.headers.get("Host", ""))
            body = server.pages.get(self.path.split("#")[0])
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body or b"")

        do_POST = do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def chromium(url: str, port: int, *extra: str, timeout: float = DEADLINE) -> str:
    """Chromium's stdout for `url`, every host name mapped to 127.0.0.1:`port`; raises
    subprocess.TimeoutExpired after killing it when it outlives `timeout`."""
    profile = tempfile.mkdtemp(prefix="clusterkit-chromium-")
    command = [
        str(CHROMIUM),
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--host-resolver-rules=MAP * 127.0.0.1:{port}",
        *extra,
        url,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, "HOME": profile},
    )
    try:
        out, _ = process.communicate(timeout=timeout)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if process.returncode != 0:
        raise RuntimeError(f"chromium exited {process.returncode} on {url}")
    return out


def dump_dom(url: str, port: int) -> str:
    """The DOM after the page's scripts ran."""
    return chromium(url, port, "--dump-dom", "--virtual-time-budget=2000")


def screenshot(url: str, port: int, path: Path, width: int = 1280, height: int = 2200) -> None:
    chromium(url, port, f"--screenshot={path}", f"--window-size={width},{height}")


@dataclass
class Image:
    width: int
    height: int
    rows: list[bytes]  # RGBA, 4 bytes a pixel

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        r, g, b = self.rows[y][4 * x : 4 * x + 3]
        return r, g, b

    def count(self, colour: tuple[int, int, int]) -> int:
        """Pixels of exactly this colour."""
        want = bytes(colour)
        return sum(1 for row in self.rows for x in range(0, len(row), 4) if row[x : x + 3] == want)

    def rows_with(self, colour: tuple[int, int, int]) -> list[int]:
        want = bytes(colour)
        return [
            y
            for y, row in enumerate(self.rows)
            if any(row[x : x + 3] == want for x in range(0, len(row), 4))
        ]


def read_png(path: Path) -> Image:
    """An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) as RGBA rows."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    chunks, at = {}, 8
    idat = b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 4 if colour == 6 else 3
    return Image(width, height, _unfilter(zlib.decompress(idat), width, height, channels))


def _unfilter(raw: bytes, width: int, height: int, channels: int) -> list[bytes]:
    stride, rows, previous = width * channels, [], bytearray(width * channels)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            line[i] = (line[i] + _predict(kind, left, up, corner)) & 0xFF
        previous = line
        rows.append(bytes(line) if channels == 4 else _rgba(bytes(line)))
    return rows


def _predict(kind: int, left: int, up: int, corner: int) -> int:
    if kind == 0:
        return 0
    if kind == 1:
        return left
    if kind == 2:
        return up
    if kind == 3:
        return (left + up) // 2
    estimate = left + up - corner
    a, b, c = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
    return left if a <= b and a <= c else up if b <= c else corner


def _rgba(rgb: bytes) -> bytes:
    return b"".join(rgb[i : i + 3] + b"\xff" for i in range(0, len(rgb), 3))
