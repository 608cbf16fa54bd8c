"""What a value of the `clusterkit` variable may be: one rule per kind of value.

A rule turns a raw YAML value (never None) into its typed value, or raises Invalid saying
what is wrong and, where it helps, what to write instead. The bench's sizes and
collectives and the cost model's rate buckets and hazards are checked with the very parsers
those features use, so a value accepted here is one they can read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from clusterkit.cost.rates import ADVISOR_BUCKETS, parse_rate
from clusterkit.cost.scenario import HAZARDS, Hazard
from clusterkit.errors import UsageError
from clusterkit.inventory.yamlfile import is_template
from clusterkit.node.bench_common import parse_size
from clusterkit.versions import Constraint


class Invalid(Exception):
    """A value that breaks its rule: what is wrong, and optionally what to write instead."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.hint = problem, hint


Rule = Callable[[Any], Any]  # raw YAML value (never None) -> typed value, or raises Invalid


def text(value: Any) -> str:
    """A literal, non-empty string; YAML numbers keep the text they were written as."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise Invalid(f"must be a string, got {type(value).__name__}")
    written = getattr(value, "source_text", None) or str(value)
    if not written.strip():
        raise Invalid("must not be empty")
    if is_template(written):
        raise Invalid(
            f"is a Jinja template ({written!r})", hint="clusterkit settings must be literal values"
        )
    return written.strip()


def constraint(value: Any) -> str:
    """A version pin such as ">=550" or "2.5.1": rejected here, not when checks run."""
    written = text(value)
    try:
        Constraint(written)
    except ValueError:
        raise Invalid(
            f"{written!r} is not a version constraint",
            hint='write a version or a range, e.g. "2.5.1", "==2.5.*" or ">=550,<560"',
        ) from None
    return written


def integer(low: int, high: int) -> Callable[[Any], int]:
    def rule(value: Any) -> int:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.strip().isdigit():
            number = int(value)
        if number is None or not low <= number <= high:
            raise Invalid(f"must be an integer {low}..{high}, got {value!r}")
        return number

    return rule


def number(
    *, above: float | None = None, low: float | None = None, unit: str = ""
) -> Callable[[Any], float]:
    """A finite number, > `above` or >= `low`; quoted numbers are accepted like Ansible does."""
    bound = (
        f"above {above:g}" if above is not None else f"at least {low:g}" if low is not None else ""
    )
    allowed = f"a number{' ' + bound if bound else ''}{' (' + unit + ')' if unit else ''}"

    def rule(value: Any) -> float:
        parsed = math.nan
        if not isinstance(value, bool) and isinstance(value, int | float | str):
            try:
                parsed = float(value)
            except ValueError:
                parsed = math.nan
        fits = math.isfinite(parsed)
        fits = fits and (above is None or parsed > above) and (low is None or parsed >= low)
        if not fits:
            raise Invalid(f"must be {allowed}, got {value!r}")
        return parsed

    return rule


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"must be true or false, got {value!r}")
    return value


def fraction(value: Any) -> float:
    """A number strictly between 0 and 1."""
    try:
        parsed = number(above=0)(value)
    except Invalid:
        parsed = math.nan
    if not 0 < parsed < 1:
        raise Invalid(f"must be a number above 0 and below 1, got {value!r}")
    return parsed


def choice(*allowed: str) -> Rule:
    def rule(value: Any) -> str:
        written = text(value)
        if written not in allowed:
            raise Invalid(f"must be one of {', '.join(allowed)}, got {written!r}")
        return written

    return rule


def size(value: Any) -> str:
    """nccl-tests sizes: bytes with an optional K/M/G/T suffix (`64M`)."""
    written = text(value)
    try:
        parse_size(written)
    except ValueError:
        raise Invalid(
            f"must be a size in bytes with an optional K/M/G suffix (e.g. 64M), got {value!r}"
        ) from None
    return written


def list_of(item: Rule, what: str) -> Rule:
    def rule(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Invalid(f"must be a list of {what}, got {type(value).__name__}")
        try:
            return tuple(item(entry) for entry in value)
        except Invalid as error:
            raise Invalid(f"must be a list of {what}: {error.problem}", error.hint) from None

    return rule


def number_or_off(unit: str) -> Rule:
    positive = number(above=0, unit=unit)

    def rule(value: Any) -> float | str:
        # YAML 1.1 reads a bare `off` as false, as Ansible does.
        if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
            return "off"
        try:
            return positive(value)
        except Invalid:
            raise Invalid(f"must be a number above 0 ({unit}) or off, got {value!r}") from None

    return rule


def preempt_rate(value: Any) -> str:
    """What `--preempt-rate` takes: a rate per node-hour, a monthly share such as 5%, or an
    AWS advisor bucket; kept as text for `cost` to parse."""
    written = text(value)
    try:
        parse_rate(written)
    except UsageError:
        raise Invalid(
            f"must be a rate per node-hour, a monthly share from 0% to below 100%, or an "
            f"advisor bucket ({', '.join(ADVISOR_BUCKETS)}), got {value!r}"
        ) from None
    return written


def hazard(value: Any) -> str:
    written = text(value)
    try:
        Hazard.parse(written)
    except UsageError:
        raise Invalid(f"must be one of {', '.join(HAZARDS)} (K > 0), got {value!r}") from None
    return written


def absolute_path(value: Any) -> str:
    """An absolute path on the nodes, without control characters (it reaches a command)."""
    written = text(value)
    if not written.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in written):
        raise Invalid(f"must be an absolute path, got {written!r}")
    return written


# A network interface name as Linux takes one (dev_valid_name: at most 15 bytes, never `.` or
# `..`, no `/`, `:` or white space), in the characters real names use: no control character
# reaches NCCL, a node's command line or a report.
_IFNAME = re.compile(r"[A-Za-z0-9_.@+-]{1,15}")
_IFNAME_HINT = (
    "NCCL_SOCKET_IFNAME syntax: names of at most 15 letters, digits, '.', '_', '-', '@' or '+',"
    " comma-separated, optionally each with :port, the list led by ^ (exclude) and/or = (exact)"
)


def interface(value: Any) -> str:
    """An NCCL_SOCKET_IFNAME value (`eth0`, `=eth0`, `^docker,lo`, `ib0:1`) whose every name
    could be a Linux interface's."""
    written = text(value)
    names = written.removeprefix("^").removeprefix("=")
    for entry in names.split(","):
        name, colon, port = entry.partition(":")
        if not _IFNAME.fullmatch(name) or name in (".", "..") or (colon and not port.isdigit()):
            where = f" in {written!r}" if entry != written else ""
            raise Invalid(f"{entry!r}{where} is not an interface name", _IFNAME_HINT)
    return written


