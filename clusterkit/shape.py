"""The checker every message from a node passes where it arrives: decoded JSON against a type.

Apart from the facts' types (facts.py): it checks any TypedDict, the probe's facts as much as
the network, bench, storage, image and launch messages and a stored baseline, and holds no
type of its own. A node is not trusted: the first value of the wrong type, or the first
unknown key, is named by its path, shortened so that node text stays bounded.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Literal, Union, get_args, get_origin


def shape_problem(value: object, expected: object, path: str) -> str | None:
    """Where decoded JSON `value` is not of type `expected` (a TypedDict, list, dict, union,
    Literal or scalar), as `path: what`; None when it is. Every message from a node is
    checked with it where it arrives."""
    if typing.is_typeddict(expected):
        return _typeddict_problem(value, expected, path)
    origin = get_origin(expected)
    if origin in (Union, types.UnionType):
        reasons = [shape_problem(value, option, path) for option in get_args(expected)]
        if None in reasons:
            return None
        return next(r for r in reasons if r is not None)
    if origin is Literal:
        return None if value in get_args(expected) else f"{path}: {_shown(value)} not allowed"
    if origin is list:
        if not isinstance(value, list):
            return _wrong(path, "a list", value)
        (item,) = get_args(expected)
        return _first(shape_problem(v, item, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            return _wrong(path, "an object", value)
        _, item = get_args(expected)
        return _first(shape_problem(v, item, f"{path}.{k}") for k, v in value.items())
    return _scalar_problem(value, expected, path)


def _typeddict_problem(value: object, expected: object, path: str) -> str | None:
    if not isinstance(value, dict):
        return _wrong(path, "an object", value)
    fields = _fields(expected)
    required: frozenset[str] = getattr(expected, "__required_keys__", frozenset())
    for key in fields:  # declaration order: the same key is named every run
        if key in required and key not in value:
            return f"{path}: no {key!r}"
    for key, item in value.items():
        if key not in fields:
            return f"{path}: unknown key {_shown(key)}"
        problem = shape_problem(item, fields[key], f"{path}.{key}")
        if problem is not None:
            return problem
    return None


@cache
def _fields(typeddict: object) -> dict[str, object]:
    return typing.get_type_hints(typeddict)


_SCALARS: dict[object, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
    type(None): (type(None),),
    None: (type(None),),
}


def _scalar_problem(value: object, expected: object, path: str) -> str | None:
    accepted = _SCALARS[expected]
    # JSON's true is no number: a bool where a count belongs is the wrong shape.
    if isinstance(value, accepted) and not (isinstance(value, bool) and bool not in accepted):
        return None
    name = "null" if expected in (None, type(None)) else getattr(expected, "__name__", "?")
    return _wrong(path, name, value)


def _wrong(path: str, wanted: str, value: object) -> str:
    return f"{path}: {wanted} expected, got {_shown(value)}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _first(problems: typing.Iterable[str | None]) -> str | None:
    return next((p for p in problems if p is not None), None)
