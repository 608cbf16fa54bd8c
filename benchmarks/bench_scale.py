"""clusterkit at 32, 128 and 256 namespace nodes, every node on the same CPU slice at every size.

Each node's sshd (and so every session it starts) runs in a cgroup of its own with the same
CFS quota at every size (tests/support/cpushares.py), as on a real cluster where every node
brings its own CPUs: what grows with the node count is then the control side's work. Per size,
`--runs` rounds, the tools taking turns within a round, medians compared:

(a) `check --skip network,bench,image` against
      ssh true     N parallel `ssh root@ADDR true`, curve25519-sha256 (paramiko's key
                   exchange; OpenSSH's default post-quantum one costs 8x the CPU, see
                   bench_check.py): the least any SSH-based check costs;
      clush        ClusterShell `clush -f N true` with the same key, known_hosts and key exchange;
      ssh python   N parallel `ssh root@ADDR python -S -c pass`, the nodes' interpreter started
                   and nothing run: the least any check whose node side is Python costs;
      ssh probe    N parallel OpenSSH clients each running clusterkit's own probe on its node:
                   the same node work as the check, so check / this is the control side's cost.
    Target (largest size): check within 1.25x of the faster of ssh true and clush. Each run
    also counts the CPU every node spent (its sshd and all it started: the slices' cgroups).
(b) the network stage (`check --skip bench,image --mesh MODE`, the stage's own seconds from
    the JSON report) with --mesh auto and --mesh full; target: auto at the largest size at most
    2x the smallest. Where this clusterkit has no --mesh, full is what it runs (auto: n/a).
    The master is the one node whose work grows with the node count: every node connects to
    its two rendezvous ports and its mesh port (about 4N handshakes, 0.3 ms of CPU each). On
    the nodes' slice (0.006 of a core at 256 nodes) that is a minute of its time, which a real
    node's cores do in a fraction of a second: the master gets --master-cpu (0.1 of a core) at
    every size, the others the common slice, and every connect gets `network.connect_timeout`
    30 s at every size (--mesh-connect-timeout) rather than the 3 s meant for real nodes.
(c) the check process's peak RSS (its own VmHWM, written as it exits: wait4's ru_maxrss
    would count this script's memory, which the child shares until it execs), threads and
    open descriptors (sampled from /proc every 50 ms), with and without the network stage;
    target under 400 MB.
(d) benchmarks/bench_slow_node.py, when it exists, run as it is.
(e) with --slurm N: the control side's cost per host over Slurm's tree instead of SSH, the
    path past one machine's SSH fan-out: `check --slurm --transport srun` against
    `--transport ssh` on N nodes of a real Slurm (tests/support/slurmcluster.py) holding one
    allocation; control-side CPU, peak RSS, threads and descriptors of each. No CPU slices
    here (slurmd is not confined): read the control side's figures, not the wall times.

Every figure is printed with the machine's load average. The exit status is 0 when every
target is met, 1 when one is missed, 2 when the cluster cannot be built here.

    python benchmarks/bench_scale.py [--sizes 32 128 256] [--runs 3] [--node-cpu FRACTION]
        [--forks N ...] [--skip-slow-node] [--slurm N]
"""

from __future__ import annotations

import argparse
import json
import os
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import CpuShares, busy_cpu_seconds  # noqa: E402
from clusterkit.probe.runner import COLLECTOR  # noqa: E402
from clusterkit.transport.nodescript import node_script, shipment  # noqa: E402
from tests.support.netcluster import (  # noqa: E402
    NetCluster,
    node_python,
    pids_in_netns,
    unavailable_reason,
)

