"""The `clusterkit` inventory variable -> ClusterSettings, validated key by key.

Ansible ignores a variable it does not use, so clusterkit's own settings live in one variable
named `clusterkit`. It is resolved per host like any variable and must come out the same on
every host: one cluster, one set of settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.graph import Origin
from clusterkit.inventory.model import ClusterSettings, Expectations
from clusterkit.inventory.yamlfile import LineMap, is_template
from clusterkit.versions import Constraint

VARIABLE = "clusterkit"
_TOP_KEYS = (
    "master",
    "master_port",
    "rdzv_port",
    "interface",
    "expect",
    "image",
    "bench",
    "network",
    "cost",
    "probe",
)
_SECTION_KEYS = ("bench", "network", "cost", "probe")  # read by later stages; mappings here
_VERSION_KEYS = ("driver", "cuda", "torch", "nccl", "python")
_EXPECT_KEYS = ("gpus_per_node", *_VERSION_KEYS)


class _Validator:
    """Checks one `clusterkit` mapping; errors name the key path and the line it is on."""

    def __init__(self, origin: Origin) -> None:
        self.path, self.line = origin

    def fail(self, key: str, problem: str, line: int | None, hint: str | None = None) -> None:
        raise InventoryError(self.path, problem, line=line or self.line, key=key, hint=hint)

    def mapping(self, key: str, value: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(key, f"must be a mapping, got {type(value).__name__}", _line(value))
        for name in value:
            if name not in allowed:
                close = difflib.get_close_matches(str(name), allowed, n=1)
                hint = (
                    f"did you mean {key}.{close[0]}?" if close else f"known: {', '.join(allowed)}"
                )
                self.fail(f"{key}.{name}", "unknown key", _key_line(value, name), hint=hint)
        return value

    def constraint(self, parent: Mapping[str, Any], key: str, name: str) -> str | None:
        """A version pin such as ">=550" or "2.5.1": rejected here, not when checks run."""
        text = self.text(parent, key, name)
        if text is not None:
            try:
                Constraint(text)
            except ValueError:
                self.fail(
                    f"{key}.{name}",
                    f"{text!r} is not a version constraint",
                    _key_line(parent, name),
                    hint='write a version or a range, e.g. "2.5.1" or ">=550,<560"',
                )
        return text

    def text(self, parent: Mapping[str, Any], key: str, name: str) -> str | None:
        value = parent.get(name)
        if value is None:
            return None
        line = _key_line(parent, name)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.fail(f"{key}.{name}", f"must be a string, got {type(value).__name__}", line)
        text = getattr(value, "source_text", None) or str(value)
        if not text.strip():
            self.fail(f"{key}.{name}", "must not be empty", line)
        if is_template(text):
            self.fail(
                f"{key}.{name}",
                f"is a Jinja template ({text!r})",
                line,
                hint="clusterkit settings must be literal values",
            )
        return text.strip()

    def integer(
        self, parent: Mapping[str, Any], key: str, name: str, low: int, high: int
    ) -> int | None:
        value = parent.get(name)
        if value is None:
            return None
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.strip().isdigit():
            number = int(value)
        if number is None or not low <= number <= high:
            self.fail(
                f"{key}.{name}",
                f"must be an integer {low}..{high}, got {value!r}",
                _key_line(parent, name),
            )
        return number


def _line(value: Any) -> int | None:
    return value.line if isinstance(value, LineMap) else None


def _key_line(mapping: Mapping[str, Any], key: str) -> int | None:
    return mapping.line_of(key) if isinstance(mapping, LineMap) else None


def parse_settings(value: Any, origin: Origin) -> ClusterSettings:
    """ClusterSettings from the resolved `clusterkit` variable (None: all defaults)."""
    check = _Validator(origin)
    top = check.mapping(VARIABLE, value, _TOP_KEYS)
    expect = check.mapping(f"{VARIABLE}.expect", top.get("expect"), _EXPECT_KEYS)
    for section in _SECTION_KEYS:
        if top.get(section) is not None and not isinstance(top[section], Mapping):
            check.fail(f"{VARIABLE}.{section}", "must be a mapping", _key_line(top, section))
    defaults = ClusterSettings()
    master_port = check.integer(top, VARIABLE, "master_port", 1, 65535)
    rdzv_port = check.integer(top, VARIABLE, "rdzv_port", 1, 65535)
    expectations = Expectations(
        gpus_per_node=check.integer(expect, f"{VARIABLE}.expect", "gpus_per_node", 0, 1024),
        **{name: check.constraint(expect, f"{VARIABLE}.expect", name) for name in _VERSION_KEYS},
    )
    return ClusterSettings(
        master=check.text(top, VARIABLE, "master"),
        master_port=defaults.master_port if master_port is None else master_port,
        rdzv_port=defaults.rdzv_port if rdzv_port is None else rdzv_port,
        interface=check.text(top, VARIABLE, "interface"),
        expect=expectations,
        image=check.text(top, VARIABLE, "image"),
        raw=dict(top),
    )
