"""Whether a stream gets colour: the terminal (Environment's *_isatty), NO_COLOR, FORCE_COLOR.

NO_COLOR (no-color.org) and FORCE_COLOR (force-color.org) count when set and not empty;
NO_COLOR wins when both are. FORCE_COLOR asks for colour where a CI log renders it, not for
a progress bar that redraws itself: that stays a terminal's.
"""

from __future__ import annotations

from collections.abc import Mapping


def wants_color(environ: Mapping[str, str], isatty: bool) -> bool:
    """Colour on a stream that `isatty` says is (or is not) a terminal, given the run's
    environment variables."""
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    return isatty
