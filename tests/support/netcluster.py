"""A real multi-node test cluster on one machine: network namespaces on a Linux bridge.

Each node is a network namespace with its own veth (named eth0 inside), address, firewall,
/etc/hosts, hostname and OpenSSH server, so clusterkit talks to it exactly as to a remote
machine: real key exchange, host-key checking, sftp for Ansible, per-node iptables faults.
Nodes share the filesystem; each gets its own tool directory first on PATH, which holds a
stand-in `nvidia-smi` (see fake_nvidia_smi.py) driven by per-node GPU state.

    with NetCluster(4) as cluster:
        cluster.inventory(path)                  # Ansible YAML inventory for clusterkit
        cluster.nodes[2].iptables("-I", "INPUT", "-p", "tcp", "--dport", "29500", "-j", "DROP")
        cluster.nodes[1].set_gpus(driver="535.129.03", cuda="12.2")
        cluster.reset()                          # healthy again

Needs root, iproute2, OpenSSH server and client tools and iptables. Several clusters may live
side by side (tests and benchmarks run concurrently): each gets its own name prefix and /24s,
recorded under /run/netcluster so that a crashed owner's leftovers are removed by the next build.

Large clusters span several subnets (at most 240 nodes per /24), each on its own bridge; this
machine routes between them, as a spine routes between racks, and `cut(a, b)` drops the
traffic between two subnets (a failed link or an ACL) while each keeps talking inside.
Run `python -m tests.support.netcluster --nodes 32 --hold` for a cluster to poke at by hand.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import itertools
import json
import os
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clusterkit.node.probe_gpu import BASE_GPU_FIELDS, COMPUTE_APPS_QUERY, GPU_FIELDS

STATE_DIR = Path("/run/netcluster")
SUBNET_PREFIX = "10.213"
NODE_INTERFACE = "eth0"
DEFAULT_MTU = 1500
SSH_PORT = 22
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
FAKE_NVIDIA_SMI = Path(__file__).resolve().with_name("fake_nvidia_smi.py")
FAKE_NVME = Path(__file__).resolve().with_name("fake_nvme.py")
# A healthy node's kernel log: ordinary lines, some of them NVIDIA's, none an Xid.
HEALTHY_KERNEL_LOG = (
    "Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP",
    "nvidia: loading out-of-tree module taints kernel.",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
    "nvidia-nvswitch: Probing device 0000:05:00.0, Vendor Id = 0x10de, Device Id = 0x22a3",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.",
)
# The probe's nvidia-smi invocations (clusterkit/node/collector.py), answered from
# pre-rendered output in normal mode.
PROBE_NVIDIA_SMI_CALLS = {
    "banner": [],
    "query": ["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"],
    # without the health fields (probe option gpu_health: false, benchmarks/bench_gpu_health.py)
    "query-base": ["--query-gpu=" + ",".join(BASE_GPU_FIELDS), "--format=csv,noheader,nounits"],
    "apps": [COMPUTE_APPS_QUERY, "--format=csv,noheader,nounits"],
    "nvlink": ["nvlink", "--status"],
    "nvlink_errors": ["nvlink", "--errorcounters"],
}
# Starts in ~25 ms and always exists where the tests run; the stand-in is stdlib only.
STAND_IN_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
FIRST_HOST_OCTET = 10  # the j-th node of a subnet gets <subnet>.<10 + j>; its bridge .1
NODES_PER_SUBNET = 240
MAX_NODES = 1000
COMMAND_TIMEOUT = 20.0
FLUSHED_FILTER_TABLE = (
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
)
REQUIRED_TOOLS = ("ip", "unshare", "iptables", "iptables-restore", "ssh-keygen", SSHD)

DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
DEFAULT_DRIVER = "550.54.15"
DEFAULT_CUDA = "12.4"
DEFAULT_GPU_COUNT = 8
# Model -> (memory.total MiB, power.limit W, compute_cap), as real boards report them.
GPU_MODELS = {
    "NVIDIA H100 80GB HBM3": (81559, 700.0, "9.0"),
    "NVIDIA H100 PCIe": (81559, 350.0, "9.0"),
    "NVIDIA H200": (143771, 700.0, "9.0"),
    "NVIDIA B200": (183359, 1000.0, "10.0"),
    "NVIDIA A100-SXM4-80GB": (81920, 400.0, "8.0"),
    "NVIDIA A100-SXM4-40GB": (40960, 400.0, "8.0"),
    "NVIDIA L4": (23034, 72.0, "8.9"),
    "NVIDIA A10G": (23028, 300.0, "8.6"),
}
GPU_MODES = ("normal", "hang", "fail", "mismatch", "absent")
BANNERS = ("classic", "r610")


class NetClusterError(RuntimeError):
    """The cluster could not be built or changed; the message says which step and why."""


_instances = itertools.count()


def node_python() -> str:
    """This interpreter as the nodes should start it: a venv's python must keep its path (the
    venv is found from it); outside one, the real path skips a pyenv shim's shell script."""
    if sys.prefix != sys.base_prefix:
        return sys.executable
    return os.path.realpath(sys.executable)


def default_prefix() -> str:
    """ck<pid><letter>: unique per process and per cluster within it, short enough for links."""
    return f"ck{os.getpid()}{string.ascii_lowercase[next(_instances) % 26]}"


