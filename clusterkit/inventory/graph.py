"""Build the group/host graph of an Ansible YAML inventory, with Ansible's yaml plugin rules.

Sections are walked in the order they are written (so host order is first appearance), a bare
string stands for a one-key mapping, null sections are skipped, `all` and `ungrouped` always
exist, and a child-group cycle is an error. Every variable remembers the file and line it
came from, so a later error can point at it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from clusterkit.errors import InventoryError
from clusterkit.inventory.hostpatterns import (
    DEFAULT_MAX_RANGE_HOSTS,
    HostPatternError,
    expand_host_key,
)
from clusterkit.inventory.yamlfile import LineMap

Origin = tuple[str, int | None]  # (file, line) a variable was set at


@dataclass
class VarLayer:
    """Variables with the file and line each was last set at."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)

    def set(self, key: str, value: Any, origin: Origin) -> None:
        self.values[key] = value
        self.origins[key] = origin

    def update_from(self, path: str, mapping: Mapping[str, Any]) -> None:
        line_of = mapping.line_of if isinstance(mapping, LineMap) else (lambda _key: None)
        for key, value in mapping.items():
            self.values[key] = value
            self.origins[key] = (path, line_of(key))


@dataclass
class GroupNode:
    name: str
    vars: VarLayer = field(default_factory=VarLayer)
    priority: int = 1
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    depth: int = 0


@dataclass
class HostNode:
    name: str
    origin: Origin  # where the host is first defined
    vars: VarLayer = field(default_factory=VarLayer)
    direct_groups: list[str] = field(default_factory=list)


@dataclass
class InventoryGraph:
    """Groups and hosts as Ansible's inventory holds them after parsing and reconciling."""

    path: str
    groups: dict[str, GroupNode] = field(default_factory=dict)
    hosts: dict[str, HostNode] = field(default_factory=dict)  # insertion = first appearance
    warnings: list[str] = field(default_factory=list)

    def ancestors(self, group: str) -> set[str]:
        seen: set[str] = set()
        pending = list(self.groups[group].parents)
        while pending:
            name = pending.pop()
            if name not in seen:
                seen.add(name)
                pending.extend(self.groups[name].parents)
        return seen

    def host_groups(self, host: str) -> set[str]:
        """Every group the host is in, directly or through a child group ("all" included)."""
        groups: set[str] = set()
        for name in self.hosts[host].direct_groups:
            groups.add(name)
            groups |= self.ancestors(name)
        return groups

    def sort_key(self, group: str) -> tuple[int, int, str]:
        """Ansible's group-vars merge order: depth from all, ansible_group_priority, name."""
        node = self.groups[group]
        return (node.depth, node.priority, node.name)


_SECTIONS = ("vars", "children", "hosts")


def _line_lookup(mapping: Mapping[Any, Any], default: int | None) -> Callable[[Any], int | None]:
    """key -> line it is written on (`default` for mappings that carry no lines)."""
    if isinstance(mapping, LineMap):
        return mapping.line_of
    return lambda _key: default


