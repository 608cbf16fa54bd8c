"""What recovering from a lost node costs `clusterkit launch`, beside a bare torchrun restart.

The same checkpointing 3-node gloo job (tests/support/ddp_job.py --checkpoint, a step every
0.25 s) runs on node1..node3 of a 4-node `NetCluster`; once every rank trains (the victim's
rank has printed `step 3`), one of three faults strikes:

- **worker crash**: every process of node3 is killed, its sshd too (a power cut);
- **master crash**: the same on node1, the master: the next attempt needs a new master;
- **partition**: node3's own firewall drops every packet in and out (iptables DROP, as a
  switch port gone would): its processes run on and its connection neither ends nor answers.

Timed from the fault until each of the 3 ranks of the new attempt (the survivors and the
spare node4) has printed its `start step=` line (it has joined the new world and loaded the
checkpoint); the moment every rank printed its first line (`joined`) is shown too, as that is
where clusterkit's own timing ends:

- **clusterkit**: `clusterkit launch INV --skip bench --nnodes 3 --max-restarts 1 ...` with
  default flags notices the lost node, stops every rank, leaves the node out, takes the spare
  node4, re-checks the new set (probe, static, network) and starts the job again. Its report's
  incident gives the breakdown from the fault's onset (the lost node's last sign of life):
  detected (detect_s), every rank stopped (stop_s), the new set checked (recheck_s), every
  rank of the new attempt printing (running_s).
- **bare**: torchrun started by hand over OpenSSH on node1..node3; at the fault, a script that
  already knows which node died and which spare to use kills the survivors' processes at
  once (straight from this machine, no SSH round trip) and starts torchrun again on the
  survivors and node4 (the first of them the master) on a new port: no detection, no stop to
  confirm, no re-check. The floor.

The two take turns for --repeat rounds per fault; the medians and the ratio are printed with
issue 35's targets (detected within 15 s and stopped within 5 s more; a partition back to
training under 30 s; a crash within 5 s of the bare restart). Between runs the cluster is
reset (sshd started again, firewalls flushed) and the lost node's leftover run folder removed,
as its reboot would.

With --slurm the same faults strike the same job inside a Slurm allocation of the 4 nodes
(tests/support/slurmcluster.py: a real slurmctld, a slurmd per node): clusterkit runs
`launch --slurm` from this machine as a shell inside the allocation would (its node processes
are srun steps), and the bare restart starts torchrun with one `srun --overlap -w NODE` step
per node instead of ssh. A crash kills the node's slurmd with the rest (it is started again
afterwards, as the node's boot would); each run gets an allocation of its own.
Run as root (namespaces, sshd, slurmd):
python benchmarks/bench_recovery.py [--repeat 3] [--steps 40] [--faults worker,master,partition]
    [--slurm]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import busy_cpu_seconds  # noqa: E402
from tests.support.netcluster import (  # noqa: E402
    SSHD,
    NetCluster,
    NetClusterError,
    Node,
    kill_netns_processes,
    node_python,
    parallel,
    pids_in_netns,
    process_exe,
    read_process,
    unavailable_reason,
)
from tests.support.slurmcluster import SlurmCluster  # noqa: E402
from tests.support.slurmcluster import unavailable_reason as slurm_unavailable  # noqa: E402

JOB = str(REPO / "tests" / "support" / "ddp_job.py")
RUN = "torch.distributed.run"
WAIT = 300.0  # seconds for any one condition (a torch import on a busy 2-core box is slow)
BARE_PORT = 29600  # the bare runs' master ports; clusterkit's is its own (29500)
START = re.compile(r"start step=(\d+) restart=1\b")
JOINED = re.compile(r"joined rank=")


@dataclass
class Site:
    """Where the job runs: over SSH with the inventory, or with `slurm` inside an allocation
    of the 4 nodes (held for one run at a time), its steps started with srun."""

    cluster: NetCluster
    inventory: Path
    slurm: SlurmCluster | None = None
    allocation: str = ""  # the job id of the run's allocation, under Slurm

    def launch_args(self, scratch: Path) -> list[str]:
        """What names the nodes to `clusterkit launch`: the inventory, or the allocation."""
        if self.slurm is None:
            return [str(self.inventory)]
        settings = scratch / "clusterkit.yaml"
        settings.write_text(json.dumps({"clusterkit": {"interface": "eth0"}}))
        return ["--slurm", "--settings", str(settings)]

    def env(self) -> dict[str, str] | None:
        """A shell's environment inside the allocation (as salloc gives), or None: ours."""
        if self.slurm is None:
            return None
        venv = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": f"{venv}:{os.environ['PATH']}",
                "SLURM_CONF": str(self.slurm.conf), "SLURM_JOB_ID": self.allocation,
                "SLURM_JOB_NODELIST": "node[1-4]"}  # fmt: skip

    def remote(self, node: Node, command: list[str]) -> list[str]:
        """`command` on `node`, as an operator's script starts it: ssh, or an srun step."""
        if self.slurm is None:
            return node.ssh_argv(shlex.join(command))
        return ["srun", "--jobid", self.allocation, "-N1", "-n1", "-w", node.name,
                "--overlap", "--quiet", *command]  # fmt: skip

    def boot(self, node: Node) -> None:
        """slurmd again on a crashed node, waited for until it runs: the reset that follows
        kills whatever else runs there, a slurmd still starting (its mounts) included."""
        assert self.slurm is not None
        self.slurm.restart_slurmd(node)
        slurmd = os.path.realpath(shutil.which("slurmd") or "/usr/sbin/slurmd")

        def up() -> bool:
            return any(process_exe(pid) == slurmd for pid in pids_in_netns(node.netns))

        end = time.monotonic() + 30.0
        while not up():
            if time.monotonic() > end:
                raise SystemExit(f"slurmd did not start again on {node.name}")
            time.sleep(0.05)

    @contextlib.contextmanager
    def session(self, fault: Fault) -> Iterator[None]:
        """One run; afterwards the cluster healthy again: the victim booted (sshd, slurmd),
        firewalls flushed, nothing left running, and under Slurm no job, every node idle."""
        try:
            if self.slurm is None:
                yield
            else:
                with self.slurm.allocation(4) as job:
                    self.allocation = job
                    yield
        finally:
            if self.slurm is None:
                self.cluster.reset()
            else:
                if not fault.partition:
                    self.boot(self.cluster[fault.victim])
                try:
                    self.slurm.reset()
                except NetClusterError:  # the booted node's job still completing: more time
                    self.slurm.wait_idle(timeout=WAIT)