def unavailable_reason() -> str | None:
    """Why a cluster cannot be built here (not root, a tool missing), or None if it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, iptables, sshd)"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)} (install iproute2 openssh-server iptables)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=COMMAND_TIMEOUT)
    if probe.returncode != 0:
        return "`ip netns` does not work here: " + probe.stderr.decode(errors="replace").strip()
    return None


def run(
    argv: Sequence[str],
    *,
    timeout: float = COMMAND_TIMEOUT,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command with a deadline; on failure raise with its stderr (check=True)."""
    try:
        result = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise NetClusterError(f"{shlex.join(argv)} timed out after {timeout:g} s") from exc
    if check and result.returncode != 0:
        raise NetClusterError(
            f"{shlex.join(argv)} exited {result.returncode}: {result.stderr.strip()}"
        )
    return result


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], workers: int = 16) -> list[Any]:
    """Apply fn to every item on a thread pool; the first exception propagates."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def pids_in_netns(netns: str) -> list[int]:
    """Every process living in a network namespace (processes cannot leave one on their own)."""
    result = run(["ip", "netns", "pids", netns], check=False)
    return [int(word) for word in result.stdout.split()]


def kill_netns_processes(netns: str, keep: Callable[[int], bool] = lambda pid: False) -> None:
    """SIGKILL every process in the namespace except those `keep` accepts; wait until gone."""
    deadline = time.monotonic() + 5.0
    while True:
        victims = [pid for pid in pids_in_netns(netns) if not keep(pid)]
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise NetClusterError(f"processes {victims} in {netns} survived SIGKILL")
        time.sleep(0.02)


def process_exe(pid: int) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/exe")
    return ""


@dataclass(frozen=True)
class NodeProcess:
    """A process running inside a node (for "nothing left running" assertions)."""

    pid: int
    ppid: int
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def read_process(pid: int) -> NodeProcess | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    return NodeProcess(pid, ppid, tuple(arg.decode(errors="replace") for arg in argv if arg))


def gpu_inventory(
    node_name: str,
    node_index: int,
    count: int,
    model: str,
    *,
    ecc_errors: int | dict[int, int],
    persistence: bool,
    memory_mib: int | None,
) -> list[dict[str, Any]]:
    """GPU records under nvidia-smi's query field names; UUIDs and bus ids differ per node."""
    memory, power_limit, compute_cap = GPU_MODELS.get(model, GPU_MODELS[DEFAULT_MODEL])
    if memory_mib is not None:
        memory = memory_mib
    gpus = []
    for index in range(count):
        errors = ecc_errors.get(index, 0) if isinstance(ecc_errors, dict) else ecc_errors
        bus = (0x18 + 0x1B * index + node_index) & 0xFF
        gpus.append(
            {
                "index": index,
                "minor_number": index,
                "name": model,
                "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{node_name}/{index}")),
                "serial": str(1654922000000 + node_index * 100 + index),
                "pci.bus_id": f"00000000:{bus:02X}:00.0",
                "vbios_version": "96.00.99.00.01",
                # an H100 SXM's InfoROM image as `-q` prints it (G520 board)
                "inforom.img": "G520.0200.00.05",
                "inforom.oem": "2.1",
                "inforom.ecc": "7.16",
                "inforom.pwr": "[N/A]",
                # the driver's verdict after an unrecoverable error (R550 prints No/No)
                "reset_status.reset_required": "No",
                "reset_status.drain_and_reset_recommended": "No",
                "persistence_mode": "Enabled" if persistence else "Disabled",
                "display_mode": "Disabled",
                "display_active": "Disabled",
                "compute_mode": "Default",
                "compute_cap": compute_cap,
                "pstate": "P0",
                "fan.speed": "[N/A]",
                "memory.total": memory,
                "memory.reserved": 0,
                "memory.used": 0,
                "utilization.gpu": 0,
                "utilization.memory": 0,
                "temperature.gpu": 27 + (node_index * 3 + index * 5) % 9,
                "temperature.memory": 35 + (node_index + index) % 5,
                # degrees left before the slowdown temperature (90 C on an H100 SXM)
                "temperature.gpu.tlimit": 90 - (27 + (node_index * 3 + index * 5) % 9),
                "power.draw": round(68.0 + ((node_index * 7 + index * 13) % 90) / 10, 2),
                "power.limit": power_limit,
                "enforced.power.limit": power_limit,
                "power.default_limit": power_limit,
                "power.max_limit": power_limit,
                "clocks.sm": 345,
                "clocks.mem": 2619,
                "clocks.max.sm": 1980,
                "clocks.max.mem": 2619,
                # an idle GPU: the link trains down to gen 1 (power saving), full width
                "pcie.link.gen.current": 1,
                "pcie.link.gen.max": 5,
                "pcie.link.gen.gpumax": 5,
                "pcie.link.gen.hostmax": 5,
                "pcie.link.width.current": 16,
                "pcie.link.width.max": 16,
                "clocks_event_reasons.active": "0x0000000000000001",  # GPU idle
                "ecc.mode.current": "Enabled",
                "ecc.mode.pending": "Enabled",
                "ecc.errors.corrected.volatile.total": 0,
                "ecc.errors.uncorrected.volatile.total": errors,
                "ecc.errors.corrected.aggregate.total": 0,
                "ecc.errors.uncorrected.aggregate.total": errors,
                "ecc.errors.corrected.volatile.sram": 0,
                "ecc.errors.corrected.volatile.dram": 0,
                "ecc.errors.uncorrected.volatile.sram": 0,
                "ecc.errors.uncorrected.volatile.dram": errors,
                "ecc.errors.corrected.aggregate.sram": 0,
                "ecc.errors.corrected.aggregate.dram": 0,
                "ecc.errors.uncorrected.aggregate.sram": 0,
                "ecc.errors.uncorrected.aggregate.dram": errors,
                # Hopper repairs memory by remapping rows; page retirement is Volta's
                "retired_pages.single_bit_ecc.count": "[N/A]",
                "retired_pages.double_bit.count": "[N/A]",
                "retired_pages.pending": "[N/A]",
                "remapped_rows.correctable": 0,
                "remapped_rows.uncorrectable": 0,
                "remapped_rows.pending": "No",
                "remapped_rows.failure": "No",
                "mig.mode.current": "Disabled",
                "mig.mode.pending": "Disabled",
            }
        )
    return gpus


