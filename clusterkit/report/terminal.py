"""Whether a stream gets colour and live redrawing: the terminal, NO_COLOR and FORCE_COLOR.

NO_COLOR (no-color.org) and FORCE_COLOR (force-color.org) count when set and not empty;
NO_COLOR wins when both are. FORCE_COLOR asks for colour where a CI log renders it, not for
a progress bar that redraws itself: that stays a terminal's.
"""

from __future__ import annotations

import os
from typing import IO


def wants_color(stream: IO[str]) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return is_terminal(stream)


def is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
