"""Runs on every node of one srun job step (sent as `python3 -S -c SOURCE`, composed with the
node-side prelude: stdlib only, Python 3.8+).

The one node program sent in the argv rather than behind the stdin bootstrap: srun hands
every task of the step the same stdin, and that stdin is the step's conversation with all
its nodes (lines addressed by node name), so the relay starts from the argv and leaves stdin
to the conversation. It carries no secrets: commands, their arguments and their stdin travel
on that stdin, never in the argv.

srun gives every task the same stdin and merges their stdout, so the control side addresses
each line to a node by name and the relay frames what its commands print into short lines
tagged with the node and command id: one step carries every node's conversation. The control
side credits a line to the node that srun's `--label` names (never to the node the line
claims) and drops a line whose tag is not that node.

In (one line each): `B id b64` a blob every node keeps; `C node cid b64json` start
{argv, timeout}; `I node cid b64` stdin bytes; `R node cid id` a blob as stdin; `E node cid`
close stdin; `K node cid` kill. Out: `node - ready job step`, `node cid o|e b64` output,
`node cid x code` exited, `node cid t` killed at its timeout, `node - alive` after a second
of silence (the control side tells a crashed node from a quiet one by it). End of stdin or
SIGTERM kills every command's process group and ends the relay.
"""

import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from clusterkit.node.prelude import end_group

NODE = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
CHUNK = 600  # raw bytes per line: a framed line stays under Slurm's 1024-byte I/O message
KILL_GRACE = 2.0
HEARTBEAT = 1.0  # the most time between two lines of this node's
_lock = threading.Lock()
_said_at = [time.monotonic()]
_commands = {}  # type: dict[str, list]  # cid -> [process, stdin queue, killed]
_blobs = {}  # type: dict[str, bytes]


def say(*words):
    """One line out, tagged with this node: srun merges every node's stdout."""
    data = (" ".join((NODE, *words)) + "\n").encode()
    with _lock:
        while data:
            data = data[os.write(1, data) :]
        _said_at[0] = time.monotonic()


def heartbeat():
    """A line whenever nothing else was said for HEARTBEAT: every live node speaks."""
    while True:
        quiet = time.monotonic() - _said_at[0]
        if quiet >= HEARTBEAT:
            say("-", "alive")
            quiet = 0.0
        time.sleep(HEARTBEAT - quiet)


def forward(cid, stream, tag):
    while True:
        data = os.read(stream.fileno(), CHUNK)
        if not data:
            return
        say(cid, tag, base64.b64encode(data).decode())


def feed(process, inbox):
    while True:
        data = inbox.get()
        try:
            if data is None:
                process.stdin.close()
                return
            process.stdin.write(data)
            process.stdin.flush()
        except OSError:
            return  # the command stopped reading: nothing more to say


def run(cid, spec, entry):
    try:
        process = subprocess.Popen(
            spec["argv"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as error:
        say(cid, "e", base64.b64encode(f"cannot run {spec['argv'][0]}: {error}".encode()).decode())
        say(cid, "x", "127")
        return
    entry[0] = process
    inbox = entry[1]
    if entry[2]:  # killed before it started
        end_group(process, KILL_GRACE)
    threading.Thread(target=feed, args=(process, inbox), daemon=True).start()
    readers = [
        threading.Thread(target=forward, args=(cid, stream, tag), daemon=True)
        for stream, tag in ((process.stdout, "o"), (process.stderr, "e"))
    ]
    for reader in readers:
        reader.start()
    try:
        process.wait(float(spec["timeout"]))
        timed_out = False
    except subprocess.TimeoutExpired:
        end_group(process, KILL_GRACE)
        timed_out = True
    for reader in readers:
        reader.join(0.5)  # a background child may hold the pipes: not for long
    say(cid, "t") if timed_out else say(cid, "x", str(process.returncode))


def stop_all(*_):
    for process, _inbox, _killed in list(_commands.values()):
        if process is not None and process.poll() is None:
            end_group(process, KILL_GRACE)
    os._exit(0)


def main():
    signal.signal(signal.SIGTERM, stop_all)
    say("-", "ready", os.environ.get("SLURM_JOB_ID", "?"), os.environ.get("SLURM_STEP_ID", "?"))
    threading.Thread(target=heartbeat, daemon=True).start()
    for line in sys.stdin.buffer:
        words = line.decode("ascii", "replace").split()
        if not words:
            continue
        if words[0] == "B":
            _blobs[words[1]] = base64.b64decode(words[2])
            continue
        if len(words) < 3 or words[1] != NODE:
            continue
        kind, cid = words[0], words[2]
        if kind == "C":
            spec = json.loads(base64.b64decode(words[3]))
            started = [None, queue.Queue(), False]  # type: list  # process, stdin, killed
            _commands[cid] = started
            threading.Thread(target=run, args=(cid, spec, started), daemon=True).start()
            continue
        entry = _commands.get(cid)
        if entry is None:
            continue
        process, inbox = entry[0], entry[1]
        if kind == "I":
            inbox.put(base64.b64decode(words[3]))
        elif kind == "R":
            inbox.put(_blobs.get(words[3], b""))
        elif kind == "E":
            inbox.put(None)
        elif kind == "K":
            entry[2] = True
            if process is not None and process.poll() is None:
                threading.Thread(target=end_group, args=(process, KILL_GRACE), daemon=True).start()
    stop_all()


if __name__ == "__main__":
    main()
