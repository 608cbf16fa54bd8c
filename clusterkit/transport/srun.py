"""srun transport: inside a Slurm allocation, one job step per phase carries every node.

A phase (probe, network, bench) opens ONE step, `srun --nodes N --ntasks-per-node 1
--overlap`, running clusterkit/node/srun_relay.py on every node; each per-host SrunTransport
then starts its command through that step (its stdin lines are addressed to its node, its
output comes back framed), so stages use the same run/start contract as over SSH and no SSH
key is needed. srun merges what every node prints: a line is credited to the node that
printed it by srun's own `--label` (the task id) and the step's layout, which we choose
(`--distribution=arbitrary`: task i runs on the i-th node of `--nodelist`), never by what
the line says, so no node can answer for another. Every command is bounded on the node (the
relay kills its process group at the deadline), every step by srun --time and by us
(scancel at the end of the phase or on Ctrl-C), so nothing is left running.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import math
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from clusterkit.errors import TransportError
from clusterkit.hostlist import check_node_name
from clusterkit.transport.base import (
    DEFAULT_OUTPUT_CAP,
    CommandResult,
    Deadline,
    PumpedProcess,
    Transport,
)
from clusterkit.transport.nodescript import node_script
from clusterkit.transport.pool import register_cancellable
from clusterkit.transport.srun_command import step_argv, step_env
from clusterkit.transport.srun_io import GoneNodes, srun_connections

STEP_SECONDS = 600.0  # a phase opened without a deadline of its own
STOP_SECONDS = 5.0  # a step told to end (stdin closed) is gone by then, or cancelled
KILL_SECONDS = 5.0  # a command killed on its node reports back by then
BLOB_MIN = 2048  # stdin at least this long is broadcast once and referred to by digest
_TASK_ERROR = re.compile(r"srun: error: (\S+): task \d+: (.+)")
_LAUNCH_FAILED = re.compile(r"srun: error: Task launch for \S+ failed on node (\S+): (.+)")
_LABEL = re.compile(rb" *(\d{1,9}): ")  # what `srun --label` puts before each task's line


class StepLost(Exception):
    """The step ended before this node's relay started, through no fault of this node (srun
    aborts a whole step when one node cannot launch it): a new step without that node helps."""


def relay_source() -> str:
    """clusterkit/node/srun_relay.py composed with the node-side prelude (sent as `-c`)."""
    return node_script("srun_relay")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class SrunStep:
    """One running `srun` over some nodes of the allocation: the relay on each."""

    def __init__(
        self, session: SrunSession, hosts: Sequence[str], name: str, deadline: Deadline
    ) -> None:
        self.session, self.hosts, self.name = session, list(hosts), name
        self.cond = threading.Condition()
        self.ready: set[str] = set()
        self.failed: dict[str, str] = {}  # node -> why its relay is gone
        self.launch_failed: dict[str, str] = {}  # node -> why the step could not start there
        self.deadline = deadline
        self.tasks = dict(enumerate(self.hosts))  # task id -> node, by the layout we ask for
        self.said_ids: dict[str, tuple[str, str]] = {}  # node -> (job, step) its relay said
        self.processes: dict[str, SrunProcess] = {}
        self.heard: dict[str, float] = {}  # node -> when its relay's last line came
        self._io = GoneNodes()
        self.ended = False  # srun exited: nothing more will come
        self.stderr_tail: list[str] = []
        self._written: set[str] = set()  # blobs every node already has
        self._ender: threading.Thread | None = None  # waits for srun once the step is closed
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        try:
            self.popen = subprocess.Popen(
                self._argv(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # Ctrl-C is ours to handle: scancel, not a raw SIGINT
                env=step_env(self.session.env),
            )
        except OSError as error:
            raise TransportError(
                self.hosts[0], "protocol", f"cannot run {session.srun[0]}: {error}"
            ) from None
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()
        for target in (self._read_stdout, self._write_stdin):
            threading.Thread(target=target, daemon=True).start()

    def _argv(self) -> list[str]:
        session = self.session
        minutes = max(1, math.ceil(self.deadline.remaining() / 60) + 1)
        return step_argv(
            [*session.srun, *([f"--jobid={session.job_id}"] if session.job_id else [])],
            session.extra_args,
            self.hosts,
            f"--job-name=clusterkit-{self.name}",
            minutes,
            [session.interpreter, "-S", "-c", relay_source()],
        )

    @property
    def ids(self) -> tuple[str, str] | None:
        """(job, step) of the step, once every relay that spoke agrees on it (and on our job):
        scancel ends what this says, so one node's word alone never chooses it."""
        said = set(self.said_ids.values())
        if len(said) != 1:
            return None
        job, step = next(iter(said))
        if not (job.isdigit() and step.isdigit()):
            return None
        return (job, step) if self.session.job_id in (None, job) else None

    # --- the three pumps ----------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            said = self._attribute(line)
            if said is None:
                continue
            node, words = said
            cid, kind = words[1], words[2]
            with self.cond:
                self.heard[node] = time.monotonic()
                if kind == "ready" and len(words) >= 5:
                    self.ready.add(node)
                    self.said_ids.setdefault(node, (words[3], words[4]))
                elif (process := self.processes.get(cid)) is not None and process.host == node:
                    process._receive(kind, words[3] if len(words) > 3 else "")
                self.cond.notify_all()
        try:
            self.popen.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            # Its output is closed, so nothing more can come through this step: end it.
            self.cancel()
        self._stderr_reader.join(STOP_SECONDS)  # srun's last words say why it ended
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def _attribute(self, line: bytes) -> tuple[str, list[str]] | None:
        """(node, words) of a relay's line, the node being the one srun's label names; None
        for a line without a label, or one that claims to come from another node."""
        label = _LABEL.match(line)
        node = self.tasks.get(int(label.group(1))) if label else None
        if label is None or node is None:
            return None
        words = line[label.end() :].decode("ascii", "replace").split()
        if len(words) < 3 or words[0] != node:
            return None  # a node speaking for another: not believed, not credited to anyone
        return node, words

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        for raw in self.popen.stderr:
            label = _LABEL.match(raw)
            line = raw[label.end() if label else 0 :].decode("utf-8", "replace").rstrip()
            if label:  # a node's own stderr, shown as its own
                task = int(label.group(1))
                line = f"{self.tasks.get(task, f'task {task}')}: {line}"
            with self.cond:
                # Only srun's own (unlabelled) lines say which node failed.
                self.stderr_tail = [*self.stderr_tail[-20:], line]
                if label is None and (match := _LAUNCH_FAILED.match(line)):
                    self.launch_failed.setdefault(match.group(1), match.group(2))
                elif label is None and (match := _TASK_ERROR.match(line)):
                    self.failed.setdefault(match.group(1), match.group(2))
                self.cond.notify_all()

    def _write_stdin(self) -> None:
        stdin = self.popen.stdin
        assert stdin is not None
        while (data := self._outbox.get()) is not None:
            try:
                stdin.write(data)
                stdin.flush()
            except OSError:
                break
        with contextlib.suppress(OSError):
            stdin.close()

    def send_line(self, *words: str) -> None:
        self._outbox.put((" ".join(words) + "\n").encode())

    def send_data(self, host: str, cid: str, data: bytes) -> None:
        """Stdin for one command; long data goes once to every node, then by digest (the
        step's stdin reaches every node, so sending it per node would multiply it)."""
        if len(data) < BLOB_MIN:
            self.send_line("I", host, cid, _b64(data))
            return
        digest = hashlib.sha256(data).hexdigest()[:32]
        if digest not in self._written:
            self._written.add(digest)
            self.send_line("B", digest, _b64(data))
        self.send_line("R", host, cid, digest)

    # --- commands -----------------------------------------------------------------------

    def wait_ready(self, host: str, until: Deadline) -> None:
        """Until this node's relay runs. StepLost when the step was aborted because of
        other nodes; TransportError when this node cannot run it."""
        with self.cond:
            while not self._launched(host):
                cancelled = self.session.cancelled.is_set()
                if cancelled:
                    raise TransportError(host, "interrupted", "interrupted; step cancelled")
                if why := self.launch_failed.get(host) or self.session.unlaunchable.get(host):
                    raise TransportError(
                        host,
                        "unreachable",
                        f"srun could not start step {self.name} on {host}: {why}",
                        hint="is its slurmd up and reachable from this node?",
                    )
                if self.launch_failed:  # srun aborts the whole step: start again without them
                    raise StepLost(host)
                if why := self.failed.get(host) or (self._why_ended() if self.ended else None):
                    raise TransportError(
                        host, "unreachable", f"srun step {self.name} did not start on {host}: {why}"
                    )
                if until.expired and host in self.ready:
                    return  # others still launching: go on, at the risk of an abort later
                if until.expired:
                    raise TransportError(
                        host,
                        "timeout",
                        f"srun step {self.name} did not start on {host} in time"
                        + (f": {self.stderr_tail[-1]}" if self.stderr_tail else ""),
                        hint="is the node allocated and its slurmd answering?",
                    )
                self.cond.wait(min(until.remaining(), 0.25))

    def _launched(self, host: str) -> bool:
        """This node's relay runs and the step has settled on every node: srun aborts the
        whole step when one node cannot launch it, killing what already runs elsewhere, so
        no command starts before every relay is up or known gone."""
        if host not in self.ready or self.ended or self.launch_failed:
            return False
        settled = self.ready | set(self.failed) | set(self.launch_failed)
        return all(other in settled for other in self.hosts)

    def find_gone(self) -> None:
        """Nodes whose stepd is gone while srun still runs join `failed` (srun_io.py): a
        crashed node is known in seconds, not at the node timeout. Under the lock."""
        now = time.monotonic()
        live = [h for h in self.hosts if h in self.ready and h not in self.failed]
        if self.ended or not live or not self._io.due(now):
            return
        self._io.checked = now
        for node in self._io.check(now, live, self.heard, srun_connections(self.popen.pid)):
            self.failed.setdefault(node, "its step's connection to srun closed: the node is gone")

    def _why_ended(self) -> str:
        return self.stderr_tail[-1] if self.stderr_tail else "srun exited"

    def start(
        self, host: str, argv: Sequence[str], deadline: Deadline, cap: int, *, own: bool = False
    ) -> SrunProcess:
        cid = str(next(self.session.counter))
        process = SrunProcess(self, host, cid, cap, own_step=own)
        with self.cond:
            self.processes[cid] = process
        spec = {"argv": list(argv), "timeout": max(1.0, deadline.remaining())}
        self.send_line("C", host, cid, _b64(json.dumps(spec).encode()))
        return process

    # --- ending -------------------------------------------------------------------------

    def close(self) -> None:
        """End the step: stdin closes, every relay kills what is left and exits. srun waits
        for every node's task, and a crashed or cut-off node never reports one: that wait
        (and the cancel of a step still there after STOP_SECONDS) goes on in the background,
        never in the way of a restart; `wait_gone()` waits for it."""
        self._outbox.put(None)
        with self.cond:
            if self._ender is not None:
                return
            self._ender = threading.Thread(target=self._end, daemon=True)
        self._ender.start()

    def _end(self) -> None:
        try:
            self.popen.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.cancel()

    def wait_gone(self, seconds: float) -> None:
        """Wait (at most `seconds`) for a closed step's srun to be gone."""
        if self._ender is not None:
            self._ender.join(seconds)

    def cancel(self) -> None:
        """scancel the step (Slurm kills it on every node), then srun itself."""
        if self.ids and self.ids[0] != "?" and self.ids[1] != "?":
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    [self.session.scancel, f"{self.ids[0]}.{self.ids[1]}"],
                    capture_output=True,
                    timeout=STOP_SECONDS,
                    env=dict(self.session.env),
                    check=False,
                )
        elif self.popen.poll() is None:
            # No relay reported yet: two SIGINTs within a second make srun cancel the step.
            for _ in range(2):
                with contextlib.suppress(ProcessLookupError):
                    self.popen.send_signal(signal.SIGINT)
                time.sleep(0.1)
        self._outbox.put(None)
        try:
            self.popen.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            # Not gone even then (stuck in the kernel): nothing more to do, and no reason to
            # hold the caller.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(STOP_SECONDS)
        with self.cond:
            self.ended = True
            self.cond.notify_all()


