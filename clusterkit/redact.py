"""Secrets never leave in a report: values whose names look secret are replaced.

The probe collects only the variables the checks read, but facts also come from images
(`docker inspect` Env), run arguments, node output and messages quoting a setting; every report
passes through `redact` before it is printed or written, and so do clusterkit's own lines on
stderr, so a token that slips into facts is still never shown.

A value is recognised by the name in front of it, in every form a setting is written in:
shell (`NAME=value`, `export NAME="va lue"`, `NAME='value'`), config files (`name = value`,
YAML `password: value`), JSON and Python literals (`"token": "value"`, `'api_key': 'value'`,
also escaped one level down: `\\"token\\": \\"value\\"`), flags (`--token value`,
`--password=value`) and HTTP headers (`Authorization: Basic ...`); besides, the credential after
`Bearer` and the password in a URL (`https://user:password@host`) are replaced wherever they
are. When it cannot tell where a value ends, more is replaced, never less.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

REDACTED = "[redacted]"

# A name is split into words (`_`, `-`, `.`, camelCase); it is secret when one of its words is
# a strong secret word (or ends in one: `hftoken`, `PGPASSWORD`) ...
STRONG_WORDS = ("token", "secret", "password", "passwd", "passphrase", "credential")
STRONG_WORDS_ALONE = ("credentials", "authorization", "apikey", "accesskey", "privatekey")
# ... or when its last word is a weak one: `DB_PASS`, `NVIDIA_API_KEY`, docker's `auth`.
# `key` and `pass` alone are too common (a dictionary key, a test pass) to count by themselves.
WEAK_LAST_WORDS = ("key", "pass", "auth")
WEAK_ALONE = ("auth",)
# A name whose last word is one of these points at a secret without holding it
# (`ansible_ssh_private_key_file`, `HF_TOKEN_PATH`, `token_count`).
REFERENCE_WORDS = ("file", "path", "dir", "name", "id", "count", "type", "fingerprint")

_WORD_SPLIT = re.compile(r"[_\-]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NAME_SHAPE = re.compile(r"^[A-Za-z_][\w.\-]*$")
# Quick test: text without any of these has nothing to redact.
_ANY_HINT = re.compile(r"(?i)key|token|secret|pass|credential|auth|apikey|bearer|://")
# A name, maybe quoted (at any escape level) or a flag, at the start of a word (not a path's
# last part: `/etc/passwd: no such file`).
_CANDIDATE = re.compile(
    r"(?<![\w.\-\\/])(?:[rRbBuU]{1,2}(?=\\*[\"']))?(?P<open>\\*[\"'])?(?P<dash>--?)?(?P<name>[A-Za-z_][\w.\-]*)"
    r"(?P<close>\\*[\"'])?"
)
# The password of `scheme://user:password@host` (up to the last `@` before the path) and
# the credential after `Bearer`, wherever they are.
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s/?#:@]*:)[^\s/?#]+(?=@)")
_BEARER = re.compile(r"(?i)(\bbearer\s+)[^\s\"'\\]+")
_ESCAPED_QUOTE = re.compile(r"(?P<slashes>\\*)[\"']")
_LEVELS = {0: 0, 1: 1, 3: 2, 7: 3}  # backslashes in front of a quote -> escape level
_JSON_SCALAR = re.compile(r"[^\s,}\]]+")
_STRING_PREFIX = re.compile(r"[rRbBuUfF]{1,2}(?=\\*[\"'])")


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD_SPLIT.split(name) if word]


def is_secret_name(name: str) -> bool:
    """A setting's name (any case: `HF_TOKEN`, `api_key`, `X-Api-Key`) that holds a secret."""
    if not _NAME_SHAPE.match(name):
        return False
    words = _words(name.rsplit(".", 1)[-1])  # `host.key` is a check, `db.password` a secret
    if not words or words[-1] in REFERENCE_WORDS:
        return False
    if any(word.endswith(STRONG_WORDS) or word in STRONG_WORDS_ALONE for word in words):
        return True
    return words[-1] in WEAK_LAST_WORDS and (len(words) > 1 or words[-1] in WEAK_ALONE)


