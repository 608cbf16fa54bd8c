"""load_inventory(): Ansible inventory sources -> Inventory, with Ansible's precedence.

Sources (YAML or INI files, directories of them, several in order) are read natively into one
graph; anything only Ansible can resolve goes, with all the sources, through ansible-inventory
when the user asked for that (`via_ansible`), and is refused otherwise: it runs code.

Per host, variables merge like Ansible's VariableManager: `all` group vars from the inventory,
then the host's other groups (by depth, ansible_group_priority, name), then group_vars/all,
then group_vars/ for the other groups in the same order, then the host's own inventory vars,
then host_vars/. Every failure is an InventoryError; nothing else escapes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.connection import connection_fields
from clusterkit.inventory.graph import GraphBuilder, InventoryGraph, Origin, VarLayer
from clusterkit.inventory.hostpatterns import max_range_hosts
from clusterkit.inventory.model import ClusterSettings, Host, Inventory
from clusterkit.inventory.names import host_name_problem, hostname_problem, username_problem
from clusterkit.inventory.sources import NeedsAnsible, add_source, vars_base_dir
from clusterkit.inventory.varsfiles import VarsDirectory
from clusterkit.inventory.viaansible import add_listing, list_with_ansible, unasked
from clusterkit.settings import VARIABLE, parse_settings

NO_VARIABLES: Mapping[str, str] = types.MappingProxyType({})


def load_inventory(
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    via_ansible: bool = False,
    for_ansible: bool = False,
    environ: Mapping[str, str] = NO_VARIABLES,
) -> Inventory:
    """Read inventory sources in order (group_vars/ and host_vars/ beside each included);
    `via_ansible` resolves them all with ansible-inventory instead of the native readers.
    A source only Ansible can read (a plugin, a script) runs code when resolved: refused
    unless `via_ansible`. `for_ansible`: the caller hands the inventory to Ansible itself
    (provision), which runs such sources anyway and honours become, refused otherwise.
    `environ` holds the run's variables: the limits' overrides, and what ansible-inventory
    runs with (none given: the defaults, and Ansible's own variables only)."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = [os.fspath(source) for source in sources]
    if not paths:
        raise InventoryError("<inventory>", "no inventory source given")
    where = paths[0] if len(paths) == 1 else ", ".join(paths)
    try:
        with _collector_paused():
            return _load(paths, via_ansible, for_ansible, environ)
    except InventoryError:
        raise
    except RecursionError:
        raise InventoryError(where, "nesting too deep to read") from None
    except OSError as exc:
        target = exc.filename or where
        raise InventoryError(str(target), f"cannot read: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Loading builds many long-lived objects and no cycles worth collecting: the cyclic
    collector's passes over them would cost as much as the load itself on large inventories."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load(
    paths: list[str], via_ansible: bool, for_ansible: bool, environ: Mapping[str, str]
) -> Inventory:
    where = paths[0] if len(paths) == 1 else ", ".join(paths)
    limit = max_range_hosts(environ)
    builder = GraphBuilder(where, limit)
    base_dirs = [vars_base_dir(path) for path in paths]
    try:
        if via_ansible:
            raise NeedsAnsible(where, "--inventory-via-ansible")
        for path in paths:
            add_source(builder, path)
    except NeedsAnsible as needs:
        if not (via_ansible or for_ansible):
            raise unasked(needs, where) from None
        builder = GraphBuilder(where, limit)
        add_listing(builder, list_with_ansible(paths, needs, environ))
        base_dirs = []  # Ansible's listing already holds the vars files' variables
    builder.path = where
    graph = builder.reconcile()
    path = where
    if not graph.hosts:
        # A misspelt key (`hostz:`) is why, more often than not: say what was skipped.
        skipped = next((w for w in graph.warnings if "unexpected key" in w), None)
        raise InventoryError(path, "the inventory defines no hosts", hint=skipped)
    resolver = _VarsResolver(graph, base_dirs)
    hosts: list[Host] = []
    settings_source: tuple[str, Any, Origin] | None = None
    for name in graph.hosts:
        values, origins, groups = resolver.host_vars(name)
        fields = connection_fields(name, values, origins, become_allowed=for_ansible)
        host = Host(name=name, groups=groups, vars=values, **fields)
        _check_names(host, graph.hosts[name].origin, origins)
        hosts.append(host)
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
    _check_master(settings.master, hosts, setting, origin)
    return Inventory(
        path=path, hosts=tuple(hosts), settings=settings, warnings=tuple(graph.warnings)
    )


def _check_names(host: Host, defined_at: Origin, origins: dict[str, Origin]) -> None:
    """Refuse, as OpenSSH does, names that could reach a shell (Match exec, ProxyCommand), and
    host names that are not one plain file name (they name files and list items)."""
    if (
        not host.proxy_jump
        and host_name_problem(host.name) is None
        and hostname_problem(host.address) is None
        and (host.user is None or username_problem(host.user) is None)
    ):
        return  # the common case: nothing to point at
    checks: list[tuple[str, str, tuple[str, ...] | None, Callable[[str], str | None]]] = [
        ("host name", host.name, None, host_name_problem)
    ]
    if host.address != host.name:
        checks.append(("address", host.address, _ADDRESS_VARS, hostname_problem))
    if host.user is not None:
        checks.append(("user", host.user, _USER_VARS, username_problem))
    for hop in (host.proxy_jump or "").split(","):
        user, _, address = hop.strip().rpartition("@")
        if hop.strip() and hop.strip().lower() != "none":
            checks.append(
                ("ProxyJump host", address.split(":")[0].strip("[]"), _SSH_ARGS, hostname_problem)
            )
            if user:
                checks.append(("ProxyJump user", user, _SSH_ARGS, username_problem))
    for what, value, variables, problem_of in checks:
        problem = problem_of(value)
        if problem is None:
            continue
        path, line = defined_at
        for var in variables or ():
            if var in origins:
                path, line = origins[var]
        raise InventoryError(
            path,
            f"host {host.name!r}: {what} {value!r} {problem}",
            line=line,
            hint=_SSH_HINT if hostname_problem(value) or what != "host name" else _FILE_HINT,
        )


_SSH_HINT = "OpenSSH refuses such names; give the host a plain name or set ansible_host"
_FILE_HINT = (
    "host names also name files and list items; give the host a plain name (letters, digits, "
    "'.', '_', '-') and its address in ansible_host"
)
_ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
_USER_VARS = ("ansible_user", "ansible_ssh_user")
_SSH_ARGS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")


def _check_master(master: str | None, hosts: list[Host], setting: Any, origin: Origin) -> None:
    """clusterkit.master must be an inventory host (by name or address): a rendezvous on a
    machine outside the inventory would be checked on none of it."""
    if master is None or any(master in (host.name, host.address) for host in hosts):
        return
    line_of = getattr(setting, "line_of", None)
    raise InventoryError(
        origin[0],
        f"{master!r} is not a host of this inventory (by name or ansible_host)",
        line=(line_of("master") if line_of else None) or origin[1],
        key=f"{VARIABLE}.master",
        hint="name one of the inventory's hosts, or leave it out to use the first",
    )


class _VarsResolver:
    """Merges each host's variables; group layers are shared by hosts with the same groups."""

    def __init__(self, graph: InventoryGraph, base_dirs: list[str]) -> None:
        self.graph = graph
        unique = list(dict.fromkeys(base_dirs))  # a directory read twice changes nothing
        warnings = graph.warnings
        self.group_files = [VarsDirectory(base, "group_vars", warnings) for base in unique]
        self.host_files = [VarsDirectory(base, "host_vars", warnings) for base in unique]
        self._group_cache: dict[frozenset[str], tuple[VarLayer, tuple[str, ...]]] = {}

    def host_vars(self, name: str) -> tuple[dict[str, Any], dict[str, Origin], tuple[str, ...]]:
        node = self.graph.hosts[name]
        group_layer, groups = self._groups_layer(frozenset(self.graph.host_groups(name)))
        merged = VarLayer(dict(group_layer.values), dict(group_layer.origins))
        merged.values.update(node.vars.values)
        merged.origins.update(node.vars.origins)
        for directory in self.host_files:  # source by source, as Ansible's vars plugin
            for file_path, data in directory.files_for(name):
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
            for group in ("all",):
                for directory in self.group_files:
                    for file_path, data in directory.files_for(group):
                        layer.update_from(file_path, data)
            for directory in self.group_files:  # source by source, then group by group
                for group in ordered:
                    for file_path, data in directory.files_for(group):
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
