"""Ansible connection variables -> the connection fields of a Host.

Aliases resolve like Ansible's ssh plugin (the later name in each list wins when both are set),
ProxyJump / ProxyCommand / StrictHostKeyChecking / UserKnownHostsFile come out of
ansible_ssh_args, ansible_ssh_common_args and ansible_ssh_extra_args (first value wins, as in
OpenSSH). `{{ var }}` and `{{ var | default(x) }}` templates over the host's own variables are
rendered; a connection variable that only Ansible could compute (other Jinja, a vault value)
fails that host alone, with the variable named, instead of the whole inventory.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any

from clusterkit.errors import InventoryError
from clusterkit.inventory.graph import Origin
from clusterkit.inventory.templates import TemplateError, render
from clusterkit.inventory.yamlfile import UnsafeText, VaultValue
from clusterkit.keyfiles import file_problem

# Ansible option -> the variables that set it, lowest precedence first.
_ADDRESS = ("ansible_host", "ansible_ssh_host")
_PORT = ("ansible_port", "ansible_ssh_port")
_USER = ("ansible_user", "ansible_ssh_user")
_KEY_FILE = ("ansible_private_key_file", "ansible_ssh_private_key_file")
_TIMEOUT = ("ansible_timeout", "ansible_ssh_timeout")
_PASSWORD = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
_HOST_KEY_CHECKING = ("ansible_host_key_checking", "ansible_ssh_host_key_checking")
# All apply, in the order Ansible puts them on the ssh command line.
_SSH_ARGS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")

# Privilege escalation. clusterkit runs everything as the SSH user and never becomes another:
# an inventory asking for become is refused rather than run, silently, as someone else.
_BECOME_SWITCHES = ("ansible_become", "become", "ansible_sudo", "ansible_su")
_BECOME_SETTINGS = (
    *(f"ansible_become_{key}" for key in ("user", "method", "pass", "password", "exe", "flags")),
    *(f"ansible_sudo_{key}" for key in ("user", "pass", "exe", "flags")),
    *(f"ansible_su_{key}" for key in ("user", "pass", "password", "exe", "flags")),
    *(f"become_{key}" for key in ("user", "method", "exe", "flags")),
)
_FALSE_WORDS = {"false", "no", "off", "n", "f", "0"}

_SSH_CONNECTIONS = {"ssh", "paramiko", "paramiko_ssh", "smart"}
_LOCAL_CONNECTIONS = {"local"}
# ssh(1) flags that take an argument: their argument is skipped, never read as a flag.
_SSH_FLAGS_WITH_ARGUMENT = set("BbcDEeFIiJLlmOoPpQRSWw")
_PLAYBOOK_PYTHON = "{{ ansible_playbook_python }}"


class HostProblem(Exception):
    """A connection variable of one host that cannot be computed: that host fails, not all."""

    def __init__(self, var: str, message: str) -> None:
        super().__init__(message)
        self.var = var


class _HostVars:
    """One host's resolved variables, with errors that point at where a variable was set."""

    def __init__(self, host: str, values: Mapping[str, Any], origins: Mapping[str, Origin]):
        self.host, self.values, self.origins = host, values, origins

    def fail(self, var: str, problem: str, hint: str | None = None) -> InventoryError:
        path, line = self.origins.get(var, ("<inventory>", None))
        return InventoryError(path, f"{problem} (host {self.host})", line=line, key=var, hint=hint)

    def pick(self, names: tuple[str, ...]) -> tuple[str, Any] | None:
        """(variable, rendered value) of the winning alias, or None when none is set."""
        found = None
        for name in names:
            value = self.values.get(name)
            if value is not None:
                found = (name, value)
        if found is None:
            return None
        value = self.get(found[0])
        return None if value is None else (found[0], value)

    def get(self, var: str) -> Any:
        """The variable's value with its templates rendered, or HostProblem."""
        value = self.values.get(var)
        if isinstance(value, VaultValue):
            raise HostProblem(var, f"{var} is vault-encrypted; only Ansible can decrypt it")
        if isinstance(value, UnsafeText):
            return value  # !unsafe: never a template
        if not isinstance(value, str) or ("{{" not in value and "{%" not in value):
            return value  # the common case: no template, no need for the render context
        context = {
            "ansible_playbook_python": sys.executable,
            **self.values,
            "inventory_hostname": self.host,
            "inventory_hostname_short": self.host.split(".", 1)[0],
        }
        try:
            return render(value, context)
        except TemplateError as exc:
            raise HostProblem(var, f"{var} cannot be rendered: {exc}") from None

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


def _password(hv: _HostVars) -> str | None:
    """The SSH password (ansible_password and its aliases). Messages name the variable and
    the value's type, never the value."""
    found = hv.pick(_PASSWORD)
    if found is None:
        return None
    var, value = found
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
        kind = "an empty string" if value == "" else f"a {type(value).__name__}"
        raise hv.fail(var, f"must be a non-empty string, got {kind}")
    return str(value)


