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
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from clusterkit.node.kernellog import parse_kernel_log, read_kernel_log
from clusterkit.node.nvlink import links_up, parse_nvlink_status
from clusterkit.node.prelude import (
    ToolError,
    find_tool,
    kill_group,
    parent_pid,
    private_folder,
    read_text,
    run_bounded,
)

MARKER = "CLUSTERKIT_LAUNCH"
STACK_DIR_VARIABLE = "CLUSTERKIT_STACK_DIR"
FAULTHANDLER_VARIABLE = "CLUSTERKIT_FAULTHANDLER"
PY_SPY_SECONDS = 20.0
FAULTHANDLER_SECONDS = 3.0
LINE_LIMIT = 64 * 1024
HEARTBEAT_SECONDS = 1.0  # the most time between two writes: the control side's clock of life
PROGRESS_SECONDS = 2.0  # how often the ranks' progress is reported (each rank writes it every 1 s)
FLIGHT_SECONDS = 5.0  # every rank's flight record is written by then, once asked
FLIGHT_FILE_LIMIT = 16 * 1024 * 1024  # a record larger than this is not read
FLIGHT_ENTRIES = 200  # the last entries of each rank's record travel
PROGRESS_FILES = 256  # a node runs fewer ranks (and DataLoader workers) than this
CHILD_WAIT_SECONDS = 10.0  # torchrun is reaped by then once killed
AGENT_SECONDS = 0.5  # a stopped torchrun whose ranks have all ended is killed after this
DOCKER_SECONDS = 10.0  # one docker CLI command (kill, rm) answers by then
# The hardware watch: the kernel log and the InfiniBand ports are read again every
# WATCH_SECONDS (one dmesg call, a few sysfs files), nvidia-smi every SMI_SECONDS.
WATCH_SECONDS = 2.0
SMI_SECONDS = 20.0
WATCH_TOOL_SECONDS = 10.0  # one dmesg or nvidia-smi call answers by then
WATCH_ANCHOR = 4096  # the last bytes of the previous read: where the new lines start
WATCH_EVENTS = 32  # at most this many events in one report
WATCH_SAID = 4096  # at most this many events remembered as told
SMI_QUERY = ("pci.bus_id", "remapped_rows.pending", "remapped_rows.failure",
             "clocks_event_reasons.active")  # fmt: skip
SMI_OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}

