"""The grammar of every image spec value that reaches a Dockerfile, pip or a label.

Each check returns None when the value is well formed, else a short reason. The grammars are
deliberately narrow (no whitespace, quotes, `$` or control characters where a shell or the
Dockerfile parser would read them), so a spec can never add an instruction to the rendered
Dockerfile or an option to pip's command line. Regexes use fullmatch: `$` alone would accept
a trailing newline.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# Docker's reference grammar (distribution/reference): a domain with an optional port, then
# lowercase path components separated by `.`, `_`, `__` or dashes.
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MAX_REPOSITORY = 255

# Debian policy 5.6.1 / 5.6.12: package names, optional :arch, then =version or /release.
_APT_NAME = r"[a-z0-9][a-z0-9+.-]+"
_APT_VERSION = r"(?:[0-9]+:)?[A-Za-z0-9][A-Za-z0-9.+~-]*"
_APT = re.compile(rf"{_APT_NAME}(?::[a-z0-9-]+)?(?:={_APT_VERSION}|/[a-z0-9][a-z0-9.-]*)?")

# PEP 508 without direct URLs: name, extras, version specifiers, an environment marker.
_PEP508_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_EXTRAS = rf"\[\s*(?:{_PEP508_NAME}(?:\s*,\s*{_PEP508_NAME})*)?\s*\]"
_SPECIFIER = r"(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_SPECIFIERS = rf"\(?\s*{_SPECIFIER}(?:\s*,\s*{_SPECIFIER})*\s*\)?"
_MARKER = r"[A-Za-z0-9_.'\"<>=!~(), -]+"
_REQUIREMENT = re.compile(
    rf"{_PEP508_NAME}\s*(?:{_EXTRAS})?\s*(?:{_SPECIFIERS})?\s*(?:;\s*{_MARKER})?"
)

# PEP 440 (the canonical public form plus a local label).
_PEP440 = re.compile(
    r"(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?"
)
_NCCL = re.compile(r"[0-9]+(?:\.[0-9]+){1,3}")
_WHEELHOUSE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*/?")
# Characters a URL may carry into a Dockerfile RUN line: no shell metacharacters.
_URL_PATH = re.compile(r"[A-Za-z0-9._~/%+:@-]*")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_GPUS = re.compile(r"all|[0-9]{1,4}|device=[0-9A-Za-z,-]{1,200}")
MAX_TEXT = 300


def control_characters(value: str) -> str | None:
    """Newlines, escapes and other C0/C1 controls end a Dockerfile line or fake terminal
    output; no spec value may hold one."""
    bad = next((ch for ch in value if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0), None)
    bad = bad or next((ch for ch in value if ch in "\u2028\u2029"), None)
    return None if bad is None else f"holds a control character ({bad!r})"


def image_name(value: str) -> str | None:
    if _NAME.fullmatch(value):
        return None
    return "must be lowercase letters, digits, `.`, `_` or `-` (at most 128)"


def repository(value: str) -> str | None:
    """An OCI repository without tag or digest: [registry[:port]/]path."""
    if len(value) > MAX_REPOSITORY or not _REPOSITORY.fullmatch(value):
        return "must be an image repository such as ghcr.io/org/name (lowercase path)"
    return None


def tagged_image(value: str) -> str | None:
    """repository[:tag], as `base.image` takes it (the digest goes in base.digest)."""
    if "@" in value:
        return "takes repo:tag; put the digest in base.digest"
    name, tag = value, None
    last = value.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = value.rpartition(":")
    if repository(name) is not None:
        return "must be an image reference such as nvidia/cuda:12.4.1-base-ubuntu22.04"
    if tag is not None and not _TAG.fullmatch(tag):
        return "has a malformed tag (letters, digits, `_`, `.`, `-`; at most 128)"
    return None


def pinned_image(value: str) -> str | None:
    """repository[:tag]@sha256:<64 hex>, as the lock records the base."""
    name, at, digest = value.partition("@")
    if not at:
        return "must end in @sha256:<64 hex>"
    return tagged_image(name) or digest_reference(digest)


def digest_reference(value: str) -> str | None:
    return None if DIGEST.fullmatch(value) else "must be sha256:<64 lowercase hex>"


def tag(value: str) -> str | None:
    if _TAG.fullmatch(value):
        return None
    return "must be a tag: letters, digits, `_`, `.`, `-`, not starting with `.` or `-`"


def apt_package(value: str) -> str | None:
    if _APT.fullmatch(value):
        return None
    return "must be a Debian package name, optionally :arch and =version or /release"


def requirement(value: str) -> str | None:
    if value.lstrip().startswith("-"):
        return "is a pip option, not a requirement"
    if len(value) <= 500 and _REQUIREMENT.fullmatch(value.strip()):
        return None
    return "must be a requirement such as numpy==1.26.4 (name, extras, versions, marker)"


def version(value: str) -> str | None:
    return None if _PEP440.fullmatch(value) else "must be a version such as 2.5.1 (PEP 440)"


def nccl_version(value: str) -> str | None:
    return None if _NCCL.fullmatch(value) else "must be a version such as 2.21.5"


def wheelhouse(value: str) -> str | None:
    if _WHEELHOUSE.fullmatch(value) and ".." not in value.split("/"):
        return None
    return "must be a relative folder inside the spec folder (letters, digits, `._-`, `/`)"


def url(value: str, *, schemes: tuple[str, ...] = ("https", "http")) -> str | None:
    """An index or project URL: http(s), a host, no credentials, no shell metacharacters."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "is not a URL"
    if parts.scheme not in schemes or not parts.hostname:
        return f"must be a {' or '.join(schemes)} URL with a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (configure them in pip or the registry instead)"
    host = parts.hostname
    if not re.fullmatch(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|[0-9A-Fa-f:.]+", host):
        return "has a malformed host"
    if port is not None and not 0 < port < 65536:
        return "has a port outside 1-65535"
    if parts.query or parts.fragment or not _URL_PATH.fullmatch(parts.path):
        return "may hold only letters, digits and `._~/%+:@-` in its path (no query)"
    return None


def gpus(value: str) -> str | None:
    return None if _GPUS.fullmatch(value) else "must be all, a count, or device=LIST"


def label_value(value: str) -> str | None:
    """A label value goes into the Dockerfile JSON-quoted; only `$` (expanded by the builder)
    and backslashes (unescaped by it) would still change it."""
    if len(value) > 4 * MAX_TEXT:
        return f"is longer than {4 * MAX_TEXT} characters"
    return "may not hold $ or \\" if "$" in value or "\\" in value else None


def text(value: str) -> str | None:
    """Free text for labels (description): one line, no quoting or expansion characters."""
    if len(value) > MAX_TEXT:
        return f"is longer than {MAX_TEXT} characters"
    if any(ch in value for ch in '$\\"`'):
        return 'may not hold $, \\, " or ` (they are expanded or quoted in a Dockerfile)'
    return None


_SPDX_ID = re.compile(r"(?:LicenseRef-)?[A-Za-z0-9][A-Za-z0-9.+-]{0,63}")


def spdx_expression(value: str) -> str | None:
    """An SPDX license expression (`Apache-2.0`, `MIT OR BSD-3-Clause`): identifiers joined
    by AND / OR / WITH, with parentheses; anything else is not a license label."""
    words = value.replace("(", " ( ").replace(")", " ) ").split()
    depth, want_id = 0, True
    for word in words:
        if word == "(" and want_id:
            depth += 1
        elif word == ")" and not want_id and depth:
            depth -= 1
        elif word in ("AND", "OR", "WITH") and not want_id:
            want_id = True
        elif want_id and _SPDX_ID.fullmatch(word) and word not in ("AND", "OR", "WITH"):
            want_id = False
        else:
            return "must be an SPDX license expression, e.g. Apache-2.0 or MIT OR BSD-3-Clause"
    if want_id or depth or len(value) > 200:
        return "must be an SPDX license expression, e.g. Apache-2.0 or MIT OR BSD-3-Clause"
    return None
