"""Every stage's name, declared once, in the order a report shows them.

The Stage classes take their `name` from `StageName` (a misspelled one is a mypy error, and
fails at import: `contract/stage.py`), the report orders its stages by `STAGE_ORDER`, and the
CLI's `--skip` offers `SKIPPABLE`. Standard library only, so the CLI stays light to import.
"""

from __future__ import annotations

from typing import Literal, get_args

StageName = Literal[
    "connect", "probe", "static", "storage", "network", "image", "dcgm", "bench", "launch"
]
# The order of the text, JUnit and HTML reports: the order a check runs its stages in.
STAGE_ORDER: tuple[StageName, ...] = get_args(StageName)
# What `--skip` may leave out: the slow stages, none that the others depend on.
SKIPPABLE: tuple[StageName, ...] = ("network", "image", "dcgm", "bench")

_RANK: dict[str, int] = {name: place for place, name in enumerate(STAGE_ORDER)}


def stage_rank(stage: str) -> int:
    """Where a stage's findings go in a report: its place in STAGE_ORDER, or last for a
    name not declared there."""
    return _RANK.get(stage, len(STAGE_ORDER))
