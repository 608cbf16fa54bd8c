"""The runtime every script shipped to nodes shares: result frames, bounded tools, file and
interface readers.

Stdlib only, Python 3.8+, and cheap to import: the probe starts once per node per check.
Never shipped alone: clusterkit/transport/nodescript.py puts this text where a node script says
`from clusterkit.node.prelude import ...`, so the script runs on a node without
clusterkit, and still imports it as usual where clusterkit is installed (the control side,
the tests). Everything defined here thus lands in each script's namespace: scripts must not
define these names themselves (tests/unit/node/test_node_scripts.py holds them to that).
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading

# The result frame; must equal clusterkit/framing.py (tests/unit/node/test_node_scripts.py).
BEGIN = b"\n--clusterkit-begin--\n"
END = b"\n--clusterkit-end--\n"
# Tools such as ip and iptables-save live in sbin, which a non-login SSH session's PATH lacks.
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
KILL_WAIT = 2.0  # a tool killed at its timeout is reaped by then, or left behind

_emit_lock = threading.Lock()
# Running tools by pid (each leads its own process group), so a signal to the script can
# take them down with it; `_stopping` refuses new ones once that has begun.
_tools = set()  # type: set[int]
_tools_lock = threading.Lock()
_stopping = False


def emit(payload):
    # type: (object) -> None
    """Print one result between the markers, flushed at once: the control side may be
    waiting for it while the script goes on, and login noise around it cannot corrupt it."""
    data = json.dumps(payload, separators=(",", ":"), default=str).encode()
    with _emit_lock:
        sys.stdout.flush()
        sys.stdout.buffer.write(BEGIN + data + END)
        sys.stdout.buffer.flush()


def read_text(path, default=None):
    # type: (str, str | None) -> str | None
    """A small file's text, stripped (sysfs, procfs, config files); `default` if unreadable."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return default


def private_folder(name):
    # type: (str) -> str
    """A fresh folder only this user can enter, under the node's TMPDIR: `name`, a dot and
    a random suffix, mode 0700, never one that existed (mkdtemp). Nothing another user of
    the node prepared can then be run, read or signalled from it."""
    import tempfile

    return tempfile.mkdtemp(prefix=name + ".", dir=os.environ.get("TMPDIR") or "/tmp")


def parent_pid(pid):
    # type: (int) -> int | None
    """The parent of a process, from /proc (None when it is gone)."""
    stat = read_text("/proc/%d/stat" % pid) or ""
    try:
        # The command name in parentheses may hold spaces: fields start after the last ')'.
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


class ToolError(Exception):
    """A tool gave no (usable) answer; the message says it to a person. `kind`: absent,
    stopping, timeout, failed (exit status not 0) or error (anything else)."""

    def __init__(self, message, kind="error"):
        # type: (str, str) -> None
        Exception.__init__(self, message)
        self.kind = kind


