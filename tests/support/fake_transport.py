"""The one fake transport of the unit tests: a node whose answers a test scripts.

`FakeTransport` is a Transport like the others (no `type: ignore` where it stands in): a
command the test's `answer` recognises gets the result it returns, a conversation its
`converse` recognises gets the process it returns, and every other command runs here, as on
a local node. It is held to the transport contract: tests/cluster/test_transport_conversation.py
runs every contract test over it too, so a fake that drifts from the real transports fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clusterkit.transport.base import DEFAULT_OUTPUT_CAP, CommandResult, Deadline, RemoteProcess
from clusterkit.transport.local import LocalTransport


@dataclass(frozen=True)
class Call:
    """One command the fake was asked to run."""

    argv: tuple[str, ...]
    stdin: bytes | None
    deadline: Deadline


# A test's node: the result for a command it answers, None for one it leaves to run here.
Answer = Callable[[Call], CommandResult | None]
Converse = Callable[[Call], RemoteProcess | None]


class FakeTransport(LocalTransport):
    def __init__(
        self, host: str, *, answer: Answer | None = None, converse: Converse | None = None
    ) -> None:
        super().__init__(host)
        self.answer, self.converse = answer, converse
        self.calls: list[Call] = []  # every `run`, answered or not

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> CommandResult:
        call = Call(tuple(argv), stdin, deadline)
        self.calls.append(call)
        if deadline.expired:  # the contract: a spent deadline starts nothing
            return CommandResult(self.host, None, b"", b"", timed_out=True)
        answered = self.answer(call) if self.answer else None
        if answered is not None:
            return answered
        return super().run(argv, stdin=stdin, deadline=deadline, output_cap=output_cap)

    def start(
        self,
        argv: Sequence[str],
        *,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        start_by: Deadline | None = None,
    ) -> RemoteProcess:
        process = self.converse(Call(tuple(argv), None, deadline)) if self.converse else None
        if process is not None:
            return process
        return super().start(argv, deadline=deadline, output_cap=output_cap, start_by=start_by)
