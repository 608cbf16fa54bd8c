"""Open files on the control side. Every host holds a socket per SSH hop for the whole run
and a pipe per channel being waited on, so a few hundred hosts outgrow the soft limit many
systems start a shell with (1024): raise it as far as the hard limit allows, and when even
that is too few, refuse before connecting rather than fail hosts at random halfway."""

from __future__ import annotations

import resource
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from clusterkit.errors import UsageError

# The interpreter, stdio, log and report files, known_hosts, srun steps: measured at 20 to
# 30 on a check without hosts; the rest is headroom.
BASE_DESCRIPTORS = 64
# Per host: a pipe (2) for each channel waited on at once, at most two (a command, and the
# kill of its process group or a second command of the same stage), and the eventfd that
# wakes its waits on Ctrl-C. Measured: 3 to 4 per host at 256 hosts.
CHANNEL_DESCRIPTORS = 5
# A ProxyCommand's stdin, stdout and stderr pipes.
PROXY_DESCRIPTORS = 3


def host_descriptors(hops: int = 1, proxy_command: bool = False) -> int:
    """What one host holds at most: a socket per SSH connection (its jump hosts' included),
    the channel pipes and wake eventfd, and a ProxyCommand's pipes."""
    return hops + CHANNEL_DESCRIPTORS + (PROXY_DESCRIPTORS if proxy_command else 0)


def descriptors_needed(per_host: Iterable[int]) -> int:
    return BASE_DESCRIPTORS + sum(per_host)


def _ceiling(hard: int) -> int:
    """The highest soft limit this process may set: the hard limit, or where that is
    unlimited, the kernel's per-process maximum."""
    if hard != resource.RLIM_INFINITY:
        return hard
    with suppress(OSError, ValueError):
        return int(Path("/proc/sys/fs/nr_open").read_text())
    return 1 << 20


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return (soft, hard) now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _ceiling(hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    return soft, hard


def ensure_descriptors(hosts: int, need: int) -> None:
    """Raise the soft limit, and refuse the run (exit 2, nothing connected) when `need`
    descriptors for `hosts` hosts are more than the hard limit lets this process open."""
    soft, hard = raise_open_file_limit()
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    limit = "hard limit (ulimit -Hn)" if soft == hard else f"soft limit (hard: {hard})"
    raise UsageError(
        f"{hosts} hosts need up to {need} open files on this machine (a connection and "
        f"channel pipes per host), but the {limit} allows {soft}",
        hint=f"raise it to at least {need}: `ulimit -n {need}` as root, `nofile` in "
        "/etc/security/limits.conf, or LimitNOFILE= for a systemd unit; or check fewer "
        "hosts at once with --limit",
    )
