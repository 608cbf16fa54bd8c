"""A real Slurm cluster (Debian's slurmctld/slurmd 22.05 and munge) over a NetCluster's nodes.

One munged of its own (its socket is a path in the cluster's directory), slurmctld in the
control namespace under its own UTS namespace (hostname `ctl`, on the bridge address and a
free port of its own), and one slurmd per node, entered with `nsenter --net` only (`ip netns
exec` would remount /sys, which slurmd needs) plus private UTS and mount namespaces for the
node's hostname and /etc/hosts. A TaskProlog puts the node's tool directory (the GPU
stand-in) first on every task's PATH, as sshd's SetEnv does for SSH sessions. With
`health_check_interval`, slurmd itself runs `clusterkit node-check --slurm-drain` (through a
wrapper, as an admin's HealthCheckProgram would) every that many seconds on every node.

    with NetCluster(3) as net, SlurmCluster(net) as slurm:
        slurm.run(["srun", "-N3", "hostname"])        # SLURM_CONF set for you
        job = slurm.sbatch(script, "-N3")
        slurm.wait_job(job)

Several may coexist: every file, socket and port is the cluster's own; close() stops every
daemon and job it started. Needs root and the packages slurmctld slurmd slurm-client munge.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.netcluster import NetCluster, NetClusterError, owner_alive, parallel

REQUIRED_TOOLS = ("munged", "munge", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "nsenter")
MUNGE_KEY = Path("/etc/munge/munge.key")
PARTITION = "debug"
START_TIMEOUT = 30.0


def unavailable_reason() -> str | None:
    """Why a Slurm cluster cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, slurmd, munged)"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)"
    if not MUNGE_KEY.exists():
        return f"{MUNGE_KEY} missing (reinstall munge)"
    return None


_OWNED_PATH = re.compile(r"/netcluster-ck(\d+)[a-z]-[^/\s]+/slurm/")


