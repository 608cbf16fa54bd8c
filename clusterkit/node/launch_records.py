"""What the ranks write into the run folder and the runner reads back: progress notes and
flight records (read bounded, unpickled without classes), and private writes.
"""

import json
import os
import pickle

FLIGHT_FILE_LIMIT = 16 * 1024 * 1024  # a record larger than this is not read
FLIGHT_ENTRIES = 200  # the last entries of each rank's record travel
PROGRESS_FILES = 256  # a node runs fewer ranks (and DataLoader workers) than this


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