SITECUSTOMIZE = r'''
"""clusterkit launch, inside each rank: its progress for the node's runner, its flight record
on request, and its Python stacks on SIGUSR1 where the node has no py-spy to ask.

A daemon thread reads the flight recorder's per-process-group counters (torch's
`_dump_fr_trace_json(False, False)`: the last collective enqueued and completed, 0.1 ms)
ten times a second, counts the times the rank computed (outside any collective, its CPU
time moving), and writes both into progress-RANK.PID.json every second; when the runner
writes fr-request, the whole record (the entries, without stack frames) into
fr-RANK.PID.json. The thread reads torch only once the
job has imported it and initialised its process group; it never raises into the job."""
import os as _os


def _clusterkit_register():
    folder = _os.environ.get("CLUSTERKIT_STACK_DIR")
    rank = _os.environ.get("RANK")
    if not folder or rank is None or not _os.environ.get("GROUP_RANK"):
        return
    if _os.environ.get("CLUSTERKIT_FAULTHANDLER") == "1":
        import faulthandler
        import signal

        try:
            path = _os.path.join(folder, "rank-%s.%d.txt" % (rank, _os.getpid()))
            stream = open(path, "w")
            faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)
            globals()["_clusterkit_stream"] = stream
        except (OSError, ValueError, AttributeError):
            pass
    import threading

    thread = threading.Thread(
        target=_clusterkit_watch, args=(folder, rank), name="clusterkit-progress", daemon=True
    )
    thread.start()


def _clusterkit_record(full):
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    c10d = sys.modules["torch"]._C._distributed_c10d
    return c10d._dump_fr_trace_json(full, False)


def _clusterkit_write(path, data):
    temporary = "%s.%d.tmp" % (path, _os.getpid())
    with open(temporary, "wb") as handle:
        handle.write(data)
    _os.replace(temporary, path)


def _clusterkit_watch(folder, rank):
    """Every 0.1 s: inside a collective or not, and computing (outside one, its CPU time
    moving) or not, counted; every second the counts and the counters go to its file."""
    import json
    import time

    own = "%s.%d.json" % (rank, _os.getpid())
    request = _os.path.join(folder, "fr-request")
    served = None
    ticks = busy = 0
    status = None
    cpu = time.process_time()
    while True:
        try:
            for _ in range(10):
                time.sleep(0.1)
                raw = _clusterkit_record(False)
                status = json.loads(raw).get("pg_status") if raw else None
                spent, cpu = time.process_time() - cpu, time.process_time()
                if status is not None:
                    ticks += 1
                    busy += spent >= 0.002 and not _clusterkit_waiting(status)
            note = {"t": time.time(), "pg_status": status, "ticks": ticks, "busy": busy}
            _clusterkit_write(_os.path.join(folder, "progress-" + own), json.dumps(note).encode())
            try:
                with open(request) as handle:
                    wanted = handle.read(64)
            except OSError:
                wanted = None
            if wanted and wanted != served:
                served = wanted
                full = _clusterkit_record(True) or b"{}"
                _clusterkit_write(_os.path.join(folder, "fr-" + own), full)
        except Exception:
            time.sleep(1.0)


def _clusterkit_waiting(status):
    """Inside a collective: one of its groups has one enqueued and not completed."""
    for counters in status.values():
        enqueued = counters.get("last_enqueued_collective")
        completed = counters.get("last_completed_collective")
        if int(enqueued) > int(completed):
            return True
    return False


def _clusterkit_chain():
    """Run the sitecustomize this one hides, if there is one."""
    import importlib
    import sys

    here = _os.path.dirname(_os.path.abspath(__file__))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if _os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


_clusterkit_register()
_clusterkit_chain()
'''


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


# --- the hardware watch --------------------------------------------------------------------


