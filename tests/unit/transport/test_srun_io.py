"""Which nodes of an srun step are gone: srun's stepd connections, counted from /proc, and
silence naming whose, only when it cannot be another's."""

from __future__ import annotations

import os
import socket

from clusterkit.transport.srun_io import (
    EVERY_SECONDS,
    SETTLE_SECONDS,
    GoneNodes,
    inbound_connections,
    socket_inodes,
    srun_connections,
)

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
)


def row(n: int, local: str, remote: str, state: str, inode: int) -> str:
    return (
        f"  {n:2d}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000     0"
        f"        0 {inode} 1 000000008437bac4 100 0 0 10 0\n"
    )


# Recorded from srun running a 3-node step after node2 crashed (three listening ports:
# messages, I/O, PMI; two stepds still connected to the I/O port), with this machine's
# other sockets (sshd's, a client's) that are not srun's.
RECORDED = HEADER + "".join(
    [
        row(0, "00000000:0016", "00000000:0000", "0A", 1555),  # sshd: not srun's
        row(1, "00000000:8037", "00000000:0000", "0A", 5155369),
        row(2, "00000000:9F5F", "00000000:0000", "0A", 5155379),
        row(3, "00000000:98F7", "00000000:0000", "0A", 5155381),
        row(4, "0101D50A:98F7", "0B01D50A:AE4E", "01", 5155390),
        row(5, "0101D50A:98F7", "0D01D50A:8E1C", "01", 5155392),
        row(6, "0101D50A:C2A0", "0A01D50A:1AE9", "01", 5155399),  # srun's own RPC out
        row(7, "0101D50A:0016", "0B01D50A:B000", "01", 1600),  # an ssh session: not srun's
    ]
)
SRUN = {"5155369", "5155379", "5155381", "5155390", "5155392", "5155399"}


def test_only_connections_into_sruns_own_listening_ports_count() -> None:
    assert inbound_connections(RECORDED, SRUN) == 2
    assert inbound_connections(RECORDED, SRUN - {"5155392"}) == 1
    assert inbound_connections(RECORDED, set()) == 0


def test_a_malformed_table_counts_nothing() -> None:
    assert inbound_connections("garbage\n\n1 2 3\n", SRUN) == 0


def test_this_process_connections_are_counted_from_proc() -> None:
    """The real /proc of this process: a listener and one connection into it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        try:
            assert len(socket_inodes(os.getpid())) >= 3
            # The client's end is ours too, but its local port listens nowhere here.
            assert srun_connections(os.getpid()) == 1
        finally:
            accepted.close()
            client.close()


def test_a_process_that_is_not_there_tells_nothing() -> None:
    assert srun_connections(2**22 + 12345) is None


NODES = ["node1", "node2", "node3"]


def test_the_one_quiet_node_is_named_once_the_drop_has_settled() -> None:
    watch = GoneNodes()
    heard = {"node1": 100.0, "node2": 95.0, "node3": 100.0}
    assert watch.check(100.5, NODES, heard, 2) == []  # the drop is seen
    assert watch.check(100.5 + SETTLE_SECONDS / 2, NODES, heard, 2) == []
    heard["node1"] = heard["node3"] = 101.8  # the live nodes spoke again since
    assert watch.check(100.5 + SETTLE_SECONDS, NODES, heard, 2) == ["node2"]
    assert watch.gone == ["node2"]


def test_nobody_is_named_while_a_live_node_is_quiet_too() -> None:
    """node3 quiet as well (a loaded node): two candidates for one missing connection."""
    watch = GoneNodes()
    heard = {"node1": 100.0, "node2": 95.0, "node3": 99.0}
    watch.check(100.0, NODES, heard, 2)
    heard["node1"] = 101.0
    assert watch.check(100.0 + SETTLE_SECONDS + 1, NODES, heard, 2) == []
    assert watch.gone == []


def test_no_drop_no_name_however_quiet_a_node_is() -> None:
    """A partitioned node keeps its connection: silence alone never names anybody here
    (the node timeout does)."""
    watch = GoneNodes()
    heard = {"node1": 100.0, "node2": 50.0, "node3": 100.0}
    for now in (100.0, 103.0, 110.0):
        assert watch.check(now, NODES, heard, 3) == []
    assert watch.check(111.0, NODES, heard, None) == []  # /proc cannot tell
    assert watch.drop_seen is None


def test_an_extra_connection_hides_a_drop_and_never_invents_one() -> None:
    """An RPC from slurmctld counted as a stepd: one gone node shows no drop; nobody is
    named, however quiet."""
    watch = GoneNodes()
    heard = {"node1": 100.0, "node2": 50.0, "node3": 100.0}
    assert watch.check(100.0, NODES, heard, 3) == []
    assert watch.check(105.0, NODES, heard, 3) == []


def test_a_drop_that_heals_is_forgotten() -> None:
    watch = GoneNodes()
    heard = {"node1": 100.0, "node2": 95.0, "node3": 100.0}
    watch.check(100.0, NODES, heard, 2)
    assert watch.check(100.5, NODES, heard, 3) == [] and watch.drop_seen is None
    assert watch.check(100.0 + SETTLE_SECONDS + 1, NODES, heard, 3) == []


def test_proc_is_read_at_most_every_half_second() -> None:
    watch = GoneNodes()
    assert watch.due(100.0)
    watch.checked = 100.0
    assert not watch.due(100.0 + EVERY_SECONDS / 2)
    assert watch.due(100.0 + EVERY_SECONDS)
