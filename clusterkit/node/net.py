"""Network pre-flight, node side: one process per node for the whole stage.

Shipped over stdin behind a small bootstrap (see clusterkit/net/stage.py), composed with the
node-side prelude (stdlib only, Python 3.8+), because it runs with whatever interpreter the
node has. Every socket operation and every external tool has its own bound so one stuck
resolver or firewall tool cannot stall the rest. Reports are framed by the prelude's `emit`,
so login noise around them cannot corrupt them.

The session, each step answered by the control side with one JSON line on stdin:
  facts  names as the node resolves them, interfaces, NCCL/GLOO ifname variables, the
         ephemeral port range and the firewall rule sets. The control side answers with
         this node's listeners: fixed ports (the user's) and port 0 for the mesh.
  bound  the planned listeners are bound and served; the report names the port the kernel
         chose for each port 0 (a free ephemeral port, where NCCL and gloo listen too), so
         runs at once on the same nodes never share one. The control side answers "go",
         with the peers' bound ports to connect to, once every node has bound, so no
         connect can come too early and nothing is retried.
  mesh   connect to the "go" message's targets from the fabric address; the listeners
         keep serving. The control side answers once every node has reported its mesh step,
         so a node handed "go" late still finds every peer listening.
  listeners  the listeners are closed (nothing stays listening) and report who reached
         them. The control side answers with the next round's plan (the nodes that failed,
         retested against everyone) or stop. End of stdin, or no answer in time, ends the
         process at any step.
"""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import sys
import threading
import time

from clusterkit.node.prelude import (
    ToolError,
    emit,
    read_interfaces,
    read_text,
    run_tool,
)

HANDSHAKE = b"CK-NET1"
FIREWALL_TOOLS = (
    ("iptables", ["iptables-save"]),
    ("iptables-legacy", ["iptables-legacy-save"]),
    ("nft", ["nft", "list", "ruleset"]),
    ("ufw", ["ufw", "status", "verbose"]),
    ("firewalld", ["firewall-cmd", "--list-all-zones"]),
)
FIREWALL_TEXT_CAP = 1024 * 1024
TCP_LISTEN_STATE = "0A"
PEER_SLACK = 1.0  # a listener gives an accepted peer its connect timeout plus this
CONNECT_WORKERS = 32  # connects in flight at once per node, whatever the cluster size
LISTEN_BACKLOG = 4096  # connects a listener queues before accepting (the master: 2 per node)


def firewall_rules(argv, timeout):
    """A firewall tool's rule dump: {"state": "ok", "text"}, or "absent"/"unknown" with why."""
    try:
        text = run_tool(argv, timeout)
    except ToolError as error:
        return {"state": "absent" if error.kind == "absent" else "unknown", "reason": str(error)}
    return {"state": "ok", "exit_code": 0, "text": text[:FIREWALL_TEXT_CAP]}


def bounded(fn, timeout, *args):
    """Run fn in a daemon thread; return ("ok", value), ("error", reason) or ("timeout", ...).

    getaddrinfo cannot be interrupted, so a stuck resolver is abandoned, not waited for."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args)
        except Exception as error:  # reported as data, never raised on the node
            box["error"] = "%s: %s" % (type(error).__name__, error)

    thread = threading.Thread(target=target)
    thread.daemon = True
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "timeout", "no answer within %ss" % timeout
    if "error" in box:
        return "error", box["error"]
    return "ok", box["value"]


def resolve(name):
    seen = []
    # An ASCII name goes as bytes: a str would import the idna codec (milliseconds per node).
    host = name.encode() if name.isascii() else name
    for info in socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM):
        address = info[4][0]
        if address not in seen:
            seen.append(address)
    return seen


def resolve_bounded(name, timeout):
    state, value = bounded(resolve, timeout, name)
    if state == "ok":
        return {"name": name, "addresses": value}
    return {"name": name, "addresses": [], "error": value}


def port_holder(port, budget=1.0):
    """Which process listens on the port (pid and command), best effort within the budget."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    listening = len(fields) > 9 and fields[3] == TCP_LISTEN_STATE
                    if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add("socket:[%s]" % fields[9])
        except OSError:
            continue
    if not inodes:
        return None
    stop = time.monotonic() + budget
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or time.monotonic() > stop:
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in inodes:
                    cmdline = read_text("/proc/%s/cmdline" % pid) or ""
                    return {"pid": int(pid), "command": cmdline.replace("\0", " ").strip()[:200]}
        except OSError:
            continue
    return {"pid": None, "command": None}


