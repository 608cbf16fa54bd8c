"""Launch, node side: runs this node's share of the job and answers for it until it ends.

Shipped over stdin behind the network stage's bootstrap, composed with the node-side prelude
(stdlib only, Python 3.8+), started with the node's interpreter. It runs torchrun (or `docker
run` around it) in a session of its own, with a marker variable every process of the job
inherits, and:

- forwards torchrun's stdout and stderr line by line to its own stdout;
- prints control messages as "<token> <json>" lines (the token is random per run, so the
  job's own output cannot forge one): started, dump, exit;
- reads commands on stdin: "dump" answers with every rank's Python stacks (py-spy when the
  node has it, else the faulthandler fallback below), "stop" ends the job;
- end of stdin (the control side died, or its connection did) also ends the job;
- when torchrun ends, kills whatever the job left behind, removes its run folder and exits.

The run folder (torchrun's logs, the flight recorder's dumps, the faulthandler hook below)
is made here, fresh and private (mkdtemp: a random name, mode 0700), never one that existed:
another user of the node who made it first would own what the ranks import from it. The
plan says the spec's placeholder wherever the folder goes; it is replaced here.

Processes of the job are found by the marker in /proc/PID/environ, so ranks torchrun starts
in sessions of their own, their children, and processes inside the container are all found.
A rank is a marked process with GROUP_RANK (torchrun sets it for workers) whose parent has
none (a DataLoader worker's parent is a rank).

Without py-spy, a sitecustomize put first on PYTHONPATH registers faulthandler for SIGUSR1 in
every rank, writing into the run folder; a dump signals the ranks and reads those files.

This file is the runner; node libraries inserted after the prelude hold its concerns:
launch_watch (the hardware watch), launch_sitecustomize (the text the ranks import),
launch_records (progress notes and flight records), launch_processes (the job's processes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from clusterkit.node.launch_processes import (
    as_this_user,
    cannot_answer,
    docker_quiet,
    find_py_spy,
    marked_processes,
    process_state,
    rank_number,
    ranks_of,
    signal_all,
    signal_ranks,
    source_lines,
)
from clusterkit.node.launch_records import (
    PROGRESS_FILES,
    count,
    cpu_seconds,
    job_process,
    pg_counters,
    progress_notes,
    read_record,
    write_private,
)
from clusterkit.node.launch_sitecustomize import SITECUSTOMIZE
from clusterkit.node.launch_watch import SMI_SECONDS, WATCH_SECONDS, HardwareWatch
from clusterkit.node.prelude import ToolError, private_folder, run_bounded

MARKER = "CLUSTERKIT_LAUNCH"
STACK_DIR_VARIABLE = "CLUSTERKIT_STACK_DIR"
FAULTHANDLER_VARIABLE = "CLUSTERKIT_FAULTHANDLER"
PY_SPY_SECONDS = 20.0
FAULTHANDLER_SECONDS = 3.0
LINE_LIMIT = 64 * 1024
HEARTBEAT_SECONDS = 1.0  # the most time between two writes: the control side's clock of life
PROGRESS_SECONDS = 2.0  # how often the ranks' progress is reported (each rank writes it every 1 s)
FLIGHT_SECONDS = 5.0  # every rank's flight record is written by then, once asked
CHILD_WAIT_SECONDS = 10.0  # torchrun is reaped by then once killed
AGENT_SECONDS = 0.5  # a stopped torchrun whose ranks have all ended is killed after this


class Runner:
    def __init__(self, spec):
        self.spec = spec
        self.token = spec["token"].encode()
        self.marker = ("%s=%s" % (MARKER, spec["marker"])).encode()
        self.run_dir = ""  # made by start()
        self.write_lock = threading.Lock()
        self.written_at = time.monotonic()  # the last write: a heartbeat only in a silence
        self.stop_requested = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.py_spy: str | None = None
        self.grace = float(spec.get("stop_grace", 5.0))
        self.rank_pids = set()  # type: set[int]

    def hurry(self):
        self.grace = min(self.grace, 1.0)
        self.stop_requested.set()

    # --- output -------------------------------------------------------------------------

    def write(self, data):
        out = getattr(sys.stdout, "buffer", sys.stdout)
        with self.write_lock:
            try:
                out.write(data)
                out.flush()
                self.written_at = time.monotonic()
            except (OSError, ValueError):
                self.stop_requested.set()  # nobody is listening any more

    def control(self, payload):
        line = json.dumps(payload, separators=(",", ":"), default=str).encode()
        self.write(self.token + b" " + line + b"\n")

    def forward(self, stream):
        while True:
            line = stream.readline(LINE_LIMIT)
            if not line:
                return
            if not line.endswith(b"\n"):
                line += b"\n"
            self.write(line)

    # --- start --------------------------------------------------------------------------

    def in_run_dir(self, value):
        """A planned value with the run folder's placeholder replaced by its path."""
        return value.replace(self.spec["run_dir_placeholder"], self.run_dir)

    def environment(self):
        env = dict(os.environ)
        env.update({name: self.in_run_dir(value) for name, value in self.spec["env"].items()})
        env[MARKER] = self.spec["marker"]
        site = os.path.join(self.run_dir, "site")
        os.mkdir(site, 0o700)
        os.mkdir(self.stacks_dir, 0o700)
        path = os.path.join(site, "sitecustomize.py")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(SITECUSTOMIZE)
        env["PYTHONPATH"] = site + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env[STACK_DIR_VARIABLE] = self.stacks_dir
        if self.py_spy is None:
            env[FAULTHANDLER_VARIABLE] = "1"
        return env

    @property
    def stacks_dir(self):
        """Where the ranks write their progress, flight records and faulthandler stacks."""
        return os.path.join(self.run_dir, "stacks")

    def start(self):
        self.run_dir = private_folder(self.spec["run_name"])
        tool = self.spec.get("stacks") or "auto"
        self.py_spy = None if tool == "faulthandler" else find_py_spy()
        if tool == "py-spy" and self.py_spy is None:
            raise OSError("py-spy is not installed on this node (--stacks py-spy)")
        self.child = subprocess.Popen(
            as_this_user([self.in_run_dir(part) for part in self.spec["argv"]]),
            cwd=self.spec.get("workdir") or None,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.control(
            {
                "event": "started",
                "pid": self.child.pid,
                "hostname": socket.gethostname(),
                "stacks": "py-spy" if self.py_spy else "faulthandler",
            }
        )

    # --- commands -----------------------------------------------------------------------

    def listen(self):
        """Commands on stdin; its end means the control side is gone: stop the job."""
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()
            if not line:
                self.stop_requested.set()
                return
            command = line.strip().decode("utf-8", "replace")
            if command == "dump":
                threading.Thread(target=self.dump, daemon=True).start()
            elif command == "stop":
                self.stop_requested.set()

    def heartbeat(self):
        """A line whenever nothing was written for HEARTBEAT_SECONDS, so a silent job is
        told from a lost node within seconds; a job that prints costs no heartbeat."""
        while True:
            quiet = time.monotonic() - self.written_at
            if quiet >= HEARTBEAT_SECONDS:
                self.control({"event": "alive"})
                quiet = 0.0
            time.sleep(HEARTBEAT_SECONDS - quiet)

    def progress(self):
        """Every rank's progress every PROGRESS_SECONDS: its CPU time and its flight
        recorder's counters, so the control side judges a job by what it does, not by what
        it prints."""
        ticks = float(os.sysconf("SC_CLK_TCK"))
        while not self.stop_requested.is_set():
            time.sleep(PROGRESS_SECONDS)
            ranks = self.progress_sample(ticks)
            if ranks:
                self.control({"event": "progress", "ranks": ranks})

    def progress_sample(self, ticks):
        """One entry per rank whose note names a process of this job with that RANK; the
        rest are ignored (a note is the job's word, no evidence of which process is a rank)."""
        ranks = []
        for rank, pid, note in progress_notes(self.stacks_dir):
            if not job_process(pid, rank, self.marker):
                continue
            cpu = cpu_seconds(pid, ticks)
            if cpu is None:
                continue  # ended, or not a process of this job any more
            entry = {"rank": rank, "pid": pid, "cpu": cpu, "groups": pg_counters(note)}
            entry.update(ticks=count(note, "ticks"), busy=count(note, "busy"))
            ranks.append(entry)
            if len(self.rank_pids) < 4 * PROGRESS_FILES:
                self.rank_pids.add(pid)  # the hardware watch knows its OOM kills by them
        return ranks

    def watch(self):
        """The hardware watch every WATCH_SECONDS while the job runs: each new event is a
        "hardware" control message. A failure of the watch never touches the job."""
        watch = HardwareWatch(self.rank_pids)
        try:
            watch.start()
        except Exception:
            return
        if watch.smi:
            args = (watch.sample_gpus, SMI_SECONDS)
            threading.Thread(target=self.watch_loop, args=args, daemon=True).start()
        self.watch_loop(watch.sample_log, WATCH_SECONDS)

    def watch_loop(self, sample, seconds):
        """`sample()` every `seconds` until the job is stopped; its events reported."""
        while not self.stop_requested.wait(seconds):
            try:
                events = sample()
            except Exception:
                continue  # one bad sample; the next may do
            if events:
                self.control({"event": "hardware", "events": events})

    def dump(self):
        """Every rank's stack and flight record. A rank that cannot answer (stopped, or
        gone) is not asked and not waited for: its entry says why."""
        ranks = []
        found = ranks_of(self.marker)
        silent = {pid: why for pid, why in
                  ((pid, cannot_answer(process_state(pid))) for pid in found) if why}  # fmt: skip
        answering = {pid: env for pid, env in found.items() if pid not in silent}
        if self.py_spy is None:
            signal_ranks(answering)
        threads = []
        for pid, env in sorted(found.items(), key=lambda item: rank_number(item[1])):
            entry = {"rank": rank_number(env), "local_rank": env.get("LOCAL_RANK"), "pid": pid}
            ranks.append(entry)
            if pid in silent:
                entry.update(method="py-spy" if self.py_spy else "faulthandler", error=silent[pid])
                continue
            target = self.py_spy_dump if self.py_spy else self.faulthandler_dump
            thread = threading.Thread(target=target, args=(entry,), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(PY_SPY_SECONDS + 1)
        records = self.flight_records(found, answering)
        for entry in ranks:
            entry["sources"] = source_lines(entry.get("raw") or "", entry["pid"])
            if entry["pid"] in records:
                entry["flight"] = records[entry["pid"]]
        self.control({"event": "dump", "ranks": ranks})

    def flight_records(self, found, answering):
        """pid -> the last FLIGHT_ENTRIES collectives of each rank's flight recorder: asked
        of the rank's own thread (fr-request; waited for from the `answering` ranks only),
        else read from the dump NCCL's watchdog wrote on a timeout. JSON only: the
        watchdog's pickle is read with no class allowed."""
        request = os.path.join(self.stacks_dir, "fr-request")
        with contextlib.suppress(OSError):
            write_private(request, ("%d" % time.monotonic_ns()).encode())
        records = {}
        end = time.monotonic() + FLIGHT_SECONDS
        while True:
            for pid, env in answering.items():
                if pid not in records:
                    name = "fr-%s.%d.json" % (env.get("RANK"), pid)
                    record = read_record(os.path.join(self.stacks_dir, name))
                    if record is not None:
                        records[pid] = record
            if len(records) == len(answering) or time.monotonic() > end:
                break
            time.sleep(0.1)
        for pid, env in found.items():
            if pid not in records:
                watchdog = os.path.join(self.run_dir, "nccl_trace_rank_%s" % env.get("RANK"))
                record = read_record(watchdog, pickled=True)
                if record is not None:
                    records[pid] = record
        return records

    def py_spy_dump(self, entry):
        entry["method"] = "py-spy"
        assert self.py_spy is not None  # chosen only when py-spy was found
        argv = [self.py_spy, "dump", "--pid", str(entry["pid"]), "--json"]
        try:
            code, out, err = run_bounded(argv, PY_SPY_SECONDS)
        except ToolError as error:
            entry["error"] = "py-spy: %s" % error
            return
        entry["raw"] = out.decode("utf-8", "replace")
        if code is None:
            entry["error"] = "py-spy: no answer within %g s" % PY_SPY_SECONDS
        elif code != 0:
            entry["error"] = "py-spy exited %d: %s" % (
                code,
                err.decode("utf-8", "replace").strip()[-300:],
            )

    def faulthandler_dump(self, entry):
        entry["method"] = "faulthandler"
        path = os.path.join(
            self.run_dir, "stacks", "rank-%s.%d.txt" % (entry["rank"], entry["pid"])
        )
        text, seen, stable_since = "", -1, time.monotonic()
        end = time.monotonic() + FAULTHANDLER_SECONDS
        while time.monotonic() < end:
            try:
                with open(path, errors="replace") as handle:
                    text = handle.read()
            except OSError:
                text = ""
            if len(text) != seen:
                seen, stable_since = len(text), time.monotonic()
            elif text and time.monotonic() - stable_since > 0.2:
                break
            time.sleep(0.05)
        entry["raw"] = text
        if not text:
            entry["error"] = "no stack: py-spy is missing and the rank wrote no faulthandler dump"

    # --- end ----------------------------------------------------------------------------

    def stop(self, grace=None):
        """TERM every process of the job (and the container), KILL what is left after the
        grace (`self.grace` by default, which a TERM to this runner shortens meanwhile).

        In a container, `docker run` itself is not sent TERM: killed while the engine is
        still creating the container, it would leave it created and never started, where
        `--rm` never removes it. It forwards signals to the container and ends with it; the
        container is signalled through the engine as soon as it exists.

        Once every rank has gone, torchrun alone gets AGENT_SECONDS more: the job is over,
        and a torchrun whose store was on a lost master spends seconds on its own teardown
        (2.4 s here, the whole grace under load) while the restart waits.

        A stopped process (state T) keeps a TERM pending until it is continued, so CONT
        follows the TERM, as a shell's `kill` does for a stopped job: a stopped rank ends
        now, not after the whole grace."""
        container = self.spec.get("container")
        spared = {self.child.pid} if container and self.child is not None else set()
        signalled = bool(container) and docker_quiet(["kill", "--signal", "TERM", container])
        signal_all(self.job_pids() - spared, signal.SIGTERM)
        signal_all(self.job_pids() - spared, signal.SIGCONT)
        started = time.monotonic()
        asked = started
        alone = None  # since when torchrun is the job's last process
        while time.monotonic() < started + (self.grace if grace is None else grace):
            pids = self.job_pids()
            if not pids:
                break
            if not container and self.child is not None and pids == {self.child.pid}:
                alone = alone or time.monotonic()
                if time.monotonic() - alone > AGENT_SECONDS:
                    break
            if container and not signalled and time.monotonic() - asked > 0.5:
                asked = time.monotonic()
                signalled = docker_quiet(["kill", "--signal", "TERM", container])
                signal_all(self.job_pids() - spared, signal.SIGTERM)
            time.sleep(0.05)
        left = self.job_pids()
        if container and left:
            docker_quiet(["kill", container])
        signal_all(self.job_pids(), signal.SIGKILL)
        return len(left)

    def remove_run_dir(self):
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def job_pids(self):
        pids = set(marked_processes(self.marker))
        if self.child is not None and self.child.poll() is None:
            pids.add(self.child.pid)
        pids.discard(os.getpid())
        return pids

    def reap(self, child):
        """torchrun's (or docker run's) exit code, bounded: it has ended or been stopped,
        so KILL it again if it is still there; None when even that did not end it (a
        process stuck in the kernel)."""
        for seconds in (CHILD_WAIT_SECONDS, CHILD_WAIT_SECONDS):
            try:
                return child.wait(seconds)
            except subprocess.TimeoutExpired:
                signal_all([child.pid], signal.SIGKILL)
        return None

    def run(self):
        try:
            self.start()
        except OSError as error:
            self.remove_run_dir()
            self.control({"event": "exit", "code": 127, "error": "cannot start: %s" % error})
            return 0
        child = self.child
        assert child is not None  # start() made it
        pumps = [
            threading.Thread(target=self.forward, args=(stream,), daemon=True)
            for stream in (child.stdout, child.stderr)
        ]
        for pump in pumps:
            pump.start()
        threading.Thread(target=self.listen, daemon=True).start()
        threading.Thread(target=self.heartbeat, daemon=True).start()
        if not self.spec.get("container"):  # the ranks' folder is not inside a container
            threading.Thread(target=self.progress, daemon=True).start()
        if self.spec.get("watch", True):
            threading.Thread(target=self.watch, daemon=True).start()
        stopped = False
        while child.poll() is None:
            if self.stop_requested.wait(0.1):
                stopped = True
                self.stop()
                break
        code = self.reap(child)
        for pump in pumps:
            pump.join(2.0)
        leftovers = self.stop(1.0) if self.job_pids() else 0
        container = self.spec.get("container")
        if container:  # whatever state the engine holds it in: gone with the job
            docker_quiet(["rm", "--force", container])
        self.remove_run_dir()
        report = {"event": "exit", "code": code, "stopped": stopped, "leftovers": leftovers}
        if code is None:
            report["error"] = "the job's process %d did not end after SIGKILL" % child.pid
        self.control(report)
        return 0


def main(argv):
    spec = json.loads(argv[1])
    runner = Runner(spec)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the control side decides; stdin ends it
    # The transport's kill (and the node-side `timeout`) sends TERM, then KILL 2 s later:
    # stop the job at once, without the usual grace.
    signal.signal(signal.SIGTERM, lambda *_: runner.hurry())
    code = runner.run()
    # Everything is reported and flushed: leave now. An ordinary exit waits 1 s for the
    # stdin reader thread's buffer lock and then aborts (SIGABRT), and every stop, every
    # restart, waited for that second.
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