@dataclass
class Output:
    """The lines of running processes, each stamped with when it arrived and whose it is."""

    lines: list[tuple[float, str, str]] = field(default_factory=list)  # (monotonic, who, text)
    readers: list[threading.Thread] = field(default_factory=list)

    def follow(self, stream: IO[bytes] | None, who: str) -> None:
        reader = threading.Thread(target=self._read, args=(stream, who), daemon=True)
        reader.start()
        self.readers.append(reader)

    def _read(self, stream: IO[bytes] | None, who: str) -> None:
        for raw in stream or ():
            self.lines.append((time.monotonic(), who, raw.decode(errors="replace").rstrip("\n")))

    def tail(self, count: int = 40) -> str:
        return "\n".join(f"{who}: {text}" for _, who, text in self.lines[-count:])


def wait_for(what: str, found: Callable[[], Any], output: Output, alive: Callable[[], bool]) -> Any:
    """found()'s first true answer, polled until WAIT runs out or nothing can come anymore."""
    end = time.monotonic() + WAIT
    while time.monotonic() < end:
        answer = found()
        if answer:
            return answer
        if not alive() and not any(reader.is_alive() for reader in output.readers):
            break
        time.sleep(0.05)
    raise SystemExit(f"waited in vain for {what}:\n{output.tail()}")


@dataclass(frozen=True)
class Fault:
    """One fault of the benchmark: which node, and how it goes away."""

    name: str
    victim: str  # node1 (the master) or node3
    partition: bool = False  # cut off the network rather than crashed

    @property
    def node_rank(self) -> int:
        return int(self.victim[-1]) - 1

    @property
    def survivors(self) -> list[str]:
        return [name for name in ("node1", "node2", "node3") if name != self.victim]

    @property
    def next_set(self) -> list[str]:
        """The next attempt's nodes in inventory order: the survivors and the spare."""
        return [*self.survivors, "node4"]


FAULTS = {
    "worker": Fault("worker crash", "node3"),
    "master": Fault("master crash", "node1"),
    "partition": Fault("partition", "node3", partition=True),
}


def strike(node: Node, fault: Fault) -> float:
    """The fault, injected; the moment. A crash kills every process of the node, sshd
    included, as a power cut would; a partition drops every packet in and out of it."""
    if fault.partition:
        for chain in ("INPUT", "OUTPUT"):
            node.iptables("-I", chain, "-j", "DROP")
    else:
        kill_netns_processes(node.netns)
    return time.monotonic()


@dataclass
class Started:
    """One rank of the new attempt: when it joined the world, when it started training."""

    joined: float = 0.0
    started: float = 0.0
    step: int = -1  # the step it resumed from