class SrunProcess(PumpedProcess):
    """A command on one node of a step (see RemoteProcess)."""

    def __init__(
        self, step: SrunStep, host: str, cid: str, cap: int, *, own_step: bool = False
    ) -> None:
        super().__init__(host, cap)
        self._step, self._cid, self._own_step = step, cid, own_step
        self._eof_sent = False
        self._exit: int | None = None
        self._killed = False  # the relay killed it at its timeout
        self._done = False

    def _receive(self, kind: str, payload: str) -> None:
        """From the step's reader, under its lock; a malformed line is dropped (its node's
        relay is ours, but what a node prints is not to be trusted)."""
        try:
            if kind in ("o", "e"):
                data = base64.b64decode(payload, validate=True)
                self._keep(self._out if kind == "o" else self._err, data)
            elif kind == "x":
                self._exit, self._done = int(payload), True
                self._exited_at = self._exited_at or time.monotonic()
            elif kind == "t":
                self._killed, self._done = True, True
                self._exited_at = self._exited_at or time.monotonic()
        except ValueError:  # binascii.Error is one
            return

    def _gone(self) -> str | None:
        """Why this command's node cannot answer any more (its channel is gone); under the
        step's lock. From then on the command counts as ended, like a closed SSH channel."""
        step = self._step
        step.find_gone()
        why = step.failed.get(self.host) or (step._why_ended() if step.ended else None)
        if why is not None and self._exited_at is None:
            self._exited_at = time.monotonic()
        return why

    def _pump(self, done: Callable[[], bool], deadline: Deadline) -> bool:
        step = self._step
        if self._pending:
            step.send_data(self.host, self._cid, self._pending)
            self._pending = b""
        if self._closing and not self._eof_sent:
            self._eof_sent = True
            step.send_line("E", self.host, self._cid)
        with step.cond:
            while not done():
                if step.session.cancelled.is_set():  # its step is scancelled: the command dies
                    self._result = self._outcome(None, bytes(self._err), timed_out=True)
                    raise TransportError(self.host, "interrupted", "interrupted; step cancelled")
                if self._done or self._gone():
                    return self._closing or done()
                if deadline.expired:
                    return False
                step.cond.wait(min(deadline.remaining(), 0.25))
        return True

    def _conclude(self, *, exited: bool) -> CommandResult:
        if not exited:
            self._step.send_line("K", self.host, self._cid)
            self._pump(lambda: False, Deadline.after(KILL_SECONDS))
        err = bytes(self._err)
        code = self._exit
        if not self._done and (why := self._gone()):
            err += f"\nsrun: {why}".encode()
            code = 255  # like ssh: the channel went away before the command said how it ended
        return self._outcome(code, err, timed_out=not exited or self._killed)

    def _release(self) -> None:
        if self._own_step:
            self._step.session.close_step(self._step)

    def _outcome(self, code: int | None, err: bytes, *, timed_out: bool) -> CommandResult:
        return CommandResult(
            self.host,
            None if timed_out else code,
            bytes(self._out),
            err,
            timed_out=timed_out,
            truncated=self._truncated,
            duration=time.monotonic() - self._started,
        )


