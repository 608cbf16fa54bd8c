"""The run session: everything the stages of one command share, in one object."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from clusterkit.checks.model import Finding
from clusterkit.contract.names import StageName
from clusterkit.errors import TransportError
from clusterkit.facts import HostEntry, HostFacts
from clusterkit.inventory.model import Inventory
from clusterkit.transport.base import Deadline, Transport


class ProgressSink(Protocol):
    """Where stages report progress (clusterkit.report.progress.Progress, or nothing)."""

    def phase(self, name: str, total: int, order: Sequence[str] = ()) -> None: ...

    def done(self, host: str, problem: str | None = None) -> None: ...


class NoProgress:
    def phase(self, name: str, total: int, order: Sequence[str] = ()) -> None:
        pass

    def done(self, host: str, problem: str | None = None) -> None:
        pass


@dataclass(frozen=True)
class SessionOptions:
    """What the command line says about every stage: how many hosts at once, which stages
    the user turned off."""

    forks: int | None = None  # hosts acted on at once; None: all of them (docs/scale.md)
    skip: frozenset[StageName] = frozenset()  # --skip: among stagenames.SKIPPABLE
    # `check` of this machine alone (no inventory, no --python): a missing torch says what
    # the machine can run (a warning), not that a job's nodes are broken.
    machine_only: bool = False


@dataclass
class Session:
    """One run of a command over a set of hosts.

    Stages read the inventory and what earlier stages left here (transports, facts,
    findings) and add their own through the runner; nothing else carries state between
    stages. The transports are opened by the `connect` stage (or handed in, e.g. by a
    scheduler allocation) and closed by `close`, whatever happened.
    """

    inventory: Inventory
    # Bounds the whole run (each stage takes `bounded()` of it); None: every stage brings
    # its own bound, as `check` does.
    deadline: Deadline | None = None
    options: SessionOptions = field(default_factory=SessionOptions)
    progress: ProgressSink = field(default_factory=NoProgress)
    transports: dict[str, Transport] = field(default_factory=dict)  # in inventory order
    unreachable: dict[str, TransportError] = field(default_factory=dict)
    facts: dict[str, HostFacts] = field(default_factory=dict)  # host -> probe facts
    failures: dict[str, str] = field(default_factory=dict)  # host -> why it has no facts
    findings: list[Finding] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "ran" or why not
    details: dict[str, Any] = field(default_factory=dict)  # stage -> raw data for JSON
    text: dict[str, list[str]] = field(default_factory=dict)  # stage -> extra report lines
    workers: int = 64  # how many hosts the running stage may act on at once (the runner's)

    def bounded(self, seconds: float | None) -> Deadline:
        """The session deadline, or `seconds` from now when that comes first."""
        if seconds is None:
            if self.deadline is None:
                raise ValueError("a stage needs a bound: the session has no deadline")
            return self.deadline
        own = Deadline.after(seconds)
        return own if self.deadline is None else Deadline(min(self.deadline.at, own.at))

    def host_entries(self) -> dict[str, HostEntry]:
        """The report's per-host section: address, reachable, why not, facts."""
        entries = {}
        for host in self.inventory.hosts:
            error = self.unreachable.get(host.name)
            entries[host.name] = HostEntry(
                address=host.address,
                reachable=host.name in self.transports,
                error=f"{error.kind}: {error.detail}" if error else self.failures.get(host.name),
                facts=self.facts.get(host.name),
            )
        return entries

    def close(self) -> None:
        for transport in self.transports.values():
            transport.close()
