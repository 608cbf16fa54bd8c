"""Ansible connection variables -> the connection fields of a Host.

Aliases resolve like Ansible's ssh plugin (the later name in each list wins when both are set),
ProxyJump / StrictHostKeyChecking / UserKnownHostsFile come out of ansible_ssh_args,
ansible_ssh_common_args and ansible_ssh_extra_args (first value wins, as in OpenSSH), and a
connection variable that only Ansible could compute (a Jinja template, a vault value) is an
error, not a silent guess.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.graph import Origin
from clusterkit.inventory.yamlfile import VaultValue, is_template

# Ansible option -> the variables that set it, lowest precedence first.
_ADDRESS = ("ansible_host", "ansible_ssh_host")
_PORT = ("ansible_port", "ansible_ssh_port")
_USER = ("ansible_user", "ansible_ssh_user")
_KEY_FILE = ("ansible_private_key_file", "ansible_ssh_private_key_file")
_TIMEOUT = ("ansible_timeout", "ansible_ssh_timeout")
_HOST_KEY_CHECKING = ("ansible_host_key_checking", "ansible_ssh_host_key_checking")
# All apply, in the order Ansible puts them on the ssh command line.
_SSH_ARGS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")

_SSH_CONNECTIONS = {"ssh", "paramiko", "paramiko_ssh", "smart"}
_LOCAL_CONNECTIONS = {"local"}
# ssh(1) flags that take an argument: their argument is skipped, never read as a flag.
_SSH_FLAGS_WITH_ARGUMENT = set("BbcDEeFIiJLlmOoPpQRSWw")
_PLAYBOOK_PYTHON = "{{ ansible_playbook_python }}"
_LITERAL_HINT = "connection variables must be literal values; write the value itself"


class _HostVars:
    """One host's resolved variables, with errors that point at where a variable was set."""

    def __init__(self, host: str, values: Mapping[str, Any], origins: Mapping[str, Origin]):
        self.host, self.values, self.origins = host, values, origins

    def fail(self, var: str, problem: str, hint: str | None = None) -> InventoryError:
        path, line = self.origins.get(var, ("<inventory>", None))
        return InventoryError(path, f"{problem} (host {self.host})", line=line, key=var, hint=hint)

    def pick(self, names: tuple[str, ...]) -> tuple[str, Any] | None:
        """(variable, value) of the winning alias, or None when none is set."""
        found = None
        for name in names:
            value = self.values.get(name)
            if value is not None:
                found = (name, value)
        if found is not None:
            self.literal(*found)
        return found

    def literal(self, var: str, value: Any) -> None:
        if is_template(value):
            raise self.fail(var, f"is a Jinja template ({value!r})", hint=_LITERAL_HINT)
        if isinstance(value, VaultValue):
            raise self.fail(var, "is vault-encrypted", hint=_LITERAL_HINT)

    def text(self, names: tuple[str, ...], convert: Callable[[str], str] = str) -> str | None:
        found = self.pick(names)
        if found is None:
            return None
        var, value = found
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise self.fail(var, f"must be a non-empty string, got {value!r}")
        return convert(str(value))


def _port(hv: _HostVars) -> int | None:
    found = hv.pick(_PORT)
    if found is None:
        return None
    var, value = found
    number = _as_int(value)
    if number is None or not 1 <= number <= 65535:
        raise hv.fail(var, f"must be a port number 1..65535, got {value!r}")
    return number


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _timeout(hv: _HostVars) -> float | None:
    found = hv.pick(_TIMEOUT)
    if found is None:
        return None
    var, value = found
    try:
        seconds = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0:
        raise hv.fail(var, f"must be a positive number of seconds, got {value!r}")
    return seconds


def _connection(hv: _HostVars) -> str:
    found = hv.pick(("ansible_connection",))
    if found is None:
        return "ssh"
    var, value = found
    name = str(value).rsplit(".", 1)[-1] if isinstance(value, str) else value
    if name in _SSH_CONNECTIONS:
        return "ssh"
    if name in _LOCAL_CONNECTIONS:
        return "local"
    raise hv.fail(
        var,
        f"connection {value!r} is not supported",
        hint="clusterkit reaches hosts over ssh (ssh, paramiko, smart) or runs them as local",
    )


