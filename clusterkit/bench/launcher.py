"""Start the bench worker under torchrun on every node, bound it, kill it.

One remote command per node ships the worker source on stdin, runs torchrun with static
rendezvous and an explicit node rank (c10d host matching fails when hostnames are not
unique), and prints the node's NCCL log after torchrun ends. On a deadline, a failing node
or Ctrl-C a separate kill command per node ends everything recorded under the run id
(torchrun, each rank's own session, the container). Which node failed first is decided from
what each node printed, never guessed (bench/attribution.py).
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from clusterkit.bench.attribution import NodeRun, judge, split_nccl_logs
from clusterkit.bench.nccltests import format_tables
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.results import BenchResult
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import torch_cuda
from clusterkit.errors import TransportError
from clusterkit.facts import collected
from clusterkit.inventory.model import Host, Inventory
from clusterkit.rundir import EACH_OWN_FOLDER, RUN_DIR, folder_name, shell_line
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.nodescript import node_script

RUN_USER = "{clusterkit_run_user}"  # the node script's uid:gid, for `docker run --user`
KILL_GRACE_S = 6.0  # kill this long before the deadline so output can still come back
FAILURE_GRACE_S = 2.0  # after a node fails, let the others report their own errors
NodePlan = tuple[str, str | None, list[str]]  # run name, container (None: no image), argv

# Runs on the node: make the run's folder (private, fresh: clusterkit/rundir.py says why),
# store the worker there, run torchrun (or docker) in the background so its pid can be
# recorded for the kill command, then print the NCCL logs and clean up. $1 starts the
# folder's name, $2 is the command as a shell line: "$dir" in it is the folder, "$user"
# this user's uid:gid.
_NODE_SCRIPT = r"""
pid= dir=
trap 'kill -TERM "$pid" 2>/dev/null; [ -n "$dir" ] && rm -rf "$dir"; exit 143' TERM HUP INT
dir=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXXXXXX") && cat > "$dir/worker.py" || {
  echo "clusterkit-bench: error setup: cannot make a private run folder in ${TMPDIR:-/tmp}" >&2
  [ -n "$dir" ] && rm -rf "$dir"; exit 97; }
user=$(id -u):$(id -g)
eval "set -- $2"
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

# Ends every process recorded in the run's folders: torchrun (launcher.kill) and each rank,
# which torchrun starts in its own session (rank*.kill), plus the container if any. Only
# folders and pid files that are this user's own are read (a decoy folder another user
# made with the same name is not). `kill -TERM -PGID`, not `kill -TERM -- -PGID`: dash's
# kill takes no `--`. The node script above cleans its run folder itself when its whole
# group is signalled (an interrupt before the pids were recorded).
_KILL_SCRIPT = (
    EACH_OWN_FOLDER
    + r"""
pids=""
read_pids() {
  for f in "$1"/*.kill; do
    if [ -f "$f" ] && [ ! -h "$f" ] && [ -O "$f" ]; then pids="$pids $(head -c 32 "$f")"; fi
  done
}
each_own_folder "$1" read_pids
name=$2
if [ -n "$name" ]; then docker kill "$name" >/dev/null 2>&1; fi
for p in $pids; do
  case $p in *[!0-9]*|'') continue;; esac
  kill -TERM "-$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null
done
sleep 1
for p in $pids; do
  case $p in *[!0-9]*|'') continue;; esac
  kill -KILL "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
done
echo "killed:$pids"
"""
)


@dataclass
class BenchOutcome:
    findings: list[Finding]
    result: BenchResult | None  # worker JSON + "gate", None when no result came back
    table: str  # the nccl-tests table, "" without a result
    nodes: list[NodeRun]
    run_id: str
    duration: float
    interrupted: bool = False

    @property
    def nccl_logs(self) -> dict[str, str]:
        return {node.host: split_nccl_logs(node.stderr)[1] for node in self.nodes}


def worker_source() -> bytes:
    """The worker, composed with its node libraries into one file, shipped over stdin to
    nodes that may lack clusterkit."""
    return node_script("bench_worker").encode()


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
    counts = [_gpu_count(options, h) for h in hosts]
    if options.backend != "gloo" and counts and min(counts) > 0:
        return min(counts)
    return 1


def _gpu_count(options: BenchOptions, host: Host) -> int:
    """The GPUs the probe found on the host (0: none, or no facts)."""
    return collected(options.facts.get(host.name, {}).get("gpus")).get("count") or 0