class Node:
    """One host of the cluster. Create through NetCluster, not directly."""

    def __init__(self, cluster: NetCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index  # 1-based
        self.name = f"node{index}"  # hostname and inventory name
        self.netns = f"{cluster.prefix}-{self.name}"
        self.segment = (index - 1) // cluster.per_subnet  # which subnet (and bridge)
        slot = (index - 1) % cluster.per_subnet + 1
        self.address = f"{cluster.subnets[self.segment]}.{FIRST_HOST_OCTET + slot}"
        self.interface = NODE_INTERFACE
        self.host_veth = f"{cluster.prefix}v{index}"
        self.dir = cluster.dir / self.name
        self.bin_dir = self.dir / "bin"
        self.home = self.dir / "home"
        self.gpu_state_path = self.dir / "gpu.json"
        self.sshd_config_path = self.dir / "sshd_config"
        self.host_key_path = self.dir / "ssh_host_ed25519_key"
        self.hosts_path = Path("/etc/netns") / self.netns / "hosts"
        self.sshd: subprocess.Popen[bytes] | None = None
        self.environment: dict[str, str] = {}  # set_environment(): more SetEnv variables

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.address} netns={self.netns}>"

    # --- running things inside the node -------------------------------------------------

    def exec(
        self,
        argv: Sequence[str],
        timeout: float = COMMAND_TIMEOUT,
        *,
        check: bool = False,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in the node's network namespace (and its /etc/hosts), to completion.

        The hostname is the machine's; use ssh_argv() to see the node as a login does.
        """
        argv = ["ip", "netns", "exec", self.netns, *argv]
        return run(argv, timeout=timeout, check=check, stdin=stdin)

    def spawn(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a background process in the node (a listener, say); reset()/close() kill it."""
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, *argv], start_new_session=True, **popen_kwargs
        )
        self.cluster._spawned.append(process)
        return process

    def iptables(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`iptables ARGS` in this node's own firewall (e.g. to drop a port)."""
        return self.exec(["iptables", "-w", *args], check=True)

    def reject_high_ports_from(self, peer: Node) -> None:
        """REJECT `peer`'s new TCP connections to this node's ports 1024-65535 (where the
        rendezvous and the mesh listen), while SSH and replies to this node stay open."""
        self.iptables("-A", "INPUT", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
                      "-j", "ACCEPT")  # fmt: skip
        self.iptables(
            "-A", "INPUT", "-s", peer.address, "-p", "tcp", "--dport", "1024:65535", "-j", "REJECT"
        )

    def ssh_argv(self, *command: str, connect_timeout: float = 5) -> list[str]:
        """The OpenSSH client command line that logs into this node with strict host keys."""
        return [
            "ssh", "-F", "/dev/null",
            "-i", str(self.cluster.key_path),
            "-o", f"UserKnownHostsFile={self.cluster.known_hosts_path}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={connect_timeout:g}",
            f"root@{self.address}",
            *command,
        ]  # fmt: skip

    def processes(self, include_sshd: bool = False) -> list[NodeProcess]:
        """Processes running in the node, its sshd listener excluded (and sessions, unless
        include_sshd): what a command over SSH left behind."""
        listener = self.sshd.pid if self.sshd and self.sshd.poll() is None else None
        found = []
        for pid in pids_in_netns(self.netns):
            if pid == listener or (not include_sshd and process_exe(pid) == SSHD):
                continue
            process = read_process(pid)
            if process is not None:
                found.append(process)
        return found

    # --- sshd ---------------------------------------------------------------------------

    def start_sshd(self, wait: bool = True) -> None:
        """Start this node's sshd (own UTS namespace, so `hostname` prints the node name)."""
        if self.sshd_running:
            return
        log = open(self.dir / "sshd.log", "ab")  # noqa: SIM115 - owned by the child
        script = 'echo "$0" > /proc/sys/kernel/hostname && exec "$1" -D -e -f "$2"'
        with log:
            self.sshd = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--",
                 "/bin/sh", "-c", script, self.name, SSHD, str(self.sshd_config_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        if wait:
            self.wait_for_sshd()

    def stop_sshd(self) -> None:
        """Stop the listener; open sessions keep running, as with `systemctl stop ssh`."""
        if self.sshd is None:
            return
        if self.sshd.poll() is None:
            self.sshd.terminate()
            try:
                self.sshd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.sshd.kill()
                self.sshd.wait(timeout=5)
        self.sshd = None

    @property
    def sshd_running(self) -> bool:
        return self.sshd is not None and self.sshd.poll() is None

    def wait_for_sshd(self, timeout: float = 15.0) -> None:
        """Block until sshd answers with its SSH banner on port 22."""
        deadline = time.monotonic() + timeout
        while True:
            if self.sshd is not None and self.sshd.poll() is not None:
                raise NetClusterError(f"sshd on {self.name} exited: {self.sshd_log_tail()}")
            try:
                with socket.create_connection((self.address, SSH_PORT), timeout=1.0) as sock:
                    sock.settimeout(max(0.1, deadline - time.monotonic()))
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise NetClusterError(
                    f"sshd on {self.name} ({self.address}) not answering after {timeout:g} s: "
                    + self.sshd_log_tail()
                )
            time.sleep(0.02)

    def sshd_log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "sshd.log").read_text(errors="replace")[-600:].strip()
        return ""

    # --- network ------------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return self.cluster.bridges[self.segment]

    @property
    def subnet(self) -> str:
        return self.cluster.subnets[self.segment]

    def add_route(self) -> None:
        """Other subnets through this machine (only when there are others: a one-subnet
        cluster keeps no default route, so a wrong address stays unreachable at once)."""
        if len(self.cluster.subnets) > 1:
            gateway = self.cluster.bridge_addresses[self.segment]
            run(["ip", "-n", self.netns, "route", "replace", "default", "via", gateway])

    def set_mtu(self, mtu: int = DEFAULT_MTU) -> None:
        """MTU of eth0 inside the node only (a mismatch shows up as hangs on large messages)."""
        run(["ip", "-n", self.netns, "link", "set", self.interface, "mtu", str(mtu)])

    def set_hosts(self, text: str | None = None, **overrides: str) -> None:
        """Replace this node's /etc/hosts (default: every node name -> its address).

        Keyword overrides remap names, e.g. set_hosts(node1="127.0.1.1"). Written in place:
        the file is bind-mounted into running sessions, so a new inode would go unseen.
        """
        if text is None:
            addresses = {node.name: node.address for node in self.cluster.nodes}
            addresses.update(overrides)
            text = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            text += "".join(f"{address}\t{name}\n" for name, address in addresses.items())
        with open(self.hosts_path, "w") as handle:
            handle.write(text)

    # --- GPU stand-in -------------------------------------------------------------------

    def set_gpus(
        self,
        count: int = DEFAULT_GPU_COUNT,
        *,
        model: str = DEFAULT_MODEL,
        driver: str = DEFAULT_DRIVER,
        cuda: str = DEFAULT_CUDA,
        ecc_errors: int | dict[int, int] = 0,
        persistence: bool = True,
        banner: str = "classic",
        mode: str = "normal",
        memory_mib: int | None = None,
        overrides: dict[int, dict[str, Any]] | None = None,
        processes: Sequence[dict[str, Any]] = (),
        nvlink: Sequence[float | None] | None = None,
        unknown_fields: Sequence[str] = (),
    ) -> None:
        """Set what `nvidia-smi` reports on this node.

        ecc_errors: uncorrected volatile count for every GPU (int) or per GPU index (dict).
        banner: "classic" (Driver Version / CUDA Version) or "r610" (KMD / CUDA UMD Version).
        mode: normal; hang (never returns, like a wedged driver); fail (driver unreachable,
        exit 9); mismatch (NVML driver/library mismatch, exit 18); absent (not on PATH).
        overrides: {gpu index: {query field: value}} for anything else, e.g. temperature.gpu
        (or "nvlink": that GPU's own links); remapped_rows.* values answer both --query-gpu
        and --query-remapped-rows (the flags as the driver prints them: "Yes"/"No").
        processes: compute processes already running, [{"gpu": 0, "pid": 4242, "name": "python",
        "used_memory": 30000}]; their memory counts in the GPU's memory.used.
        nvlink: every GPU's links (GB/s, None = inactive), e.g. [26.562] * 18; None: no NVLink.
        unknown_fields: query field names this driver rejects (an older driver), e.g.
        ["clocks_event_reasons.active"] for one before 535.
        """
        if mode not in GPU_MODES:
            raise ValueError(f"mode must be one of {GPU_MODES}, not {mode!r}")
        if banner not in BANNERS:
            raise ValueError(f"banner must be one of {BANNERS}, not {banner!r}")
        gpus = gpu_inventory(
            self.name, self.index, count, model,
            ecc_errors=ecc_errors, persistence=persistence, memory_mib=memory_mib,
        )  # fmt: skip
        for index, fields in (overrides or {}).items():
            gpus[index].update(fields)
        for app in processes:
            gpus[app["gpu"]]["memory.used"] += app["used_memory"]
        if nvlink is not None:
            for gpu in gpus:
                gpu.setdefault("nvlink", list(nvlink))  # an override's own links win
        state = {"mode": mode, "banner": banner, "driver": driver, "cuda": cuda, "gpus": gpus}
        if unknown_fields:
            state["unknown_fields"] = list(unknown_fields)
        state["processes"] = [dict(app) for app in processes]
        text = json.dumps(state, indent=1)
        wrapper = self.bin_dir / "nvidia-smi"
        unchanged = self.gpu_state_path.exists() and self.gpu_state_path.read_text() == text
        if unchanged and wrapper.exists():
            return  # every reset lands here: the wrapper and its rendered answers still hold
        self.gpu_state_path.write_text(text)
        if mode == "absent":
            wrapper.unlink(missing_ok=True)
            return
        stand_in = shlex.join(
            [STAND_IN_PYTHON, "-S", "-E", str(FAKE_NVIDIA_SMI), str(self.gpu_state_path)]
        )
        replay = self._replay_cases(stand_in, mode)
        wrapper.write_text(f'#!/bin/sh\n{replay}exec {stand_in} "$@"\n')
        wrapper.chmod(0o755)

    def _replay_cases(self, stand_in: str, mode: str) -> str:
        """Shell cases answering the probe's two calls from output rendered now by the same
        stand-in: a node then pays a `cat`, not a Python start, per call (the check benchmark
        measures clusterkit, not the stand-in). Other calls and other modes run it live."""
        if mode != "normal":
            return ""
        cases = []
        for label, args in PROBE_NVIDIA_SMI_CALLS.items():
            rendered = self.bin_dir / f"nvidia-smi.{label}.out"
            done = subprocess.run(
                [*shlex.split(stand_in), *args], capture_output=True, check=False, timeout=30
            )
            if done.returncode != 0:  # a rejected field (unknown_fields): answered live
                continue
            rendered.write_bytes(done.stdout)
            pattern = shlex.quote(" ".join(args))
            cases.append(f"  {pattern}) exec cat {shlex.quote(str(rendered))} ;;\n")
        return 'case "$*" in\n' + "".join(cases) + "esac\n"

    def gpu_state(self) -> dict[str, Any]:
        """The state nvidia-smi reports from (for asserting on expected values)."""
        return json.loads(self.gpu_state_path.read_text())

    # --- kernel log stand-ins --------------------------------------------------------------

    def set_kernel_log(self, lines: Sequence[str] = (), *, dmesg_restricted: bool = False) -> None:
        """What `dmesg --time-format iso` and `journalctl -k -b -o short-iso` print on this
        node (test nodes share the host's kernel): ordinary boot lines, then `lines` (message
        text such as `NVRM: Xid (PCI:0000:38:00): 79, ...`), each with its tool's own time
        prefix. dmesg_restricted: dmesg fails as under kernel.dmesg_restrict=1."""
        messages = [*HEALTHY_KERNEL_LOG, *lines]
        stamps = [f"2026-11-26T00:{i // 60 % 60:02d}:{i % 60:02d}" for i in range(len(messages))]
        dmesg = "".join(
            f"{t},{i:06d}+00:00 {m}\n" for i, (t, m) in enumerate(zip(stamps, messages))
        )
        journal = "".join(f"{t}+0000 {self.name} kernel: {m}\n" for t, m in zip(stamps, messages))
        restricted = (
            'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1\n'
            if dmesg_restricted
            else ""
        )
        for tool, text, guard in (("dmesg", dmesg, restricted), ("journalctl", journal, "")):
            log = self.dir / f"{tool}.log"
            script = f"#!/bin/sh\n{guard}exec cat {shlex.quote(str(log))}\n"
            wrapper = self.bin_dir / tool
            if not (log.exists() and log.read_text() == text):
                log.write_text(text)
            if not (wrapper.exists() and wrapper.read_text() == script):
                wrapper.write_text(script)
                wrapper.chmod(0o755)

    # --- DCGM stand-in ------------------------------------------------------------------

    def set_dcgm(self, output: Path | None = None, *, exit_code: int = 0) -> None:
        """What `dcgmi` prints on this node: the file `output` (a recorded `dcgmi diag -j`
        document, tests/fixtures/dcgm/) with `exit_code`; None: no dcgmi on the node. Each
        call's arguments are appended to `dcgmi.calls` in the node's directory."""
        wrapper, calls = self.bin_dir / "dcgmi", self.dir / "dcgmi.calls"
        calls.unlink(missing_ok=True)
        if output is None:
            wrapper.unlink(missing_ok=True)
            return
        wrapper.write_text(
            f'#!/bin/sh\necho "$*" >> {shlex.quote(str(calls))}\n'
            f"cat {shlex.quote(str(output))}\nexit {int(exit_code)}\n"
        )
        wrapper.chmod(0o755)

    def set_nvme(self, devices: list[dict[str, Any]] | None) -> None:
        """nvme-cli on this node: `devices` as tests/support/fake_nvme.py reads them
        ({"name": "nvme0", "smart": {"media_errors": 3}}, ...), answered as nvme-cli 2.x
        prints; None: no `nvme` on the node (the default)."""
        wrapper, state = self.bin_dir / "nvme", self.dir / "nvme.json"
        if devices is None:
            wrapper.unlink(missing_ok=True)
            state.unlink(missing_ok=True)
            return
        state.write_text(json.dumps({"devices": devices}))
        stand_in = shlex.join([STAND_IN_PYTHON, "-S", "-E", str(FAKE_NVME), str(state)])
        wrapper.write_text(f'#!/bin/sh\nexec {stand_in} "$@"\n')
        wrapper.chmod(0o755)

    def dcgm_calls(self) -> list[str]:
        calls = self.dir / "dcgmi.calls"
        return calls.read_text().splitlines() if calls.exists() else []

    # --- construction and health --------------------------------------------------------

    def create(self) -> None:
        """Namespace, veth into the bridge, address, files and host key (sshd not started)."""
        run(["ip", "netns", "add", self.netns])
        run(["ip", "link", "add", self.host_veth, "type", "veth",
             "peer", "name", self.interface, "netns", self.netns])  # fmt: skip
        run(["ip", "link", "set", self.host_veth, "master", self.bridge, "up"])
        run(["ip", "-n", self.netns, "addr", "add", f"{self.address}/24", "dev", self.interface])
        run(["ip", "-n", self.netns, "link", "set", self.interface, "mtu", str(DEFAULT_MTU), "up"])
        run(["ip", "-n", self.netns, "link", "set", "lo", "up"])
        self.add_route()
        self.bin_dir.mkdir(parents=True)
        self.home.mkdir(mode=0o700)
        self.hosts_path.parent.mkdir(parents=True, exist_ok=True)
        self.set_hosts()
        self.set_gpus()
        self.set_kernel_log()
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.name,
             "-f", str(self.host_key_path)])  # fmt: skip
        self.write_sshd_config()

    def write_sshd_config(self) -> None:
        """sshd's configuration: strict keys, and the node's own PATH, HOME and any
        variables set_environment() gave its sessions."""
        variables = {"PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home)}
        variables.update(self.environment)
        self.sshd_config_path.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.address}:{SSH_PORT}",
                    f"HostKey {self.host_key_path}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.cluster.authorized_keys_path}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",  # the key files live under /tmp
                    "UseDNS no",
                    "PrintMotd no",
                    "PrintLastLog no",
                    "X11Forwarding no",
                    "AllowTcpForwarding yes",  # ProxyJump through a node
                    "MaxStartups 256",
                    "MaxSessions 64",
                    "LogLevel INFO",
                    "SetEnv " + " ".join(f"{k}={v}" for k, v in variables.items()),
                    f"Subsystem sftp {SFTP_SERVER}",
                    "",
                ]
            )
        )

    def set_environment(self, **variables: str) -> None:
        """Variables every new session on the node gets (e.g. DOCKER_HOST for its own
        engine); none to go back to PATH and HOME only. Restarts sshd; open sessions stay.
        reset() keeps them: whoever set them (and started what they point at) undoes them."""
        if variables == self.environment:
            return
        self.environment = dict(variables)
        self.write_sshd_config()
        self.stop_sshd()
        self.start_sshd()

    def host_key_line(self) -> str:
        key_type, key = Path(f"{self.host_key_path}.pub").read_text().split()[:2]
        return f"{self.address} {key_type} {key}"

    def reset(self) -> None:
        """Back to healthy: no leftover processes, open firewall, default MTU, hosts and GPUs,
        sshd listening."""
        listener = self.sshd.pid if self.sshd_running else None
        daemons = self.cluster.daemons
        kill_netns_processes(
            self.netns, keep=lambda pid: pid == listener or process_exe(pid) in daemons
        )
        self.exec(
            ["sh", "-c",
             "command -v nft >/dev/null && nft flush ruleset; iptables-restore -w < \"$0\"",
             str(self.cluster.flushed_rules_path)],
            check=True,
        )  # fmt: skip
        run(["ip", "link", "set", self.host_veth, "master", self.bridge,
             "mtu", str(DEFAULT_MTU), "up"])  # fmt: skip
        run(["ip", "-n", self.netns, "link", "set", self.interface, "mtu", str(DEFAULT_MTU), "up"])
        address = f"{self.address}/24"
        run(["ip", "-n", self.netns, "addr", "replace", address, "dev", self.interface])
        self.add_route()
        self.set_hosts()
        self.set_gpus()
        self.set_kernel_log()
        self.set_dcgm()
        self.set_nvme(None)
        if not self.sshd_running:
            self.start_sshd()