class GraphBuilder:
    """Adds the groups, hosts and variables of one or more sources to one graph, as Ansible's
    inventory does; `path` is the source being read (errors and origins name it)."""

    def __init__(self, path: str, max_range_hosts: int = DEFAULT_MAX_RANGE_HOSTS) -> None:
        self.graph = InventoryGraph(path)
        self.path = path
        self.max_range_hosts = max_range_hosts  # the most names one host key may expand to
        self._add_group("all")
        self._add_group("ungrouped")
        self._add_child("all", "ungrouped", None)

    def error(self, message: str, line: int | None, key: str | None = None, **kw: Any) -> NoReturn:
        raise InventoryError(self.path, message, line=line, key=key, **kw)

    def add_group(self, name: str) -> GroupNode:
        return self._add_group(name)

    def add_child(self, parent: str, child: str, line: int | None) -> None:
        self._add_child(parent, child, line)

    def add_host(self, group: str, name: str, port: int | None, line: int | None) -> HostNode:
        """The host (created on first sight, when `port` applies), now also in `group`."""
        if not name:
            self.error("empty host name", line)
        host = self.graph.hosts.get(name)
        if host is None:
            host = self.graph.hosts[name] = HostNode(name, (self.path, line))
            if port:
                host.vars.set("ansible_port", port, (self.path, line))
        if group not in host.direct_groups:
            host.direct_groups.append(group)
        return host

    def set_group_var(self, group: GroupNode, var: str, value: Any, line: int | None) -> None:
        if var == "ansible_group_priority":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                self.error("must be an integer", line, key=var)
            try:
                group.priority = int(value)
            except ValueError:
                self.error(f"must be an integer, got {value!r}", line, key=var)
            return
        group.vars.set(var, value, (self.path, line))

    def _add_group(self, name: str) -> GroupNode:
        node = self.graph.groups.get(name)
        if node is None:
            node = self.graph.groups[name] = GroupNode(name)
        return node

    def _add_child(self, parent: str, child: str, line: int | None) -> None:
        if parent == child:
            self.error(f"group {child!r} lists itself as a child", line, key=child)
        groups = self.graph.groups
        if child in groups[parent].children:
            return
        if child in self.graph.ancestors(parent):
            self.error(
                f"child-group cycle: {child!r} is already an ancestor of {parent!r}",
                line,
                key=child,
                hint="a group may not contain itself through its children",
            )
        groups[parent].children.append(child)
        if parent not in groups[child].parents:
            groups[child].parents.append(parent)

    def parse_group(self, name: Any, data: Any, line: int | None, top_level: bool) -> str:
        if not isinstance(name, str):
            self.error(f"group name {name!r} must be a string; quote it", line)
        if data is not None and not isinstance(data, Mapping):
            if top_level:
                self.graph.warnings.append(
                    f"{self.path}:{line}: skipping {name!r}: not a group definition (a mapping)"
                )
                return name
            if name not in self.graph.groups:
                self.error(
                    f"child group {name!r} must be a mapping or empty, got {type(data).__name__}",
                    line,
                    key=name,
                )
            return name
        group = self._add_group(name)
        if data is None:
            return name
        for key, value in data.items():
            key_line = data.line_of(key) if isinstance(data, LineMap) else line
            if key in _SECTIONS and isinstance(value, str):
                value = {value: None}
            if value is None:
                continue
            if not isinstance(value, Mapping):
                if key in _SECTIONS:
                    self.error(
                        f"{key} of group {name!r} must be a mapping, got {type(value).__name__}",
                        key_line,
                        key=key,
                    )
                self.graph.warnings.append(
                    f"{self.path}:{key_line}: skipping key {key!r} in group {name!r}: not a mapping"
                )
                continue
            value_lines = _line_lookup(value, key_line)
            if key == "vars":
                self._set_group_vars(group, value, value_lines)
            elif key == "children":
                for child, child_data in value.items():
                    child_line = value_lines(child)
                    child = self.parse_group(child, child_data, child_line, top_level=False)
                    self._add_child(name, child, child_line)
            elif key == "hosts":
                for host_key, host_vars in value.items():
                    self._parse_host(name, host_key, host_vars, value_lines(host_key))
            else:
                self.graph.warnings.append(
                    f"{self.path}:{key_line}: skipping unexpected key {key!r} in group "
                    f"{name!r}: only vars, children and hosts are valid"
                )
        return name

    def _set_group_vars(self, group: GroupNode, values: Mapping[str, Any], lines: Any) -> None:
        for var, value in values.items():
            line = lines(var)
            if not isinstance(var, str):
                self.error(f"variable name {var!r} must be a string", line)
            self.set_group_var(group, var, value, line)

    def _parse_host(self, group: str, key: Any, host_vars: Any, line: int | None) -> None:
        if not isinstance(key, str):
            self.error(f"host name {key!r} must be a string; quote it", line)
        try:
            names, port = expand_host_key(key, self.max_range_hosts)
        except HostPatternError as exc:
            self.error(str(exc), line, key=key)
        if host_vars is not None and not isinstance(host_vars, Mapping):
            self.error(
                f"host variables must be a mapping, got {type(host_vars).__name__}",
                line,
                key=key,
            )
        for name in names:
            if not name:
                self.error("empty host name", line, key=key)
            host = self.add_host(group, name, port, line)
            for var, value in (host_vars or {}).items():
                if not isinstance(var, str):
                    self.error(f"variable name {var!r} must be a string", line, key=key)
                var_line = host_vars.line_of(var) if isinstance(host_vars, LineMap) else line
                host.vars.set(var, value, (self.path, var_line))

    def reconcile(self) -> InventoryGraph:
        """Parentless groups join `all`; hosts in no other group join `ungrouped`."""
        graph = self.graph
        for name in graph.hosts.keys() & graph.groups.keys():  # Ansible warns the same
            path, line = graph.hosts[name].origin
            where = f"{path}:{line}" if line is not None else path
            graph.warnings.append(f"{where}: found both a group and a host named {name!r}")
        for name, node in graph.groups.items():
            if name != "all" and not node.parents:
                self._add_child("all", name, None)
        reach: dict[frozenset[str], set[str]] = {}
        for host in list(graph.hosts.values()):
            direct = frozenset(host.direct_groups)
            if direct not in reach:  # the host's groups with their ancestors, as Ansible's
                reach[direct] = set(direct).union(*(graph.ancestors(g) for g in direct))
            others = reach[direct] - {"all", "ungrouped"}
            if "ungrouped" in reach[direct]:
                if others and "ungrouped" in host.direct_groups:
                    host.direct_groups.remove("ungrouped")
                    if not host.direct_groups:
                        self._drop_orphan(host)
            elif not others:
                host.direct_groups.append("ungrouped")
        self._set_depths()
        return graph

    def _drop_orphan(self, host: HostNode) -> None:
        """A host only in `ungrouped`, itself a child of another group: Ansible takes it out
        of `ungrouped` and so out of every group, and no pattern reaches it any more."""
        del self.graph.hosts[host.name]
        path, line = host.origin
        where = f"{path}:{line}" if line is not None else path
        self.graph.warnings.append(
            f"{where}: host {host.name!r} is dropped: it is only in 'ungrouped', which is "
            "listed as a child of another group (Ansible drops it too)"
        )

    def _set_depths(self) -> None:
        """Depth = longest path from `all` (the graph is acyclic by construction)."""
        groups = self.graph.groups
        pending = ["all"]
        while pending:
            node = groups[pending.pop()]
            for child in node.children:
                if groups[child].depth < node.depth + 1:
                    groups[child].depth = node.depth + 1
                    pending.append(child)


def build_graph(path: str, data: Any) -> InventoryGraph:
    """The inventory graph of one parsed YAML document, or an InventoryError."""
    builder = GraphBuilder(path)
    add_yaml_source(builder, path, data)
    return builder.reconcile()


def add_yaml_source(builder: GraphBuilder, path: str, data: Any) -> None:
    """Add one parsed YAML inventory document to the graph, or raise an InventoryError."""
    hint = "convert other formats with: ansible-inventory -i FILE --list --yaml > inventory.yaml"
    if not data:
        raise InventoryError(path, "not a YAML inventory: the file is empty")
    if not isinstance(data, Mapping):
        raise InventoryError(
            path,
            f"not a YAML inventory: the top level is a {type(data).__name__}, "
            "not a mapping of groups",
            line=1,
            hint=hint,
        )
    if data.get("plugin"):
        line = data.line_of("plugin") if isinstance(data, LineMap) else None
        raise InventoryError(
            path,
            "not a YAML inventory: this is an inventory plugin configuration",
            line=line,
            key="plugin",
            hint=hint,
        )
    builder.path = path
    for name, group_data in data.items():
        line = data.line_of(name) if isinstance(data, LineMap) else None
        builder.parse_group(name, group_data, line, top_level=True)
