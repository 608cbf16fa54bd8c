"""select_hosts(): the subset an Ansible `--limit` pattern names.

Terms are separated by commas (or colons when there is no comma); each is a host name, a group
name, an fnmatch glob, or `~regex`. Plain terms add hosts, `&term` keeps only hosts also in
term, `!term` removes hosts; as in Ansible, plain terms apply first, then `&`, then `!`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
import re

from clusterkit.errors import UsageError
from clusterkit.inventory.model import Host, Inventory

_GLOB_CHARS = frozenset("*?[")


def split_terms(limit: str) -> list[str]:
    """The terms of a limit string, like Ansible's split_host_pattern."""
    text = limit.strip()
    if "," in text:
        parts = text.split(",")
    else:
        try:
            ipaddress.IPv6Address(text.lstrip("!&"))
            parts = [text]
        except ValueError:
            parts = _split_colons(text)
    return [part.strip() for part in parts if part.strip()]


def _split_colons(text: str) -> list[str]:
    """Split on colons that are not inside [...] (subscripts, bracketed addresses)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
        if char == ":" and not depth:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _matches(term: str, hosts: tuple[Host, ...]) -> list[Host]:
    """Hosts a single term names: groups first; host names when no group matched or a glob."""
    if term in ("all", "*"):
        return list(hosts)
    if term.startswith("~"):
        try:
            regex = re.compile(term[1:])
        except re.error as exc:
            raise UsageError(f"--limit: bad regular expression {term!r}: {exc}") from None

        def match(name: str) -> bool:
            return regex.match(name) is not None

    elif _GLOB_CHARS & set(term):

        def match(name: str) -> bool:
            return fnmatch.fnmatchcase(name, term)

    else:

        def match(name: str) -> bool:
            return name == term

    by_group = [host for host in hosts if any(match(group) for group in host.groups)]
    if by_group and not (term.startswith("~") or _GLOB_CHARS & set(term) or "." in term):
        return by_group
    by_name = {host.name for host in hosts if match(host.name)}
    chosen = {host.name for host in by_group} | by_name
    return [host for host in hosts if host.name in chosen]


def select_hosts(inventory: Inventory, limit: str) -> Inventory:
    """The inventory restricted to the hosts `limit` names (Ansible --limit semantics)."""
    terms = split_terms(limit)
    if not terms:
        raise UsageError(f"--limit {limit!r} names no hosts")
    plain = [term for term in terms if term[0] not in "!&"]
    intersect = [term[1:] for term in terms if term[0] == "&"]
    exclude = [term[1:] for term in terms if term[0] == "!"]
    chosen: set[str] = set()
    for term in plain or ["all"]:
        found = _matches(term, inventory.hosts)
        if not found:
            raise UsageError(
                f"--limit pattern {term!r} matches no host or group of {_where(inventory)}"
            )
        chosen.update(host.name for host in found)
    for term in intersect:
        found = _matches(term, inventory.hosts)
        if not found:
            raise UsageError(
                f"--limit pattern '&{term}' matches no host or group of {_where(inventory)}"
            )
        chosen &= {host.name for host in found}
    for term in exclude:
        chosen -= {host.name for host in _matches(term, inventory.hosts)}
    if not chosen:
        raise UsageError(f"--limit {limit!r} leaves no hosts of {_where(inventory)}")
    kept = tuple(host for host in inventory.hosts if host.name in chosen)
    return dataclasses.replace(inventory, hosts=kept)


def _where(inventory: Inventory) -> str:
    return inventory.path or "the local inventory"