def bindable(port):
    """Whether the port is free right now: listeners, connections using it as their local
    port and TIME_WAIT all refuse a bind without SO_REUSEADDR. Dual-stack first, so IPv6-only
    users count too. (Cheaper than /proc/net/tcp, which walks the whole host's socket table on
    every read.)"""
    families = [socket.AF_INET6, socket.AF_INET] if socket.has_ipv6 else [socket.AF_INET]
    for family in families:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
            return True
        except OSError as error:
            if error.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                return False
        finally:
            sock.close()
    return False


def facts(args):
    timeout = float(args.get("timeout", 3.0))
    tool_timeout = float(args.get("tool_timeout", 5.0))
    hostname = socket.gethostname()
    result = {"phase": "facts", "hostname": hostname, "uid": os.geteuid()}

    firewall = {}
    threads = []

    def collect(key, argv):
        if os.geteuid() != 0:
            firewall[key] = {"state": "unknown", "reason": "not root (uid %d)" % os.geteuid()}
        elif key == "iptables-legacy" and not read_text("/proc/net/ip_tables_names"):
            firewall[key] = {"state": "ok", "text": "", "reason": "no legacy tables loaded"}
        else:
            firewall[key] = firewall_rules(argv, tool_timeout)

    def start(target, *args):
        thread = threading.Thread(target=target, args=args)
        thread.daemon = True
        thread.start()
        threads.append(thread)

    for key, argv in FIREWALL_TOOLS:
        start(collect, key, argv)
    names = {}

    def look_up(key, name):
        names[key] = resolve_bounded(name, timeout)

    master = args.get("master")
    if master:
        start(look_up, "master", master)
    start(look_up, "own_name", hostname)
    result["interfaces"], result["interfaces_error"] = read_interfaces(tool_timeout)
    result["env"] = {
        key: os.environ.get(key) for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    }
    text = read_text("/proc/sys/net/ipv4/ip_local_port_range") or ""
    try:
        low, high = (int(part) for part in text.split())
        result["ephemeral_range"] = [low, high]
    except (AttributeError, ValueError):
        result["ephemeral_range"] = None
    reserved = [int(port) for port in args.get("reserved_ports", [])]
    result["reserved_in_use"] = {
        str(port): port_holder(port) for port in reserved if not bindable(port)
    }
    stop = time.monotonic() + tool_timeout + 2
    for thread in threads:
        thread.join(max(0.0, stop - time.monotonic()))
    for key, _argv in FIREWALL_TOOLS:
        firewall.setdefault(key, {"state": "unknown", "reason": "collector did not finish"})
    result["firewall"] = firewall
    unanswered = {"addresses": [], "error": "no answer within %ss" % timeout}
    result["master"] = names.get("master", dict(unanswered, name=master)) if master else None
    result["own_name"] = names.get("own_name", dict(unanswered, name=hostname))
    return result


class Peer:
    """One accepted connection a listener is serving."""

    __slots__ = ("answered", "conn", "give_up_at", "received")

    def __init__(self, conn, give_up_at):
        self.conn, self.give_up_at = conn, give_up_at
        self.received = b""
        self.answered = False