CHECK_TARGET = 1.25  # check / the faster of ssh true and clush, at most
NETWORK_TARGET = 2.0  # network stage (auto), largest / smallest size, at most
MEMORY_TARGET_MB = 400.0  # the check process's peak RSS at the largest size, under
RUN_TIMEOUT = 600.0
KEX = "curve25519-sha256"
# Runs clusterkit as `python -m clusterkit` does and, as it exits, writes its peak RSS (kB)
# to the file named first.
PEAK_RSS = (
    "import atexit, runpy, sys\n"
    "path = sys.argv.pop(1)\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            open(path, 'w').write(line.split()[1])\n"
    "atexit.register(peak)\n"
    "runpy.run_module('clusterkit', run_name='__main__', alter_sys=True)\n"
)
NODES_PER_SUBNET = 64  # rack-sized subnets: 32 nodes on one, 256 on four


@dataclass
class Run:
    """One timed run: wall seconds, control-side CPU (the process and its waited-for
    children), peak RSS, and, for clusterkit, its peak threads and descriptors."""

    seconds: float
    cpu: float
    rss_mb: float
    machine_cpu: float
    load: float
    threads: int = 0
    fds: int = 0
    stage_seconds: float | None = None
    node_ms: float | None = None  # CPU each node spent on it (its sshd and all it started)
    problems: list[str] = field(default_factory=list)  # failed findings, unreachable hosts
    note: str = ""


@dataclass
class Series:
    runs: list[Run] = field(default_factory=list)

    def median(self, attribute: str = "seconds") -> float:
        """Over the runs that passed (all runs when none did: the cell is marked)."""
        passed = [run for run in self.runs if not run.problems] or self.runs
        values = [getattr(run, attribute) for run in passed]
        return statistics.median(v for v in values if v is not None)

    def peak(self, attribute: str) -> float:
        return max(getattr(run, attribute) for run in self.runs)


def load_average() -> float:
    return os.getloadavg()[0]


class Sampler:
    """Peak threads and open descriptors of one process, read from /proc while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.threads, self.fds = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
                fds = len(os.listdir(f"/proc/{self.pid}/fd"))
            except OSError:
                return
            threads = next(
                int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")
            )
            self.threads, self.fds = max(self.threads, threads), max(self.fds, fds)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_processes(
    argvs: Sequence[Sequence[str]],
    *,
    sample: bool = False,
    stdin: bytes = b"",
    stdout: Path | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Start every argv at once and wait for all; their summed CPU and largest RSS come from
    wait4, so a tool's own children (clush's ssh clients) are counted with it."""
    started, busy, load = time.perf_counter(), busy_cpu_seconds(), load_average()
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    procs = []
    try:
        for argv in argvs:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=out, stderr=subprocess.PIPE if not stdout else None, env=env,
            )  # fmt: skip
            procs.append(proc)
        sampler = Sampler(procs[0].pid) if sample else None
        if stdin:
            for proc in procs:
                threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
        killer = threading.Timer(RUN_TIMEOUT, lambda: [p.kill() for p in procs])
        killer.start()
        cpu, rss, codes = 0.0, 0, []
        try:
            for proc in procs:
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                codes.append(proc.returncode)
                cpu += usage.ru_utime + usage.ru_stime
                rss = max(rss, usage.ru_maxrss)
        finally:
            killer.cancel()
            if sampler:
                sampler.stop()
    finally:
        if stdout:
            out.close()  # type: ignore[union-attr]
    seconds = time.perf_counter() - started
    if not stdout and any(codes):  # with stdout (a check), the caller reads its report
        errors = [p.stderr.read().decode(errors="replace")[-500:] for p in procs if p.stderr]
        raise SystemExit(f"{argvs[0][0]}: exit codes {sorted(set(codes))}: {errors[:3]}")
    return Run(
        seconds, cpu, rss / 1024, busy_cpu_seconds() - busy, load,
        sampler.threads if sampler else 0, sampler.fds if sampler else 0,
    )  # fmt: skip


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:
        pass


