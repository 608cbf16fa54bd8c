"""`group_vars/` and `host_vars/` beside the inventory file, found the way Ansible finds them.

For an entity NAME the first of `NAME`, `NAME.yml`, `NAME.yaml`, `NAME.json` that exists wins;
a directory is read recursively in sorted order (hidden files and `~` backups skipped, only
files with those extensions or none), later files overriding earlier ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.yamlfile import LineMap, load_yaml

_EXTENSIONS = (".yml", ".yaml", ".json")

VarsFile = tuple[str, Mapping[str, Any]]  # (path, variables)


class VarsDirectory:
    """One `group_vars` or `host_vars` directory; files are read once and cached."""

    def __init__(self, base_dir: str, subdir: str, warnings: list[str]) -> None:
        self.root = os.path.join(base_dir, subdir)
        self.exists = os.path.isdir(self.root)
        self.warnings = warnings  # duplicate keys, an unreadable directory: said, not fatal
        self._cache: dict[str, list[VarsFile]] = {}
        if self.exists and not os.access(self.root, os.R_OK | os.X_OK):
            self.exists = False  # Ansible finds no files in it, silently: we say so
            warnings.append(f"{self.root}: directory not readable: its variables are skipped")

    def files_for(self, name: str) -> list[VarsFile]:
        """The variable files for one group or host, in the order they apply."""
        if not self.exists or name.startswith(os.sep):
            return []
        cached = self._cache.get(name)
        if cached is None:
            loaded = (_read_vars(path, self.warnings) for path in self._paths_for(name))
            cached = self._cache[name] = [item for item in loaded if item[1]]
        return cached

    def _paths_for(self, name: str) -> list[str]:
        base = os.path.join(self.root, name)
        for candidate in (base, *(base + ext for ext in _EXTENSIONS)):
            if os.path.isdir(candidate):
                return _dir_files(candidate)
            if os.path.isfile(candidate):  # never a pipe: reading one would block
                return [candidate]
        return []


def _dir_files(directory: str) -> list[str]:
    found: list[str] = []
    for entry in sorted(os.listdir(directory)):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        full = os.path.join(directory, entry)
        ext = os.path.splitext(entry)[1]
        if os.path.isdir(full) and not ext:
            found.extend(_dir_files(full))
        elif os.path.isfile(full) and (not ext or ext in _EXTENSIONS):
            found.append(full)
    return found


def _read_vars(path: str, warnings: list[str]) -> VarsFile:
    """One vars file; an unreadable one is an error, as it is for Ansible."""
    data = load_yaml(path, warnings=warnings)
    if not data:
        return path, {}
    if not isinstance(data, Mapping):
        raise InventoryError(
            path, f"a vars file must hold a mapping of variables, got {type(data).__name__}"
        )
    for key in data:
        if not isinstance(key, str):
            line = data.line_of(key) if isinstance(data, LineMap) else None
            raise InventoryError(path, f"variable name {key!r} must be a string", line=line)
    return path, data