class SrunSession:
    """The allocation's nodes and the step of the current phase.

    `phase(name)` opens one step over every node for the commands of that phase; a command
    started outside any phase gets a step of its own node only. srun and scancel run with
    `env`, the run's variables (its PATH finds them; layout variables are dropped).
    """

    def __init__(
        self,
        hosts: Sequence[str],
        *,
        job_id: str | None = None,
        interpreter: str = "python3",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str],
        srun: Sequence[str] = ("srun",),
        scancel: str = "scancel",
        on_close: Callable[[], None] | None = None,
    ) -> None:
        # Each name is one element of --nodelist and one task of the layout: a hostlist or a
        # comma in it would shift every node's output onto another's name.
        self.hosts = [check_node_name(host, "srun") for host in hosts]
        self.job_id, self.interpreter = job_id, interpreter
        self.extra_args, self.env, self.srun, self.scancel = (
            list(extra_args),
            env,
            list(srun),
            scancel,
        )
        self.on_close = on_close  # e.g. cancel an allocation made for this session
        self.counter = itertools.count(1)
        self.cancelled = threading.Event()
        self.current: SrunStep | None = None
        self.unlaunchable: dict[str, str] = {}  # node -> why srun could not start a step there
        self.steps_opened = 0
        self._lock = threading.Lock()
        self._live: list[SrunStep] = []
        self._closing: list[SrunStep] = []  # closed; their srun may still be ending
        register_cancellable(self)

    def transports(self) -> dict[str, SrunTransport]:
        return {host: SrunTransport(host, self) for host in self.hosts}

    def open_step(self, hosts: Sequence[str], name: str, deadline: Deadline) -> SrunStep:
        if self.cancelled.is_set():
            raise TransportError(hosts[0], "interrupted", "interrupted")
        step = SrunStep(self, hosts, name, deadline)
        with self._lock:
            self._live.append(step)
            self.steps_opened += 1
        return step

    def close_step(self, step: SrunStep) -> None:
        """Close a step; its srun ends in the background (see SrunStep.close), and the
        session's own close waits for every one."""
        step.close()
        with self._lock:
            if step in self._live:
                self._live.remove(step)
                self._closing = [s for s in self._closing if s.popen.poll() is None]
                self._closing.append(step)

    def relaunch(self, lost: SrunStep) -> SrunStep:
        """The phase's step again without the nodes that could not launch it (once per lost
        step, whichever node asks first)."""
        with self._lock:
            if self.current is not lost:
                return self.current or lost
            hosts = [host for host in lost.hosts if host not in lost.launch_failed]
        lost.cancel()  # srun is aborting it anyway: make sure nothing of it lingers
        self.unlaunchable.update(lost.launch_failed)
        step = self.open_step(hosts, lost.name, lost.deadline)
        with self._lock:
            self.current = step
        return step

    @contextlib.contextmanager
    def phase(
        self, name: str, seconds: float = STEP_SECONDS, nodes: Sequence[str] | None = None
    ) -> Iterator[SrunStep]:
        """One step over every node (or these `nodes` of the allocation) for the commands
        started inside the block."""
        # A node where srun could not start an earlier step is left out at once: trying it
        # again would abort the whole step again, after the same wait.
        wanted = self.hosts if nodes is None else [h for h in self.hosts if h in nodes]
        hosts = [host for host in wanted if host not in self.unlaunchable] or wanted
        self.current = self.open_step(hosts, name, Deadline.after(seconds))
        try:
            yield self.current
        finally:
            self.current = None
            self._close_steps()

    def cancel(self) -> None:
        """Ctrl-C / SIGTERM: cancel every step not yet gone; waits stop at once."""
        self.cancelled.set()
        with self._lock:
            steps = [*self._live, *(s for s in self._closing if s.popen.poll() is None)]
        for step in steps:
            step.cancel()
            with step.cond:
                step.cond.notify_all()

    def _close_steps(self) -> None:
        with self._lock:
            steps = list(self._live)
        for step in steps:
            self.close_step(step)

    def close(self) -> None:
        """End every step and wait until each srun is gone (bounded: a step still there is
        cancelled, then killed), so nothing is left running; then `on_close`, once."""
        self._close_steps()
        with self._lock:
            closing, self._closing = self._closing, []
        for step in closing:  # closed together: each wait is bounded, and runs alongside
            step.wait_gone(STOP_SECONDS * 3 + 1.0)
        with self._lock:
            on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()


class SrunTransport(Transport):
    """One node of an SrunSession under the Transport contract."""

    def __init__(self, host: str, session: SrunSession) -> None:
        self.host, self.session = host, session

    def cancel(self) -> None:
        self.session.cancel()

    def start(
        self,
        argv: Sequence[str],
        *,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        start_by: Deadline | None = None,
    ) -> SrunProcess:
        if why := self.session.unlaunchable.get(self.host):
            raise TransportError(
                self.host,
                "unreachable",
                f"srun could not start a step on {self.host}: {why}",
                hint="is its slurmd up and reachable from this node?",
            )
        step = self.session.current
        if step is None or self.host not in step.hosts:
            step = self.session.open_step([self.host], "command", deadline)
            own = True
        else:
            own = False
        until = start_by or deadline
        try:
            while True:
                try:
                    step.wait_ready(self.host, until)
                    break
                except StepLost:
                    step = self.session.relaunch(step)
        except TransportError:
            if own:
                self.session.close_step(step)
            raise
        return step.start(self.host, argv, deadline, output_cap, own=own)

    def close(self) -> None:
        """The session's steps end with its first transport closed: the stages are over."""
        self.session.close()
