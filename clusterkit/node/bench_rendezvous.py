"""How the bench ranks find each other: dying with torchrun, the process group joined within
a deadline, the world size checked, the go barrier, and JSON gathered to rank 0.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import signal
import sys
import time

from clusterkit.node.bench_common import EXIT_FAILED, EXIT_WORLD, LOG_PREFIX, BenchError

# --- node-side plumbing -------------------------------------------------------------------


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank when its torchrun agent dies: torchrun starts ranks in
    their own session, so killing the agent's process group would otherwise orphan them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent already died before prctl took effect
            os._exit(EXIT_FAILED)
    except (OSError, AttributeError):
        pass


def write_pid(run_dir: str | None, rank: int) -> None:
    """Record this rank's pid (its own session: torchrun uses start_new_session) so a kill
    command sent by the launcher can end it by run id."""
    if not run_dir:
        return
    path = os.path.join(run_dir, f"rank{rank}.kill")
    try:
        with open(path, "w") as handle:
            handle.write(f"{os.getpid()}\n")
    except OSError:
        pass


def log_line(message: str) -> None:
    sys.stderr.write(f"{LOG_PREFIX} {message}\n")
    sys.stderr.flush()


def env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def device_info(torch, backend: str, local_rank: int) -> dict:
    """This rank's device: CUDA name and PCI bus id, or the CPU."""
    if backend == "nccl":
        props = torch.cuda.get_device_properties(local_rank)
        try:
            bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
        except (AttributeError, TypeError):
            bus = "?"
        return {"device": local_rank, "bus_id": bus, "name": props.name}
    name = platform.processor() or platform.machine() or "cpu"
    return {"device": local_rank, "bus_id": "cpu", "name": "CPU " + name}


def synchronize(torch, backend: str) -> None:
    if backend == "nccl":
        torch.cuda.synchronize()


def _parse_barrier_failure(message: str) -> list[int]:
    """Ranks a failed monitored_barrier names ("Ranks 1, 2 failed to pass monitoredBarrier",
    "Rank 2 failed to pass monitoredBarrier")."""
    match = re.search(r"Ranks?\s+([\d,\s]+?)\s+failed to pass monitoredBarrier", message)
    if not match:
        return []
    return [int(part) for part in re.findall(r"\d+", match.group(1))]


def check_world_size(world_size: int, expected: int | None) -> None:
    if expected is not None and world_size != expected:
        raise BenchError(
            "world-size",
            f"WORLD_SIZE is {world_size} but {expected} ranks were expected "
            "(nodes x GPUs per node): a partial run would measure the wrong thing",
            EXIT_WORLD,
        )


def join_world(dist, backend: str, rank: int, world_size: int, timeout_s: float):
    """Initialise the process group and a gloo side group, then prove every rank arrived:
    monitored_barrier names the ranks that did not."""
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(backend=backend, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None
    try:
        dist.monitored_barrier(group=control, timeout=timeout, wait_all_ranks=True)
    except RuntimeError as error:
        missing = _parse_barrier_failure(str(error))
        raise BenchError(
            "join",
            f"ranks {','.join(map(str, missing)) or '?'} did not arrive within "
            f"{timeout_s:g}s: {str(error).splitlines()[0]}",
            EXIT_WORLD,
        ) from None
    return control


def await_go(dist, group, rank: int, barrier_dir: str, timeout: float) -> None:
    """Groups of `bench --find-slow` measure at the same moment, so none is timed on a
    machine or fabric the others have left idle: rank 0 says the group is ready (a file the
    launcher waits for) and waits for the launcher's go, then every rank leaves a barrier.
    Without a go in time the group measures anyway (the launcher may be gone)."""
    if rank == 0:
        go = os.path.join(barrier_dir, "go")
        try:
            with open(os.path.join(barrier_dir, "ready"), "w"):
                pass
        except OSError as error:
            log_line(f"cannot write the ready file: {error}")
        end = time.monotonic() + timeout
        while not os.path.exists(go) and time.monotonic() < end:
            time.sleep(0.05)
        if not os.path.exists(go):
            log_line(f"no go within {timeout:g}s: measuring anyway")
    dist.barrier(group=group)


def gather_json(torch, dist, value, world_size: int, group) -> list:
    """Every rank's `value` (JSON), gathered as byte tensors on the gloo control group.
    dist.all_gather_object decodes through tensor.numpy(), so it fails on a node without
    numpy; the bench must not need a package the job itself may not."""
    data = json.dumps(value).encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=group)
    lengths = [int(size.item()) for size in sizes]
    payload = torch.zeros(max(lengths), dtype=torch.uint8)
    payload[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    chunks = [torch.zeros(max(lengths), dtype=torch.uint8) for _ in range(world_size)]
    dist.all_gather(chunks, payload, group=group)
    return [json.loads(bytes(chunk[:n].tolist())) for chunk, n in zip(chunks, lengths)]
