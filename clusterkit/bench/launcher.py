"""Start the bench worker under torchrun on every node, bound it, kill it, attribute it.

One remote command per node ships the worker source on stdin, runs torchrun with static
rendezvous and an explicit node rank (c10d host matching fails when hostnames are not
unique), and prints the node's NCCL log after torchrun ends. On a deadline, a failing node
or Ctrl-C a separate kill command per node ends everything recorded under the run id
(torchrun, each rank's own session, the container). Which node failed first is decided from
what each node printed, never guessed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from clusterkit import framing
from clusterkit.bench import gate
from clusterkit.bench.nccltests import format_table
from clusterkit.bench.worker import parse_size
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import torch_cuda
from clusterkit.errors import TransportError
from clusterkit.inventory.model import BenchSettings, Host, Inventory
from clusterkit.transport.base import CommandResult, Deadline, Transport

STAGE = "bench"
KILL_GRACE_S = 6.0  # kill this long before the deadline so output can still come back
FAILURE_GRACE_S = 2.0  # after a node fails, let the others report their own errors
NCCL_LOG_BEGIN = "--clusterkit-nccl-log--"
NCCL_LOG_END = "--clusterkit-nccl-log-end--"
_LOG_LINE = re.compile(r"^clusterkit-bench: (.*)$", re.M)
_JOINED = re.compile(r"rank (\d+) joined on (\S+)")
_ERROR = re.compile(r"error ([\w-]+): (.*)")
_ROOT_CAUSE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M
)
_ROOT_SECTION = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={10,}|\Z)", re.S)
_EXTERNAL_SIGNALS = {1, 2, 9, 15}  # SIGHUP, SIGINT, SIGKILL, SIGTERM
_SIGNAL = re.compile(r"Signal (\d+) \((\w+)\) received by PID")

# Runs on the node: store the worker, run torchrun (or docker) in the background so its pid
# can be recorded for the kill command, then print the NCCL logs and clean up.
_NODE_SCRIPT = r"""
dir=$1; shift
pid=
trap 'kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"; exit 143' TERM HUP INT
mkdir -p "$dir" && cat > "$dir/worker.py" || {
  echo "clusterkit-bench: error setup: cannot write $dir/worker.py" >&2; exit 97; }
"$@" &
pid=$!
echo "$pid" > "$dir/launcher.kill"
wait "$pid"; rc=$?
for f in "$dir"/nccl.*.log; do
  [ -f "$f" ] || continue
  printf '\n%s %s\n' "--clusterkit-nccl-log--" "${f##*/}" >&2
  tail -c 262144 "$f" >&2
  printf '\n%s\n' "--clusterkit-nccl-log-end--" >&2