class HardwareWatch:
    """What a fault shows first on this node, sampled while the job runs: new Xid/SXid lines
    in the kernel log since the job started (read with the probe's own parser), OOM kills of
    the job's ranks, InfiniBand ports going down or `link_downed` rising (sysfs), and, where
    nvidia-smi exists, a row remap pending or failed, a slowdown reason, a GPU gone, an NVLink
    link that was up at the start gone down (the probe's parser, clusterkit/node/nvlink.py).
    Each new fact is told once; the control side grades it with `check`'s own rules. Only this
    node's devices are named: it speaks for itself."""

    def __init__(self, rank_pids, sysfs="/sys"):
        self.rank_pids = rank_pids  # pids of this job's ranks, kept by the progress sampler
        self.sysfs = sysfs
        self.tail = None  # type: str | None  # the end of the last kernel log read
        self.seen = set()  # type: set[tuple]  # keys of the kernel events read so far
        self.ports = {}  # (hca, port) -> (state, link_downed) at the last read
        self.smi = find_tool("nvidia-smi")
        self.gpus = None  # bus ids nvidia-smi listed at the start
        self.nvlinks = None  # {GPU index: links up} at the start; None: no NVLink is up
        self.buses = {}  # GPU index -> bus id as the kernel log writes it
        self.fields = list(SMI_QUERY)
        self.smi_at = 0.0
        self.said = set()  # type: set[tuple]
        self.lock = threading.Lock()

    def start(self):
        """The state at the job's start: what is already there is `check`'s, not news."""
        self.kernel_events()
        self.ports = ib_ports(self.sysfs)
        rows = self.smi_rows()
        self.gpus = None if rows is None else [row.get("pci.bus_id") for row in rows]
        self.start_nvlinks()
        self.smi_at = time.monotonic()

    def start_nvlinks(self):
        """The NVLink links up at the start, and each GPU's bus id to name it by: two calls,
        once; a node with no link up is not asked again."""
        up = self.nvlink_state()
        if not self.smi or not up or not any(up.values()):
            return
        argv = [self.smi, "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
        try:
            code, out, _ = run_bounded(argv, WATCH_TOOL_SECONDS)
        except ToolError:
            return
        for line in out.decode("utf-8", "replace").splitlines()[:64]:
            index, _, bus = line.partition(",")
            if code == 0 and index.strip().isdigit():
                self.buses[int(index)] = bus_id(bus.strip())
        self.nvlinks = up

    def nvlink_state(self):
        """{GPU index: links up} from `nvidia-smi nvlink --status` (the probe's parser), or
        None: no answer, or no GPU listed (never read as every link down)."""
        if not self.smi:
            return None
        try:
            code, out, _ = run_bounded([self.smi, "nvlink", "--status"], WATCH_TOOL_SECONDS)
        except ToolError:
            return None
        gpus = parse_nvlink_status(out.decode("utf-8", "replace")) if code == 0 else []
        return links_up(gpus[:64]) or None

    def sample(self):
        """The new events since the last sample, each told once: the kernel log and the
        ports, and nvidia-smi when SMI_SECONDS have passed."""
        return self.sample_log() + (self.sample_gpus() if self.smi_due() else [])

    def sample_log(self):
        """The kernel log's and the ports' new events (cheap: every WATCH_SECONDS)."""
        return self.told(self.kernel_events() + self.port_events())

    def smi_due(self):
        return bool(self.smi) and time.monotonic() - self.smi_at >= SMI_SECONDS

    def sample_gpus(self):
        """nvidia-smi's new events: one call, up to WATCH_TOOL_SECONDS (a wedged driver
        makes it slow, so the runner asks it in a thread of its own)."""
        self.smi_at = time.monotonic()
        return self.told(self.gpu_events() + self.nvlink_events())

    def told(self, found):
        """The events not told before (at most WATCH_EVENTS), now remembered as told."""
        fresh = []
        with self.lock:
            for event in found:
                key = (event["kind"], event["device"], event["code"], event["text"],
                       tuple(sorted(event["fields"].items())))  # fmt: skip
                if key not in self.said and len(self.said) < WATCH_SAID:
                    self.said.add(key)
                    fresh.append(event)
        return fresh[:WATCH_EVENTS]

    def kernel_events(self):
        """Xid/SXid events and OOM kills of the job's ranks logged since the last read."""
        try:
            text, source = read_kernel_log(WATCH_TOOL_SECONDS)
        except ToolError:
            return []
        previous, self.tail = self.tail, text[-WATCH_ANCHOR:]
        at = text.rfind(previous) if previous else -1
        fresh = text[at + len(previous or "") :] if at >= 0 else text  # rotated: known skipped
        parsed = parse_kernel_log(fresh, source)
        events = []
        for item in parsed["events"]:
            key = (item["kind"], item["pci"], item["code"], item["time"], item["text"])
            if key not in self.seen and previous is not None:
                events.append(watch_event(item["kind"], item["pci"], item["code"],
                                          item["text"], item.get("fatal")))  # fmt: skip
            self.seen.add(key)
        for kill in parsed["oom_kills"]:
            key = ("oom", kill["pid"], kill["time"], "", "")
            if key not in self.seen and previous is not None and kill["pid"] in self.rank_pids:
                text = "the kernel's OOM killer killed rank process %d (%s)" % (
                    kill["pid"], kill["name"])  # fmt: skip
                events.append(watch_event("oom", "", kill["pid"], text))
            self.seen.add(key)
        return events

    def port_events(self):
        """A port that was ACTIVE and is not now; a link_downed count that rose."""
        now = ib_ports(self.sysfs)
        events = []
        for key, (state, downed) in sorted(now.items()):
            before = self.ports.get(key)
            device = "%s/%s" % key
            if before and before[0] == "ACTIVE" and state != "ACTIVE":
                events.append(watch_event("ib-port", device, 0, "port %s" % state))
            if before and downed > before[1]:
                text = "link_downed rose from %d to %d" % (before[1], downed)
                events.append(watch_event("ib-flap", device, downed - before[1], text))
        self.ports = now
        return events

    def smi_rows(self):
        """nvidia-smi's rows for SMI_QUERY, one bounded call; None when it gave none. A GPU
        the driver lost is missing from the rows while nvidia-smi lists the others and exits
        non-zero ("Unable to determine the device handle for GPU ..."): those rows count.
        Nothing listed at all (the driver unloaded, NVML mismatched) is no answer."""
        if not self.smi:
            return None
        for _ in range(2):
            argv = [self.smi, "--query-gpu=" + ",".join(self.fields), "--format=csv,noheader"]
            try:
                code, out, err = run_bounded(argv, WATCH_TOOL_SECONDS)
            except ToolError:
                return None
            said = (out + err).decode("utf-8", "replace")
            older = [SMI_OLD_NAMES.get(f, f) for f in self.fields]
            if code and "is not a valid field" in said and older != self.fields:
                self.fields = older  # an older driver's spelling, asked once more
                continue
            rows = [[v.strip() for v in line.split(",")] for line in said.splitlines()]
            found = [dict(zip(SMI_QUERY, row)) for row in rows
                     if len(row) == len(SMI_QUERY) and row[0].count(":") == 2]  # fmt: skip
            return found[:64] if code is not None and (found or code == 0) else None
        return None

    def gpu_events(self):
        """A GPU listed at the start and not now; a remap pending or failed, a slowdown."""
        rows = self.smi_rows()
        if rows is None or self.gpus is None:
            return []
        listed = {row.get("pci.bus_id") for row in rows}
        events = [watch_event("gpu-gone", bus_id(gpu), 0, "no longer listed by nvidia-smi")
                  for gpu in self.gpus if gpu not in listed]  # fmt: skip
        for row in rows:
            fields = {k: v[:32] for k, v in row.items() if k != "pci.bus_id"}
            if gpu_row_of_note(fields):
                events.append(
                    watch_event("gpu", bus_id(row.get("pci.bus_id")), 0, "", None, fields)
                )
        return events

    def nvlink_events(self):
        """A link up at the job's start and down now; one down from the start is not news.
        A GPU nvidia-smi no longer lists is told as gone, not as its links."""
        start = self.nvlinks
        now = self.nvlink_state() if start else None
        if not start or now is None:
            return []
        events = []
        for index, before in sorted(start.items()):
            for link in sorted(before - now.get(index, before)):
                text = "GPU %d link %d: up at the job's start, down now" % (index, link)
                events.append(watch_event("nvlink-down", self.buses.get(index, ""), link, text))
        return events


def watch_event(kind, device, code, text, fatal=None, fields=None):
    """One event as it travels (launch/messages.py WatchEvent): bounded here too."""
    return {"kind": kind, "device": str(device)[:64], "code": int(code), "fatal": fatal,
            "text": str(text)[:300], "fields": fields or {}}  # fmt: skip


def bus_id(value):
    """nvidia-smi's `00000000:18:00.0` as the kernel log's `0000:18:00`."""
    parts = str(value or "").lower().split(":")
    if len(parts) != 3:
        return str(value)[:64]
    return "%s:%s:%s" % (parts[0][-4:].rjust(4, "0"), parts[1], parts[2].split(".")[0])


def gpu_row_of_note(fields):
    """A remap pending or failed, or a slowdown reason other than idle and the usual caps."""
    flags = [fields.get("remapped_rows.pending"), fields.get("remapped_rows.failure")]
    if any(flag in ("Yes", "1") for flag in flags):
        return True
    try:
        return bool(int(fields.get("clocks_event_reasons.active") or "0", 16) & 0xE8)
    except ValueError:
        return False


def ib_ports(sysfs):
    """(hca, port) -> (state, link_downed) of every RDMA port, from sysfs."""
    base = os.path.join(sysfs, "class", "infiniband")
    found = {}  # type: dict[tuple[str, str], tuple[str, int]]
    try:
        hcas = sorted(os.listdir(base))[:64]
    except OSError:
        return found
    for hca in hcas:
        folder = os.path.join(base, hca, "ports")
        try:
            ports = sorted(os.listdir(folder))[:16]
        except OSError:
            continue
        for port in ports:
            state = (read_text(os.path.join(folder, port, "state")) or "").split(":")[-1].strip()
            downed = read_text(os.path.join(folder, port, "counters", "link_downed")) or "0"
            found[(hca[:32], port[:8])] = (state[:16], int(downed) if downed.isdigit() else 0)
    return found


# --- progress and flight records ---------------------------------------------------------


def progress_notes(folder):
    """(rank, pid, note) of every progress-RANK.PID.json the ranks wrote, one per rank: the
    newest of a process with a process group, else the newest. A rank's helper processes
    (spawned DataLoader workers, torch.compile's workers) inherit its variables and write
    notes too, with no group: they must not stand for the rank."""
    try:
        names = sorted(os.listdir(folder))[: 4 * PROGRESS_FILES]
    except OSError:
        return []
    found = {}  # type: dict[int, tuple[int, dict]]
    for name in names:
        parts = name.split(".")
        if len(parts) != 3 or not name.startswith("progress-") or parts[2] != "json":
            continue
        rank, pid = parts[0][len("progress-") :], parts[1]
        if not (rank.isdigit() and pid.isdigit()):
            continue
        try:
            with open(os.path.join(folder, name), "rb") as handle:
                note = json.loads(handle.read(64 * 1024))
        except (OSError, ValueError):
            continue
        if isinstance(note, dict) and (
            int(rank) not in found or note_rank(note) > note_rank(found[int(rank)][1])
        ):
            found[int(rank)] = (int(pid), note)
    return [(rank, pid, note) for rank, (pid, note) in sorted(found.items())][:PROGRESS_FILES]


def count(note, key):
    """A non-negative count from a rank's note (0 when it has none)."""
    value = note.get(key)
    return value if type(value) is int and 0 <= value < 2**53 else 0


def note_rank(note):
    """How a note compares with another of the same rank: one with a group first, then the
    newest."""
    return (isinstance(note.get("pg_status"), dict), note_time(note))


def note_time(note):
    value = note.get("t")
    return value if isinstance(value, (int, float)) else 0.0


def pg_counters(note):
    """{process group: [last collective enqueued, last completed]} from the flight
    recorder's pg_status, or None before the job's process group exists."""
    status = note.get("pg_status")
    if not isinstance(status, dict):
        return None
    counters = {}
    for group, values in list(status.items())[:64]:
        if not isinstance(values, dict):
            continue
        try:
            enqueued = int(str(values.get("last_enqueued_collective")))
            completed = int(str(values.get("last_completed_collective")))
        except ValueError:
            continue
        counters[str(group)[:64]] = [enqueued, completed]
    return counters


def cpu_seconds(pid, ticks):
    """utime + stime of a process, in seconds; None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, IndexError, ValueError):
        return None


def job_process(pid, rank, marker, proc="/proc", uid=None):
    """Whether `pid` may stand for `rank`: the job's user owns it and its environ carries
    the job's marker and that RANK. A note only names its pid: one naming another user's
    process, torchrun or another rank must never have that process's CPU time or OOM kill
    read as the rank's."""
    folder = os.path.join(proc, str(pid))
    try:
        if os.stat(folder).st_uid != (os.getuid() if uid is None else uid):
            return False
        with open(os.path.join(folder, "environ"), "rb") as handle:
            items = handle.read().split(b"\0")
    except OSError:
        return False
    return marker in items and ("RANK=%d" % rank).encode() in items


class _NoClasses(pickle.Unpickler):
    """Plain data only: a pickle naming any class or function is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("%s.%s is not plain data" % (module, name))


def read_record(path, pickled=False):
    """A flight record's last FLIGHT_ENTRIES collectives, each reduced to what the control
    side reads; None when there is none (or it is too large, or unreadable)."""
    try:
        if os.path.getsize(path) > FLIGHT_FILE_LIMIT:
            return None
        with open(path, "rb") as handle:
            data = _NoClasses(handle).load() if pickled else json.loads(handle.read())
    except (OSError, ValueError, pickle.UnpicklingError, EOFError, RecursionError):
        return None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return [flight_entry(e) for e in entries[-FLIGHT_ENTRIES:] if isinstance(e, dict)]


def flight_entry(entry):
    """One collective as it travels: its group, sequence number, operation, sizes, state."""
    sizes = entry.get("input_sizes")
    return {
        "pg": str(entry.get("pg_id"))[:64],
        "seq": entry.get("collective_seq_id")
        if type(entry.get("collective_seq_id")) is int
        else -1,
        "op": str(entry.get("profiling_name"))[:80],
        "sizes": json.dumps(sizes)[:200] if sizes is not None else "",
        "state": str(entry.get("state"))[:20],
        "created_ns": entry.get("time_created_ns")
        if type(entry.get("time_created_ns")) is int
        else 0,
    }


def write_private(path, data):
    """A file of the runner's in the private run folder, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


# --- processes ----------------------------------------------------------------------------


def read_environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def marked_processes(marker):
    """pid -> raw environ of every process carrying the marker (zombies have none)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            raw = read_environ(int(name))
            if marker in raw.split(b"\0"):
                found[int(name)] = raw
    return found


def parse_environ(raw):
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def ranks_of(marker):
    """pid -> environ of each rank: a marked worker whose parent is not a worker."""
    marked = {pid: parse_environ(raw) for pid, raw in marked_processes(marker).items()}
    workers = {pid: env for pid, env in marked.items() if "GROUP_RANK" in env and "RANK" in env}
    return {pid: env for pid, env in workers.items() if parent_pid(pid) not in workers}


def rank_number(env):
    try:
        return int(env.get("RANK"))
    except (TypeError, ValueError):
        return -1


def process_state(pid, proc="/proc"):
    """The state letter of /proc/PID/stat (R, S, D, T, t, Z, X...); None: no such process.
    Read as bytes after the command's last ")": the command is the process's own choice."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as handle:
            fields = handle.read(4096).rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    return fields[0].decode("ascii", "replace")[:1] if fields else None


def cannot_answer(state):
    """Why a rank in this state can write no stack and no flight record, or None: a
    stopped process runs no signal handler and no thread until it is continued, and a gone
    one never will, so waiting for them only delays the hang's report."""
    if state in ("T", "t"):
        how = "stopped" if state == "T" else "stopped by a tracer"
        return "its process is %s (state %s): it can write no stack, none was asked" % (how, state)
    if state is None or state in ("Z", "X", "x"):
        ended = "state %s" % state if state else "gone"
        return "its process has ended (%s): no stack to ask" % ended
    return None


def signal_ranks(found):
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGUSR1)


