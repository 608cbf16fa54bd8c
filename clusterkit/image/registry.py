"""A tag's manifest digest from its registry's HTTP API (OCI distribution spec), without a
Docker engine: `image lock` works on a CI runner that has none.

HEAD /v2/<repository>/manifests/<tag> with the manifest media types Docker accepts; a 401
with a Bearer challenge is answered with the registry's token flow (anonymous for public
images; CLUSTERKIT_REGISTRY_USERNAME / CLUSTERKIT_REGISTRY_PASSWORD when set, never printed).
Loopback registries are spoken to over plain HTTP, as Docker does; every other over HTTPS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from clusterkit.errors import ConfigError, ExternalToolError, StageError
from clusterkit.image.grammar import DIGEST

TIMEOUT = 15.0  # seconds per request: a registry answers a manifest HEAD in well under this
DOCKER_HUB = "registry-1.docker.io"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Reference:
    registry: str  # host[:port]
    repository: str
    tag: str

    @classmethod
    def parse(cls, reference: str) -> Reference:
        """repo[:tag] as Docker reads it: a first part with `.` or `:` (or localhost) is a
        registry, otherwise Docker Hub, where one-part names live under library/."""
        name, tag = reference, "latest"
        if ":" in reference.rsplit("/", 1)[-1]:
            name, _, tag = reference.rpartition(":")
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            return cls(first, rest, tag)
        return cls(DOCKER_HUB, name if "/" in name else f"library/{name}", tag)

    @property
    def base_url(self) -> str:
        host = self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry
        scheme = "http" if host in LOOPBACK else "https"
        return f"{scheme}://{self.registry}"


def manifest_digest(
    reference: str, *, timeout: float = TIMEOUT, environ: Mapping[str, str] | None = None
) -> str:
    """The digest the tag points to now (what `docker pull` would fetch); credentials from
    `environ` (None: this process's)."""
    ref = Reference.parse(reference)
    url = f"{ref.base_url}/v2/{ref.repository}/manifests/{urllib.parse.quote(ref.tag)}"
    headers = {"Accept": ACCEPT}
    response = _request("HEAD", url, headers, reference, timeout)
    if response.status == 401:
        challenge = response.headers.get("WWW-Authenticate", "")
        token = _token(challenge, reference, timeout, os.environ if environ is None else environ)
        headers["Authorization"] = token
        response = _request("HEAD", url, headers, reference, timeout)
    _raise_for(response, reference)
    digest = response.headers.get("Docker-Content-Digest", "")
    if not DIGEST.fullmatch(digest):  # some registries leave it out of HEAD: hash the body
        response = _request("GET", url, headers, reference, timeout)
        _raise_for(response, reference)
        digest = "sha256:" + hashlib.sha256(response.body).hexdigest()
    return digest


@dataclass(frozen=True)
class _Response:
    status: int
    headers: dict[str, str]
    body: bytes


_BODY_LIMIT = 4 * 1024 * 1024  # a manifest or token is a few KB


def _request(
    method: str, url: str, headers: dict[str, str], reference: str, timeout: float
) -> _Response:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return _Response(answer.status, dict(answer.headers), answer.read(_BODY_LIMIT))
    except urllib.error.HTTPError as error:
        return _Response(error.code, dict(error.headers or {}), error.read(_BODY_LIMIT))
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise StageError(
            f"cannot reach the registry for {reference} ({url.split('/v2/')[0]}): {reason}",
            hint="check network access, or lock with --offline and base.digest in the spec",
        ) from None


def _raise_for(response: _Response, reference: str) -> None:
    if response.status == 200:
        return
    if response.status == 404:
        raise ConfigError(f"{reference}: no such image or tag in its registry")
    if response.status in (401, 403):
        raise ExternalToolError(
            f"{reference}: the registry refused access (HTTP {response.status})",
            hint="set CLUSTERKIT_REGISTRY_USERNAME and CLUSTERKIT_REGISTRY_PASSWORD",
        )
    raise ExternalToolError(f"{reference}: the registry answered HTTP {response.status}")


def _token(challenge: str, reference: str, timeout: float, environ: Mapping[str, str]) -> str:
    """The Authorization header the challenge asks for: a Bearer token from the realm
    (anonymous unless credentials are set in `environ`), or Basic credentials."""
    scheme = challenge.split(" ", 1)[0].lower()
    user = environ.get("CLUSTERKIT_REGISTRY_USERNAME")
    password = environ.get("CLUSTERKIT_REGISTRY_PASSWORD")
    basic = (
        "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if user and password
        else None
    )
    if scheme == "basic" and basic:
        return basic
    params = dict(_CHALLENGE.findall(challenge))
    realm = params.pop("realm", "")
    if scheme != "bearer" or not realm.startswith(("https://", "http://")):
        raise ExternalToolError(
            f"{reference}: the registry asks for credentials clusterkit cannot give "
            f"({scheme or 'no'} challenge)",
            hint="set CLUSTERKIT_REGISTRY_USERNAME and CLUSTERKIT_REGISTRY_PASSWORD",
        )
    url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(params)
    response = _request("GET", url, {"Authorization": basic} if basic else {}, reference, timeout)
    if response.status != 200:
        raise ExternalToolError(
            f"{reference}: the registry's token service answered HTTP {response.status}"
        )
    try:
        document = json.loads(response.body)
        token = document.get("token") or document.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise ExternalToolError(f"{reference}: the registry's token service gave no token")
    return f"Bearer {token}"