def node_argv(
    host: Host,
    node_rank: int,
    *,
    nodes: int,
    nproc: int,
    master: str,
    port: int,
    run_name: str,
    container: str | None,
    image: str | None,
    gpus: bool,
    interface: str | None,
    options: BenchOptions,
    infiniband: bool = False,
    barrier_timeout: float | None = None,
    fill: float | None = None,
) -> list[str]:
    """The argv one node runs (the transport quotes it): its run folder's name starts with
    `run_name`. With `barrier_timeout` the group measures only after the launcher's go (see
    worker._await_go); with `fill` each timed block lasts that many seconds
    (worker._fill_iters)."""
    run_dir = RUN_DIR
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": f"{run_dir}/nccl.%h.%p.log"}
    if interface:
        env["GLOO_SOCKET_IFNAME"] = interface
        env["NCCL_SOCKET_IFNAME"] = interface
    worker = [
        f"{run_dir}/worker.py",
        "-b", options.minbytes, "-e", options.maxbytes, "-f", str(options.stepfactor),
        "-n", str(options.iters), "-w", str(options.warmup_iters), "-c", str(options.check),
        "-d", options.datatype, "--backend", options.backend,
        "--collective", ",".join(options.collectives),
        "--expect-world-size", str(nodes * nproc),
        "--join-timeout", f"{options.join_timeout:g}", "--frame",
    ]  # fmt: skip
    if not image:
        worker += ["--run-dir", run_dir]  # pids inside a container mean nothing out here
    if barrier_timeout is not None:
        worker += ["--barrier-dir", run_dir, "--barrier-timeout", f"{barrier_timeout:.0f}"]
    if fill:
        worker += ["--fill", f"{fill:g}"]
    torchrun = [
        "-m", "torch.distributed.run",
        "--nnodes", str(nodes), "--node-rank", str(node_rank), "--nproc-per-node", str(nproc),
        "--master-addr", master, "--master-port", str(port),
        "--rdzv-conf", f"timeout={int(options.join_timeout)}", "--max-restarts", "0",
    ]  # fmt: skip
    if image:
        docker = ["docker", "run", "--rm", "--name", container or "clusterkit-bench"]
        # as this user: the run folder is this user's alone (mode 0700)
        docker += ["--user", RUN_USER]
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
    line = shell_line(command, {RUN_DIR: "dir", RUN_USER: "user"})
    return ["sh", "-c", _NODE_SCRIPT, "clusterkit-bench", folder_name(run_name), line]


@dataclass(frozen=True)
class World:
    """Who runs the bench and how: hosts in node-rank order (the master first), ranks per
    node, the image (None: the node interpreter) and whether containers get the GPUs."""

    hosts: list[Host]
    nproc: int
    image: str | None
    gpus: bool

    def infiniband(self, options: BenchOptions, host: Host) -> bool:
        return bool(collected(options.facts.get(host.name, {}).get("infiniband")).get("devices"))


def plan_world(
    transports: Mapping[str, Transport], inventory: Inventory, options: BenchOptions
) -> World:
    """The world of the connected inventory hosts (the caller refuses a partial one)."""
    hosts = [host for host in inventory.hosts if host.name in transports]
    master_host = inventory.master if inventory.master in hosts else hosts[0]
    ordered = [master_host, *[h for h in hosts if h is not master_host]]
    image = inventory.settings.image if options.image is None else (options.image or None)
    gpus = options.backend != "gloo" and any(
        _gpu_count(options, h) > 0 or h.name not in options.facts for h in ordered
    )
    return World(ordered, ranks_per_node(inventory, options, ordered), image, gpus)


def job_plans(
    inventory: Inventory,
    world: World,
    options: BenchOptions,
    hosts: list[Host],
    *,
    tag: str,
    master: str,
    port: int,
    barrier_timeout: float | None = None,
    fill: float | None = None,
) -> dict[str, NodePlan]:
    """Each node of one torchrun job over `hosts` (in node-rank order): its run name,
    container (with an image) and argv. Both names carry `tag` and the node rank, so the
    kill command finds that node's processes and no other job's."""
    plans: dict[str, NodePlan] = {}
    for rank, host in enumerate(hosts):
        run_name = f"clusterkit-bench-{tag}-n{rank}"
        container = run_name if world.image else None
        argv = node_argv(
            host,
            rank,
            nodes=len(hosts),
            nproc=world.nproc,
            master=master,
            port=port,
            run_name=run_name,
            container=container,
            image=world.image,
            gpus=world.gpus,
            infiniband=world.infiniband(options, host),
            interface=inventory.settings.interface,
            options=options,
            barrier_timeout=barrier_timeout,
            fill=fill,
        )
        plans[host.name] = (run_name, container, argv)
    return plans