# -- where a value ends ---------------------------------------------------------------------


def _units(text: str, start: int, level: int) -> Iterator[tuple[str, int, int]]:
    """The characters of `text` from `start` as they read after `level` rounds of undoing
    backslash escapes: (character, its first raw index, the raw index after it)."""
    if level == 0:
        for index in range(start, len(text)):
            yield text[index], index, index + 1
        return
    below = _units(text, start, level - 1)
    for char, first, after in below:
        if char == "\\":
            escaped = next(below, None)
            if escaped is None:
                return
            yield escaped[0], first, escaped[2]
        else:
            yield char, first, after


def _quote_level(text: str, index: int) -> int | None:
    """How many rounds of backslash escaping the quote opening at `index` is under (a plain
    quote 0, one backslash 1, three 2), or None."""
    found = _ESCAPED_QUOTE.match(text, index)
    return _LEVELS.get(len(found["slashes"])) if found else None


def _string_end(text: str, start: int, quote: str, level: int) -> tuple[int, int]:
    """(closing quote's first raw index, the index after it) of a string whose content starts
    at `start`; an unterminated string runs to the end of the text. A doubled quote (YAML's
    and SQL's `''`, Python's and the shell's `'a''b'`) goes on."""
    units = _units(text, start, level)
    closing: tuple[int, int] | None = None
    for char, first, after in units:
        if closing is not None:
            if char != quote:
                return closing
            closing = None
        elif char == "\\":
            next(units, None)
        elif char == quote:
            closing = first, after
    return closing or (len(text), len(text))


def _quoted_span(text: str, index: int, level: int) -> tuple[int, int, int]:
    """(content start, content end, end) of the string whose quote opens at `index`."""
    start = index + 2**level  # past the quote and the backslashes that escape it
    return (start, *_string_end(text, start, text[start - 1], level))


def _shell_word_end(text: str, start: int) -> int:
    """The end of a shell word: quotes, backslashes and `a,b` are inside it; white space and
    `;` end it, and so does `, ` after something (`set A_KEY=x, B=1` lists two)."""
    index = start
    while index < len(text):
        char = text[index]
        if char.isspace() or char == ";":
            break
        if char == "," and index > start and text[index + 1 : index + 2].isspace():
            break
        if char == "\\":
            index += 2
        elif char == "'":  # the shell's single quotes: a backslash in them is just that
            closing = text.find("'", index + 1)
            index = len(text) if closing == -1 else closing + 1
        elif char == '"':
            index = _quoted_span(text, index, 0)[2]
        else:
            index += 1
    return min(index, len(text))


def _line_end(text: str, index: int) -> int:
    ends = [found for found in (text.find("\n", index), text.find("\r", index)) if found != -1]
    return min(ends, default=len(text))


def _value_lines_end(text: str, index: int, column: int) -> int:
    """The end of a config or YAML value: its line and the lines after it indented deeper than
    its name (a YAML block scalar `|`, a folded value, an INI continuation)."""
    end = probe = _line_end(text, index)
    while probe < len(text):
        start = probe + 1
        probe = _line_end(text, start)
        line = text[start:probe]
        body = line.lstrip(" \t")
        if not body:
            continue  # a blank line belongs to the value only if a deeper line follows
        if len(line) - len(body) <= column:
            break
        end = probe
    return end


# -- one name and its value -----------------------------------------------------------------


def _separator(text: str, index: int, quoted: bool, flag: bool) -> tuple[str, int] | None:
    """What joins the name to its value: ("=", after) for shell words, ("line", after) for
    config and YAML values, ("json", after) after a quoted name, ("word", after) for flags."""
    if quoted and text.startswith("]", index):
        index += 1  # environ["HF_TOKEN"] = ...
    sign_at = _spaces_end(text, index)
    sign = text[sign_at : sign_at + 1]
    if flag and not quoted:  # --password=value, --token value
        if sign_at == index and sign in ("=", ":"):
            return "=", index + 1
        return ("word", sign_at) if sign_at > index else None
    if sign in ("=", ":"):
        after = _spaces_end(text, sign_at + 1)
        if quoted:
            return "json", after
        if sign == "=" and after == sign_at + 1 == index + 1:
            return "=", after
        return "line", after
    if flag and (sign_at > index or sign == ","):  # "--token", "value"
        return "word", _spaces_end(text, sign_at + 1 if sign == "," else sign_at)
    return None


