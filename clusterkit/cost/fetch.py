"""GET a JSON document from a price endpoint, within bounds a hostile server cannot stretch.

- One deadline for the whole update: every receive (status line, headers, body) waits at most
  until it, so a server that drips one byte a second cannot hold `--timeout 10` for a minute.
- A size cap per document, read in chunks: an endless or huge answer is an error, not a
  MemoryError.
- Only http and https, and a redirect or a followed link stays on the origin (scheme, host
  and port) of the URL it came from: a `NextPageLink` of `file:///etc/passwd` is refused.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any

from clusterkit.errors import ClusterkitError
from clusterkit.status import ExitStatus

# The largest answers read. AWS's per-region EC2 offer files list every instance type, OS,
# tenancy and term: hundreds of MB today, so they get room to grow. The region index, the
# Spot Advisor data (a few MB) and Azure's pages (100 items) are far below the smaller cap.
MAX_OFFER_BYTES = 2 << 30
MAX_DOCUMENT_BYTES = 64 << 20
CHUNK_BYTES = 1 << 16
SCHEMES = ("http", "https")


class Unreachable(ClusterkitError):
    """An endpoint did not answer in time, or answered with something unusable."""

    exit_status = ExitStatus.INCOMPLETE


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side (its own makefile, so closing stays counted) whose every
    receive ends by the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock, self._deadline = sock, deadline
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """A connected socket as http.client uses it, but read through a _DeadlineReader."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _HTTPConnection(http.client.HTTPConnection):
    deadline = 0.0

    def connect(self) -> None:
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class _HTTPSConnection(http.client.HTTPSConnection):
    deadline = 0.0

    def connect(self) -> None:
        super().connect()  # TCP, then TLS: the wrapped socket is read under the deadline
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)

    def _connection(self, host: str, **options: Any) -> http.client.HTTPConnection:
        connection = _HTTPConnection(host, **options)
        connection.deadline = self.deadline
        return connection


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """Certificates are verified as urllib does by default (the default SSL context)."""

    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)

    def _connection(self, host: str, **options: Any) -> http.client.HTTPConnection:
        connection = _HTTPSConnection(host, **options)
        connection.deadline = self.deadline
        return connection


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> IO[bytes] | None:
        location = headers.get("location") or headers.get("uri")
        if location:
            check_link(urllib.parse.urljoin(req.full_url, location), req.full_url, "a redirect")
        followed: IO[bytes] | None = super().http_error_302(req, fp, code, msg, headers)
        return followed

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def url_problem(url: str) -> str | None:
    """Why `url` is not an http(s) URL with a host, or None."""
    scheme, host = origin(url)
    if scheme not in SCHEMES:
        return f"only {' and '.join(SCHEMES)} URLs are fetched, not {scheme or 'a bare path'}"
    return None if host else "the URL has no host"


def check_link(link: Any, came_from: str, what: str) -> str:
    """`link` (a page's next link, a redirect), refused unless it stays on `came_from`'s
    origin: a price page may point at its next page, never elsewhere."""
    if not isinstance(link, str):
        raise Unreachable(f"price update: {came_from}: {what} is not a URL string")
    if url_problem(link) or origin(link) != origin(came_from):
        scheme, host = origin(came_from)
        raise Unreachable(
            f"price update: {came_from}: {what} {link[:200]!r} leaves {scheme}://{host}; "
            "not followed"
        )
    return link


class Fetcher:
    """GETs JSON documents under one deadline for the whole update."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self._opener = urllib.request.OpenerDirector()
        for handler in (
            urllib.request.ProxyHandler(),
            _HTTPHandler(self.deadline),
            _HTTPSHandler(self.deadline),
            _SameOriginRedirects(),
            urllib.request.HTTPDefaultErrorHandler(),
            urllib.request.HTTPErrorProcessor(),
        ):
            self._opener.add_handler(handler)

    def json(self, url: str, limit: int = MAX_DOCUMENT_BYTES) -> Any:
        body = self._body(url, limit)
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as error:
            raise Unreachable(f"price update: {url}: not JSON: {error}") from None

    def _body(self, url: str, limit: int) -> bytes:
        problem = url_problem(url)
        if problem:
            raise Unreachable(f"price update: {url[:200]}: {problem}")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Unreachable(f"price update: deadline of {self.seconds:g}s passed before {url}")
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with self._opener.open(request, timeout=left) as response:
                return _read_capped(response, url, limit)
        except urllib.error.HTTPError as error:
            raise Unreachable(f"price update: {url}: HTTP {error.code} {error.reason}") from None
        except TimeoutError:
            raise Unreachable(
                f"price update: {url}: timed out (--timeout {self.seconds:g}s for all requests)"
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", None) or error
            raise Unreachable(f"price update: {url} unreachable: {reason}") from None


def _read_capped(response: Any, url: str, limit: int) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise Unreachable(f"price update: {url}: answer of {declared} bytes is over {limit}")
    body = bytearray()
    while chunk := response.read(CHUNK_BYTES):
        body += chunk
        if len(body) > limit:
            raise Unreachable(f"price update: {url}: answer is over {limit} bytes; stopped")
    return bytes(body)