def resumed(
    output: Output, since: float, who_of: Callable[[str, str], str | None]
) -> dict[str, Started]:
    """Per host, its rank of the new attempt: every line of it seen since `since`."""
    ranks: dict[str, Started] = {}
    for at, who, text in list(output.lines):
        host = who_of(who, text)
        joined, match = JOINED.search(text), START.search(text)
        if at < since or not host or not (joined or match):
            continue
        rank = ranks.setdefault(host, Started())
        if joined and not rank.joined:
            rank.joined = at
        if match and not rank.started:
            rank.started, rank.step = at, int(match[1])
    return ranks


def all_started(ranks: dict[str, Started]) -> dict[str, Started] | None:
    return ranks if sum(1 for rank in ranks.values() if rank.started) >= 3 else None


@dataclass
class Measured:
    seconds: float  # fault -> every rank of the new attempt printed `start step=`
    joined: float  # fault -> every rank of it printed its first line (`joined`)
    busy: float  # the machine's busy CPU over those seconds
    incident: dict[str, Any] = field(default_factory=dict)  # clusterkit's own record


def recovered(ranks: dict[str, Started], fault: Fault, struck: float, busy: float) -> Measured:
    """Seconds from the fault to the last rank's start; each rank resumed past step 0."""
    if set(ranks) != set(fault.next_set) or any(r.step < 3 for r in ranks.values()):
        raise SystemExit(f"the new attempt is not {fault.next_set} from a checkpoint: {ranks}")
    return Measured(
        max(rank.started for rank in ranks.values()) - struck,
        max(rank.joined for rank in ranks.values()) - struck,
        busy,
    )


# --- clusterkit ------------------------------------------------------------------------------


def clusterkit_run(site: Site, scratch: Path, steps: int, fault: Fault) -> Measured:
    report = scratch / "report.json"
    argv = [
        sys.executable, "-m", "clusterkit", "launch", *site.launch_args(scratch), "--skip",
        "bench", "--nnodes", "3", "--max-restarts", "1", "--check-output", str(report),
        "--format", "json", "--", JOB, *job_args(scratch / "clusterkit.pt", steps),
    ]  # fmt: skip
    launch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=site.env())
    output = Output()
    output.follow(launch.stdout, "stdout")
    output.follow(launch.stderr, "stderr")
    alive = lambda: launch.poll() is None  # noqa: E731
    try:
        training = re.compile(rf"^{fault.victim}/\d+: step 3 ")
        wait_for("the victim training", lambda: has_line(output, "stdout", training), output, alive)
        busy = busy_cpu_seconds()
        struck = strike(site.cluster[fault.victim], fault)
        found = lambda: ranks_started(output, struck)  # noqa: E731
        first = wait_for("the new attempt", found, output, alive)
        busy = busy_cpu_seconds() - busy
        measured = recovered(first, fault, struck, busy)
        code = launch.wait(timeout=WAIT)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    for reader in output.readers:
        reader.join(10)
    if code != 0:
        raise SystemExit(f"clusterkit launch exited {code}:\n{output.tail()}")
    record = json.loads(report.read_text())["details"]["launch"]
    (incident,) = record["incidents"]
    if incident["fault"] != "node" or incident["hosts"] != [fault.victim]:
        raise SystemExit(f"not {fault.victim}'s node fault: {incident}")
    reboot_cleans(run_id(output), fault.node_rank)
    measured.incident = incident
    return measured


def has_line(output: Output, who: str, pattern: re.Pattern[str]) -> bool:
    return any(w == who and pattern.search(text) for _, w, text in list(output.lines))


def ranks_started(output: Output, since: float) -> dict[str, Started] | None:
    def host_of(who: str, text: str) -> str | None:
        match = re.match(r"(node\d)/\d+: ", text)
        return match[1] if who == "stdout" and match else None

    return all_started(resumed(output, since, host_of))


def run_id(output: Output) -> str:
    for _, who, text in output.lines:
        found = re.search(r"launching run ([0-9a-f]+) on", text)
        if who == "stderr" and found:
            return found[1]
    raise SystemExit("no run id in clusterkit's output:\n" + output.tail())


def reboot_cleans(run: str, node_rank: int) -> None:
    """What the crashed node's reboot does to its /tmp: its run folder goes (nobody could
    reach the node to remove it; the nodes here share this machine's /tmp)."""
    for folder in Path("/tmp").glob(f"clusterkit-launch-{run}-n{node_rank}.*"):
        shutil.rmtree(folder, ignore_errors=True)


# --- bare torchrun -----------------------------------------------------------------------------