# srun options the transport sets itself (which nodes, the deadline, how output comes back):
# overriding one would break the step. srun takes any unambiguous prefix, so prefixes too.
SRUN_OWN_OPTIONS = (
    "nodes", "ntasks", "ntasks-per-node", "nodelist", "exclude", "jobid", "overlap", "time",
    "kill-on-bad-exit", "input", "output", "error", "label", "pty", "distribution",
    "unbuffered", "multi-prog",
)  # fmt: skip
_OPTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def srun_option(value: Any) -> str:
    """One srun option, `--name` or `--name=value`, with no control characters (it reaches
    srun's argv as one argument, never a shell) and not one the transport sets itself."""
    written = text(value)
    name = written[2:].split("=", 1)[0]
    if not written.startswith("--") or not _OPTION_NAME.fullmatch(name):
        raise Invalid(f"must be one long option such as --gres=gpu:8, got {written!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in written):
        raise Invalid(f"must not hold control characters, got {written!r}")
    clash = [own for own in SRUN_OWN_OPTIONS if own.startswith(name)]
    if clash:
        raise Invalid(
            f"{written!r}: clusterkit sets --{clash[0]} itself",
            hint=f"leave out {', '.join('--' + own for own in SRUN_OWN_OPTIONS)}",
        )
    return written


PORT = integer(1, 65535)