class NetCluster:
    """n real hosts (network namespaces + sshd) on one bridge per subnet, reachable from
    this machine.

    prefix: names this cluster's namespaces and links (default "ck<pid><letter>", unique).
    subnets: how many /24s the nodes are spread over, in equal consecutive blocks (default:
    as few as hold n). Node i is `node{i}`; in a one-subnet cluster it is at <subnet>.<10+i>,
    and the control side (this namespace) is <subnet>.1 on every subnet's bridge.
    """

    def __init__(
        self,
        n: int,
        prefix: str | None = None,
        *,
        start_timeout: float = 15.0,
        subnets: int | None = None,
    ) -> None:
        if not 1 <= n <= MAX_NODES:
            raise ValueError(f"a cluster has 1..{MAX_NODES} nodes, not {n}")
        count = subnets if subnets is not None else -(-n // NODES_PER_SUBNET)
        if not 1 <= count <= n or -(-n // count) > NODES_PER_SUBNET:
            raise ValueError(f"{n} nodes do not fit {count} subnets of {NODES_PER_SUBNET}")
        self.per_subnet = -(-n // count)
        reason = unavailable_reason()
        if reason:
            raise NetClusterError(reason)
        self.prefix = prefix or default_prefix()
        if len(self.prefix) > 10 or not self.prefix.isalnum():
            raise ValueError(f"prefix must be 1-10 letters/digits (link names), not {prefix!r}")
        self.bridges = [f"{self.prefix}br" + (str(k) if k else "") for k in range(count)]
        self.bridge = self.bridges[0]
        # dockerd sets the FORWARD policy to DROP; with br_netfilter that drops node-to-node
        # traffic on our bridges too, which would look like a firewall the test never set.
        self.forward_rules = [
            ["FORWARD", "-i", inbound, "-o", outbound, "-j", "ACCEPT"]
            for inbound in self.bridges
            for outbound in self.bridges
        ]
        self.cuts: list[list[str]] = []
        self._spawned: list[subprocess.Popen[bytes]] = []
        # Programs a reset leaves running in the nodes (a SlurmCluster adds slurmd).
        self.daemons: set[str] = {SSHD}
        self._closed = False
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        started = time.monotonic()
        self.subnets = self._claim_subnets(n, count)
        self.subnet = self.subnets[0]
        self.bridge_addresses = [f"{subnet}.1" for subnet in self.subnets]
        self.bridge_address = self.bridge_addresses[0]
        self.dir = Path(tempfile.mkdtemp(prefix=f"netcluster-{self.prefix}-"))
        self._record(n)
        self.nodes: list[Node] = [Node(self, index) for index in range(1, n + 1)]
        atexit.register(self.close)
        try:
            self._build(start_timeout)
        except BaseException:
            self.close()
            raise
        self.build_seconds = time.monotonic() - started

    # --- public API ---------------------------------------------------------------------

    key_path = property(lambda self: self.dir / "id_ed25519")
    known_hosts_path = property(lambda self: self.dir / "known_hosts")
    authorized_keys_path = property(lambda self: self.dir / "authorized_keys")
    flushed_rules_path = property(lambda self: self.dir / "flushed.rules")

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __getitem__(self, name: str) -> Node:
        """Node by name: cluster["node2"]."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def __enter__(self) -> NetCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def inventory(
        self,
        path: str | os.PathLike[str],
        extra_vars: dict[str, Any] | None = None,
        python_interpreter: str | None = None,
        *,
        clusterkit: dict[str, Any] | None = None,
        host_vars: dict[str, dict[str, Any]] | None = None,
        nodes: Sequence[Node] | None = None,
    ) -> Path:
        """Write an Ansible YAML inventory of the cluster and return its path.

        python_interpreter defaults to this interpreter (torch is installed there): the venv's
        own python when the tests run in one, else its real path (not a pyenv shim);
        /usr/bin/python3 has no torch. clusterkit: merged over {master: node1, interface: eth0}.
        host_vars: per-node variables, e.g. {"node3": {"ansible_python_interpreter": ...}}.
        """
        members = list(nodes) if nodes is not None else self.nodes
        cluster_settings = {"master": members[0].name, "interface": NODE_INTERFACE}
        cluster_settings.update(clusterkit or {})
        group_vars: dict[str, Any] = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key_path),
            "ansible_python_interpreter": python_interpreter or node_python(),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={self.known_hosts_path}",
        }
        group_vars.update(extra_vars or {})
        group_vars["clusterkit"] = cluster_settings
        hosts = {}
        for node in members:
            hosts[node.name] = {"ansible_host": node.address}
            hosts[node.name].update((host_vars or {}).get(node.name, {}))
        document = {"all": {"hosts": hosts, "vars": group_vars}}
        target = Path(path)
        target.write_text(yaml.safe_dump(document, sort_keys=False))
        return target

    def segment(self, index: int) -> list[Node]:
        """The nodes of subnet `index` (0-based)."""
        return [node for node in self.nodes if node.segment == index]

    def cut(self, first: int, second: int) -> None:
        """Drop all traffic between subnets `first` and `second`, both ways (reset undoes)."""
        for inbound, outbound in ((first, second), (second, first)):
            rule = ["FORWARD", "-i", self.bridges[inbound], "-o", self.bridges[outbound],
                    "-j", "DROP"]  # fmt: skip
            run(["iptables", "-w", "-I", *rule])
            self.cuts.append(rule)

    def heal(self) -> None:
        """Undo every cut."""
        while self.cuts:
            run(["iptables", "-w", "-D", *self.cuts.pop()], check=False)

    def reset(self) -> None:
        """Restore every node to healthy (see Node.reset) and kill spawned processes."""
        self._reap_spawned()
        self.heal()
        parallel(Node.reset, self.nodes)

    def close(self) -> None:
        """Kill everything the cluster started and remove every trace of it. Idempotent."""
        if os.getpid() != self._owner_pid:
            return  # a forked child exiting must not tear down its parent's cluster
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for node in getattr(self, "nodes", []):
            if node.sshd is not None and node.sshd.poll() is None:
                node.sshd.kill()
        teardown(self._record_data(len(getattr(self, "nodes", []))))
        for node in getattr(self, "nodes", []):
            if node.sshd is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.sshd.wait(timeout=5)
        self._reap_spawned()
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)

    # --- construction -------------------------------------------------------------------

    def _claim_subnets(self, n: int, count: int) -> list[str]:
        """Pick `count` free <SUBNET_PREFIX>.X /24s under a lock, cleaning up dead owners'
        clusters first."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        with open(STATE_DIR / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            remove_stale_clusters()
            existing = STATE_DIR / f"{self.prefix}.json"
            if existing.exists():
                owner = json.loads(existing.read_text()).get("pid")
                raise NetClusterError(f"prefix {self.prefix!r} is in use by live process {owner}")
            for bridge in self.bridges:
                if run(["ip", "link", "show", bridge], check=False).returncode == 0:
                    raise NetClusterError(f"link {bridge} exists but no cluster owns it")
            taken = set()
            for record in cluster_records():
                taken.update(record_subnets(record))
            addresses = run(["ip", "-4", "-o", "addr", "show"]).stdout
            for word in addresses.split():
                if word.startswith(SUBNET_PREFIX + "."):
                    taken.add(".".join(word.split(".")[:3]))
            free = [f"{SUBNET_PREFIX}.{third}" for third in range(1, 255)]
            free = [subnet for subnet in free if subnet not in taken][:count]
            if len(free) < count:
                raise NetClusterError(f"no {count} free /24s left in {SUBNET_PREFIX}.0.0/16")
            self.subnets = free
            self._record(n)  # claimed before the lock is released
            return free

    def _record_data(self, n: int) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "prefix": self.prefix,
            "subnets": getattr(self, "subnets", []),
            "bridges": self.bridges,
            "forward_rules": self.forward_rules,
            "cuts": self.cuts,
            "dir": str(getattr(self, "dir", "")) or None,
            "nodes": [
                {"netns": f"{self.prefix}-node{i}", "veth": f"{self.prefix}v{i}"}
                for i in range(1, n + 1)
            ],
        }

    def _record(self, n: int) -> None:
        """Note what this cluster creates, so that a later build can clean up after a crash."""
        (STATE_DIR / f"{self.prefix}.json").write_text(json.dumps(self._record_data(n)))

    def _build(self, start_timeout: float) -> None:
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "netcluster-client",
             "-f", str(self.key_path)])  # fmt: skip
        self.authorized_keys_path.write_text(Path(f"{self.key_path}.pub").read_text())
        self.flushed_rules_path.write_text(FLUSHED_FILTER_TABLE)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        raise_neighbour_table_limits()
        for bridge, address in zip(self.bridges, self.bridge_addresses, strict=True):
            run(["ip", "link", "add", bridge, "type", "bridge"])
            run(["ip", "addr", "add", f"{address}/24", "dev", bridge])
            run(["ip", "link", "set", bridge, "up"])
        for rule in self.forward_rules:
            run(["iptables", "-w", "-I", *rule])
        if len(self.bridges) > 1:
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")  # this machine routes
        parallel(Node.create, self.nodes)
        self.known_hosts_path.write_text("".join(node.host_key_line() + "\n" for node in self))
        for node in self.nodes:
            node.start_sshd(wait=False)
        parallel(lambda node: node.wait_for_sshd(start_timeout), self.nodes)

    def _reap_spawned(self) -> None:
        for process in self._spawned:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self._spawned.clear()


