"""Run a launch plan on every node and watch it: output, first failure, hangs, stops.

One node process per node (clusterkit/node/launch.py) over the node's transport. One thread
per node owns its process (send, read, finish) and turns what it reads into events; the
calling thread takes the events in order, prints every rank's lines as `host/rank: ...`,
keeps each rank's last lines, and decides:

- a node reports a failed torchrun: wait FAILURE_GRACE for the other nodes' reports (a
  peer's death makes others fail too), name the first failure, stop the rest;
- no rank printed for `hang_timeout` (or NCCL's watchdog says a collective timed out): ask
  every node for every rank's stacks, group the ranks by where they wait, stop the job;
- a node says nothing at all (not even its heartbeat) for `node_timeout`, or its
  connection ends without an exit report: the node is lost, the rest is stopped at once
  (no grace: what the others report next follows from the loss, and a restart waits).
  A lost node is gone: its stop and sweep go on in the background, never in the way of
  the restart, and the outage counts from its last sign of life, not from the detection;
- Ctrl-C or SIGTERM: stop everything.

Stopping is the node process's job ("stop", or the end of its stdin); when a node does not
confirm within the grace, its process group is killed over the connection and a sweep by
the job's marker variable kills whatever is left.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from clusterkit.checks.model import Status
from clusterkit.errors import TransportError
from clusterkit.escape import printable
from clusterkit.launch import failure as failures
from clusterkit.launch import flight, stacks
from clusterkit.launch.evidence import write_records, write_stacks
from clusterkit.launch.job import HangReport, JobOutcome, SuperviseOptions
from clusterkit.launch.messages import (
    ControlMessage,
    MalformedControl,
    RankDump,
    RankProgress,
    WatchEvent,
    own_ranks,
    parse_control,
)
from clusterkit.launch.plan import MARKER_VARIABLE, NodeLaunch
from clusterkit.launch.progress import ProgressWatch, Sample, Straggler
from clusterkit.launch.sweep import SWEEP_SECONDS, sweep
from clusterkit.launch.watch import Graded, grade, own_events
from clusterkit.redact import redact_text
from clusterkit.rundir import RUN_DIR
from clusterkit.safefiles import PrivateFolder
from clusterkit.status import ExitStatus, interrupted_status
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.nodescript import node_script, shipment

START_SECONDS = 30.0  # the server starts the node process by then
FAILURE_GRACE = 2.0  # after a node fails, how long the others may report their own failure
DUMP_SECONDS = 45.0  # every node's stack dumps are back by then (py-spy: ~0.1 s a rank)
STOP_MARGIN = 8.0  # beyond the stop grace, before a node's process group is killed
LAST_LINES = 20  # kept per rank for the failure report
HUNG_STATUS = 124  # like timeout(1): the job was stopped because it made no progress
_RANK_LINE = re.compile(rb"^\[rank(\d{1,9})\]:(.*)$", re.S)  # a rank, not a 5000-digit number
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|watchdog timeout", re.I)


def node_source() -> bytes:
    """clusterkit/node/launch.py composed with the node-side prelude."""
    return node_script("launch").encode()


@dataclass
class _Node:
    plan: NodeLaunch
    transport: Transport
    commands: queue.Queue[bytes] = field(default_factory=queue.Queue)
    thread: threading.Thread | None = None
    exit_code: int | None = None
    reported_at: float | None = None  # when its exit report came
    stopped_by_us: bool = False
    ended: bool = False
    lost: bool = False
    abandoned: bool = False  # its stop was overdue: we ended its process ourselves
    error: str | None = None
    heard_at: float = field(default_factory=time.monotonic)  # its last byte (sign of life)
    spoke: bool = False  # any byte yet: before the first, the start may take START_SECONDS
    agent_lines: deque[str] = field(default_factory=lambda: deque(maxlen=400))
    dump: list[RankDump] | None = None
    dump_problems: list[str] = field(default_factory=list)  # entries dropped as malformed
    stacks_method: str | None = None
    malformed: str | None = None  # the first control message dropped for its shape, and why

    @property
    def host(self) -> str:
        return self.plan.host

    @property
    def ranks(self) -> range:
        """The global ranks this node runs: torchrun numbers them node by node."""
        per_node = int(self.plan.env.get("NPROC_PER_NODE", "1"))
        return range(self.plan.node_rank * per_node, (self.plan.node_rank + 1) * per_node)


class Supervisor:
    """Runs one launch plan to its end; `run()` returns the outcome, never leaves a process
    on a node it can reach (a node lost to silence stops its own share once it is back)."""

    def __init__(
        self,
        transports: Mapping[str, Transport],
        plan: Sequence[NodeLaunch],
        run_id: str,
        pythons: Mapping[str, str],
        options: SuperviseOptions,
    ) -> None:
        self.nodes = {item.host: _Node(item, transports[item.host]) for item in plan}
        self.run_id, self.pythons, self.options = run_id, pythons, options
        self.token = "clusterkit-" + secrets.token_hex(8)
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.last_lines: dict[tuple[str, int], deque[str]] = {}
        self.logs: dict[tuple[str, int | None], TextIO] = {}
        self.log_failed = False  # --log-dir became unwritable: told once, then left alone
        self.failures: list[failures.Failure] = []
        self.failed_at: float | None = None
        self.onset_at: float | None = None  # when the first failure began, as far as known
        self.stopping_since: float | None = None
        self.stop_reason = ""
        self.last_progress = time.monotonic()
        self.dump_since: float | None = None
        self.hang: HangReport | None = None
        self.hang_reason = ""
        self.interrupted = False
        self.started = time.monotonic()
        self.ranks_expected = sum(int(item.env.get("NPROC_PER_NODE", "1")) for item in plan)
        self.ranks_seen: set[tuple[str, int]] = set()
        self.running_at: float | None = None
        self.progress = ProgressWatch()
        self.straggler: Straggler | None = None
        self.hardware: list[Graded] = []
        self.hardware_fault: Graded | None = None
        self.watch_dropped: set[str] = set()  # hosts told about a dropped hardware event

    # --- the node threads -------------------------------------------------------------

    def _node_shipment(self, node: _Node, source: bytes) -> tuple[list[str], bytes]:
        spec = {
            "token": self.token,
            "marker": f"{self.run_id}/{node.plan.node_rank}",
            "argv": list(node.plan.argv),
            "env": node.plan.env,
            "run_name": node.plan.run_name,
            "run_dir_placeholder": RUN_DIR,
            "workdir": node.plan.workdir,
            "container": node.plan.container,
            "stop_grace": self.options.stop_grace,
            "stacks": self.options.stacks,
            "watch": self.options.watch,
        }
        python = self.pythons.get(node.host, "python3")
        return shipment(python, source, [json.dumps(spec)])

    def _pump(self, node: _Node, source: bytes, deadline: Deadline) -> None:
        process: RemoteProcess | None = None
        try:
            argv, stdin = self._node_shipment(node, source)
            process = node.transport.start(
                argv, deadline=deadline, start_by=Deadline.after(START_SECONDS)
            )
            process.send(stdin)
            while True:
                with contextlib.suppress(queue.Empty):
                    while True:
                        process.send(node.commands.get_nowait())
                chunk = process.read_lines(Deadline.after(0.2))
                if chunk:  # stamped on arrival: a busy event queue is not the node's silence
                    node.heard_at, node.spoke = time.monotonic(), True
                for line in chunk.splitlines():
                    self.events.put(("line", node.host, line))
                if not chunk and process.exited:
                    break
                if node.stopped_by_us and node.commands.empty() and self._stop_overdue():
                    node.abandoned = True
                    break
            result = process.finish(Deadline.after(2.0))
            for line in result.stdout.splitlines():
                self.events.put(("line", node.host, line))
            self.events.put(("ended", node.host, result.stderr_tail()))
        except TransportError as error:
            if process is not None:
                with contextlib.suppress(TransportError):
                    process.finish(Deadline.after(2.0))
            self.events.put(("ended", node.host, f"{error.kind}: {error.detail}"))

    def _stop_overdue(self) -> bool:
        since = self.stopping_since
        return since is not None and time.monotonic() - since > self.options.stop_grace + (
            STOP_MARGIN
        )

    # --- the calling thread -------------------------------------------------------------

    def run(self) -> JobOutcome:
        source = node_source()
        limit = self.options.time_limit or 30 * 24 * 3600.0
        deadline = Deadline.after(limit)
        for node in self.nodes.values():
            node.thread = threading.Thread(
                target=self._pump, args=(node, source, deadline), daemon=True
            )
            node.thread.start()
        try:
            self._watch(deadline)
        except BaseException as error:  # Ctrl-C, SIGTERM (raised as Ctrl-C), stdout gone
            self.interrupted = isinstance(error, KeyboardInterrupt)
            self.options.note("clusterkit: stopping the job on every node")
            self._stop_all("interrupted")
            try:
                self._watch(deadline)
            except BaseException:  # a second Ctrl-C: the sweep below still runs
                self._abandon()
            if not self.interrupted:
                raise
        finally:
            self._sweep_unconfirmed()
            for handle in self.logs.values():
                handle.close()
        return self._outcome()

    def _watch(self, deadline: Deadline) -> None:
        while not all(node.ended or node.lost for node in self.nodes.values()):
            try:
                kind, host, payload = self.events.get(timeout=0.2)
            except queue.Empty:
                kind = ""
            if kind:
                self._handle(kind, self.nodes[host], payload)
            self._decide(deadline)

    def _handle(self, kind: str, node: _Node, payload: Any) -> None:
        """One event of a node's; when it was heard is stamped where its bytes arrive."""
        if kind == "line":
            self._line(node, payload)
        elif kind == "ended":
            node.ended = True
            # Gone without a report: lost, even while it was being stopped (its channel
            # went away, as a crashed node's does while its peers fail), unless it was us
            # who ended it, its stop overdue.
            if node.reported_at is None and not node.abandoned:
                node.lost = True
                node.error = str(payload or "the node process ended without a report")
                self._lose(node, time.monotonic())

    def _line(self, node: _Node, raw: bytes) -> None:
        if raw.startswith(self.token.encode() + b" "):
            self._received(node, raw[len(self.token) + 1 :])
            return
        match = _RANK_LINE.match(raw)
        rank = int(match[1]) if match else None
        text = (match[2] if match else raw).decode("utf-8", "replace").rstrip("\r")
        if rank is not None and text.startswith(own := f"[rank{rank}]:"):
            text = text[len(own) :].lstrip(" ")  # torch's own prefix on its error lines
        who = f"{node.host}/{rank}" if rank is not None else node.host
        shown = redact_text(text)  # relayed like every other output: secrets redacted
        # Once we stop the job, torchrun's complaints about being stopped go to the log only.
        if rank is not None or self.stopping_since is None:
            print(f"{who}: {shown}", file=self.options.out, flush=True)
        self._log(node.host, rank, shown)
        if rank is None:
            node.agent_lines.append(text)
        else:
            self.last_lines.setdefault((node.host, rank), deque(maxlen=LAST_LINES)).append(text)
            if not self.progress.reported:  # a job judged by what it does, once it says
                self.last_progress = time.monotonic()
            self._seen(node.host, rank)
        if _WATCHDOG.search(text) and not self.hang_reason:
            self.hang_reason = f"NCCL's watchdog reported a timeout on {who}"

    def _seen(self, host: str, rank: int) -> None:
        """Every rank running is what a restart waits for: say so once."""
        if self.running_at is not None:
            return
        self.ranks_seen.add((host, rank))
        if len(self.ranks_seen) >= self.ranks_expected:
            self.running_at = time.monotonic()
            if self.options.on_running is not None:
                self.options.on_running()

    def _received(self, node: _Node, text: bytes) -> None:
        """A control message, checked (launch/messages.py). One that is not JSON, or of
        another shape, is dropped like any line that cannot be read: the node's exit report
        is then missing, and the node is lost when it ends (the first shape problem is told
        once per node)."""
        try:
            decoded = json.loads(text)
        except (ValueError, RecursionError):
            return
        try:
            message, dropped = parse_control(decoded)
        except MalformedControl as error:
            if node.malformed is None:
                node.malformed = str(error)
                note = f"clusterkit: {node.host}: a malformed message was dropped: {error}"
                self.options.note(printable(note))
            return
        self._control(node, message, dropped)

    def _control(self, node: _Node, message: ControlMessage, dropped: list[str]) -> None:
        if message["event"] == "started":
            node.stacks_method = message["stacks"]
        elif message["event"] == "dump":
            node.dump, foreign = own_ranks(message["ranks"], node.ranks)
            node.dump_problems = [*dropped, *foreign]
        elif message["event"] == "progress":
            self._progress(node, own_ranks(message["ranks"], node.ranks, "progress")[0])
        elif message["event"] == "hardware":
            self._hardware(node, message["events"], dropped)
        elif message["event"] == "exit":
            node.exit_code = message["code"]
            node.reported_at = time.monotonic()
            if error := message.get("error"):
                node.error = error
                self.options.note(printable(f"clusterkit: {node.host}: {error}"))
            if node.exit_code != 0 and not node.stopped_by_us:
                by_rank = {r: list(v) for (h, r), v in self.last_lines.items() if h == node.host}
                by_rank[-1] = list(node.agent_lines)[-LAST_LINES:]
                for item in failures.node_failures(
                    node.host,
                    int(node.exit_code if node.exit_code is not None else 1),
                    "\n".join(node.agent_lines),
                    by_rank,
                    node.reported_at,
                ):
                    self._fail(item)

    def _progress(self, node: _Node, ranks: list[RankProgress]) -> None:
        """The node's ranks' samples: progress for the hang clock, and the straggler."""
        now = time.monotonic()
        for entry in ranks:
            groups = entry["groups"]
            counters = None if groups is None else {
                group: (pair[0], pair[1]) for group, pair in groups.items() if len(pair) == 2
            }  # fmt: skip
            sample = Sample(now, entry["cpu"], counters, entry["ticks"], entry["busy"])
            if self.progress.add(node.host, entry["rank"], sample):
                self.last_progress = now
        if self.straggler is None and (found := self.progress.straggler()) is not None:
            self.straggler = found
            self.options.note(printable(f"clusterkit: {found.describe()}"))
            if self.options.straggler_fault and self.failed_at is None:
                self.failed_at = now
                self._stop_all(f"{found.host} is a straggler (--straggler-fault)")

    def _hardware(self, node: _Node, events: list[WatchEvent], dropped: list[str]) -> None:
        """The node's hardware watch: each event graded as `check` grades it, told once and
        kept; the first that `check` fails the node for stops the job as a node fault."""
        devices = self.options.devices
        kept, foreign = own_events(events, None if devices is None else devices.get(node.host))
        for why in [*dropped, *foreign][:1]:
            if node.host not in self.watch_dropped:  # once per node: no flood of notes
                self.watch_dropped.add(node.host)
                self.options.note(printable(f"clusterkit: {node.host}: dropped: {why}"))
        for graded in (grade(node.host, event) for event in kept):
            if graded.status is Status.OK or graded in self.hardware:
                continue
            self.hardware.append(graded)
            self.options.note(f"clusterkit: {graded.line()}")
            self._log("", None, graded.line())  # --log-dir/watch.txt
            if graded.fatal and self.hardware_fault is None and self.failed_at is None:
                self.hardware_fault = graded
                self.failed_at = time.monotonic()
                self._stop_all(graded.line())

    def _fail(self, item: failures.Failure, onset: float | None = None) -> None:
        """A failure; the first one sets when the fault was detected and began. A node lost
        after others failed (under srun a crashed node goes quiet while its peers' ranks fail
        at once) went silent before their failures: the outage began at its last sign."""
        self.failures.append(item)
        if self.failed_at is None:
            self.failed_at = time.monotonic()
            self.onset_at = onset if onset is not None else self.failed_at
        elif item.lost and onset is not None and self.onset_at is not None:
            self.onset_at = min(self.onset_at, onset)

    def _lose(self, node: _Node, now: float) -> None:
        """The node is gone: its fault began at its last sign of life, not now."""
        node.lost = True
        self._fail(failures.Failure(node.host, None, None, now, lost=True), node.heard_at)

    def _decide(self, deadline: Deadline) -> None:
        now = time.monotonic()
        for node in self.nodes.values():
            # Before its first byte a node may still be starting (bounded by START_SECONDS).
            allowed = max(self.options.node_timeout, 0.0 if node.spoke else START_SECONDS)
            if not node.ended and not node.lost and now - node.heard_at > allowed:
                node.error = f"nothing heard for {self.options.node_timeout:g} s"
                self._lose(node, now)
        if self.stopping_since is not None:
            return
        if self.failed_at is not None:
            others_done = all(n.ended or n.reported_at for n in self.nodes.values())
            lost_first = self.failures[0].lost
            if now - self.failed_at >= FAILURE_GRACE or others_done or lost_first:
                self._stop_all("a rank failed")
            return
        if self.dump_since is not None:
            waiting = [n for n in self._live() if n.dump is None]
            if not waiting or now - self.dump_since > DUMP_SECONDS:
                self._analyse_hang(missing=[n.host for n in waiting])
                self._stop_all("the job hung")
            return
        if overdue := self._exit_overdue(now):
            self.options.note(printable(f"clusterkit: {overdue}: stopping it"))
            self._stop_all(overdue)
            return
        hang = self.options.hang_timeout
        # The clock starts at the first sign of a rank (a line, a sample): imports and the
        # rendezvous (bounded by its own join timeout) are not progress a job can report.
        started = self.last_lines or self.progress.last
        if hang and started and now - self.last_progress > hang and not self.hang_reason:
            self.hang_reason = (
                f"no rank advanced for {hang:g} s (no collective completed, no rank computing)"
                if self.progress.reported
                else f"no rank printed anything for {hang:g} s"
            )
        if self.hang_reason:
            self.options.note(f"clusterkit: {self.hang_reason}: collecting every rank's stack")
            self.dump_since = now
            for node in self._live():
                node.commands.put(b"dump\n")
            return
        if deadline.remaining() <= self.options.stop_grace + STOP_MARGIN:
            self._stop_all("the time limit was reached")

    def _exit_overdue(self, now: float) -> str | None:
        """Why the nodes still running are overdue: every other node reported its end
        `exit_wait` ago and none of their ranks printed since; None while they are not."""
        ended = [n.reported_at for n in self.nodes.values() if n.reported_at is not None]
        waiting = [n.host for n in self._live() if n.reported_at is None]
        if not ended or not waiting:
            return None
        quiet = now - max(*ended, self.last_progress)
        if quiet <= self.options.exit_wait:
            return None
        return (
            f"{', '.join(waiting)} sent no exit report and no rank line "
            f"{self.options.exit_wait:g} s after the other nodes ended"
        )

    def _live(self) -> list[_Node]:
        return [n for n in self.nodes.values() if not n.ended and not n.lost]

    def _stop_all(self, reason: str) -> None:
        if self.stopping_since is not None:
            return
        self.stopping_since = time.monotonic()
        self.stop_reason = reason
        for node in self.nodes.values():
            if not node.ended and node.reported_at is None:
                node.stopped_by_us = True
                node.commands.put(b"stop\n")

    def _analyse_hang(self, missing: list[str]) -> None:
        parsed = [
            stacks.parse_dump(node.host, entry)
            for node in self.nodes.values()
            for entry in node.dump or []
        ]
        groups = stacks.group_ranks(parsed)
        dropped = [f"{n.host}: {why}" for n in self.nodes.values() for why in n.dump_problems]
        records = {
            (node.host, entry["rank"]): entry["flight"]
            for node in self.nodes.values()
            for entry in node.dump or []
            if "flight" in entry
        }
        parted = flight.divergence(records)
        self.hang = HangReport(groups, parsed, missing, self.hang_reason, dropped, parted)
        self._write_log(lambda folder: write_stacks(folder, parsed))
        self._write_log(lambda folder: write_records(folder, records))

    def _abandon(self) -> None:
        """A second Ctrl-C: stop waiting for confirmations; the sweep still runs."""
        for node in self.nodes.values():
            node.ended = True

    def _sweep_unconfirmed(self) -> None:
        """Kill, by marker, what a node that never confirmed its stop may have left. The
        sweep of a node lost to silence goes on in the background, never awaited: over a dead
        connection it can only wait, and the node's runner stops its own share once it finds
        its connection gone. One whose node process ended is swept at once (it is quick where
        the connection lives on, and fails at once where it does not)."""
        unconfirmed = [n for n in self.nodes.values() if n.reported_at is None]
        threads: list[threading.Thread] = []
        for node in unconfirmed:
            marker = f"{MARKER_VARIABLE}={self.run_id}/{node.plan.node_rank}"
            where = (node.transport, marker, node.plan.run_name)
            thread = threading.Thread(target=sweep, args=where, daemon=True)
            thread.start()
            if not (node.lost and not node.ended):
                threads.append(thread)
        for thread in threads:
            thread.join(SWEEP_SECONDS + 2.0)

    def _log(self, host: str, rank: int | None, text: str) -> None:
        def write(folder: PrivateFolder) -> None:
            handle = self.logs.get((host, rank))
            if handle is None:
                name = f"{host}-{rank:d}.log" if rank is not None else f"{host}-torchrun.log"
                name = name if host else "watch.txt"  # the hardware watch's lines
                handle = self.logs[(host, rank)] = folder.open_new(name)
            handle.write(text + "\n")
            handle.flush()

        self._write_log(write)

    def _write_log(self, write: Callable[[PrivateFolder], object]) -> None:
        """Write into --log-dir, if any; a failure (a full disk, a file others planted) is
        told once and ends the logging, never the supervision of the job."""
        folder = self.options.log_dir
        if folder is None or self.log_failed:
            return
        try:
            write(folder)
        except OSError as error:
            self.log_failed = True
            self.options.note(printable(f"clusterkit: --log-dir: no more logs written: {error}"))

    # --- the verdict --------------------------------------------------------------------

    def _outcome(self) -> JobOutcome:
        outcome = self._verdict()
        outcome.all_failures = list(self.failures)
        outcome.detected_at = self.failed_at if self.failed_at is not None else self.dump_since
        outcome.onset_at = self.onset_at if self.failed_at is not None else outcome.detected_at
        if self.hang is not None and self.failed_at is None:
            outcome.onset_at = self.last_progress  # a hang began when the job last advanced
        outcome.running_at = self.running_at
        outcome.straggler = self.straggler
        outcome.hardware, outcome.hardware_fault = list(self.hardware), self.hardware_fault
        if self.options.log_dir is not None:
            outcome.evidence = str(self.options.log_dir)
        return outcome

    def _verdict(self) -> JobOutcome:
        codes = {host: node.exit_code for host, node in self.nodes.items()}
        seconds = time.monotonic() - self.started
        if self.interrupted:
            return JobOutcome(
                int(interrupted_status()),
                "interrupted",
                "interrupted: the job was stopped on every node",
                node_codes=codes,
                seconds=seconds,
            )
        if self.hang is not None:
            stacks_said = f"stacks: {self.hang.summary}" if self.hang.summary else "no stacks"
            where = "; ".join([*self.hang.flight, stacks_said])
            message = f"the job hung ({self.hang.reason}): {where}"
            return JobOutcome(HUNG_STATUS, "hung", message, None, self.hang, codes, seconds)
        if (fault := self.hardware_fault) is not None and not self.failures:
            return JobOutcome(
                int(ExitStatus.FAILED), "node-fault", fault.line(), None, None, codes, seconds
            )
        if self.straggler is not None and self.options.straggler_fault and not self.failures:
            return JobOutcome(
                int(ExitStatus.INCOMPLETE), "slow", self.straggler.describe(), None, None, codes,
                seconds,
            )  # fmt: skip
        first = failures.first_failure(self.failures)
        if first is not None:
            result = "lost" if first.lost else "failed"
            return JobOutcome(
                failures.exit_status(first), result, first.describe(), first, None, codes, seconds
            )
        if self.stop_reason:
            return JobOutcome(
                int(ExitStatus.INCOMPLETE), "stopped", self.stop_reason, None, None, codes, seconds
            )
        return JobOutcome(0, "succeeded", "every rank succeeded", None, None, codes, seconds)