def _spaces_end(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t":
        index += 1
    return index


def _value_span(
    text: str, index: int, kind: str, opened: tuple[str, int] | None, column: int
) -> tuple[int, int]:
    """The characters to replace: a string's content (its quotes stay), else the value. A name
    inside an open string (`"HF_TOKEN=value"`, `-H "Authorization: Bearer value"`) has a value
    that ends where that string does."""
    if opened is not None:
        return index, _string_end(text, index, *opened)[0]
    prefix = _STRING_PREFIX.match(text, index) if kind == "json" else None
    quote_at = prefix.end() if prefix else index
    level = _quote_level(text, quote_at)
    if level is not None and (level > 0 or kind in ("json", "line")):
        start, end, after = _quoted_span(text, quote_at, level)
        if kind != "line" or _ends_value(text, after):
            return start, end
    if kind == "json":
        scalar = _JSON_SCALAR.match(text, index)
        return index, scalar.end() if scalar else index
    if kind == "line":
        return index, _value_lines_end(text, index, column)
    return index, _shell_word_end(text, index)


def _ends_value(text: str, index: int) -> bool:
    """Nothing but a comment or the next item after a quoted config value (`"a" b` is one)."""
    rest = text[index : _line_end(text, index)].lstrip(" \t")
    return not rest or rest[0] in "#,}]"


def _line_start(text: str, index: int) -> int:
    return max(text.rfind("\n", 0, index), text.rfind("\r", 0, index)) + 1


def _opened(open_quote: str) -> tuple[str, int]:
    """The quote and escape level of the string a name starts inside."""
    return open_quote[-1], _LEVELS.get(len(open_quote) - 1, 0)


def _named_values(text: str) -> str:
    pieces: list[str] = []
    done = 0
    for match in _CANDIDATE.finditer(text):
        if match.start() < done or not is_secret_name(match["name"]):
            continue
        open_quote, close_quote = match["open"], match["close"]
        quoted = bool(open_quote) and open_quote == close_quote
        after_name = match.end() if quoted else match.end("name")
        separator = _separator(text, after_name, quoted, bool(match["dash"]))
        if separator is None:
            continue
        kind, value_at = separator
        opened = _opened(open_quote) if open_quote and not quoted else None
        column = match.start("name") - _line_start(text, match.start("name"))
        start, end = _value_span(text, value_at, kind, opened, column)
        if end > start:
            pieces += [text[done:start], REDACTED]
            done = end
    return "".join(pieces) + text[done:]


def redact_text(text: str) -> str:
    """`text` with every secret in it replaced by [redacted]."""
    if not _ANY_HINT.search(text):
        return text
    text = _named_values(text)
    for pattern in (_URL_PASSWORD, _BEARER):
        text = pattern.sub(lambda match: match[1] + REDACTED, text)
    return text


def _is_secret_flag(item: Any) -> bool:
    """`--token` (its value is the next argument of an argv list)."""
    return isinstance(item, str) and item.startswith("-") and is_secret_name(item.lstrip("-"))


def _redact_list(items: list[Any] | tuple[Any, ...]) -> list[Any]:
    clean: list[Any] = []
    for index, item in enumerate(items):
        follows_flag = index > 0 and _is_secret_flag(items[index - 1])
        clean.append(REDACTED if follows_flag and isinstance(item, str) else redact(item))
    return clean


def redact(value: Any) -> Any:
    """A copy of `value` (dicts, lists, strings, as JSON holds them) with every secret-named
    entry's value, every secret inside a string and the argument after a secret flag in a list
    replaced by [redacted]."""
    if isinstance(value, dict):
        return {
            key: REDACTED
            if isinstance(key, str) and is_secret_name(key) and value[key] is not None
            else redact(value[key])
            for key in value
        }
    if isinstance(value, (list, tuple)):
        return _redact_list(value)
    if isinstance(value, str):
        return redact_text(value)
    return value