# Every namespace shares the kernel's ARP table (default limit 1024 entries): a 32-node mesh
# needs ~1000, and overflow shows up as node-to-node connects timing out for no visible reason.
# 256 nodes in a full mesh need ~33k entries (each node's same-subnet peers and gateway).
NEIGHBOUR_LIMITS = {"gc_thresh1": 1024, "gc_thresh2": 32768, "gc_thresh3": 65536}


def raise_neighbour_table_limits() -> None:
    for family in ("ipv4", "ipv6"):
        for name, wanted in NEIGHBOUR_LIMITS.items():
            path = Path(f"/proc/sys/net/{family}/neigh/default/{name}")
            with contextlib.suppress(OSError, ValueError):
                if int(path.read_text()) < wanted:
                    path.write_text(str(wanted))


def cluster_records() -> list[dict[str, Any]]:
    records = []
    for path in STATE_DIR.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    return records


def record_subnets(record: dict[str, Any]) -> list[str]:
    """The /24s a cluster record holds (records written before clusters had several keep
    one "subnet")."""
    return record.get("subnets") or ([record["subnet"]] if record.get("subnet") else [])


def owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_clusters() -> list[str]:
    """Tear down clusters whose owning process died without closing them; their prefixes."""
    removed = []
    for record in cluster_records():
        if not owner_alive(record["pid"]):
            teardown(record)
            removed.append(record["prefix"])
    return removed


