"""The text of the sitecustomize put first on every rank's PYTHONPATH: the rank's progress
and flight record for the runner, and its stacks on SIGUSR1 where the node has no py-spy.
"""

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
