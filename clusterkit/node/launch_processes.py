"""The job's processes as the runner finds them: marked by the launch variable in
/proc/PID/environ, their ranks and states, signals to them, py-spy and docker helpers.
"""

import contextlib
import json
import os
import signal
import sys

from clusterkit.node.prelude import ToolError, find_tool, kill_group, parent_pid, run_bounded

DOCKER_SECONDS = 10.0  # one docker CLI command (kill, rm) answers by then


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
