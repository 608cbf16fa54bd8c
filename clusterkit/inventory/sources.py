"""Inventory sources -> one graph: files (YAML or INI), directories, several sources in order.

A file is tried the way Ansible's default plugins try it: a `.yml`/`.yaml`/`.json` file or one
with no extension is read as YAML first and as INI when it is not a YAML inventory; any other
extension is INI. A directory is read entry by entry in sorted order (subdirectories too),
skipping what Ansible skips: hidden names, `group_vars`, `host_vars`, `vars_plugins`, and the
extensions in IGNORED_EXTENSIONS. What only Ansible can resolve (an inventory plugin
configuration, an executable script, TOML, a host list such as `a,b,`) raises NeedsAnsible.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from clusterkit.errors import InventoryError
from clusterkit.inventory.graph import GraphBuilder, add_yaml_source
from clusterkit.inventory.inifile import add_ini_source
from clusterkit.inventory.yamlfile import LineMap, load_yaml, read_text

YAML_EXTENSIONS = ("", ".yaml", ".yml", ".json")
# Ansible's INVENTORY_IGNORE_EXTS default (REJECT_EXTS + .orig, .cfg, .retry).
IGNORED_EXTENSIONS = (
    ".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry",
)  # fmt: skip
_IGNORED = re.compile(
    "|".join(
        [r"^\.", "^host_vars$", "^group_vars$", "^vars_plugins$"]
        + [re.escape(ext) + "$" for ext in IGNORED_EXTENSIONS]
    )
)
_FORMAT_HINT = "write a YAML inventory (a mapping of groups) or an INI inventory ([group] sections)"


class NeedsAnsible(Exception):
    """A source only Ansible itself can resolve; `why` says what it is."""

    def __init__(self, path: str, why: str, line: int | None = None) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why, self.line = path, why, line


def add_source(builder: GraphBuilder, source: str, within: tuple[str, ...] = ()) -> None:
    """Add one `-i` source (file or directory) to the graph; `within` are the real paths of
    the directories being read, so a symlink back into one is refused, not followed forever."""
    if os.path.isdir(source):
        real = os.path.realpath(source)
        if real in within:
            raise InventoryError(
                source, f"directory loop: this is {real} again", hint="remove the symlink"
            )
        _add_directory(builder, source, (*within, real))
    elif os.path.isfile(source):
        _add_file(builder, source)
    elif os.path.exists(source):
        raise InventoryError(
            source, "not a regular file (a pipe, socket or device): give the inventory file"
        )
    elif "," in source:
        raise NeedsAnsible(source, "a host list")
    else:
        raise InventoryError(source, "no such file or directory", hint="check the path")


def vars_base_dir(source: str) -> str:
    """Where Ansible looks for group_vars/ and host_vars/ of a source."""
    real = os.path.realpath(source)
    return real if os.path.isdir(real) else os.path.dirname(real)


def _add_directory(builder: GraphBuilder, directory: str, within: tuple[str, ...]) -> None:
    for entry in sorted(os.listdir(directory)):
        if _IGNORED.search(entry):
            continue
        add_source(builder, os.path.join(directory, entry), within)


def _add_file(builder: GraphBuilder, path: str) -> None:
    text = read_text(path)
    if text.startswith("#!") and os.access(path, os.X_OK):
        raise NeedsAnsible(path, "an executable inventory script")
    extension = os.path.splitext(path)[1]
    if extension == ".toml":
        raise NeedsAnsible(path, "a TOML inventory")
    if extension not in YAML_EXTENSIONS:
        add_ini_source(builder, path, text)
        return
    duplicates: list[str] = []
    try:
        data = load_yaml(path, text, duplicates)
        if isinstance(data, Mapping) and data.get("plugin"):
            line = data.line_of("plugin") if isinstance(data, LineMap) else None
            raise NeedsAnsible(path, "an inventory plugin configuration", line)
        if not data or not isinstance(data, Mapping):
            raise InventoryError(path, _not_a_mapping(data), line=1 if data else None)
    except InventoryError as yaml_error:
        _add_ini_instead(builder, path, text, yaml_error)
        return
    builder.graph.warnings.extend(duplicates)
    add_yaml_source(builder, path, data)


def _not_a_mapping(data: object) -> str:
    if not data:
        return "not a YAML inventory: the file is empty"
    return (
        f"not a YAML inventory: the top level is a {type(data).__name__}, not a mapping of groups"
    )


def _add_ini_instead(
    builder: GraphBuilder, path: str, text: str, yaml_error: InventoryError
) -> None:
    """Ansible tries INI when YAML fails; when both fail, report the reading that got further
    (the likelier intent), saying the file is neither."""
    try:
        add_ini_source(builder, path, text)
    except InventoryError as ini_error:  # the whole load fails: no need to undo the partial add
        yaml_line, ini_line = yaml_error.line or 0, ini_error.line or 0
        if ini_line > yaml_line or (ini_line == yaml_line and _starts_with_section(text)):
            chosen, other = ini_error, "YAML"
        else:
            chosen, other = yaml_error, "INI"
        raise InventoryError(
            path,
            f"{_reason(chosen)} (nor is it {other})",
            line=chosen.line,
            key=chosen.key,
            hint=chosen.hint or _FORMAT_HINT,
        ) from None


def _starts_with_section(text: str) -> bool:
    """True when the first line that is not blank or a comment is an INI `[section]`."""
    for raw in text.splitlines():
        line = raw.strip()
        if line and line[0] not in "#;":
            return line.startswith("[") and line.endswith("]")
    return False


def _reason(error: InventoryError) -> str:
    """The message of an InventoryError without its `file:line: key:` prefix and hint."""
    text = error.message
    where = f"{error.path}:{error.line}: " if error.line is not None else f"{error.path}: "
    if text.startswith(where):
        text = text[len(where) :]
    if error.key and text.startswith(f"{error.key}: "):
        text = text[len(error.key) + 2 :]
    return text
