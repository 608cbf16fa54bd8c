"""Ansible INI inventories, read with the rules of Ansible's ini inventory plugin.

Sections are `[group]` (hosts), `[group:vars]` and `[group:children]`; lines before the first
section are hosts of `ungrouped`. A host line is split like a shell line (`#` starts a comment
at a word boundary), its first word is a host pattern (`node[01:16]`, `[a:f]`, strides,
`host:port`) and the rest are `key=value` variables. Every value is read as a Python literal when
it is one (`2222` is an int, `"[1, 2]"` a list, `True` a bool) and kept as text otherwise; on a
host line the shell-style split has already removed quotes, so `port="22"` is the int 22, while
in `[group:vars]` the value after `=` is taken as written, quotes included, so `x="22"` stays the
string "22". A `[g:vars]` or `[p:children]` naming a group that no section defines is an error,
as it is for Ansible.
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from typing import Any, NoReturn

from clusterkit.inventory.graph import GraphBuilder
from clusterkit.inventory.hostpatterns import HostPatternError, expand_host_key
from clusterkit.inventory.yamlfile import UnsafeText

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_COMMENT_MARKERS = ("#", ";")
# A host line without quotes, escapes or comments splits like a shell line on blanks.
_PLAIN_LINE = re.compile(r"[^'\"\\#\s]+(?:[ \t]+[^'\"\\#\s]+)*")
# Text that literal_eval can only refuse: a name, dotted address, path or user@host.
_PLAIN_TEXT = re.compile(r"[A-Za-z_][\w.\-/:@]*|[0-9]+(?:\.[0-9]+){2,}", re.ASCII)
_STATES = ("hosts", "children", "vars")
_HINT = "see https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html"


def ini_value(text: str) -> Any:
    """Ansible's typing of an INI value: a Python literal when it parses as one, else text."""
    if text.isdigit() and text.isascii() and (text[0] != "0" or text == "0"):
        return int(text)  # the common cases first: literal_eval is slow
    if _PLAIN_TEXT.fullmatch(text) and text not in ("True", "False", "None"):
        return text  # a name, address or path: never a Python literal
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    """What Ansible keeps of a literal: tuples and sets become lists, bytes become text, and
    types a variable cannot hold (complex, Ellipsis) become their text; bytes become text that
    is never a template (Ansible lists it as unsafe)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, bytes):  # Ansible keeps it as text it never templates
        return UnsafeText(value.decode("utf-8", errors="replace"))
    if value is Ellipsis:
        return "..."
    if isinstance(value, complex):
        return str(value)
    return value


class _Pending:
    """A group named by `[g:vars]` or `[p:children]` before any section defines it."""

    def __init__(self, line: int, state: str, parents: list[str]) -> None:
        self.line, self.state, self.parents = line, state, parents


class _IniReader:
    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder
        self.pending: dict[str, _Pending] = {}
        self.group, self.state = "ungrouped", "hosts"

    def fail(self, message: str, line: int, hint: str | None = _HINT) -> NoReturn:
        self.builder.error(message, line, hint=hint)

    def read(self, text: str) -> None:
        number = 0
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line[0] in _COMMENT_MARKERS:
                continue
            section = _SECTION.match(line)
            if section:
                self.section(section.group(1), section.group(2), line, number)
            elif line.startswith("[") and line.endswith("]"):
                self.fail(
                    f"invalid section header {line!r}",
                    number,
                    hint="a header is [group], [group:vars] or [group:children], with no spaces",
                )
            elif self.state == "hosts":
                self.hosts(line, number)
            elif self.state == "vars":
                self.variable(line, number)
            else:
                self.child(line, number)
        for name, pending in self.pending.items():
            if pending.state == "vars":
                self.fail(
                    f"section [{name}:vars] is for a group no section defines",
                    pending.line,
                    hint=f"add a [{name}] section (it may be empty) or fix the name",
                )
            self.fail(
                f"section [{pending.parents[-1]}:children] names group {name!r}, "
                "which no section defines",
                pending.line,
                hint=f"add a [{name}] section (it may be empty)",
            )

    def section(self, name: str, state: str | None, line: str, number: int) -> None:
        state = state or "hosts"
        if state not in _STATES:
            self.fail(
                f"section {line!r} has unknown type {state!r}",
                number,
                hint="the types are :vars and :children",
            )
        self.group, self.state = name, state
        groups = self.builder.graph.groups
        if name not in groups:
            if state == "vars" and name not in self.pending:
                self.pending[name] = _Pending(number, state, [])
            self.builder.add_group(name)
        pending = self.pending.get(name)
        if pending is not None and state != "vars":
            if pending.state == "children":
                self._adopt(name, number)
            elif pending.state == "vars":
                del self.pending[name]

    def _adopt(self, name: str, number: int) -> None:
        """A group listed as a child before its own section: join the parents waiting for it."""
        for parent in self.pending[name].parents:
            self.builder.add_child(parent, name, number)
            waiting = self.pending.get(parent)
            if waiting is not None and waiting.state == "children":
                self._adopt(parent, number)
        self.pending.pop(name, None)

    def hosts(self, line: str, number: int) -> None:
        try:
            plain = _PLAIN_LINE.fullmatch(line)
            tokens = line.split() if plain else shlex.split(line, comments=True)
        except ValueError as exc:
            self.fail(f"cannot split host line {line!r}: {exc}", number, hint="close the quote")
        if not tokens:
            self.fail(f"expected a host name, got {line!r}", number)
        pattern = tokens[0]
        try:
            names, port = expand_host_key(pattern, self.builder.max_range_hosts)
        except HostPatternError as exc:
            self.builder.error(str(exc), number, key=pattern)
        if pattern.strip().endswith(":") and port is None:
            self.fail(
                f"host pattern {pattern!r} ends in ':'",
                number,
                hint="':' is reserved for a port: write host:22",
            )
        if "---" in (name.strip() for name in names):
            self.fail(
                "'---' is not a host name (a YAML document start?)",
                number,
                hint="a YAML inventory must be a mapping of groups",
            )
        variables: dict[str, Any] = {}
        for token in tokens[1:]:
            if "=" not in token:
                self.fail(
                    f"expected key=value after the host name, got {token!r}",
                    number,
                    hint="write host variables as key=value; quote values with spaces",
                )
            key, value = token.split("=", 1)
            variables[key] = ini_value(value)
        for name in names:
            host = self.builder.add_host(self.group, name, port, number)
            for key, value in variables.items():
                host.vars.set(key, value, (self.builder.path, number))

    def variable(self, line: str, number: int) -> None:
        if "=" not in line:
            self.fail(
                f"expected key=value in [{self.group}:vars], got {line!r}",
                number,
                hint="a :vars section holds one key=value per line",
            )
        key, value = (part.strip() for part in line.split("=", 1))
        group = self.builder.graph.groups[self.group]
        self.builder.set_group_var(group, key, ini_value(value), number)

    def child(self, line: str, number: int) -> None:
        match = _GROUP_NAME.match(line)
        if not match:
            self.fail(
                f"expected a group name in [{self.group}:children], got {line!r}",
                number,
                hint="one group name per line, no spaces or ':'",
            )
        child = match.group(1)
        if child in self.builder.graph.groups:
            self.builder.add_child(self.group, child, number)
        elif child in self.pending:
            self.pending[child].parents.append(self.group)
        else:
            self.pending[child] = _Pending(number, "children", [self.group])


def add_ini_source(builder: GraphBuilder, path: str, text: str) -> None:
    """Add one INI inventory to the graph, or raise an InventoryError naming file and line."""
    builder.path = path
    _IniReader(builder).read(text)