class Bench:
    """The tools, as command lines over one cluster."""

    def __init__(
        self, cluster: NetCluster, scratch: Path, mesh: bool, connect_timeout: float
    ) -> None:
        self.cluster, self.scratch, self.mesh = cluster, scratch, mesh
        self.inventory = cluster.inventory(
            scratch / "inventory.yaml",
            clusterkit={"network": {"connect_timeout": connect_timeout}},
        )
        self.ssh_options = [
            "-F", "/dev/null", "-i", str(cluster.key_path),
            "-o", f"UserKnownHostsFile={cluster.known_hosts_path}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=60", "-o", f"KexAlgorithms={KEX}",
        ]  # fmt: skip

    def ssh(self, *command: str) -> list[list[str]]:
        return [
            ["ssh", *self.ssh_options, f"root@{node.address}", *command] for node in self.cluster
        ]

    def ssh_true(self) -> Run:
        return run_processes(self.ssh("true"))

    def ssh_python(self) -> Run:
        """N parallel `ssh ADDR python -S -c pass` with the nodes' interpreter: the least any
        check whose node side is Python costs."""
        return run_processes(self.ssh(shlex.join([node_python(), "-S", "-c", "pass"])))

    def ssh_probe(self) -> Run:
        """OpenSSH running clusterkit's probe on every node, started as clusterkit starts it
        (the check's node work)."""
        script = node_script(COLLECTOR).encode()
        argv, stdin = shipment(node_python(), script, ["{}"])
        return run_processes(self.ssh(shlex.join(argv)), stdin=stdin)

    def clush(self) -> Run:
        nodes = ",".join(node.address for node in self.cluster)
        fanout = str(len(self.cluster))
        options = shlex.join(self.ssh_options)
        argv = ["clush", "-w", nodes, "-f", fanout, "-l", "root", "-o", options, "-S", "true"]
        return run_processes([argv])

    def check(self, *extra: str) -> tuple[Run, dict[str, Any]]:
        """One check; a run that did not pass is kept, with its failed findings: on a CPU
        slice this small a node's own tool bounds (nvidia-smi 12 s) can run out when the
        machine is busy, which says nothing about the control side."""
        report_path = self.scratch / "report.json"
        # The nodes' CPU slices make a handshake take seconds and a probe a minute: the same
        # 60 s the OpenSSH clients get to connect (clusterkit's bound covers the whole
        # handshake, ssh's only the TCP part), and the probe bounded no tighter than theirs.
        peak = self.scratch / "peak-rss"
        argv = [sys.executable, "-c", PEAK_RSS, str(peak), "check", str(self.inventory),
                "--format", "json", "--connect-timeout", "60", "--timeout", "600",
                *extra]  # fmt: skip
        run = run_processes([argv], sample=True, stdout=report_path)
        run.rss_mb = int(peak.read_text()) / 1024
        try:
            report = json.loads(report_path.read_text())
        except ValueError:
            raise SystemExit(f"check {' '.join(extra)} wrote no report") from None
        unreachable = [name for name, host in report["hosts"].items() if not host["reachable"]]
        bad = [f"{f['id']}: {f['message']}" for f in report["findings"]
               if f["status"] in ("fail", "error")]  # fmt: skip
        run.problems = [f"unreachable: {name}" for name in unreachable]
        run.problems += [line[:160] for line in bad]
        return run, report

    def static(self, forks: int | None) -> Run:
        extra = ["--forks", str(forks)] if forks else []
        return self.check("--skip", "network,bench,image", *extra)[0]

    def network(self, mode: str | None) -> Run:
        """The stage in a check, with its own seconds and rounds from the JSON details."""
        extra = ["--mesh", mode] if mode and self.mesh else []
        run, report = self.check("--skip", "bench,image", *extra)
        details = report["details"]["network"]
        run.stage_seconds = details["seconds"]["total"]
        rounds = (details.get("mesh") or {}).get("rounds") or details.get("rounds") or []
        run.note = f"facts {details['seconds'].get('facts')} s; rounds " + ", ".join(
            f"{r.get('pairs')} pairs {r.get('seconds')} s (go spread {r.get('go_spread')} s)"
            for r in rounds
        )
        return run