def job_args(checkpoint: Path, steps: int) -> list[str]:
    return ["--steps", str(steps), "--step-seconds", "0.25", "--checkpoint", str(checkpoint)]


def torchrun(
    site: Site,
    node: Node,
    rank: int,
    master: Node,
    port: int,
    restart: int,
    scratch: Path,
    job: list[str],
) -> subprocess.Popen[bytes]:
    """torchrun on `node` over OpenSSH or srun, as an operator's script starts it."""
    env = {"GLOO_SOCKET_IFNAME": node.interface, "PYTHONUNBUFFERED": "1",
           "CLUSTERKIT_RESTART": str(restart)}  # fmt: skip
    command = [
        "env", *(f"{name}={value}" for name, value in env.items()),
        node_python(), "-m", "torch.distributed.run", "--nnodes", "3", "--node-rank", str(rank),
        "--nproc-per-node", "1", "--master-addr", master.address, "--master-port", str(port),
        "--max-restarts", "0", "--log-dir", str(scratch / f"torchrun-{restart}-{node.name}"),
        JOB, *job,
    ]  # fmt: skip
    return subprocess.Popen(
        site.remote(node, command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=site.env(),
    )


def stop_job(node: Node, only_job: bool = False) -> None:
    """Every process of the job on a surviving node killed; its sshd stays, and with
    `only_job` (under Slurm) every process that is not torchrun or a rank (slurmd, the
    allocation's own steps; the job's step ends with its torchrun)."""
    listener = node.sshd.pid if node.sshd else None

    def keep(pid: int) -> bool:
        if pid == listener or process_exe(pid) == SSHD:
            return True
        found = read_process(pid) if only_job else None
        return found is not None and not any(JOB in arg or RUN in arg for arg in found.argv)

    kill_netns_processes(node.netns, keep=keep)


def bare_run(site: Site, scratch: Path, steps: int, port: int, fault: Fault) -> Measured:
    nodes = {name: site.cluster[name] for name in ("node1", "node2", "node3", "node4")}
    job = job_args(scratch / "bare.pt", steps)
    output = Output()
    processes: list[subprocess.Popen[bytes]] = []

    def start(names: Sequence[str], restart: int) -> None:
        master = nodes[names[0]]
        for rank, name in enumerate(names):
            node = nodes[name]
            process = torchrun(site, node, rank, master, port + restart, restart, scratch, job)
            processes.append(process)
            output.follow(processes[-1].stdout, f"{node.name}#{restart}")

    alive = lambda: any(p.poll() is None for p in processes)  # noqa: E731
    stop = lambda node: stop_job(node, only_job=site.slurm is not None)  # noqa: E731
    try:
        start(("node1", "node2", "node3"), 0)
        training = re.compile(r"^step 3 ")
        victim = f"{fault.victim}#0"
        wait_for("the victim training", lambda: has_line(output, victim, training), output, alive)
        busy = busy_cpu_seconds()
        struck = strike(nodes[fault.victim], fault)
        parallel(stop, [nodes[name] for name in fault.survivors])
        start(fault.next_set, 1)  # a new port: no wait for the old
        found = lambda: new_ranks_started(output, struck)  # noqa: E731
        first = wait_for("the new attempt", found, output, alive)
        busy = busy_cpu_seconds() - busy
        return recovered(first, fault, struck, busy)
    finally:
        parallel(stop, list(nodes.values()))
        for process in processes:
            try:  # a partitioned node's session never ends by itself, nor a dead step's srun
                process.wait(timeout=10 if fault.partition or site.slurm else 30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def new_ranks_started(output: Output, since: float) -> dict[str, Started] | None:
    def host_of(who: str, text: str) -> str | None:
        name, _, restart = who.partition("#")
        return name if restart == "1" else None

    return all_started(resumed(output, since, host_of))


# --- the benchmark -----------------------------------------------------------------------------


def one_round(
    site: Site, scratch: Path, round_: int, steps: int, fault: Fault
) -> dict[str, Measured]:
    """Both variants, in turns that swap every round; the cluster healthy after each."""
    offset = 2 * (round_ + 10 * list(FAULTS.values()).index(fault))
    variants: dict[str, Callable[[Path], Measured]] = {
        "clusterkit": lambda folder: clusterkit_run(site, folder, steps, fault),
        "bare": lambda folder: bare_run(site, folder, steps, BARE_PORT + offset, fault),
    }
    order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
    measured: dict[str, Measured] = {}
    for name in order:
        folder = scratch / f"{fault.victim}-{fault.partition:d}-{name}-{round_}"
        folder.mkdir()
        with site.session(fault):
            measured[name] = variants[name](folder)
        print(f"  {name:<10} run {round_ + 1}: {describe(measured[name])} "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    return measured


def describe(run: Measured) -> str:
    words = (
        f"fault -> every rank joined {run.joined:6.2f} s, started {run.seconds:6.2f} s "
        f"(machine busy CPU {run.busy:5.1f} s)"
    )
    if run.incident:
        parts = ", ".join(f"{key} {value:.2f}" for key, value in breakdown(run).items())
        words += f"\n{'':18}incident, seconds: {parts}"
        words += f"\n{'':18}reason: {str(run.incident.get('reason'))[:200]}"
    return words


def breakdown(run: Measured) -> dict[str, float]:
    """clusterkit's incident, each step in seconds: from the lost node's last sign of life to
    the detection, the stop, the re-check and the start of every rank; then what it reported
    as the outage (running_s, from that last sign of life) beside the outage measured here
    from the fault to every rank joined (the moment the incident's running ends)."""
    record = run.incident
    detect, stop = float(record["detect_s"]), float(record["stop_s"])
    recheck, running = float(record["recheck_s"]), float(record["running_s"])
    return {
        "detect": detect,
        "stop": stop - detect,
        "re-check": recheck - stop,
        "start": running - recheck,
        "reported running_s": running,
        "measured": run.joined,
    }


def summary(fault: Fault, runs: list[dict[str, Measured]]) -> None:
    ours = [run["clusterkit"] for run in runs]
    bare = [run["bare"] for run in runs]
    print(f"\n{fault.name}: medians over {len(runs)} alternating runs, 3 nodes x 1 gloo rank "
          f"+ 1 spare, {fault.victim} struck at step 3, seconds from the fault:")  # fmt: skip
    print(f"  {'':38} every rank joined   every rank started")
    for name, measured in (("clusterkit launch --max-restarts 1", ours), ("bare torchrun", bare)):
        joined = statistics.median(m.joined for m in measured)
        started = statistics.median(m.seconds for m in measured)
        print(f"  {name:<38} {joined:17.2f}   {started:18.2f}")
    print("  clusterkit's incident (each step; the outage it reported beside the one measured):")
    steps = {key: statistics.median(breakdown(m)[key] for m in ours) for key in breakdown(ours[0])}
    for key, value in steps.items():
        print(f"    {key:<20} {value:6.2f} s")
    mine = statistics.median(m.seconds for m in ours)
    floor = statistics.median(m.seconds for m in bare)
    print(f"  clusterkit / bare (every rank started) = {mine / floor:5.2f}x, "
          f"{mine - floor:+.2f} s")  # fmt: skip
    print("  targets: " + "; ".join(verdicts(fault, steps, mine, floor)))


def verdicts(fault: Fault, steps: dict[str, float], mine: float, floor: float) -> list[str]:
    """Issue 35's targets for this fault, each met or missed."""

    def judged(words: str, held: bool) -> str:
        return f"{words} {'met' if held else 'MISSED'}"

    found = [judged(f"stop {steps['stop']:.1f} s <= 5 s", steps["stop"] <= 5.0)]
    if fault.partition:
        found.insert(0, judged(f"detected {steps['detect']:.1f} s <= 15 s", steps["detect"] <= 15))
        found.append(judged(f"fault to training {mine:.1f} s < 30 s", mine < 30.0))
    else:
        found.append(judged(f"{mine - floor:+.1f} s of the bare restart <= 5 s", mine - floor <= 5))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="the job's steps (0.25 s each)")
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help="which faults, comma-separated: "
        + ", ".join(FAULTS) + " (default: all)",
    )  # fmt: skip
    parser.add_argument("--slurm", action="store_true", help="inside a Slurm allocation (srun)")
    args = parser.parse_args()
    chosen = [FAULTS[name] for name in args.faults.split(",") if name]
    reason = unavailable_reason() or (slurm_unavailable() if args.slurm else None)
    if reason:
        raise SystemExit(f"needs the namespace cluster{' and Slurm' * args.slurm}: {reason}")
    results: list[tuple[Fault, list[dict[str, Measured]]]] = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(NetCluster(4))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        slurm = stack.enter_context(SlurmCluster(cluster)) if args.slurm else None
        site = Site(cluster, cluster.inventory(scratch / "inventory.yaml"), slurm)
        for fault in chosen:
            print(f"{fault.name}{' under Slurm' * args.slurm}:", flush=True)
            runs = [
                one_round(site, scratch, round_, args.steps, fault) for round_ in range(args.repeat)
            ]
            results.append((fault, runs))
    for fault, runs in results:
        summary(fault, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