def signal_all(pids, sig):
    for pid in pids:
        kill_group(pid, sig)  # its group when it leads one, and itself


def as_this_user(argv):
    """Images run as a non-root USER; a container job writes torchrun's logs into the run
    folder this process made, so it runs as this process's uid/gid (root stays root)."""
    argv = list(argv)
    if argv[:2] == ["docker", "run"] and "--user" not in argv:
        argv[2:2] = ["--user", "%d:%d" % (os.getuid(), os.getgid())]
    return argv


def docker_quiet(args, timeout=DOCKER_SECONDS):
    """A docker CLI command, bounded (its process group killed at the timeout); True when
    it succeeded."""
    try:
        code, _out, _err = run_bounded(["docker", *args], timeout)
    except ToolError:
        return False
    return code == 0


def find_py_spy():
    """py-spy beside this interpreter (a venv's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return find_tool("py-spy")


def source_lines(raw, pid):
    """'file:line' -> the source text, for every frame in a dump (read on the node, through
    the process's root so files inside a container are found too)."""
    import re

    try:
        threads = json.loads(raw)
        frames = [frame for thread in threads for frame in thread.get("frames") or []]
        pairs = {(str(f.get("filename")), str(f.get("line"))) for f in frames}
    except (ValueError, TypeError, AttributeError):
        pairs = set(re.findall(r'File "([^"]+)", line (\d+)', raw))
    sources = {}
    for filename, number in pairs:
        for path in ("/proc/%d/root%s" % (pid, filename), filename):
            try:
                with open(path, errors="replace") as handle:
                    for index, text in enumerate(handle, 1):
                        if index == int(number):
                            sources["%s:%s" % (filename, number)] = text.strip()[:200]
                            break
                break
            except OSError:
                continue
    return sources


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
