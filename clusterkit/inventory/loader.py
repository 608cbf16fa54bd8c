"""load_inventory(): an Ansible YAML inventory file -> Inventory, with Ansible's precedence.

Per host, variables merge like Ansible's VariableManager: `all` group vars from the inventory,
then the host's other groups (by depth, ansible_group_priority, name), then group_vars/all,
then group_vars/ for the other groups in the same order, then the host's own inventory vars,
then host_vars/. Every failure is an InventoryError; nothing else escapes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.connection import connection_fields
from clusterkit.inventory.graph import InventoryGraph, Origin, VarLayer, build_graph
from clusterkit.inventory.model import ClusterSettings, Host, Inventory
from clusterkit.inventory.settings import VARIABLE, parse_settings
from clusterkit.inventory.varsfiles import VarsDirectory
from clusterkit.inventory.yamlfile import load_yaml, read_text


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Read one YAML inventory file (and group_vars/ host_vars/ beside it)."""
    path = os.fspath(path)
    try:
        return _load(path)
    except InventoryError:
        raise
    except RecursionError:
        raise InventoryError(path, "nesting too deep to read") from None
    except OSError as exc:
        where = exc.filename or path
        raise InventoryError(str(where), f"cannot read: {exc.strerror or exc}") from None


def _load(path: str) -> Inventory:
    graph = build_graph(path, load_yaml(path, read_text(path)))
    if not graph.hosts:
        raise InventoryError(path, "the inventory defines no hosts")
    resolver = _VarsResolver(graph, os.path.dirname(os.path.realpath(path)))
    hosts: list[Host] = []
    settings_source: tuple[str, Any, Origin] | None = None
    for name in graph.hosts:
        values, origins, groups = resolver.host_vars(name)
        hosts.append(
            Host(name=name, groups=groups, vars=values, **connection_fields(name, values, origins))
        )
        setting = values.get(VARIABLE)
        origin = origins.get(VARIABLE, (path, None))
        if settings_source is None:
            settings_source = (name, setting, origin)
        elif setting != settings_source[1]:
            raise InventoryError(
                origin[0],
                f"differs between hosts {settings_source[0]!r} and {name!r}",
                line=origin[1],
                key=VARIABLE,
                hint="clusterkit settings are per cluster: define them once, under all.vars",
            )
    assert settings_source is not None
    _, setting, origin = settings_source
    settings = parse_settings(setting, origin)
    return Inventory(
        path=path, hosts=tuple(hosts), settings=settings, warnings=tuple(graph.warnings)
    )


class _VarsResolver:
    """Merges each host's variables; group layers are shared by hosts with the same groups."""

    def __init__(self, graph: InventoryGraph, base_dir: str) -> None:
        self.graph = graph
        self.group_files = VarsDirectory(base_dir, "group_vars")
        self.host_files = VarsDirectory(base_dir, "host_vars")
        self._group_cache: dict[frozenset[str], tuple[VarLayer, tuple[str, ...]]] = {}

    def host_vars(self, name: str) -> tuple[dict[str, Any], dict[str, Origin], tuple[str, ...]]:
        node = self.graph.hosts[name]
        group_layer, groups = self._groups_layer(frozenset(self.graph.host_groups(name)))
        merged = VarLayer(dict(group_layer.values), dict(group_layer.origins))
        merged.values.update(node.vars.values)
        merged.origins.update(node.vars.origins)
        for file_path, data in self.host_files.files_for(name):
            merged.update_from(file_path, data)
        return merged.values, merged.origins, groups

    def _groups_layer(self, groups: frozenset[str]) -> tuple[VarLayer, tuple[str, ...]]:
        cached = self._group_cache.get(groups)
        if cached is None:
            graph = self.graph
            ordered = sorted(groups - {"all"}, key=graph.sort_key)
            layer = VarLayer()
            for group in ("all", *ordered):
                layer.values.update(graph.groups[group].vars.values)
                layer.origins.update(graph.groups[group].vars.origins)
            for group in ("all", *ordered):
                for file_path, data in self.group_files.files_for(group):
                    layer.update_from(file_path, data)
            cached = self._group_cache[groups] = (layer, ("all", *ordered))
        return cached


def local_inventory() -> Inventory:
    """The inventory used when none is given: this machine, run locally, default settings."""
    host = Host(
        name="localhost",
        address="localhost",
        connection="local",
        python_interpreter=sys.executable,
        groups=("all", "ungrouped"),
    )
    return Inventory(path=None, hosts=(host,), settings=ClusterSettings())
