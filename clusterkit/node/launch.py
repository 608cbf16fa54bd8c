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

from clusterkit.node.prelude import (
    ToolError,
    find_tool,
    kill_group,
    parent_pid,
    private_folder,
    run_bounded,
)

MARKER = "CLUSTERKIT_LAUNCH"
STACK_DIR_VARIABLE = "CLUSTERKIT_STACK_DIR"
FAULTHANDLER_VARIABLE = "CLUSTERKIT_FAULTHANDLER"
PY_SPY_SECONDS = 20.0
FAULTHANDLER_SECONDS = 3.0
LINE_LIMIT = 64 * 1024
HEARTBEAT_SECONDS = 5.0
PROGRESS_SECONDS = 2.0  # how often the ranks' progress is reported (each rank writes it every 1 s)
FLIGHT_SECONDS = 5.0  # every rank's flight record is written by then, once asked
FLIGHT_FILE_LIMIT = 16 * 1024 * 1024  # a record larger than this is not read
FLIGHT_ENTRIES = 200  # the last entries of each rank's record travel
PROGRESS_FILES = 256  # a node runs fewer ranks (and DataLoader workers) than this
CHILD_WAIT_SECONDS = 10.0  # torchrun is reaped by then once killed
DOCKER_SECONDS = 10.0  # one docker CLI command (kill, rm) answers by then

SITECUSTOMIZE = r'''
"""clusterkit launch, inside each rank: its progress for the node's runner, its flight record
on request, and its Python stacks on SIGUSR1 where the node has no py-spy to ask.

A daemon thread, every second: the flight recorder's per-process-group counters (torch's
`_dump_fr_trace_json(False, False)`: the last collective enqueued and completed, 0.1 ms)
into progress-RANK.PID.json; when the runner writes fr-request, the whole record (the
entries, without stack frames) into fr-RANK.PID.json. The thread reads torch only once the
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
    import json
    import time

    own = "%s.%d.json" % (rank, _os.getpid())
    request = _os.path.join(folder, "fr-request")
    served = None
    while True:
        try:
            raw = _clusterkit_record(False)
            status = json.loads(raw).get("pg_status") if raw else None
            note = {"t": time.time(), "pg_status": status}
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
            pass
        time.sleep(1.0)


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
        self.stop_requested = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.py_spy: str | None = None
        self.grace = float(spec.get("stop_grace", 5.0))

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
        """A line every few seconds, so a silent job is told from a lost node."""
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            self.control({"event": "alive"})

    def progress(self):
        """Every rank's progress every PROGRESS_SECONDS: its CPU time and its flight
        recorder's counters, so the control side judges a job by what it does, not by what
        it prints."""
        ticks = float(os.sysconf("SC_CLK_TCK"))
        while not self.stop_requested.is_set():
            time.sleep(PROGRESS_SECONDS)
            ranks = []
            for rank, pid, note in progress_notes(self.stacks_dir):
                cpu = cpu_seconds(pid, ticks)
                if cpu is None:
                    continue  # ended, or not a process of this job any more
                entry = {"rank": rank, "pid": pid, "cpu": cpu, "groups": pg_counters(note)}
                ranks.append(entry)
            if ranks:
                self.control({"event": "progress", "ranks": ranks})

    def dump(self):
        ranks = []
        found = ranks_of(self.marker)
        if self.py_spy is None:
            signal_ranks(found)
        threads = []
        for pid, env in sorted(found.items(), key=lambda item: rank_number(item[1])):
            entry = {"rank": rank_number(env), "local_rank": env.get("LOCAL_RANK"), "pid": pid}
            ranks.append(entry)
            target = self.py_spy_dump if self.py_spy else self.faulthandler_dump
            thread = threading.Thread(target=target, args=(entry,), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(PY_SPY_SECONDS + 1)
        records = self.flight_records(found)
        for entry in ranks:
            entry["sources"] = source_lines(entry.get("raw") or "", entry["pid"])
            if entry["pid"] in records:
                entry["flight"] = records[entry["pid"]]
        self.control({"event": "dump", "ranks": ranks})

    def flight_records(self, found):
        """pid -> the last FLIGHT_ENTRIES collectives of each rank's flight recorder: asked
        of the rank's own thread (fr-request), else read from the dump NCCL's watchdog wrote
        on a timeout. JSON only: the watchdog's pickle is read with no class allowed."""
        request = os.path.join(self.stacks_dir, "fr-request")
        with contextlib.suppress(OSError):
            write_private(request, ("%d" % time.monotonic_ns()).encode())
        records = {}
        end = time.monotonic() + FLIGHT_SECONDS
        while True:
            for pid, env in found.items():
                if pid not in records:
                    name = "fr-%s.%d.json" % (env.get("RANK"), pid)
                    record = read_record(os.path.join(self.stacks_dir, name))
                    if record is not None:
                        records[pid] = record
            if len(records) == len(found) or time.monotonic() > end:
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
        container is signalled through the engine as soon as it exists."""
        container = self.spec.get("container")
        spared = {self.child.pid} if container and self.child is not None else set()
        signalled = bool(container) and docker_quiet(["kill", "--signal", "TERM", container])
        signal_all(self.job_pids() - spared, signal.SIGTERM)
        started = time.monotonic()
        asked = started
        while time.monotonic() < started + (self.grace if grace is None else grace):
            if not self.job_pids():
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


# --- progress and flight records ---------------------------------------------------------


def progress_notes(folder):
    """(rank, pid, note) of every progress-RANK.PID.json the ranks wrote, newest per rank."""
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
            int(rank) not in found or note_time(note) > note_time(found[int(rank)][1])
        ):
            found[int(rank)] = (int(pid), note)
    return [(rank, pid, note) for rank, (pid, note) in sorted(found.items())][:PROGRESS_FILES]


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
    return runner.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
