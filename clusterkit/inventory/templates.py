"""The small part of Jinja that Ansible users write in connection variables.

`{{ var }}` and `{{ var | default(x) }}` (also `d(x)`, and `default(x, true)`) referring to
the same host's variables, with literal text around them: `ansible_user: "{{ lxc_user }}"`,
`ansible_host: "{{ inventory_hostname }}.lab"`. A variable that is itself such a template is
rendered first. Anything else (other filters, `{% %}`, lookups, hostvars) cannot be rendered
without Ansible: TemplateError says what, and the caller fails that host alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_EXPRESSION = re.compile(r"\{\{((?:(?!\}\}).)*)\}\}", re.S)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_LITERAL = r"""'[^'\\]*'|"[^"\\]*"|-?[0-9]+|true|false|True|False"""
_DEFAULT = re.compile(
    rf"\s*\|\s*(?:default|d)\s*\(\s*(?P<arg>{_LITERAL}|{_NAME})\s*"
    r"(?:,\s*(?P<boolean>true|false|True|False)\s*)?\)\s*"
)
_VARIABLE = re.compile(rf"\s*(?P<name>{_NAME})\s*")
_MAX_DEPTH = 10


class TemplateError(ValueError):
    """A template this module cannot render; the message names the variable or construct."""


def render(value: Any, variables: Mapping[str, Any], depth: int = 0) -> Any:
    """The value with its `{{ }}` expressions rendered; one whole expression keeps its type."""
    if not isinstance(value, str) or ("{{" not in value and "{%" not in value):
        return value
    if "{%" in value:
        raise TemplateError(f"{value!r} uses a {{% %}} statement, which only Ansible can run")
    if depth > _MAX_DEPTH:
        raise TemplateError(f"templates refer to each other more than {_MAX_DEPTH} deep")
    whole = _EXPRESSION.fullmatch(value.strip())
    if whole and value.strip() == value:
        return _evaluate(whole.group(1), variables, depth)
    pieces: list[str] = []
    position = 0
    for match in _EXPRESSION.finditer(value):
        pieces.append(value[position : match.start()])
        result = _evaluate(match.group(1), variables, depth)
        pieces.append("" if result is None else str(result))
        position = match.end()
    rest = value[position:]
    if "{{" in rest:
        raise TemplateError(f"{value!r} has an unclosed '{{{{'")
    return "".join(pieces) + rest


def _evaluate(expression: str, variables: Mapping[str, Any], depth: int) -> Any:
    variable = _VARIABLE.match(expression)
    if not variable:
        raise TemplateError(f"'{{{{{expression}}}}}' is more than a variable reference")
    name, rest = variable.group("name"), expression[variable.end() :]
    if rest.startswith(("(", ".", "[")):
        raise TemplateError(f"'{{{{{expression}}}}}' is more than a variable reference")
    defined = name in variables
    result = render(variables[name], variables, depth + 1) if defined else None
    while rest.strip():
        default = _DEFAULT.match(rest)
        if not default:
            raise TemplateError(
                f"'{{{{{expression}}}}}': only the default filter can be rendered here"
            )
        if not defined or (_truthy(default.group("boolean")) and not result):
            result, defined = _argument(default.group("arg"), variables, depth), True
        rest = rest[default.end() :]
    if not defined:
        raise TemplateError(f"variable {name!r} is not defined for this host")
    return result


def _argument(text: str, variables: Mapping[str, Any], depth: int) -> Any:
    if text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    if text.lstrip("-").isdigit():
        return int(text)
    if text not in variables:
        raise TemplateError(f"variable {text!r} (a default) is not defined for this host")
    return render(variables[text], variables, depth + 1)


def _truthy(flag: str | None) -> bool:
    return flag in ("true", "True")
