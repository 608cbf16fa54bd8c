"""mypy plugin: reading a key that clusterkit's TypedDicts do not declare is an error.

mypy checks `facts["gpus"]` against the TypedDict but lets `facts.get("gpu")` through as
`object` (a TypedDict may hold more keys than it declares), and `.get` is how optional
facts are read: a renamed fact would become a check that silently skips. clusterkit's
TypedDicts describe exactly what the node sends (clusterkit/facts.py checks it on
arrival), so for them an undeclared key in `.get` is reported like one in `[...]`.
Configured in pyproject.toml (`[tool.mypy] plugins`).
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.errorcodes import TYPEDDICT_ITEM
from mypy.nodes import StrExpr
from mypy.plugin import MethodContext, Plugin
from mypy.plugins.default import typed_dict_get_callback
from mypy.types import Type, TypedDictType, get_proper_type

OWN = "clusterkit."
GET = "typing.Mapping.get"


def _declared_keys_only(ctx: MethodContext) -> Type:
    typed = get_proper_type(ctx.type)
    if (
        isinstance(typed, TypedDictType)
        and typed.fallback.type.fullname.startswith(OWN)
        and ctx.args
        and len(ctx.args[0]) == 1
        and isinstance(key := ctx.args[0][0], StrExpr)
        and key.value not in typed.items
    ):
        name = typed.fallback.type.name
        ctx.api.fail(
            f'TypedDict "{name}" has no key "{key.value}"', ctx.context, code=TYPEDDICT_ITEM
        )
    return typed_dict_get_callback(ctx)


class ClosedFacts(Plugin):
    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        return _declared_keys_only if fullname == GET else None


def plugin(version: str) -> type[Plugin]:
    return ClosedFacts