def has_mesh_option() -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "clusterkit", "check", "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return "--mesh" in done.stdout


def measure_size(
    size: int,
    runs: int,
    fraction: float,
    forks: Sequence[int],
    mesh: bool,
    only: Sequence[str] = (),
    connect_timeout: float = 30.0,
    master_cpu: float | None = None,
) -> dict[str, Series]:
    """Every tool `runs` times over one cluster of `size` nodes, taking turns."""
    subnets = max(1, size // NODES_PER_SUBNET)
    started = time.monotonic()
    tools: dict[str, Callable[[Bench], Run]] = {
        "ssh true": Bench.ssh_true,
        "clush": Bench.clush,
        "ssh python": Bench.ssh_python,
        "ssh probe": Bench.ssh_probe,
        "check": lambda bench: bench.static(None),
        **{f"check -f {n}": (lambda bench, n=n: bench.static(n)) for n in forks},
        "network full": lambda bench: bench.network("full"),
    }
    if mesh:
        tools["network auto"] = lambda bench: bench.network("auto")
    if only:
        tools = {name: tool for name, tool in tools.items() if name in only}
    series = {name: Series() for name in tools}
    with (
        NetCluster(size, subnets=subnets) as cluster,
        CpuShares(fraction) as shares,
        tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch,
    ):
        for node in cluster:  # sshd now; every session it starts later inherits the slice
            master = node is cluster.nodes[0]  # node1: the master
            own = max(master_cpu, fraction) if master and master_cpu else None
            shares.confine(node.name, pids_in_netns(node.netns), own)
        print(
            f"{size} nodes on {subnets} subnet(s), built in {time.monotonic() - started:.0f} s, "
            f"each node {fraction:.4f} of a core, the master {max(master_cpu or 0, fraction):.4f}",
            flush=True,
        )
        bench = Bench(cluster, Path(scratch), mesh, connect_timeout)
        for round_ in range(1, runs + 1):
            for name, tool in tools.items():
                used = shares.used_seconds()
                run = tool(bench)
                if used is not None:
                    run.node_ms = ((shares.used_seconds() or used) - used) / size * 1000
                series[name].runs.append(run)
                print(f"  {size:>4} {name:14} run {round_}: {describe(run)}", flush=True)
    return series


def describe(run: Run) -> str:
    text = f"{run.seconds:6.2f} s  control CPU {run.cpu:6.2f} s"
    if run.stage_seconds is not None:
        text += f"  stage {run.stage_seconds:6.2f} s"
    if run.node_ms is not None:
        text += f"  nodes {run.node_ms:5.1f} ms CPU each"
    if run.threads:
        text += f"  peak {run.rss_mb:5.0f} MB {run.threads:4} threads {run.fds:5} fds"
    cores = os.cpu_count() or 1
    busy = run.machine_cpu / run.seconds
    text += f"  (machine {busy:.1f} of {cores} cores busy, load {run.load:.1f})"
    if run.note:
        text += f"\n      {run.note}"
    if run.problems:
        text += f"\n      FAILED: {len(run.problems)} failed findings: {run.problems[0]}..."
    return text


def summary(results: dict[int, dict[str, Series]]) -> bool:
    """Print the medians per size and the targets; True when every target is met."""
    sizes = sorted(results)
    names = list(results[sizes[-1]])
    print("\nmedians (seconds; control-side CPU seconds in brackets)")
    print(f"  {'':16}" + "".join(f"{size:>20}" for size in sizes))
    for name in names:
        cells = []
        for size in sizes:
            series = results[size][name]
            wall = series.median("stage_seconds") if name.startswith("network") else series.median()
            failed = " " if all(not run.problems for run in series.runs) else "!"
            failed = "x" if all(run.problems for run in series.runs) else failed
            cells.append(f"{wall:8.2f}{failed} ({series.median('cpu'):6.2f})")
        print(f"  {name:16}" + "".join(f"{cell:>20}" for cell in cells))
    print("  (! : some runs did not pass, the median is of those that did; x : none passed)")
    if all(run.node_ms is not None for run in results[sizes[-1]]["ssh true"].runs):
        print("  CPU each node spent (ms, median):")
        for name in names:
            cells = [f"{results[size][name].median('node_ms'):.1f}" for size in sizes]
            print(f"  {name:16}" + "".join(f"{cell:>20}" for cell in cells))
    print("  check process peak (MB / threads / fds):")
    for name in (n for n in names if n.startswith(("check", "network"))):
        cells = [
            f"{results[s][name].peak('rss_mb'):.0f}/{results[s][name].peak('threads'):.0f}/"
            f"{results[s][name].peak('fds'):.0f}"
            for s in sizes
        ]
        print(f"  {name:16}" + "".join(f"{cell:>20}" for cell in cells))

    small, large = sizes[0], sizes[-1]
    top = results[large]
    ok = True
    faster = min(top["ssh true"].median(), top["clush"].median())
    check = top["check"].median()
    ok &= verdict(f"check / faster of ssh true and clush at {large}", check / faster, CHECK_TARGET)
    print(f"  (check / ssh probe, the same node work over OpenSSH: "
          f"{check / top['ssh probe'].median():.2f}x)")  # fmt: skip
    if "ssh python" in top:
        floor = top["ssh python"].median() / faster
        print(f"  (ssh python / faster: {floor:.2f}x, the least a Python node side costs)")
    mode = "network auto" if "network auto" in top else None
    if len(sizes) > 1:
        for name in ("network auto", "network full"):
            if name in top:
                ratio = top[name].median("stage_seconds") / results[small][name].median(
                    "stage_seconds"
                )
                if name == mode:
                    ok &= verdict(f"{name} {large} / {small} nodes", ratio, NETWORK_TARGET)
                else:
                    print(f"  {name} {large} / {small} nodes = {ratio:.2f}x (reported)")
    if mode is None:
        print("  network auto: n/a (this clusterkit has no --mesh; full is what it runs)")
    peak = max(top[name].peak("rss_mb") for name in top if name.startswith(("check", "network")))
    ok &= verdict(f"check peak RSS at {large} nodes (MB)", peak, MEMORY_TARGET_MB)
    return ok


def verdict(label: str, value: float, target: float) -> bool:
    met = value <= target
    print(f"  {label} = {value:.2f} (target <= {target:g}): {'met' if met else 'MISSED'}")
    return met


def measure_slurm(nodes: int, runs: int) -> dict[str, Series]:
    """check over srun job steps and over SSH, inside one allocation of `nodes` nodes."""
    import yaml

    from tests.support.slurmcluster import SlurmCluster
    from tests.support.slurmcluster import unavailable_reason as slurm_unavailable

    reason = slurm_unavailable()
    if reason:
        print(f"\nslurm: not measured ({reason})")
        return {}
    series = {"srun": Series(), "ssh": Series()}
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch,
        NetCluster(nodes, subnets=max(1, nodes // NODES_PER_SUBNET)) as net,
        SlurmCluster(net) as slurm,
        slurm.allocation(nodes) as job,
    ):
        settings = {"interface": "eth0"}
        inventory = net.inventory(Path(scratch) / "inventory.yaml", clusterkit=settings)
        settings_path = Path(scratch) / "settings.yaml"
        settings_path.write_text(yaml.safe_dump({"clusterkit": settings}))
        print(f"\nslurm: {nodes} nodes, job {job}, ready in {time.monotonic() - started:.0f} s")
        env = {**os.environ, "SLURM_CONF": str(slurm.conf), "SLURM_JOB_ID": job,
               "SLURM_JOB_NODELIST": f"node[1-{nodes}]"}  # fmt: skip
        paths = {
            "srun": ["--slurm", "--transport", "srun", "--settings", str(settings_path)],
            "ssh": [str(inventory), "--slurm", "--transport", "ssh", "--connect-timeout", "60"],
        }
        report, peak = Path(scratch) / "report.json", Path(scratch) / "peak-rss"
        for round_ in range(1, runs + 1):
            for name, args in paths.items():
                argv = [sys.executable, "-c", PEAK_RSS, str(peak), "check", "--format",
                        "json", *args, "--skip", "network,bench,image"]  # fmt: skip
                run = run_processes([argv], sample=True, stdout=report, env=env)
                run.rss_mb = int(peak.read_text()) / 1024
                hosts = json.loads(report.read_text())["hosts"].values()
                reached = sum(1 for host in hosts if host["reachable"])
                if reached != nodes:
                    raise SystemExit(f"check over {name} reached {reached} of {nodes}")
                series[name].runs.append(run)
                print(f"  {nodes:>4} check {name:5} run {round_}: {describe(run)}", flush=True)
    for name, one in series.items():
        print(
            f"  check over {name:4}: median {one.median():.2f} s, control CPU "
            f"{1000 * one.median('cpu') / nodes:.1f} ms per host, peak "
            f"{one.peak('rss_mb'):.0f} MB, {one.peak('threads'):.0f} threads, "
            f"{one.peak('fds'):.0f} fds"
        )
    return series


def slow_node() -> bool:
    script = REPO / "benchmarks" / "bench_slow_node.py"
    if not script.exists():
        print("\nslow node: benchmarks/bench_slow_node.py is not here yet: not measured")
        return True
    print(f"\nslow node: {script.name} (load {load_average():.1f})", flush=True)
    done = subprocess.run([sys.executable, str(script)], timeout=3 * RUN_TIMEOUT, check=False)
    return done.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128, 256])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--node-cpu",
        type=float,
        default=None,
        metavar="FRACTION",
        help="each node's slice of one core at every size (default: three quarters of this "
        "machine's cores shared by the largest size)",
    )
    parser.add_argument(
        "--forks", type=int, action="append", default=[], help="also time check --forks N"
    )
    parser.add_argument(
        "--mesh-connect-timeout", type=float, default=30.0, metavar="SECONDS",
        help="clusterkit.network.connect_timeout at every size (default 30: on its slice "
        "a node answers hundreds of handshakes in seconds, not the 3 s of a real node)",
    )  # fmt: skip
    parser.add_argument(
        "--master-cpu", type=float, default=0.1, metavar="FRACTION",
        help="the master's slice of a core at every size (default 0.1; 0: the common slice)",
    )  # fmt: skip
    parser.add_argument("--skip-slow-node", action="store_true")
    parser.add_argument(
        "--slurm", type=int, default=0, metavar="N",
        help="also compare check over srun and over SSH on N Slurm nodes (no target)",
    )  # fmt: skip
    parser.add_argument(
        "--only", action="append", default=[], metavar="TOOL",
        help="measure only this tool (repeatable; e.g. 'check', 'network full'): no verdicts",
    )  # fmt: skip
    args = parser.parse_args()
    reason = unavailable_reason() or CpuShares.reason()
    if reason or shutil.which("clush") is None:
        print(f"bench_scale: cannot run here: {reason or 'clush not on PATH'}", file=sys.stderr)
        return 2
    sizes = sorted(args.sizes)
    fraction = args.node_cpu or 0.75 * (os.cpu_count() or 1) / sizes[-1]
    mesh = has_mesh_option()
    if args.slurm:
        measure_slurm(args.slurm, args.runs)
    results = {
        size: measure_size(
            size,
            args.runs,
            fraction,
            args.forks,
            mesh,
            args.only,
            args.mesh_connect_timeout,
            args.master_cpu or None,
        )
        for size in sizes
    }
    if args.only:
        return 0
    ok = summary(results)
    if not args.skip_slow_node:
        ok &= slow_node()
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
