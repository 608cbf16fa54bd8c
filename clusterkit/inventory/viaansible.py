"""Resolve inventory sources with Ansible itself: `ansible-inventory -i SRC ... --list`.

Inventory plugins (aws_ec2, gcp_compute, constructed, ...), executable scripts and TOML files
can only be resolved by Ansible. That runs code on this machine (a script, a plugin, any
`lookup('pipe', ...)` in a `compose`), so it happens only with --inventory-via-ansible: a
source found to need it otherwise is refused (`unasked`), never run. Ansible is GPL, so it
is run as a program, never imported, in the run's environment. The run has a deadline
(CLUSTERKIT_ANSIBLE_INVENTORY_TIMEOUT seconds, default 120); on expiry its whole process
group is killed. Its `--list` output carries every host's resolved variables
(group_vars/ and host_vars/ included), so the graph built from it needs no vars files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.graph import GraphBuilder
from clusterkit.inventory.sources import NeedsAnsible
from clusterkit.inventory.yamlfile import UnsafeText, VaultValue

TIMEOUT_VARIABLE = "CLUSTERKIT_ANSIBLE_INVENTORY_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
KILL_WAIT = 5.0  # ansible-inventory is reaped by then once its group is killed
INSTALL_HINT = "install Ansible: pip install ansible-core (or your distribution's ansible package)"


def ansible_timeout(environ: Mapping[str, str]) -> float:
    """The run's CLUSTERKIT_ANSIBLE_INVENTORY_TIMEOUT, else the default; seconds."""
    text = environ.get(TIMEOUT_VARIABLE, "")
    try:
        seconds = float(text) if text else DEFAULT_TIMEOUT
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86400:
        raise InventoryError(
            TIMEOUT_VARIABLE, f"must be a number of seconds between 0 and 86400, got {text!r}"
        )
    return seconds


def find_ansible_inventory(environ: Mapping[str, str]) -> str | None:
    """ansible-inventory on the run's PATH (none: the system's default search path), else
    beside this Python (Ansible installed in the same venv)."""
    return shutil.which("ansible-inventory", path=environ.get("PATH", os.defpath)) or shutil.which(
        "ansible-inventory", path=os.path.dirname(sys.executable)
    )


def unasked(needs: NeedsAnsible, where: str) -> InventoryError:
    """The refusal of a source only ansible-inventory can resolve, when the user did not ask
    for ansible-inventory: resolving it runs the source's code, which a file dropped into
    an inventory directory must not get to do on its own."""
    what = needs.why if needs.path == where else f"{needs.path} is {needs.why}"
    return InventoryError(
        needs.path if needs.line else where,
        f"{what}: resolving it runs code on this machine through ansible-inventory "
        "(plugins, scripts, lookups), which clusterkit does only when asked",
        line=needs.line,
        hint="pass --inventory-via-ansible if you trust every source, or convert it once: "
        "ansible-inventory -i SOURCE --list --yaml > inventory.yaml",
    )


def list_with_ansible(
    sources: Sequence[str], needs: NeedsAnsible, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The `ansible-inventory --list` JSON for the sources, or one InventoryError; it runs
    with the run's `environ` (Ansible's own settings, a plugin's credentials)."""
    where = ", ".join(sources)
    executable = find_ansible_inventory(environ)
    if executable is None:
        what = needs.why if needs.path == where else f"{needs.path} is {needs.why}"
        raise InventoryError(
            needs.path if needs.line else where,
            f"{what}: resolving it needs ansible-inventory, which is not installed",
            line=needs.line,
            hint=INSTALL_HINT,
        )
    argv = [executable]
    for source in sources:
        argv += ["-i", source]
    argv.append("--list")
    env = dict(
        environ,
        ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="True",  # a broken source is an error here too
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )
    timeout = ansible_timeout(environ)
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        errors="replace",
        start_new_session=True,  # a script's own children die with it on timeout
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise InventoryError(
            where,
            f"ansible-inventory did not finish within {timeout:g} s",
            hint=f"a slow plugin or script? raise {TIMEOUT_VARIABLE}",
        ) from None
    except BaseException:
        _kill_group(process)
        raise
    if process.returncode != 0:
        raise InventoryError(where, f"ansible-inventory failed: {_last_error(stderr)}")
    try:
        listing = json.loads(stdout)
    except ValueError as exc:
        raise InventoryError(where, f"ansible-inventory printed no JSON listing: {exc}") from None
    if not isinstance(listing, dict):
        raise InventoryError(where, "ansible-inventory printed no JSON listing")
    return listing


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    # A process of the script that left the group may hold the pipes: do not wait on it.
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.communicate(timeout=KILL_WAIT)


def _last_error(stderr: str) -> str:
    """The most telling line of Ansible's stderr, on one line."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.strip()]
    for line in lines:  # the first plugin's own complaint says most (a missing collection...)
        if line.startswith("[WARNING]: Failed to parse"):
            return line[len("[WARNING]: ") :]
    for line in lines:
        if line.startswith(("[ERROR]", "ERROR!")):
            return line
    return lines[-1] if lines else "no message"


def warnings_of(stderr: str) -> list[str]:
    return [" ".join(line.split()) for line in stderr.splitlines() if "[WARNING]" in line]


def _tagged(value: Any) -> Any:
    """Ansible's JSON tags back into values: `{"__ansible_unsafe": text}` is text never
    templated, `{"__ansible_vault": ciphertext}` an encrypted value."""
    if isinstance(value, dict):
        if len(value) == 1 and "__ansible_unsafe" in value:
            return UnsafeText(str(value["__ansible_unsafe"]))
        if len(value) == 1 and "__ansible_vault" in value:
            return VaultValue(str(value["__ansible_vault"]))
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    return value


def add_listing(builder: GraphBuilder, listing: Mapping[str, Any]) -> None:
    """Add the groups and hosts of an `ansible-inventory --list` listing to the graph; each
    host's variables are Ansible's resolved ones."""
    meta = listing.get("_meta")
    hostvars = meta.get("hostvars", {}) if isinstance(meta, Mapping) else {}
    seen: set[str] = set()

    def walk(group: str) -> None:
        if group in seen:
            return
        seen.add(group)
        builder.add_group(group)
        entry = listing.get(group)
        entry = entry if isinstance(entry, Mapping) else {}
        for host in entry.get("hosts") or ():
            node = builder.add_host(group, str(host), None, None)
            for key, value in (hostvars.get(host) or {}).items():
                node.vars.set(key, _tagged(value), (builder.path, None))
        for child in entry.get("children") or ():
            builder.add_group(str(child))
            builder.add_child(group, str(child), None)
            walk(str(child))

    walk("all")
    for group in listing:
        if group != "_meta":
            walk(str(group))