def launch_bench(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    options: BenchOptions,
    deadline: Deadline,
) -> BenchOutcome:
    """Run the bench on every inventory host in `transports`; never leaves a process."""
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:12]
    missing = [host.name for host in inventory.hosts if host.name not in transports]
    if missing or len(missing) == len(inventory.hosts):
        finding = Finding(
            "bench.not-joined",
            Status.SKIP,
            f"not run: {', '.join(missing) or 'no host'} not connected; a partial world "
            "would measure the wrong thing",
            hosts=missing,
        )
        return BenchOutcome([finding], None, "", [], run_id, 0.0)
    world = plan_world(transports, inventory, options)
    runs = [NodeRun(host.name, rank) for rank, host in enumerate(world.hosts)]
    plans = job_plans(
        inventory,
        world,
        options,
        world.hosts,
        tag=run_id,
        master=options.master_addr or world.hosts[0].address,
        port=options.master_port or inventory.settings.master_port,
    )
    interrupted = supervise(transports, [runs], plans, deadline)
    findings, result = judge(runs, inventory, options, world.nproc, deadline)
    table = format_tables(result) if result else ""
    return BenchOutcome(
        findings, result, table, runs, run_id, time.monotonic() - started, interrupted
    )


def supervise(
    transports: Mapping[str, Transport],
    groups: list[list[NodeRun]],
    plans: Mapping[str, NodePlan],
    deadline: Deadline,
) -> bool:
    """Run every node of every group (separate torchrun jobs, a host in one group at most)
    in its own thread. On a group's first failure send the kill command to that group; on
    the deadline or Ctrl-C, to every group. Returns True when interrupted."""
    source = worker_source()
    runs = [run for group in groups for run in group]
    group_of = {id(run): index for index, group in enumerate(groups) for run in group}
    killed: set[int] = set()

    def one(run: NodeRun) -> None:
        try:
            run.result = transports[run.host].run(
                plans[run.host][2], stdin=source, deadline=deadline
            )
        except TransportError as error:
            run.error = error
        finally:
            run.ended_at = time.monotonic()

    def kill_groups(indexes: list[int]) -> None:
        targets = [i for i in indexes if i not in killed]
        if not targets:
            return
        killed.update(targets)
        members = [run for i in targets for run in groups[i]]
        for run in members:
            run.killed = run.ended_at is None
        kill_deadline = Deadline.after(max(3.0, min(8.0, deadline.remaining())))

        def kill(run: NodeRun) -> None:
            if run.ended_at is not None and run.ok:
                return
            run_name, container, _ = plans[run.host]
            argv = ["sh", "-c", _KILL_SCRIPT, "clusterkit-kill", run_name, container or ""]
            # A node that is gone cannot be reached; its own `timeout -k` ends the rest.
            with contextlib.suppress(TransportError):
                transports[run.host].run(argv, deadline=kill_deadline)

        threads = [threading.Thread(target=kill, args=(run,), daemon=True) for run in members]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(kill_deadline.remaining() + 1)

    everyone = list(range(len(groups)))
    executor = ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="bench")
    futures: dict[Future[None], NodeRun] = {executor.submit(one, run): run for run in runs}
    pending = set(futures)
    failed_at: dict[int, float] = {}
    interrupted = False
    try:
        while pending:
            now = time.monotonic()
            if deadline.remaining() <= KILL_GRACE_S:
                kill_groups(everyone)
            kill_groups([g for g, at in failed_at.items() if now - at >= FAILURE_GRACE_S])
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                run = futures[future]
                if not run.ok:
                    failed_at.setdefault(group_of[id(run)], time.monotonic())
            if len(killed) == len(groups) and deadline.expired:
                break
    except KeyboardInterrupt:
        interrupted = True
        kill_groups(everyone)
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


def describe_command(argv: list[str]) -> str:
    """The node command as a shell line, for --verbose and docs (the script elided)."""
    return shlex.join([part if "\n" not in part else "<node script>" for part in argv])