def teardown(record: dict[str, Any]) -> None:
    """Remove what a cluster record lists; anything already gone is fine."""

    def remove_node(node: dict[str, str]) -> None:
        netns = node["netns"]
        if Path("/run/netns", netns).exists():
            kill_netns_processes(netns)
        run(["ip", "link", "del", node["veth"]], check=False)
        run(["ip", "netns", "del", netns], check=False)
        shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)

    parallel(remove_node, record["nodes"])
    for bridge in record.get("bridges") or [record["bridge"]]:
        run(["ip", "link", "del", bridge], check=False)
    rules = record.get("forward_rules") or [record["forward_rule"]]
    for rule in [*rules, *(record.get("cuts") or [])]:
        for _ in range(10):  # in case a rule was inserted twice
            if run(["iptables", "-w", "-D", *rule], check=False).returncode != 0:
                break
    if record.get("dir"):
        shutil.rmtree(record["dir"], ignore_errors=True)
    (STATE_DIR / f"{record['prefix']}.json").unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Build a cluster by hand, print its timing and inventory, optionally hold it."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.netcluster")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--subnets", type=int, default=None)
    parser.add_argument("--prefix", default=None)
    parser.add_argument("--hold", action="store_true", help="keep it until Ctrl-C")
    parser.add_argument("--inventory", default=None, help="write the inventory here")
    parser.add_argument("--cleanup", action="store_true", help="only remove dead clusters")
    args = parser.parse_args(argv)
    if args.cleanup:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        print("removed:", " ".join(remove_stale_clusters()) or "nothing")
        return 0
    with NetCluster(args.nodes, args.prefix, subnets=args.subnets) as cluster:
        inventory = cluster.inventory(args.inventory or cluster.dir / "inventory.yaml")
        print(f"built {len(cluster)} nodes in {cluster.build_seconds:.2f} s")
        print(f"inventory: {inventory}")
        print("ssh:", shlex.join(cluster.nodes[0].ssh_argv("hostname")))
        if args.hold:
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        started = time.monotonic()
    print(f"closed in {time.monotonic() - started:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
