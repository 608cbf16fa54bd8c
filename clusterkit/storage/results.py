"""What clusterkit/node/storage.py answers, typed: for each shared path, what the action did.

A node is not trusted: its answer is checked against these types where it arrives
(`parse_answer`, called by storage/stage.py), so an answer of another shape, an unknown key
or a path that was not asked for included, fails that node with the path of the first bad
value, and the verdicts read typed entries: a renamed key is a mypy error. The node program
ships with the control side, so there is no version to skew; change its output and these
types change with it (tests/unit/stages/test_shared_paths.py runs the real program's answers
through them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict, cast

from clusterkit.shape import shape_problem


class MalformedAnswer(ValueError):
    """A node's answer does not have this shape; the message names where."""


Action = Literal["write", "read", "remove"]


class Request(TypedDict):
    """What the stage sends the node program (its one argument, as JSON)."""

    action: Action
    paths: list[str]
    token: str


class PathEntry(TypedDict, total=False):
    """One path's outcome: what the action did, or its `error`, and the space there."""

    written: bool  # write: the token file was made
    token: str  # read: what the token file holds (its first 200 characters)
    error: str  # the action failed: the exception's name and why
    free_bytes: int  # absent when the filesystem could not be asked
    total_bytes: int


Answer = dict[str, PathEntry]  # path -> its entry, one for every path asked about


def parse_answer(raw: object, paths: Sequence[str]) -> Answer:
    """The node's answer about `paths`, checked: MalformedAnswer naming the first bad value."""
    # The paths first: a key the node made up is then only ever shown quoted.
    problem = _paths_problem(raw, paths) if isinstance(raw, dict) else None
    problem = problem or shape_problem(raw, Answer, "storage")
    if problem is not None:
        raise MalformedAnswer(problem)
    return cast(Answer, raw)


def _paths_problem(answer: dict[object, object], paths: Sequence[str]) -> str | None:
    """Every path asked about has its entry, and no other path has one."""
    for path in paths:
        if path not in answer:
            return f"storage: no entry for {path!r}"
    for key in answer:
        if key not in paths:
            return f"storage: unknown path {key!r:.40}"
    return None