def _python_interpreter(hv: _HostVars) -> str | None:
    value = hv.values.get("ansible_python_interpreter")
    if isinstance(value, str) and " ".join(value.split()) == _PLAYBOOK_PYTHON:
        return sys.executable  # the common idiom for local hosts: this very interpreter
    interpreter = hv.text(("ansible_python_interpreter",))
    if interpreter is not None and interpreter.startswith("auto"):
        return None  # Ansible's interpreter discovery: let the runner use its default
    return interpreter


def _strict_from_host_key_checking(hv: _HostVars) -> str | None:
    found = hv.pick(_HOST_KEY_CHECKING)
    if found is None:
        return None
    var, value = found
    if isinstance(value, str):
        lowered = value.strip().lower()
        value = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}.get(
            lowered, value
        )
    if not isinstance(value, bool):
        raise hv.fail(var, f"must be a boolean, got {value!r}")
    return None if value else "no"


def _ssh_options(hv: _HostVars) -> dict[str, str]:
    """ProxyJump, StrictHostKeyChecking and UserKnownHostsFile from the ssh argument vars."""
    options: dict[str, str] = {}
    for var in _SSH_ARGS:
        value = hv.values.get(var)
        if value is None:
            continue
        hv.literal(var, value)
        if not isinstance(value, str):
            raise hv.fail(var, f"must be a string of ssh arguments, got {value!r}")
        try:
            tokens = shlex.split(value)
        except ValueError as exc:
            raise hv.fail(var, f"cannot be split like a shell line: {exc}") from None
        for key, option_value in _options_in(tokens):
            if key == "proxycommand":
                raise hv.fail(
                    var,
                    "ProxyCommand is not supported",
                    hint="use -J jumphost or -o ProxyJump=jumphost instead",
                )
            options.setdefault(key, option_value)  # ssh(1): the first value obtained wins
    return options


def _options_in(tokens: list[str]) -> list[tuple[str, str]]:
    """(lower-case option name, value) for every -J and -o in an ssh argument list."""
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if len(token) < 2 or token[0] != "-" or token[1] not in _SSH_FLAGS_WITH_ARGUMENT:
            continue
        flag, argument = token[1], token[2:]
        if not argument and index < len(tokens):
            argument, index = tokens[index], index + 1
        if flag == "J" and argument:
            found.append(("proxyjump", argument))
        elif flag == "o" and argument:
            key, value = _split_option(argument)
            if not value and index < len(tokens) and not tokens[index].startswith("-"):
                value, index = tokens[index], index + 1
            found.append((key.lower(), value))
    return found


def _split_option(text: str) -> tuple[str, str]:
    """`Key=value` or `Key value` (ssh_config syntax) -> (Key, value)."""
    text = text.strip()
    cut = min(
        (pos for pos in (text.find("="), text.find(" "), text.find("\t")) if pos >= 0), default=-1
    )
    if cut < 0:
        return text, ""
    return text[:cut].strip(), text[cut + 1 :].strip().lstrip("=").strip()


def connection_fields(
    host: str, values: Mapping[str, Any], origins: Mapping[str, Origin]
) -> dict[str, Any]:
    """Host keyword arguments for the connection, from one host's resolved variables."""
    hv = _HostVars(host, values, origins)
    options = _ssh_options(hv)
    strict = options.get("stricthostkeychecking") or _strict_from_host_key_checking(hv)
    known_hosts = options.get("userknownhostsfile")
    return {
        "address": hv.text(_ADDRESS) or host,
        "port": _port(hv),
        "user": hv.text(_USER),
        "key_file": hv.text(_KEY_FILE, os.path.expanduser),
        "proxy_jump": options.get("proxyjump") or None,
        "strict_host_key_checking": strict or None,
        "user_known_hosts_file": os.path.expanduser(known_hosts) if known_hosts else None,
        "connection": _connection(hv),
        "python_interpreter": _python_interpreter(hv),
        "ssh_timeout": _timeout(hv),
    }
