"""Every finding clusterkit's own code creates during a test must carry a registered check id
(clusterkit/checks/registry.py); findings a test builds itself (made-up ids) are exempt."""

from __future__ import annotations

import sys
from typing import Any

from clusterkit.checks.model import Finding
from clusterkit.checks.registry import CHECKS

unregistered: dict[str, str] = {}  # id -> the module that created it


def install() -> None:
    """Wrap Finding.__init__ once: note an unregistered id created by clusterkit code."""
    original = Finding.__init__
    if getattr(original, "_check_ids", False):
        return

    def init(self: Finding, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.id not in CHECKS:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("clusterkit"):
                unregistered.setdefault(self.id, caller)

    init._check_ids = True  # type: ignore[attr-defined]
    Finding.__init__ = init  # type: ignore[method-assign]


def take() -> dict[str, str]:
    """The unregistered ids seen since the last call."""
    seen = dict(unregistered)
    unregistered.clear()
    return seen
