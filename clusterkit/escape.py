"""Text from inventories and nodes, made safe to print on one line.

Host names, addresses, error messages and node output reach the terminal and CI logs; a
newline or an escape sequence in them could forge a line (a fake `verdict: PASS`), move the
cursor or recolour the screen. Control, line-separator and format characters are printed as
Python-style escapes instead (`\\n`, `\\x1b`, `\\u202e`); everything else is left as it is.
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def printable(text: object) -> str:
    """`text` as one line of harmless characters (a backslash is doubled only when something
    else in the text had to be escaped, so ordinary Windows-style paths read as written)."""
    value = str(text)
    if value.isprintable() and "\\" not in value:
        return value
    if not any(_unsafe(char) for char in value):
        return value
    return "".join(_escaped(char) if _unsafe(char) or char == "\\" else char for char in value)
