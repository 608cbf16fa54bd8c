"""What recovering from a lost node costs `clusterkit launch`, beside a bare torchrun restart.

The same checkpointing 3-node gloo job (tests/support/ddp_job.py --checkpoint, a step every
0.25 s) runs on node1..node3 of a 4-node `NetCluster`; once every rank trains (node3's rank
has printed `step 3`), node3 crashes: every process in it is killed, its sshd too. Timed from
that kill until each of the 3 ranks of the new attempt has printed its `start step=` line
(it has joined the new world and loaded the checkpoint); the moment every rank printed its
first line (`joined`) is shown too, as that is where clusterkit's own timing ends:

- **clusterkit**: `clusterkit launch INV --skip bench --nnodes 3 --max-restarts 1 ...` notices
  the lost node, stops every rank, leaves node3 out, takes the spare node4, re-checks the new
  set (probe, static, network) and starts the job again. Its own report's incident gives the
  breakdown from the detection: every rank stopped (stop_s), the new set checked (recheck_s),
  every rank of the new attempt printing (running_s); the detection's own delay is the
  outside `joined` time less running_s.
- **bare**: torchrun started by hand over OpenSSH on node1..node3; at the crash, a script that
  already knows which node died and which spare to use kills the survivors' processes at
  once (straight from this machine, no SSH round trip) and starts torchrun again on node1,
  node2 and node4 on a new port: no detection, no stop to confirm, no re-check. The floor.

The two take turns for --repeat rounds; each run, the medians and the ratio are printed
(reported, no target). Between runs the cluster is reset (node3's sshd started again) and the
crashed node's leftover run folder removed, as its reboot would.
Run as root (namespaces, sshd): python benchmarks/bench_recovery.py [--repeat 3] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import busy_cpu_seconds  # noqa: E402
from tests.support.netcluster import (  # noqa: E402
    SSHD,
    NetCluster,
    Node,
    kill_netns_processes,
    node_python,
    parallel,
    process_exe,
    unavailable_reason,
)

JOB = str(REPO / "tests" / "support" / "ddp_job.py")
WAIT = 300.0  # seconds for any one condition (a torch import on a busy 2-core box is slow)
BARE_PORT = 29600  # the bare runs' master ports; clusterkit's is its own (29500)
START = re.compile(r"start step=(\d+) restart=1\b")
JOINED = re.compile(r"joined rank=")


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


def crash(node: Node) -> float:
    """Every process of the node killed, sshd included, as a power cut would; the moment."""
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
    seconds: float  # crash -> every rank of the new attempt printed `start step=`
    joined: float  # crash -> every rank of it printed its first line (`joined`)
    busy: float  # the machine's busy CPU over those seconds
    incident: dict[str, Any] = field(default_factory=dict)  # clusterkit's own record


def recovered(ranks: dict[str, Started], crashed: float, busy: float) -> Measured:
    """Seconds from the crash to the last rank's start; each rank resumed past step 0."""
    if set(ranks) != {"node1", "node2", "node4"} or any(r.step < 3 for r in ranks.values()):
        raise SystemExit(f"the new attempt is not node1, node2, node4 from a checkpoint: {ranks}")
    return Measured(
        max(rank.started for rank in ranks.values()) - crashed,
        max(rank.joined for rank in ranks.values()) - crashed,
        busy,
    )


# --- clusterkit ------------------------------------------------------------------------------