class Listener:
    """One planned listening port: accepts, answers the handshake, records who came."""

    def __init__(self, port, role, name, peer_seconds):
        self.port, self.role, self.name = port, role, name
        # Longer than a connecting peer waits for our answer: a peer starved of CPU between
        # its connect and its handshake line must not be cut off and look like a stranger.
        self.peer_seconds = peer_seconds
        self.seen = set()
        self.sock: socket.socket | None = None
        self.state = "ok"
        self.error = None
        self.holder = None
        self.lock = threading.Lock()

    def bind(self):
        families = [socket.AF_INET6, socket.AF_INET] if socket.has_ipv6 else [socket.AF_INET]
        for family in families:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                if self.port:  # a fixed port may be rebound over TIME_WAIT; port 0 is always new
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                    sock.bind(("::", self.port))
                else:
                    sock.bind(("0.0.0.0", self.port))
                # Every node connects to the master's ports at the same moment: 128 queued
                # connects overflowed at 256 nodes (SYNs dropped, connects timing out) on a
                # master busy answering. The kernel caps this at net.core.somaxconn.
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
                self.sock = sock
                self.port = sock.getsockname()[1]  # the kernel's choice for port 0
                return
            except OSError as error:
                sock.close()
                if error.errno == errno.EADDRINUSE and self.port:
                    self.state = "in_use"
                    self.error = os.strerror(error.errno)
                    self.holder = port_holder(self.port)
                    return
                if error.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                    continue
                self.state = "error"
                self.error = error.strerror or str(error)
                return
        self.state = "error"
        self.error = self.error or "no address family could bind"

    def serve(self, until):
        """Accept and answer peers in this one thread: a node of a large cluster gets hundreds
        of near-simultaneous connects, and a thread for each would cost more than the work.
        poll, not select: descriptors past 1024 are normal at that scale."""
        if self.sock is None:
            return
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        peers: dict[int, Peer] = {}  # fd -> Peer

        def drop(fd):
            poller.unregister(fd)
            peers.pop(fd).conn.close()

        try:
            while self.sock is not None and time.monotonic() < until():
                try:
                    events = poller.poll(50)
                except OSError:
                    return
                now = time.monotonic()
                for fd, _event in events:
                    if fd == self.sock.fileno():
                        conn = self._accept()
                        if conn is not None:
                            peers[conn.fileno()] = Peer(conn, now + self.peer_seconds)
                            poller.register(conn, select.POLLIN)
                    elif fd in peers and not self._serve_peer(peers[fd]):
                        drop(fd)
                for fd in [fd for fd, peer in peers.items() if peer.give_up_at < now]:
                    drop(fd)
        finally:
            for peer in peers.values():
                peer.conn.close()

    def _accept(self):
        if self.sock is None:
            return None
        try:
            conn, _address = self.sock.accept()
        except OSError:
            return None
        conn.setblocking(False)
        return conn

    def _serve_peer(self, peer):
        """Read the peer's handshake line and answer it; False once the peer is done."""
        try:
            data = peer.conn.recv(256)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data or peer.answered:
            # After our answer we wait for the peer to close first: TIME_WAIT then stays on
            # its ephemeral port, not on ours, so a job binding the rendezvous port right
            # after us is not refused.
            return bool(data)
        peer.received += data
        if b"\n" not in peer.received and len(peer.received) < 256:
            return True
        parts = peer.received.decode("utf-8", "replace").split()
        if len(parts) < 2 or parts[0] != HANDSHAKE.decode():
            return False
        with self.lock:  # before answering: once answered, the peer may report at once
            self.seen.add(parts[1])
        try:
            peer.conn.sendall(HANDSHAKE + b" " + self.name.encode() + b"\n")
        except OSError:
            return False
        peer.answered = True
        return True

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def read_line(conn, limit=256):
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = conn.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


CONNECT_ERRORS = {
    errno.ECONNREFUSED: "refused",
    errno.EHOSTUNREACH: "unreachable",
    errno.ENETUNREACH: "unreachable",
    errno.ETIMEDOUT: "timeout",
}


def connect_once(target, source, timeout, name, handshake_timeout):
    """One bounded connect plus the handshake; returns (result, detail). The handshake has
    its own bound: once connected the peer is known reachable, and a connect squeezed to the
    end of the window must not turn a slow answer into a stranger on the port."""
    address = target["address"]
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if source and (":" in source) == (family == socket.AF_INET6):
            try:
                sock.bind((source, 0))
            except OSError as error:
                return "error", "cannot use source address %s: %s" % (source, error.strerror)
        sock.settimeout(timeout)
        try:
            sock.connect((address, int(target["port"])))
        except socket.timeout:
            return "timeout", "no answer within %.1fs" % timeout
        except OSError as error:
            kind = CONNECT_ERRORS.get(error.errno or 0, "error")
            return kind, error.strerror or str(error)
        sock.settimeout(handshake_timeout)
        try:
            sock.sendall(HANDSHAKE + b" " + name.encode() + b"\n")
            reply = read_line(sock).split()
        except OSError as error:
            return "foreign", "connected, but no clusterkit listener answered (%s)" % (
                error.strerror or error
            )
        if len(reply) >= 2 and reply[0] == HANDSHAKE.decode():
            return "ok", reply[1]
        return "foreign", "connected, but another program listens on this port"
    finally:
        sock.close()


def probe_target(target, source, name, budget, handshake_timeout):
    """One bounded connect; every peer listens already, so its first answer is final."""
    started = time.monotonic()
    result, detail = connect_once(target, source, budget, name, handshake_timeout)
    outcome = dict(target)
    outcome.update(result=result, detail=detail, seconds=round(time.monotonic() - started, 3))
    return outcome