done
rm -rf "$dir"
exit "$rc"
"""

# Ends every process recorded under the run directory: torchrun (launcher.kill) and each
# rank, which torchrun starts in its own session (rank*.kill), plus the container if any.
# `kill -TERM -PGID`, not `kill -TERM -- -PGID`: dash's kill takes no `--`. The node script
# above cleans its run directory itself when its whole group is signalled (an interrupt
# before the pids were recorded).
_KILL_SCRIPT = r"""
dir=$1; name=$2
pids=""
for f in "$dir"/*.kill; do [ -f "$f" ] && pids="$pids $(cat "$f")"; done
if [ -n "$name" ]; then docker kill "$name" >/dev/null 2>&1; fi
for p in $pids; do kill -TERM "-$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
sleep 1
for p in $pids; do kill -KILL "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
echo "killed:$pids"
"""


@dataclass(frozen=True)
class BenchOptions:
    """Sweep (nccl-tests flags), gate and launch settings; defaults from BenchSettings."""

    minbytes: str = BenchSettings.minbytes
    maxbytes: str = BenchSettings.maxbytes
    stepfactor: int = BenchSettings.stepfactor
    iters: int = BenchSettings.iters
    warmup_iters: int = BenchSettings.warmup_iters
    check: int = 1
    datatype: str = BenchSettings.datatype
    backend: str = "auto"
    nproc_per_node: int | None = None  # None: expect.gpus_per_node, probe facts, else 1
    gate_size: int | None = None  # None: the largest size measured
    min_busbw: float | None = None  # None: NCCL_TESTS_MIN_BW, clusterkit.bench, fabric
    join_timeout: float = BenchSettings.join_timeout
    master_addr: str | None = None  # None: the inventory master's address
    master_port: int | None = None  # None: clusterkit.master_port
    image: str | None = None  # None: clusterkit.image; "" forces the node interpreter
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    facts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: BenchSettings, **given: Any) -> BenchOptions:
        """The inventory's `clusterkit.bench` with what was given (flags) on top; None in
        `given` means not given. Ranks never wait for each other past the run's deadline."""
        chosen = {
            "minbytes": settings.minbytes,
            "maxbytes": settings.maxbytes,
            "stepfactor": settings.stepfactor,
            "iters": settings.iters,
            "warmup_iters": settings.warmup_iters,
            "datatype": settings.datatype,
            "gate_size": parse_size(settings.gate_size) if settings.gate_size else None,
            "join_timeout": min(settings.join_timeout, settings.timeout),
            **{name: value for name, value in given.items() if value is not None},
        }
        return cls(**chosen)


@dataclass
class NodeRun:
    """What one node's torchrun did, as seen from here."""

    host: str
    node_rank: int
    result: CommandResult | None = None
    error: TransportError | None = None
    ended_at: float | None = None
    killed: bool = False  # we sent the kill command before it ended

    @property
    def stdout(self) -> str:
        return self.result.stdout.decode("utf-8", "replace") if self.result else ""

    @property
    def stderr(self) -> str:
        return self.result.stderr.decode("utf-8", "replace") if self.result else ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok


@dataclass
class BenchOutcome:
    findings: list[Finding]
    result: dict[str, Any] | None  # worker JSON + "gate", None when no result came back
    table: str  # the nccl-tests table, "" without a result
    nodes: list[NodeRun]
    run_id: str
    duration: float
    interrupted: bool = False

    @property
    def nccl_logs(self) -> dict[str, str]:
        return {node.host: split_nccl_logs(node.stderr)[1] for node in self.nodes}


def worker_source() -> bytes:
    """The worker file, shipped over stdin to nodes that may lack clusterkit."""
    return resources.files("clusterkit.bench").joinpath("worker.py").read_bytes()


def split_nccl_logs(stderr: str) -> tuple[str, str]:
    """Separate the node's own stderr from the NCCL log sections the node script appended."""
    own: list[str] = []
    logs: list[str] = []
    inside = False
    for line in stderr.splitlines():
        if line.startswith(NCCL_LOG_BEGIN):
            inside = True
        elif line.startswith(NCCL_LOG_END):
            inside = False
        elif inside:
            logs.append(line)
        else:
            own.append(line)
    return "\n".join(own), "\n".join(logs)


def ranks_per_node(inventory: Inventory, options: BenchOptions, hosts: list[Host]) -> int:
    """--nproc-per-node; else one gloo rank per node where torch has no CUDA (a rank per
    unusable GPU would only measure the node's cores); else the GPUs pinned or found."""
    if options.nproc_per_node:
        return options.nproc_per_node
    torch_builds = [torch_cuda(options.facts.get(h.name, {})) for h in hosts]
    if options.facts and any(build in (None, "cpu") for build in torch_builds):
        return 1
    if inventory.settings.expect.gpus_per_node:
        return inventory.settings.expect.gpus_per_node
    counts = [
        int((options.facts.get(h.name, {}).get("gpus") or {}).get("count") or 0) for h in hosts
    ]
    if options.backend != "gloo" and counts and min(counts) > 0:
        return min(counts)
    return 1


def node_argv(
    host: Host,
    node_rank: int,
    *,
    nodes: int,
    nproc: int,
    master: str,
    port: int,
    run_dir: str,
    container: str | None,
    image: str | None,
    gpus: bool,
    interface: str | None,
    options: BenchOptions,
    infiniband: bool = False,
) -> list[str]:
    """The argv one node runs (the transport quotes it)."""
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": f"{run_dir}/nccl.%h.%p.log"}
    if interface:
        env["GLOO_SOCKET_IFNAME"] = interface
        env["NCCL_SOCKET_IFNAME"] = interface
    worker = [
        f"{run_dir}/worker.py",
        "-b", options.minbytes, "-e", options.maxbytes, "-f", str(options.stepfactor),
        "-n", str(options.iters), "-w", str(options.warmup_iters), "-c", str(options.check),
        "-d", options.datatype, "--backend", options.backend,
        "--expect-world-size", str(nodes * nproc),
        "--join-timeout", f"{options.join_timeout:g}", "--frame",
    ]  # fmt: skip
    if not image:
        worker += ["--run-dir", run_dir]  # pids inside a container mean nothing out here
    torchrun = [
        "-m", "torch.distributed.run",
        "--nnodes", str(nodes), "--node-rank", str(node_rank), "--nproc-per-node", str(nproc),
        "--master-addr", master, "--master-port", str(port),
        "--rdzv-conf", f"timeout={int(options.join_timeout)}", "--max-restarts", "0",
    ]  # fmt: skip
    if image:
        docker = ["docker", "run", "--rm", "--name", container or "clusterkit-bench"]
        if gpus:
            docker += ["--gpus", "all"]
        docker += ["--ipc=host", "--network", "host", "--ulimit", "memlock=-1"]
        if infiniband:  # RDMA devices: without them NCCL falls back to TCP sockets
            docker += ["--device", "/dev/infiniband"]
        docker += ["-v", f"{run_dir}:{run_dir}"]
        for name, value in env.items():
            docker += ["-e", f"{name}={value}"]
        command = [*docker, image, "python3", *torchrun, *worker]
    else:
        interpreter = host.python_interpreter or "python3"
        command = ["env", *(f"{k}={v}" for k, v in env.items()), interpreter, *torchrun, *worker]
    return ["sh", "-c", _NODE_SCRIPT, "clusterkit-bench", run_dir, *command]


def launch_bench(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    options: BenchOptions,
    deadline: Deadline,
) -> BenchOutcome:
    """Run the bench on every inventory host in `transports`; never leaves a process."""
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:12]
    hosts = [host for host in inventory.hosts if host.name in transports]
    missing = [host.name for host in inventory.hosts if host.name not in transports]
    if missing or not hosts:
        finding = Finding(
            "bench.not-joined",
            Status.SKIP,
            f"not run: {', '.join(missing) or 'no host'} not connected; a partial world "
            "would measure the wrong thing",
            hosts=missing,
            stage=STAGE,
        )
        return BenchOutcome([finding], None, "", [], run_id, 0.0)
    master_host = inventory.master if inventory.master in hosts else hosts[0]
    ordered = [master_host, *[h for h in hosts if h is not master_host]]
    nproc = ranks_per_node(inventory, options, ordered)
    image = inventory.settings.image if options.image is None else (options.image or None)
    gpus = options.backend != "gloo" and any(
        int((options.facts.get(h.name, {}).get("gpus") or {}).get("count") or 0) > 0
        or h.name not in options.facts
        for h in ordered
    )
    runs = [NodeRun(host.name, rank) for rank, host in enumerate(ordered)]
    plans: dict[str, tuple[str, str | None, list[str]]] = {}
    for run, host in zip(runs, ordered):
        run_dir = f"/tmp/clusterkit-bench-{run_id}-n{run.node_rank}"
        container = f"clusterkit-bench-{run_id}-n{run.node_rank}" if image else None
        argv = node_argv(
            host,
            run.node_rank,
            nodes=len(ordered),
            nproc=nproc,
            master=options.master_addr or master_host.address,
            port=options.master_port or inventory.settings.master_port,
            run_dir=run_dir,
            container=container,
            image=image,
            gpus=gpus,
            infiniband=bool(
                ((options.facts.get(host.name) or {}).get("infiniband") or {}).get("devices")
            ),
            interface=inventory.settings.interface,
            options=options,
        )
        plans[run.host] = (run_dir, container, argv)
    interrupted = _supervise(transports, runs, plans, deadline)
    findings, result = judge(runs, inventory, options, nproc, deadline)
    table = format_table(result) if result else ""
    return BenchOutcome(
        findings, result, table, runs, run_id, time.monotonic() - started, interrupted
    )


def _supervise(
    transports: Mapping[str, Transport],
    runs: list[NodeRun],
    plans: dict[str, tuple[str, str | None, list[str]]],
    deadline: Deadline,
) -> bool:
    """Run every node in its own thread; on the first failure, the deadline or Ctrl-C send
    the kill command everywhere. Returns True when interrupted."""
    source = worker_source()
    killed = threading.Event()

    def one(run: NodeRun) -> None:
        try:
            run.result = transports[run.host].run(
                plans[run.host][2], stdin=source, deadline=deadline
            )
        except TransportError as error:
            run.error = error
        finally:
            run.ended_at = time.monotonic()

    def kill_all() -> None:
        if killed.is_set():
            return
        killed.set()
        for run in runs:
            run.killed = run.ended_at is None
        kill_deadline = Deadline.after(max(3.0, min(8.0, deadline.remaining())))

        def kill(run: NodeRun) -> None:
            if run.ended_at is not None and run.ok:
                return
            run_dir, container, _ = plans[run.host]
            argv = ["sh", "-c", _KILL_SCRIPT, "clusterkit-kill", run_dir, container or ""]
            # A node that is gone cannot be reached; its own `timeout -k` ends the rest.
            with contextlib.suppress(TransportError):
                transports[run.host].run(argv, deadline=kill_deadline)

        threads = [threading.Thread(target=kill, args=(run,), daemon=True) for run in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(kill_deadline.remaining() + 1)

    executor = ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="bench")
    futures: dict[Future[None], NodeRun] = {executor.submit(one, run): run for run in runs}
    pending = set(futures)
    failed_at: float | None = None
    interrupted = False
    try:
        while pending:
            now = time.monotonic()
            if deadline.remaining() <= KILL_GRACE_S:
                kill_all()
            if failed_at is not None and now - failed_at >= FAILURE_GRACE_S:
                kill_all()
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                if not futures[future].ok and failed_at is None:
                    failed_at = time.monotonic()
            if killed.is_set() and deadline.expired:
                break
    except KeyboardInterrupt:
        interrupted = True
        kill_all()
        for transport in transports.values():
            cancel = getattr(transport, "cancel", None)
            if cancel is not None:
                cancel()
    finally:
        # Interrupted too: a cancelled node thread kills its command's process group over the
        # connection (bounded: a few seconds at most), which catches a node whose kill command
        # ran before it had recorded its pids. Returning first would close the connections
        # under those kills and leave torchrun running there.
        executor.shutdown(wait=True, cancel_futures=True)
    return interrupted


# --- attribution and findings ---------------------------------------------------------------


@dataclass
class NodeReport:
    """What one node printed, reduced to facts the verdict needs."""

    host: str
    joined: list[int]
    errors: list[tuple[str, str]]  # (kind, message) from the worker
    root_causes: list[tuple[int, int, str]]  # torchrun's first observed failure: rank, exit, signal
    frame: dict[str, Any] | None


def read_node(run: NodeRun) -> NodeReport:
    own, _ = split_nccl_logs(run.stderr)
    joined: list[int] = []
    errors: list[tuple[str, str]] = []
    for line in _LOG_LINE.findall(own):
        if match := _JOINED.match(line):
            joined.append(int(match[1]))
        elif match := _ERROR.match(line):
            errors.append((match[1], match[2].strip()))
    causes: list[tuple[int, int, str]] = []
    for section in _ROOT_SECTION.findall(own):
        for match in _ROOT_CAUSE.finditer(section):
            signal = _SIGNAL.search(section, match.end())
            causes.append((int(match[1]), int(match[3]), signal[2] if signal else ""))
    frame = None
    if run.result is not None:
        try:
            frame = framing.decode(run.result.stdout)
        except framing.FrameError:
            frame = None
    return NodeReport(run.host, sorted(set(joined)), errors, causes, frame)


def judge(
    runs: list[NodeRun],
    inventory: Inventory,
    options: BenchOptions,
    nproc: int,
    deadline: Deadline,
) -> tuple[list[Finding], dict[str, Any] | None]:
    """Findings from what every node printed. Pure given the runs."""
    reports = {run.host: read_node(run) for run in runs}
    hosts = [run.host for run in runs]
    result = next(
        (
            r.frame
            for r in reports.values()
            if r.frame and "results" in r.frame and not r.frame.get("error")
        ),
        None,
    )
    findings: list[Finding] = []
    world_errors = [
        (host, message)
        for host, report in reports.items()
        for kind, message in report.errors
        if kind == "world-size"
    ]
    if world_errors:
        findings.append(
            Finding(
                "bench.world-size",
                Status.FAIL,
                f"{world_errors[0][1]} (caught before timing)",
                hosts=sorted({host for host, _ in world_errors}),
                expected=len(runs) * nproc,
                stage=STAGE,
                remedy="check --nproc-per-node / clusterkit.expect.gpus_per_node and that every "
                "node runs the bench",
            )
        )
    if result is None and not world_errors:
        findings += _failure_findings(runs, reports, deadline)
        return findings, None
    if result is None:
        return findings, None
    threshold = gate.resolve_threshold(
        flag=options.min_busbw,
        environ=options.environ,
        inventory_min_busbw=inventory.settings.bench.min_busbw,
        fabric=gate.detect_fabric(options.facts) if options.facts else None,
        backend=str(result.get("backend")),
    )
    verdict = gate.evaluate(result, threshold, options.gate_size)
    result["gate"] = verdict.to_dict()
    findings.append(gate.busbw_finding(verdict, hosts))
    findings.append(gate.correctness_finding(result, hosts))
    optional = [gate.slow_rank_finding(result, options.gate_size)]
    logs = {run.host: gate.parse_nccl_log(split_nccl_logs(run.stderr)[1]) for run in runs}
    optional.append(gate.socket_transport_finding(logs, options.facts))
    environments = {h: dict(f.get("env") or {}) for h, f in options.facts.items()}
    environments["(control machine)"] = {
        k: v for k, v in options.environ.items() if k in gate.DEBUG_ONLY_NCCL_VARS
    }
    optional.append(gate.debug_vars_finding(environments))
    findings += [finding for finding in optional if finding is not None]
    return findings, result


def _failure_findings(
    runs: list[NodeRun], reports: dict[str, NodeReport], deadline: Deadline
) -> list[Finding]:
    """No result: name the node (and rank) that failed first, and those that never joined."""
    culprits: list[tuple[int, float, str, str]] = []  # (priority, ended, host, message)
    for run in runs:
        report = reports[run.host]
        if run.killed:
            continue
        ended = run.ended_at or float("inf")
        if run.error is not None:
            culprits.append((0, ended, run.host, f"{run.host} dropped out: {run.error.detail}"))
        elif run.result is not None and run.result.timed_out:
            message = f"{run.host} did not finish before the deadline"
            culprits.append((4, ended, run.host, message))
        elif run.result is not None and run.result.exit_code != 0:
            died = [c for c in report.root_causes if c[1] < 0]
            if died:
                rank, code, name = died[0]
                # Killed from outside (SIGKILL, OOM killer, SIGTERM) comes before a crash such
                # as gloo's abort, which is usually the consequence of losing a peer.
                priority = 1 if -code in _EXTERNAL_SIGNALS else 2
                message = f"rank {rank} on {run.host} died (signal {-code} {name})".strip()
                culprits.append((priority, ended, run.host, message))
            else:
                detail = _last_error(report, run)
                message = f"{run.host} failed (exit {run.result.exit_code}): {detail}"
                culprits.append((3, ended, run.host, message))
    culprits.sort()
    findings: list[Finding] = []
    stopped = [run.host for run in runs if run.killed]
    if culprits:
        first_host, message = culprits[0][2], culprits[0][3]
        others = sorted({c[2] for c in culprits[1:]} - {first_host})
        tail = f"; then failed too: {', '.join(others)}" if others else ""
        tail += f"; stopped by clusterkit: {', '.join(stopped)}" if stopped else ""
        findings.append(
            Finding(
                "bench.rank-failed",
                Status.FAIL,
                message + tail,
                hosts=[first_host],
                found=message,
                stage=STAGE,
                remedy=f"look at {first_host}: `dmesg`, the NCCL log in the JSON report, and the "
                "network stage findings",
            )
        )
    elif stopped:
        findings.append(
            Finding(
                "bench.timeout",
                Status.ERROR,
                f"no result before the deadline; stopped on {', '.join(stopped)}",
                hosts=stopped,
                stage=STAGE,
                remedy="raise --timeout, or reduce -e/-n; check the network stage",
            )
        )
    never = [run.host for run in runs if not reports[run.host].joined]
    if never:
        everyone = len(never) == len(runs)
        findings.append(
            Finding(
                "bench.not-joined",
                Status.ERROR,
                "no rank joined on any node: the rendezvous never completed"
                if everyone
                else f"no rank joined from {', '.join(never)}",
                hosts=never,
                stage=STAGE,
                remedy="check that every node reaches the master port, that all TCP between "
                "nodes on clusterkit.interface is open, and the network stage findings",
            )
        )
    return findings


def _last_error(report: NodeReport, run: NodeRun) -> str:
    if report.errors:
        kind, message = report.errors[-1]
        return f"{kind}: {message}"[:300]
    if report.frame and report.frame.get("error"):
        return str(report.frame["error"].get("message"))[:300]
    own, _ = split_nccl_logs(run.stderr)
    lines = [line for line in own.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def describe_command(argv: list[str]) -> str:
    """The node command as a shell line, for --verbose and docs (the script elided)."""
    return shlex.join([part if "\n" not in part else "<node script>" for part in argv])
