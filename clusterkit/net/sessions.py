"""The network stage's node-side processes (clusterkit/node/net.py), one per node, talked to
step by step: every step sent to every node at once and its reports read as they come, each
checked on arrival, each wait bounded; a node that fails a step is dropped with why."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from clusterkit.framing import END
from clusterkit.net.messages import (
    FactsArgs,
    FactsReport,
    MalformedMessage,
    parse_facts_report,
)
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.nodescript import (
    ScriptFailure,
    decode_result,
    failure_of,
    node_script,
    shipment,
)
from clusterkit.transport.pool import parallel

if TYPE_CHECKING:
    pass

FACTS_SECONDS = 15.0  # node-side resolver and tool bounds are 3 s and 5 s, run concurrently
TRANSPORT_MARGIN = 10.0  # SSH exec start and output transfer on a busy control machine
STOP_SECONDS = 3.0  # a node told to stop (or whose stdin closed) exits by then, or is killed

_Report = TypeVar("_Report")


def node_source() -> bytes:
    """clusterkit/node/net.py composed with the node-side prelude."""
    return node_script("net").encode()


class NodeSessions:
    """The node-side processes of one stage run, talked to step by step. Each report is
    checked where it arrives (net/messages.py): a node that fails a step, with no report in
    time or one of another shape, leaves the session with its reason in `errors` and is
    stopped in `close`."""

    def __init__(
        self, transports: dict[str, Transport], deadline: Deadline, workers: int | None = None
    ) -> None:
        """`workers`: nodes talked to at once; every node (the default) for a step to be a
        barrier: with fewer, the last nodes would get "go" only after the first finished."""
        self.transports, self.deadline = transports, deadline
        self.workers = workers or max(1, len(transports))
        self.processes: dict[str, RemoteProcess] = {}
        self.dropped: list[RemoteProcess] = []  # failed a step; ended with the rest in close
        self.errors: dict[str, str] = {}
        self.sent: dict[str, float] = {}  # host -> when its last message was handed over

    def start(
        self,
        hosts: list[str],
        interpreters: Mapping[str, str],
        args: Mapping[str, FactsArgs],
        until: Deadline,
        wait: float = FACTS_SECONDS + 2 * TRANSPORT_MARGIN,
    ) -> dict[str, FactsReport]:
        """Start the node script everywhere and return each node's first report (facts).
        `wait`: how long a node waits for each answer, longer than any step lasts here."""
        source = node_source()

        def one(host: str) -> FactsReport:
            argv, stdin = shipment(
                interpreters[host], source, [json.dumps({**args[host], "wait": wait})]
            )
            process = self.transports[host].start(argv, deadline=self.deadline, start_by=until)
            self.processes[host] = process
            process.send(stdin)
            return self._report(process, until, "facts", parse_facts_report)

        return self._each(hosts, one)

    def step(
        self,
        name: str,
        messages: Mapping[str, Mapping[str, object]],
        seconds: float,
        until: Deadline,
        parse: Callable[[object], _Report],
    ) -> dict[str, _Report]:
        """Send each live node its message and return its next report, checked by `parse`,
        due `seconds` after that node was handed its message and by `until` at the latest.
        Counted per node: on a busy control side handing a message to every node takes
        seconds, which must not be taken from the last nodes' time."""

        self.sent = {}

        def one(host: str) -> _Report:
            process = self.processes[host]
            process.send(json.dumps(messages[host]).encode() + b"\n")
            self.sent[host] = handed = time.monotonic()  # written by the wait that follows
            return self._report(process, Deadline(min(until.at, handed + seconds)), name, parse)

        return self._each([host for host in messages if host in self.processes], one)

    def spread(self) -> float:
        """Seconds between the first and the last node handed the last step's message."""
        return max(self.sent.values()) - min(self.sent.values()) if self.sent else 0.0

    def close(self) -> None:
        """End every node process: stdin closes, so each exits at once; killed otherwise."""
        processes = [*self.processes.values(), *self.dropped]
        self.processes, self.dropped = {}, []
        parallel(
            lambda process: process.finish(Deadline.after(STOP_SECONDS)),
            processes,
            workers=self.workers,
        )

    def _each(self, hosts: list[str], fn: Callable[[str], _Report]) -> dict[str, _Report]:
        """Run one step everywhere. A node that fails it leaves the session at once but is
        stopped only in `close`: killing a stuck one takes seconds the others must not wait."""
        reports: dict[str, _Report] = {}
        for host, outcome in zip(hosts, parallel(fn, hosts, workers=self.workers), strict=True):
            if isinstance(outcome, BaseException):
                self.errors[host] = str(outcome) or type(outcome).__name__
                if host in self.processes:
                    self.dropped.append(self.processes.pop(host))
            else:
                reports[host] = outcome
        return reports

    @staticmethod
    def _report(
        process: RemoteProcess, until: Deadline, name: str, parse: Callable[[object], _Report]
    ) -> _Report:
        """The step's report, checked; ScriptFailure with the reason when none came or it
        has another shape."""
        chunk = process.expect(END, until)
        if chunk is None:
            if until.expired:
                raise ScriptFailure("timeout", f"{name} step did not finish in time")
            # It exited (no wait): why, from its exit status and stderr.
            raise failure_of(process.finish(Deadline.after(STOP_SECONDS)), f"{name} step")
        try:
            return parse(decode_result(chunk, f"{name} step"))
        except MalformedMessage as error:
            raise ScriptFailure("broken", f"{name} step sent a malformed report: {error}") from None


def bounded(deadline: Deadline, seconds: float) -> Deadline:
    return Deadline(min(deadline.at, time.monotonic() + seconds))