class Mesh:
    """This node's part of one mesh round: its listeners, then its connects. The listeners
    serve until `close`, which the session calls only once the control side says every node
    has finished connecting: when "go" reaches the nodes over several seconds, the last one
    still finds every peer listening."""

    def __init__(self, plan):
        self.plan = plan
        self.name = plan["name"]
        peer_seconds = float(plan.get("connect_timeout", 3.0)) + PEER_SLACK
        self.listeners = [
            Listener(int(item["port"]), item["role"], self.name, peer_seconds)
            for item in plan["listen"]
        ]
        self.done = threading.Event()
        self.servers = []

    def bind(self):
        """Bind and start serving every planned port (before reporting bound, so peers
        that connect right after "go" are accepted at once)."""
        for listener in self.listeners:
            listener.bind()
            thread = threading.Thread(target=listener.serve, args=(self.listen_until,))
            thread.daemon = True
            thread.start()
            self.servers.append(thread)
        return {"phase": "bound", "listeners": self.report()}

    def listen_until(self):
        return 0 if self.done.is_set() else float("inf")

    def connect(self, targets):
        """Every connect "go" named (the peers' bound ports), each bounded; the listeners
        keep serving."""
        started = time.monotonic()
        plan = self.plan
        window = float(plan.get("window", 5.0))
        connect_timeout = float(plan.get("connect_timeout", 3.0))
        window_end = started + window
        results: list[dict | None] = [None] * len(targets)
        todo = enumerate(targets)
        todo_lock = threading.Lock()
        source = plan.get("source")

        def work():
            while True:
                with todo_lock:
                    item = next(todo, None)
                if item is None:
                    return
                index, target = item
                budget = max(0.2, min(connect_timeout, window_end - time.monotonic()))
                results[index] = probe_target(target, source, self.name, budget, connect_timeout)

        workers = []
        for _ in range(min(CONNECT_WORKERS, len(targets))):
            thread = threading.Thread(target=work)
            thread.daemon = True
            thread.start()
            workers.append(thread)
        for thread in workers:
            thread.join(max(0.0, window_end + connect_timeout + 1 - time.monotonic()))
        for index, target in enumerate(targets):
            if results[index] is None:
                results[index] = dict(target, result="timeout", detail="connect never returned")
        return {
            "phase": "mesh",
            "round": plan.get("round", 1),
            "connects": results,
            "seconds": round(time.monotonic() - started, 3),
            "cpu": round(time.process_time(), 3),  # this process's CPU seconds so far
        }

    def closed(self):
        """Close the listeners and report who reached each one."""
        self.close()
        return {
            "phase": "listeners",
            "round": self.plan.get("round", 1),
            "listeners": self.report(),
        }

    def report(self):
        return [
            {
                "port": item.port,
                "role": item.role,
                "state": item.state,
                "error": item.error,
                "holder": item.holder,
                "seen": sorted(item.seen),
            }
            for item in self.listeners
        ]

    def close(self):
        self.done.set()
        for thread in self.servers:
            thread.join(1.0)
        self.servers = []
        for listener in self.listeners:
            listener.close()


class Inbox:
    """The control side's answers: one JSON object per line on stdin, each awaited at most
    `wait` seconds. None means stop: end of input, a timeout, or {"stop": true}."""

    def __init__(self, wait, fd=0):
        self.wait, self.fd = wait, fd
        self.buffer = b""

    def next(self):
        give_up = time.monotonic() + self.wait
        while b"\n" not in self.buffer:
            left = give_up - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        message = json.loads(line)
        return None if message.get("stop") else message


def session(args, inbox):
    """facts, then the mesh rounds."""
    emit(facts(args))
    mesh_rounds(inbox)


def mesh_rounds(inbox):
    """Rounds of plan -> bound -> go -> mesh -> listeners until the control side stops: a
    later round retests the nodes an earlier one found failing. The listeners close only on
    the answer to the mesh report, which the control side sends once every node's report is
    in; the inbox's wait bounds how long they serve when that answer never comes."""
    while True:
        plan = inbox.next()
        if plan is None:
            return
        mesh = Mesh(plan)
        try:
            emit(mesh.bind())
            go = inbox.next()
            if go is None:
                return
            emit(mesh.connect(go.get("targets") or []))
            if inbox.next() is None:
                return
            emit(mesh.closed())
        finally:
            mesh.close()


def main(argv):
    if len(argv) != 2:
        emit({"error": "usage: node.py JSON-ARGS"})
        return 2
    try:
        args = json.loads(argv[1])
    except ValueError as error:
        emit({"error": "arguments are not JSON: %s" % error})
        return 2
    try:
        session(args, Inbox(float(args.get("wait", 30.0))))
    except Exception as error:  # reported as data: the control side names the host
        emit({"error": "network stage failed on the node: %s: %s" % (type(error).__name__, error)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