def _key_file(hv: _HostVars) -> str | None:
    """The private key file, refused here when it exists and cannot be one: a FIFO would hold
    the connection for a writer, /dev/zero would be read without end."""
    path = hv.text(_KEY_FILE, os.path.expanduser)
    problem = file_problem(path) if path else None
    if problem:
        found = hv.pick(_KEY_FILE)
        var = found[0] if found else _KEY_FILE[-1]
        raise hv.fail(var, f"{path}: {problem}", hint="name the private key file itself")
    return path


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
    return _interpreter_command(hv, interpreter) if interpreter is not None else None


def _interpreter_command(hv: _HostVars, interpreter: str) -> str:
    """The interpreter as the one word every remote argv starts with. Ansible puts the value
    in a shebang, so `/usr/bin/env python3` is common: that is a PATH lookup of `python3`,
    which the node's shell does for a bare name too. Other arguments have no such meaning."""
    try:
        words = shlex.split(interpreter)
    except ValueError as exc:
        raise hv.fail("ansible_python_interpreter", f"cannot be split into words: {exc}") from None
    if len(words) == 1:
        return words[0]
    # `env -i ...` or `env NAME=value ...` would change the environment, not just find python.
    program = words[1] if len(words) == 2 and os.path.basename(words[0]) == "env" else ""
    if program and not program.startswith("-") and "=" not in program:
        return program
    raise hv.fail(
        "ansible_python_interpreter",
        f"{interpreter!r}: an interpreter with arguments is not supported",
        hint="give the interpreter's path, or `/usr/bin/env python3` to find it on the node's PATH",
    )


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
        value = hv.get(var)
        if value is None:
            continue
        if not isinstance(value, str):
            raise hv.fail(var, f"must be a string of ssh arguments, got {value!r}")
        try:
            tokens = shlex.split(value)
        except ValueError as exc:
            raise hv.fail(var, f"cannot be split like a shell line: {exc}") from None
        for key, option_value in _options_in(tokens):
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


def _refuse_become(hv: _HostVars) -> None:
    """Refuse any become variable, unless become is switched off explicitly (`ansible_become:
    false`): then the others set nothing. Names the variable, never its value."""
    switches = [name for name in _BECOME_SWITCHES if hv.values.get(name) is not None]
    settings = [name for name in _BECOME_SETTINGS if hv.values.get(name) is not None]
    if not switches and not settings:
        return  # the common case
    on = [name for name in switches if not _switched_off(hv, name)]
    if switches and not on:
        return
    raise hv.fail(
        (on or settings)[0],
        "clusterkit does not use become: it runs everything as the SSH user",
        hint="connect as the user the checks need instead (ansible_user), or set "
        "ansible_become: false",
    )


def _switched_off(hv: _HostVars, name: str) -> bool:
    try:
        value = hv.get(name)
    except HostProblem:
        return False  # cannot tell: not off
    if isinstance(value, str):
        return value.strip().lower() in _FALSE_WORDS
    return value is False or (type(value) is int and value == 0)


def connection_fields(
    host: str,
    values: Mapping[str, Any],
    origins: Mapping[str, Origin],
    *,
    become_allowed: bool = False,
) -> dict[str, Any]:
    """Host keyword arguments for the connection, from one host's resolved variables; a
    variable that cannot be computed gives the host a `problem` instead of failing the load.
    Become variables are refused unless `become_allowed` (Ansible, not clusterkit, connects)."""
    hv = _HostVars(host, values, origins)
    if not become_allowed:
        _refuse_become(hv)
    try:
        return _fields(hv)
    except HostProblem as problem:
        path, line = origins.get(problem.var, ("<inventory>", None))
        where = f"{path}:{line}" if line is not None else path
        return {"address": host, "problem": f"{problem} ({where})"}


def _fields(hv: _HostVars) -> dict[str, Any]:
    host = hv.host
    options = _ssh_options(hv)
    strict = options.get("stricthostkeychecking") or _strict_from_host_key_checking(hv)
    known_hosts = options.get("userknownhostsfile")
    return {
        "address": hv.text(_ADDRESS) or host,
        "port": _port(hv),
        "user": hv.text(_USER),
        "key_file": _key_file(hv),
        "proxy_jump": options.get("proxyjump") or None,
        "proxy_command": options.get("proxycommand") or None,
        "strict_host_key_checking": strict or None,
        "user_known_hosts_file": os.path.expanduser(known_hosts) if known_hosts else None,
        "connection": _connection(hv),
        "python_interpreter": _python_interpreter(hv),
        "ssh_timeout": _timeout(hv),
        "password": _password(hv),
    }