def clusterkit_run(cluster: NetCluster, inventory: Path, scratch: Path, steps: int) -> Measured:
    report = scratch / "report.json"
    argv = [
        sys.executable, "-m", "clusterkit", "launch", str(inventory), "--skip", "bench",
        "--nnodes", "3", "--max-restarts", "1", "--check-output", str(report),
        "--format", "json", "--", JOB, *job_args(scratch / "clusterkit.pt", steps),
    ]  # fmt: skip
    launch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output = Output()
    output.follow(launch.stdout, "stdout")
    output.follow(launch.stderr, "stderr")
    alive = lambda: launch.poll() is None  # noqa: E731
    try:
        training = re.compile(r"^node3/\d+: step 3 ")
        wait_for("node3 training", lambda: has_line(output, "stdout", training), output, alive)
        busy = busy_cpu_seconds()
        crashed = crash(cluster["node3"])
        found = lambda: ranks_started(output, crashed)  # noqa: E731
        first = wait_for("the new attempt", found, output, alive)
        busy = busy_cpu_seconds() - busy
        measured = recovered(first, crashed, busy)
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
    if incident["fault"] != "node" or incident["hosts"] != ["node3"]:
        raise SystemExit(f"not node3's node fault: {incident}")
    reboot_cleans(run_id(output), 2)
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
    node: Node, rank: int, master: Node, port: int, restart: int, scratch: Path, job: list[str]
) -> subprocess.Popen[bytes]:
    """torchrun on `node` over OpenSSH, as an operator's script starts it."""
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
        node.ssh_argv(shlex.join(command)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def stop_job(node: Node) -> None:
    """Every process of the job on a surviving node killed; its sshd stays."""
    listener = node.sshd.pid if node.sshd else None
    kill_netns_processes(node.netns, keep=lambda pid: pid == listener or process_exe(pid) == SSHD)


def bare_run(cluster: NetCluster, scratch: Path, steps: int, port: int) -> Measured:
    node1, node2, node3, node4 = (cluster[f"node{i}"] for i in range(1, 5))
    job = job_args(scratch / "bare.pt", steps)
    output = Output()
    processes: list[subprocess.Popen[bytes]] = []

    def start(nodes: Sequence[Node], restart: int) -> None:
        for rank, node in enumerate(nodes):
            processes.append(torchrun(node, rank, node1, port + restart, restart, scratch, job))
            output.follow(processes[-1].stdout, f"{node.name}#{restart}")

    alive = lambda: any(p.poll() is None for p in processes)  # noqa: E731
    try:
        start((node1, node2, node3), 0)
        training = re.compile(r"^step 3 ")
        wait_for("node3 training", lambda: has_line(output, "node3#0", training), output, alive)
        busy = busy_cpu_seconds()
        crashed = crash(node3)
        parallel(stop_job, (node1, node2))
        start((node1, node2, node4), 1)  # a new port: no wait for the old
        found = lambda: new_ranks_started(output, crashed)  # noqa: E731
        first = wait_for("the new attempt", found, output, alive)
        busy = busy_cpu_seconds() - busy
        return recovered(first, crashed, busy)
    finally:
        parallel(stop_job, (node1, node2, node3, node4))
        for process in processes:
            try:
                process.wait(timeout=30)
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
    cluster: NetCluster, inventory: Path, scratch: Path, round_: int, steps: int
) -> dict[str, Measured]:
    """Both variants, in turns that swap every round; the cluster healthy after each."""
    variants: dict[str, Callable[[Path], Measured]] = {
        "clusterkit": lambda folder: clusterkit_run(cluster, inventory, folder, steps),
        "bare": lambda folder: bare_run(cluster, folder, steps, BARE_PORT + 2 * round_),
    }
    order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
    measured: dict[str, Measured] = {}
    for name in order:
        folder = scratch / f"{name}-{round_}"
        folder.mkdir()
        measured[name] = variants[name](folder)
        cluster.reset()  # node3's sshd back, nothing left running
        print(f"  {name:<10} run {round_ + 1}: {describe(measured[name])}", flush=True)
    return measured


def describe(run: Measured) -> str:
    words = (
        f"crash -> every rank joined {run.joined:6.2f} s, started {run.seconds:6.2f} s "
        f"(machine busy CPU {run.busy:5.1f} s)"
    )
    if run.incident:
        parts = ", ".join(f"{key} {value:.2f}" for key, value in breakdown(run).items())
        words += f"\n{'':18}incident, seconds: {parts}"
    return words


def breakdown(run: Measured) -> dict[str, float]:
    """clusterkit's incident in seconds: stop, re-check and running count from the detection;
    the detection itself from the crash (the incident's running moment is when the last rank
    printed its first line, its `joined`)."""
    times = {key: float(run.incident[key]) for key in ("stop_s", "recheck_s", "running_s")}
    return {"crash -> detected": run.joined - times["running_s"], **times}


def summary(runs: list[dict[str, Measured]]) -> None:
    ours = [run["clusterkit"] for run in runs]
    bare = [run["bare"] for run in runs]
    print(f"\nmedians over {len(runs)} alternating runs, 3 nodes x 1 gloo rank + 1 spare, "
          "node3 crashed at step 3, seconds from the crash:")  # fmt: skip
    print(f"  {'':38} every rank joined   every rank started")
    for name, measured in (("clusterkit launch --max-restarts 1", ours), ("bare torchrun", bare)):
        joined = statistics.median(m.joined for m in measured)
        started = statistics.median(m.seconds for m in measured)
        print(f"  {name:<38} {joined:17.2f}   {started:18.2f}")
    print("  clusterkit's incident (stop, re-check, running: from the detection):")
    for key in breakdown(ours[0]):
        value = statistics.median(breakdown(m)[key] for m in ours)
        print(f"    {key:<20} {value:6.2f} s")
    ratio = statistics.median(m.seconds for m in ours) / statistics.median(m.seconds for m in bare)
    print(f"clusterkit / bare (every rank started) = {ratio:5.2f}x (reported, no target)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="the job's steps (0.25 s each)")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"needs the namespace cluster: {reason}")
    runs: list[dict[str, Measured]] = []
    with NetCluster(4) as cluster, tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        inventory = cluster.inventory(scratch / "inventory.yaml")
        for round_ in range(args.repeat):
            runs.append(one_round(cluster, inventory, scratch, round_, args.steps))
    summary(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