def remove_stale_slurm() -> list[int]:
    """Kill Slurm test daemons (munged, slurmctld, slurmd) whose owning test process died
    without closing them (killed by a timeout, say); a NetCluster's own stale-cleanup removes
    the namespaces but knows nothing of them. Returns the pids killed."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        match = _OWNED_PATH.search(argv)
        if match and not owner_alive(int(match.group(1))):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


class SlurmCluster:
    """slurmctld + one slurmd per node of `net`; node names are the NetCluster's (node1...)."""

    def __init__(
        self, net: NetCluster, *, cpus: int = 2, health_check_interval: int | None = None
    ) -> None:
        reason = unavailable_reason()
        if reason:
            raise NetClusterError(reason)
        remove_stale_slurm()
        self.net = net
        self.dir = net.dir / "slurm"
        if self.dir.exists():
            raise NetClusterError(f"{self.dir} exists: this NetCluster already has a Slurm")
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "run" / "socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.node_names = [node.name for node in net.nodes]
        self._daemons: list[subprocess.Popen[bytes]] = []
        self._closed = False
        self.health_check_interval = health_check_interval
        try:
            self._build(cpus)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- using it -----------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, **kwargs
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command (or anything) with SLURM_CONF pointing at this cluster."""
        env = {**self.env, **kwargs.pop("env", {})}
        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=timeout, env=env, **kwargs
            )
        except subprocess.TimeoutExpired as exc:
            raise NetClusterError(f"{shlex.join(argv)} timed out after {timeout:g} s") from exc
        if check and done.returncode != 0:
            raise NetClusterError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr}")
        return done

    def sbatch(self, script: Path, *args: str, env: dict[str, str] | None = None) -> int:
        """Submit a batch script; its job id."""
        done = self.run(["sbatch", "--parsable", *args, str(script)], env=env or {})
        return int(done.stdout.strip().split(";")[0])

    @contextlib.contextmanager
    def allocation(self, nodes: int, timeout: float = 60.0) -> Iterator[str]:
        """A running job on the first `nodes` nodes to start steps in, as `salloc -N` would
        give; its id. Cancelled on the way out."""
        job = self.run(
            ["sbatch", "--parsable", f"-N{nodes}", "--output=/dev/null",
             "--wrap", "sleep infinity"]
        ).stdout.strip()  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while (state := self.job_state(int(job))) != "RUNNING":
                if time.monotonic() > deadline:
                    raise NetClusterError(f"allocation {job} still {state} after {timeout:g} s")
                time.sleep(0.05)
            yield job
        finally:
            self.run(["scancel", job], check=False)

    def job_state(self, job: int) -> str:
        done = self.run(["scontrol", "show", "job", str(job)], check=False)
        for word in done.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "GONE"

    def wait_job(self, job: int, timeout: float = 180.0) -> str:
        """Wait until the job has ended; its final state (COMPLETED, FAILED, ...)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job)
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                return state
            if time.monotonic() > deadline:
                self.run(["scancel", str(job)], check=False)
                raise NetClusterError(f"job {job} still {state} after {timeout:g} s")
            time.sleep(0.1)

    def steps(self) -> list[str]:
        """Every job step Slurm still knows as running (`squeue -s`), batch/extern excluded."""
        done = self.run(["squeue", "-h", "-s", "-o", "%i %j"])
        return [
            line
            for line in done.stdout.splitlines()
            if line.strip() and not line.split()[0].endswith((".batch", ".extern"))
        ]

    def jobs(self) -> list[str]:
        return [line for line in self.run(["squeue", "-h", "-o", "%i"]).stdout.split() if line]

    def node_state(self, name: str) -> tuple[str, str]:
        """(state, reason) of a node as scontrol reports them."""
        done = self.run(["scontrol", "show", "node", name])
        state = reason = ""
        for line in done.stdout.splitlines():
            line = line.strip()
            if line.startswith("State="):
                state = line.split()[0].split("=", 1)[1]
            if line.startswith("Reason="):
                reason = line.split("=", 1)[1].rsplit(" [", 1)[0]
        return state, reason

    def reset(self) -> None:
        """Healthy again: no job, every node resumed and idle, the NetCluster reset (firewall,
        GPUs, hosts, leftover processes) with slurmd kept running."""
        for job in self.jobs():
            self.run(["scancel", "--signal=KILL", "--full", job], check=False)
        self.net.reset()
        names = ",".join(self.node_names)
        self.run(["scontrol", "update", f"nodename={names}", "state=resume"], check=False)
        self.wait_idle()

    def wait_idle(self, timeout: float = START_TIMEOUT) -> None:
        """Until every node is idle and no job is left."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False)
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            if all(states.get(name) == "idle" for name in self.node_names) and not self.jobs():
                return
            if time.monotonic() > deadline:
                raise NetClusterError(f"nodes not idle after {timeout:g} s: {states}")
            time.sleep(0.1)

    # --- construction -------------------------------------------------------------------

    def _build(self, cpus: int) -> None:
        self.dir.mkdir(parents=True)
        self.net.dir.chmod(0o711)  # munge must reach its own directory below
        self.dir.chmod(0o755)
        for sub in ("state", "spool", "log"):
            (self.dir / sub).mkdir()
        self.net.daemons.add(os.path.realpath(shutil.which("slurmd") or "/usr/sbin/slurmd"))
        self._start_munged()
        self.port = free_port(self.net.bridge_address)
        self._write_conf(cpus)
        self._start_slurmctld()
        for node in self.net.nodes:
            self._start_slurmd(node)
        self.wait_idle()

    def _start_munged(self) -> None:
        munge_dir = self.munge_socket.parent.parent
        self.munge_socket.parent.mkdir(parents=True)
        shutil.copy(MUNGE_KEY, munge_dir / "munge.key")
        user = pwd.getpwnam("munge")
        for path in (munge_dir, self.munge_socket.parent, munge_dir / "munge.key"):
            os.chown(path, user.pw_uid, user.pw_gid)
        munge_dir.chmod(0o711)
        self.munge_socket.parent.chmod(0o755)
        (munge_dir / "munge.key").chmod(0o600)
        self._spawn(
            ["runuser", "-u", "munge", "--", "munged", "-F",
             f"--socket={self.munge_socket}", f"--key-file={munge_dir / 'munge.key'}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'seed'}",
             f"--log-file={munge_dir / 'munged.log'}"],
            "munged",
        )  # fmt: skip
        self._wait(lambda: self.munge_socket.exists(), "munged socket")

    def _write_conf(self, cpus: int) -> None:
        prolog = self.dir / "taskprolog.sh"
        prolog.write_text(
            "#!/bin/sh\n"
            "# Each node's own tools (the GPU stand-in) first on PATH, as SSH sessions have.\n"
            f'echo "export PATH={self.net.dir}/$SLURMD_NODENAME/bin:$PATH"\n'
        )
        prolog.chmod(0o755)
        nodes = "\n".join(
            f"NodeName={node.name} NodeAddr={node.address} CPUs={cpus} RealMemory=1000"
            for node in self.net.nodes
        )
        names = ",".join(self.node_names)
        health_check = self._health_check_lines()
        self.conf.write_text(
            f"""\