def find_tool(name):
    # type: (str) -> str | None
    """The executable's path: PATH first, then sbin; a path is taken as it is. (shutil.which
    would cost the import of its compression codecs.)"""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep) + list(SBIN_DIRS)
    for folder in folders:
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def kill_group(pid, sig=signal.SIGKILL):
    # type: (int, int) -> None
    """Signal the process group `pid` leads, and `pid` itself: a child caught between fork
    and setsid does not lead its group yet."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, sig)


def end_group(process, grace):
    # type: (subprocess.Popen[bytes], float) -> None
    """TERM the group a child leads, so it can clean up; KILL what is left after `grace`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        kill_group(process.pid, sig)
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bounded(argv, timeout):
    # type: (list[str], float) -> tuple[int | None, bytes, bytes]
    """Run a tool in a process group of its own: (exit status, or None when the group was
    killed at `timeout`; stdout; stderr). Raises ToolError when the tool cannot start."""
    path = find_tool(argv[0])
    if path is None:
        raise ToolError("absent: %s not found" % argv[0], "absent")
    # Spawn and register under the lock the stop handler takes: no tool starts after it looked.
    with _tools_lock:
        if _stopping:
            raise ToolError("stopping: %s not started" % argv[0], "stopping")
        try:
            process = subprocess.Popen(
                [path, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            raise ToolError("%s: %s" % (argv[0], error.strerror or error)) from None
        _tools.add(process.pid)
    try:
        out, err = process.communicate(timeout=timeout)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        # Bounded too: a tool stuck in the kernel (a hung NFS mount) dies only when it leaves
        # it, and a child that left the group may hold the pipes open.
        try:
            out, err = process.communicate(timeout=KILL_WAIT)
        except subprocess.TimeoutExpired:
            out, err = b"", b""
        return None, out, err
    finally:
        with _tools_lock:
            _tools.discard(process.pid)


def run_tool(argv, timeout):
    # type: (list[str], float) -> str
    """A tool's stdout; ToolError unless it exits 0 within `timeout` seconds."""
    code, out, err = run_bounded(argv, timeout)
    if code is None:
        message = "timeout: %s did not answer within %g s" % (argv[0], timeout)
        raise ToolError(message, "timeout")
    if code != 0:
        lines = (err or out).decode("utf-8", "replace").strip().splitlines()
        detail = " ".join(lines[-2:])[-300:]
        raise ToolError("%s exited %d: %s" % (argv[0], code, detail), "failed")
    return out.decode("utf-8", "replace")


def _children():
    # type: () -> set[int]
    """Our children from /proc: catches a tool forked but not yet registered."""
    me = os.getpid()
    names = os.listdir("/proc") if os.path.isdir("/proc") else []
    return {int(name) for name in names if name.isdigit() and parent_pid(int(name)) == me}


def _stop_tools_and_exit(signum, frame):
    # type: (int, object) -> None
    global _stopping
    # A group kill signals us twice (directly, and again through `timeout`): a second entry
    # would wait out the lock the first one holds, so later signals are ignored from here.
    for other in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(other, signal.SIG_IGN)
    # The tools already running first, before anything that can wait: the control side's
    # KILL follows its TERM within 2 s, and a tool in a group of its own would outlive us.
    for pid in tuple(_tools):
        kill_group(pid)
    # Runs in the main thread, which never holds the lock; a worker holds it only to spawn.
    _tools_lock.acquire(timeout=2)
    _stopping = True
    # Registered tools first (fast), then any child /proc shows (slow on a busy machine).
    for victims in (lambda: set(_tools), _children):
        for pid in victims():
            kill_group(pid)
    os._exit(128 + signum)


def stop_tools_on_signals():
    # type: () -> None
    """On TERM, HUP or INT kill every tool's group and exit 128+signal at once. Tools lead
    groups of their own, so the control side's kill of the script's group (deadline,
    Ctrl-C: TERM first) reaches them through this handler."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _stop_tools_and_exit)


def interface_kind(base):
    # type: (str) -> str | None
    """What an interface is, from its sysfs folder `base`, so bridges, tunnels and veths are
    told from NICs whatever their names: loopback, bridge, bond, tun (tun and tap), the
    uevent's DEVTYPE (vlan, wlan, wireguard, vxlan...), `device` for hardware (a NIC,
    IPoIB: a `device` link), else `virtual` (veth, macvlan, dummy). None if unreadable."""
    kind_type = read_text(base + "/type")
    if kind_type is None:
        return None
    if kind_type == "772":  # ARPHRD_LOOPBACK
        return "loopback"
    for marker, kind in (("/bridge", "bridge"), ("/bonding", "bond"), ("/tun_flags", "tun")):
        if os.path.exists(base + marker):
            return kind
    for line in (read_text(base + "/uevent") or "").splitlines():
        if line.startswith("DEVTYPE="):
            return line[len("DEVTYPE=") :] or "virtual"
    return "device" if os.path.exists(base + "/device") else "virtual"


def read_interfaces(timeout):
    # type: (float) -> tuple[list[dict], str | None]
    """Every network interface, by name: admin state (`up`, IFF_UP), operstate, MTU and kind
    (interface_kind) from /sys/class/net; `ip -j addr`'s flags and inet/inet6 addresses
    (`flags` None where ip did not list it). Returns (interfaces sorted by name, why ip could
    not be read, or None)."""
    found = {}  # type: dict[str, dict]
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        names = []
    for name in names:
        base = "/sys/class/net/" + name
        flags = read_text(base + "/flags")
        mtu = read_text(base + "/mtu")
        found[name] = {
            "name": name,
            "up": bool(int(flags, 16) & 1) if flags else None,
            "operstate": read_text(base + "/operstate"),
            "mtu": int(mtu) if mtu and mtu.isdigit() else None,
            "kind": interface_kind(base),
            "flags": None,
            "addresses": [],
        }
    error = None
    try:
        for item in json.loads(run_tool(["ip", "-j", "addr", "show"], timeout) or "[]"):
            name = item.get("ifname")
            entry = found.setdefault(
                name,
                {
                    "name": name,
                    "up": "UP" in item.get("flags", []),
                    "operstate": str(item.get("operstate", "")).lower(),
                    "mtu": item.get("mtu"),
                    "addresses": [],
                },
            )
            entry["flags"] = item.get("flags", [])
            for address in item.get("addr_info", []):
                if address.get("family") in ("inet", "inet6") and address.get("local"):
                    entry["addresses"].append(
                        {
                            "family": address["family"],
                            "address": address["local"],
                            "prefixlen": address.get("prefixlen"),
                        }
                    )
    except ToolError as tool_error:
        error = str(tool_error)
    except (ValueError, AttributeError) as parse_error:
        error = "ip -j addr: %s" % parse_error
    return [found[name] for name in sorted(found)], error
