"""Which nodes of an srun step are gone, from srun's own sockets.

Each node's slurmstepd keeps one TCP connection open to one of srun's I/O ports while its
task runs: all the node's output comes through it. When the node crashes its kernel
closes it, but srun says nothing (it waits for a task exit that never comes) and the
node's stream merely goes quiet, so its loss would wait for the node timeout. srun's
connections in /proc tell it at once: one fewer means one stepd gone.

Which one is decided by silence, and only when it cannot be another: a gone node's last
byte came before its connection closed, so it has been quiet since before the drop was
seen; a live node speaks again within a heartbeat. When exactly as many nodes are quiet
since the drop as connections are missing, they are the ones gone; otherwise nobody is
named and the node timeout decides, as before. A connection opened by anyone else (an
RPC from slurmctld) only hides a drop, never invents one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

SETTLE_SECONDS = 1.5  # after a drop is seen, the live nodes have spoken again by then (1 s beats)
EVERY_SECONDS = 0.5  # /proc is read at most this often per step (two small files)
_LISTEN, _ESTABLISHED = "0A", "01"


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def inbound_connections(table: str, inodes: set[str]) -> int:
    """Established connections to a listening port, among the sockets `inodes`, in the
    text of /proc/PID/net/tcp (and tcp6): the connections others opened to this process."""
    rows = [line.split() for line in table.splitlines()]
    mine = [row for row in rows if len(row) > 9 and row[9] in inodes]
    ports = {row[1].rsplit(":", 1)[-1] for row in mine if row[3] == _LISTEN}
    return sum(1 for row in mine if row[3] == _ESTABLISHED and row[1].rsplit(":", 1)[-1] in ports)


def srun_connections(pid: int) -> int | None:
    """How many stepds are connected to srun `pid` now; None where /proc cannot tell."""
    try:
        inodes = socket_inodes(pid)
        table = ""
        for name in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{name}", encoding="ascii", errors="replace") as file:
                table += file.read()
    except OSError:
        return None
    return inbound_connections(table, inodes)


class GoneNodes:
    """The nodes of one step known gone: connections dropped, and silence naming whose."""

    def __init__(self) -> None:
        self.gone: list[str] = []
        self.drop_seen: float | None = None  # when fewer connections than nodes were seen
        self.checked = 0.0

    def check(
        self, now: float, live: Sequence[str], heard: Mapping[str, float], connected: int | None
    ) -> list[str]:
        """`live`: the nodes whose relay runs; `heard`: when each last spoke; `connected`:
        srun's stepd connections now. Returns the nodes newly known gone."""
        missing = len(live) - connected if connected is not None else 0
        if missing <= 0:
            self.drop_seen = None
            return []
        if self.drop_seen is None:
            self.drop_seen = now
            return []
        if now - self.drop_seen < SETTLE_SECONDS:
            return []
        quiet = [host for host in live if heard.get(host, 0.0) < self.drop_seen]
        if len(quiet) != missing:
            return []  # not only the gone ones are quiet: nobody is named
        self.gone += quiet
        self.drop_seen = None
        return quiet

    def due(self, now: float) -> bool:
        """Whether /proc is to be read again: a drop seen within EVERY_SECONDS of it, not
        after the node's first missed beat, is a second less of a restart."""
        return now - self.checked >= EVERY_SECONDS
