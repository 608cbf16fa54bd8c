"""What goes to a node: a node script with the prelude's text in place of its import.

A node script imports its runtime like any module (`from clusterkit.nodescript.prelude import
emit, run_tool`), so it is importable and tested where clusterkit is installed. Nodes may lack
clusterkit, so the text they are sent has that line replaced by the prelude itself: one file,
shipped as before (over stdin, behind the bootstrap, or as `-c`), with the same helpers as
every other node script. Composed once per process; a regex, not `ast`, keeps it cheap.

Part of the transport layer, as what travels: the srun transport ships its relay composed
here, and nodescript/run.py (which runs node scripts over transports) sits above it.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

PRELUDE = "clusterkit.nodescript.prelude"
# The import at the top level of a script (column 0), on one line or parenthesised.
_IMPORT = re.compile(r"^from clusterkit\.nodescript\.prelude import (?:\([^)]*\)|[^\n(]*)\n", re.M)
_DOCSTRING = re.compile(r'\A"""(?:.|\n)*?"""\n')


@cache
def prelude_source() -> str:
    """The prelude as it is inserted: its module docstring dropped, its ends marked."""
    text = resources.files("clusterkit.nodescript").joinpath("prelude.py").read_text()
    body = _DOCSTRING.sub("", text, count=1).strip()
    return f"# --- {PRELUDE} (inserted for the node) ---\n{body}\n# --- end of {PRELUDE} ---\n"


@cache
def compose(source: str) -> str:
    """`source` with its one top-level prelude import replaced by the prelude."""
    found = list(_IMPORT.finditer(source))
    if len(found) != 1:
        raise ValueError(f"a node script imports {PRELUDE} once at its top level, not {len(found)}")
    return source[: found[0].start()] + prelude_source() + source[found[0].end() :]


@cache
def node_script(module: str) -> str:
    """The composed text of the node script `module`, e.g. "clusterkit.probe.collector"."""
    package, _, name = module.rpartition(".")
    return compose(resources.files(package).joinpath(f"{name}.py").read_text())
