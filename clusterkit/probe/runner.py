"""Fan the probe out: one remote execution per host, all hosts in parallel."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clusterkit.errors import TransportError
from clusterkit.facts import ENV_NAMES, PROBE_VERSION, HostFacts, MalformedFacts, parse_facts
from clusterkit.inventory.model import Inventory
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.nodescript import (
    NodeScriptError,
    ScriptFailure,
    node_script,
    run_node_script,
)
from clusterkit.transport.pool import parallel

DEFAULT_INTERPRETER = "python3"
COLLECTOR = "collector"  # clusterkit/node/collector.py


@dataclass
class ProbeResults:
    facts: dict[str, HostFacts] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # host -> why no facts


def interpreter_for(inventory: Inventory, host: str) -> str:
    return inventory.host(host).python_interpreter or DEFAULT_INTERPRETER


def probe_host(
    transport: Transport, interpreter: str, options: Mapping[str, Any], deadline: Deadline
) -> HostFacts:
    """Run the collector on one host and type its facts; raise TransportError with the
    reason when it fails or sends facts of another shape (clusterkit/facts.py)."""
    # run_node_script starts it with -S: the collector adds site-packages itself.
    result = run_node_script(
        transport,
        node_script(COLLECTOR),
        [json.dumps({**options, "env_names": ENV_NAMES}, separators=(",", ":"))],
        interpreter=interpreter,
        deadline=deadline,
        what="the probe",
    )
    version = result.get("probe_version")
    if version != PROBE_VERSION:
        why = f"the probe sent facts of version {version!r}, not {PROBE_VERSION}"
        raise NodeScriptError(transport.host, ScriptFailure("broken", why))
    try:
        return parse_facts(result.get("facts"))
    except MalformedFacts as error:
        failure = ScriptFailure("broken", f"the probe sent malformed facts: {error}")
        raise NodeScriptError(transport.host, failure) from None


def probe_all(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    deadline: Deadline,
    *,
    workers: int | None = None,
    on_done: Callable[[str, str | None], None] | None = None,
    host_seconds: float | None = None,
) -> ProbeResults:
    """Probe every host, at most `workers` at once; each host's probe is bounded by
    `deadline` and, given `host_seconds`, by that long from its own start (a host in a later
    wave gets as long as one in the first)."""
    probe_options = inventory.settings.probe.options()

    def one(name: str) -> HostFacts:
        own = deadline
        if host_seconds is not None:
            own = Deadline(min(deadline.at, time.monotonic() + host_seconds))
        try:
            facts = probe_host(
                transports[name], interpreter_for(inventory, name), probe_options, own
            )
        except TransportError as error:
            if on_done:
                on_done(name, error.detail)
            raise
        if on_done:
            on_done(name, None)
        return facts

    names = list(transports)
    results = ProbeResults()
    for name, outcome in zip(names, parallel(one, names, workers=workers)):
        if isinstance(outcome, TransportError):
            results.failures[name] = outcome.detail
        elif isinstance(outcome, BaseException):
            results.failures[name] = f"probe failed: {outcome}"
        else:
            results.facts[name] = outcome
    return results
