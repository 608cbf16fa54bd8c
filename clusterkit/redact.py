"""Secrets never leave in a report: values whose names look secret are replaced.

The probe collects only the variables the checks read, but facts also come from images
(`docker inspect` Env), run arguments and messages quoting `NAME=value`; every report passes
through `redact` before it is printed or written, so a token that slips into facts is still
never shown.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
# Words that mark a variable as holding a secret (matched anywhere in an upper-case name).
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASS", "CREDENTIAL")
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# NAME=value inside a string (a run argument, a message): the value ends at white space,
# a comma, a semicolon or a quote.
_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=([^\s,;'\"]+)")


def is_secret_name(name: str) -> bool:
    """An environment-variable-shaped name (upper case) containing a secret word."""
    return bool(_NAME.match(name)) and any(word in name for word in SECRET_WORDS)


def _redact_text(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"{name}={REDACTED}" if is_secret_name(name.upper()) else match.group(0)

    return _ASSIGNMENT.sub(replace, text) if "=" in text else text


def redact(value: Any) -> Any:
    """A copy of `value` (dicts, lists, strings, as JSON holds them) with every secret-named
    entry's value, and every `SECRET_NAME=value` inside a string, replaced by [redacted]."""
    if isinstance(value, dict):
        return {
            key: REDACTED
            if isinstance(key, str) and is_secret_name(key) and value[key] is not None
            else redact(value[key])
            for key in value
        }
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _redact_text(value)
    return value
