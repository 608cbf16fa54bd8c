"""Node and inventory text as HTML: one printable line, bounded, every markup character
escaped.

Apart so that the page and every heat map escape node text the one same way, without the
maps importing the page that includes them.
"""

from __future__ import annotations

import html

from clusterkit.escape import printable

TEXT_MAX = 2000  # characters of one message, expected/found or remedy
NAME_MAX = 128  # characters of a host name, check id or rule


def text(value: object, limit: int = TEXT_MAX) -> str:
    """Node or inventory text as HTML, in an element or a quoted attribute: one printable
    line (control characters as escapes), at most `limit` characters, every markup character
    escaped, quotes included."""
    line = printable(value)
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return html.escape(line, quote=True)