ClusterName={self.net.prefix.lower()}
SlurmctldHost=ctl({self.net.bridge_address})
SlurmctldPort={self.port}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool/%n
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd-%n.pid
SlurmctldLogFile={self.dir}/log/slurmctld.log
SlurmdLogFile={self.dir}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog={prolog}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
KillWait=2
MinJobAge=10
InactiveLimit=0
SlurmdTimeout=300
MailProg=/bin/true
{health_check}{nodes}
PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""
        )

    def _health_check_lines(self) -> str:
        """slurm.conf lines running `clusterkit node-check --slurm-drain` from slurmd (with
        this venv's python and the node's own GPU stand-in), or "" without an interval."""
        if self.health_check_interval is None:
            return ""
        wrapper = self.dir / "healthcheck.sh"
        node_dir = f"{self.net.dir}/$node"
        wrapper.write_text(
            "#!/bin/sh\n"
            "# What an admin's HealthCheckProgram would be; each run's report kept per node.\n"
            'node="${SLURMD_NODENAME:-$(hostname -s)}"\n'
            f'export PATH="{node_dir}/bin:/usr/local/bin:/usr/bin:/bin" SLURM_CONF={self.conf}\n'
            f"exec {shlex.quote(sys.executable)} -m clusterkit node-check --slurm-drain"
            f" --python {shlex.quote(sys.executable)}"  # the jobs' Python: this venv has torch
            f' --node-name "$node" --format json --output "{node_dir}/health-check.json"\n'
        )
        wrapper.chmod(0o755)
        return (
            f"HealthCheckProgram={wrapper}\n"
            f"HealthCheckInterval={self.health_check_interval}\n"
            "HealthCheckNodeState=ANY\n"
        )

    def _start_slurmctld(self) -> None:
        self._spawn(
            ["unshare", "--uts", "sh", "-c", 'hostname ctl && exec slurmctld -D -f "$0"',
             str(self.conf)],
            "slurmctld",
        )  # fmt: skip

        def answering() -> bool:
            return self.run(["scontrol", "ping"], check=False, timeout=10).returncode == 0

        self._wait(answering, "slurmctld")

    def _start_slurmd(self, node) -> None:
        (self.dir / "spool" / node.name).mkdir(exist_ok=True)  # kept across a restart
        keep = self.dir / "spool" / f"{node.name}.cgroup"
        keep.mkdir(exist_ok=True)
        # Private UTS (hostname) and mount namespaces: the node's /etc/hosts, and a sysfs of
        # the node's network namespace (as `ip netns exec` gives, so /sys/class/net shows
        # the node's own interfaces) with the machine's /sys/fs/cgroup moved back onto it,
        # which slurmd needs.
        script = (
            'mount --bind "$1" /etc/hosts && mount --rbind /sys/fs/cgroup "$3"'
            ' && mount -t sysfs sysfs /sys && mount --move "$3" /sys/fs/cgroup'
            ' && hostname "$0" && exec slurmd -D -N "$0" -f "$2"'
        )
        self._spawn(
            ["nsenter", f"--net=/var/run/netns/{node.netns}", "unshare", "--uts", "--mount",
             "--propagation", "private", "sh", "-c", script, node.name, str(node.hosts_path),
             str(self.conf), str(keep)],
            f"slurmd-{node.name}",
        )  # fmt: skip

    def restart_slurmd(self, node) -> None:
        """slurmd again on a node whose processes were all killed (a crash, then a boot)."""
        self._daemons = [p for p in self._daemons if p.poll() is None]
        self._start_slurmd(node)

    def _spawn(self, argv: list[str], name: str) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")  # noqa: SIM115 - owned by the child
        with log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=self.env,
            )
        self._daemons.append(process)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            dead = [p for p in self._daemons if p.poll() is not None]
            if dead:
                raise NetClusterError(f"{what}: {shlex.join(dead[0].args)} exited; {self.logs()}")
            if time.monotonic() > deadline:
                raise NetClusterError(f"{what} not ready after {START_TIMEOUT:g} s; {self.logs()}")
            time.sleep(0.05)

    def logs(self, limit: int = 1500) -> str:
        text = ""
        for path in sorted((self.dir / "log").glob("*")):
            with contextlib.suppress(OSError):
                text += f"--- {path.name}\n" + path.read_text(errors="replace")[-limit:]
        return text

    def close(self) -> None:
        """Cancel every job, stop every daemon (and whatever a job left), remove the files."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            for job in self.jobs():
                self.run(["scancel", job], check=False, timeout=10)
        for process in reversed(self._daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)

        def stop(process: subprocess.Popen[bytes]) -> None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

        parallel(stop, self._daemons)
        # slurmstepd and job processes live in the nodes' network namespaces: the
        # NetCluster's own teardown kills what is left there.
        shutil.rmtree(self.dir, ignore_errors=True)
