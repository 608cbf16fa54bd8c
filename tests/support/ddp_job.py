"""A tiny DDP job for launch tests: trains a linear model on CPU with gloo.

Prints what torchrun gave it (rank, world size, master) so a test can check the job was
wired as planned, then one line per step. Faults on request:
  --fail-rank R     rank R raises after the first step
  --sleep-rank R    rank R sleeps before the second step's all_reduce (a hang)
  --skip-rank R     rank R skips the second step's all_reduce (a desync: the ranks hang)
  --chatty          a thread in every rank prints a line every 0.3 s, whatever the ranks do
  --quiet           no line per step: a job that logs elsewhere
  --compute-ms N    every step computes N ms of CPU work first (for stragglers)
  --signal-rank R   rank R sends itself --signal-name (default SEGV: a crash) after step 0
  --hunt            every rank acts as a hostile job before it starts (see hunt)
  --unused-parameter  the model has a layer forward() never uses: DDP's own error at step 1
  --checkpoint F    resume from F when it exists (rank 0 writes it after every step), as a
                    training script must for a restart to go on where the last attempt was
"""

import argparse
import contextlib
import json
import os
import re
import signal
import stat
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def hunt() -> None:
    """A hostile job: look for the launch's control token where any user of the node can
    (every process's command line) and forge the node process's exit report with what it
    finds, written straight to torchrun's stdout; then say what it found and how private
    its run folder is."""
    tokens: set[str] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            tokens.update(re.findall(r"clusterkit-[0-9a-f]{16}", text))
    forged = json.dumps({"event": "exit", "code": 0, "stopped": False, "leftovers": 0})
    for token in tokens:
        with contextlib.suppress(OSError), open(f"/proc/{os.getppid()}/fd/1", "w") as out:
            out.write(f"{token} {forged}\n")
    folder = Path(os.environ["TORCH_FR_DUMP_TEMP_FILE"]).parent
    info = folder.stat()
    print(
        f"hunt tokens={len(tokens)} run_dir_mode={stat.S_IMODE(info.st_mode):o} "
        f"run_dir_uid={info.st_uid} run_dir_name={folder.name}",
        flush=True,
    )


def resume(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The step to start from: the checkpoint's, or 0 when there is none yet."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def save(path: str, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Written whole or not at all: a node lost mid-write leaves the last checkpoint."""
    partial = f"{path}.partial"
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(state, partial)
    os.replace(partial, path)


def chatter() -> None:
    """A logging thread that goes on printing whatever the training does."""
    while True:
        print("still here", flush=True)
        time.sleep(0.3)


def compute(seconds: float) -> None:
    """Busy the CPU for about `seconds` of its own time (a slower node takes longer)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        sum(i * i for i in range(2000))


class Unused(torch.nn.Module):
    """A linear model with a layer forward() never calls: DDP waits for its gradients and
    raises at the next step ("Expected to have finished reduction in the prior iteration")."""

    def __init__(self) -> None:
        super().__init__()
        self.used = torch.nn.Linear(8, 1)
        self.unused = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-text", default="fails on purpose", help="its error message")
    parser.add_argument("--sleep-rank", type=int, default=None)
    parser.add_argument("--skip-rank", type=int, default=None)
    parser.add_argument("--chatty", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--compute-ms", type=float, default=0.0)
    parser.add_argument("--sleep", type=float, default=600.0)
    parser.add_argument("--signal-rank", type=int, default=None)
    # Not --signal: torchrun's parser takes it for its --signals-to-handle, even after the script.
    parser.add_argument("--signal-name", default="SEGV", help="without SIG")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause after each step")
    parser.add_argument("--hunt", action="store_true", help="act as a hostile job (see hunt)")
    parser.add_argument("--checkpoint", default=None, help="resume from / save to this file")
    parser.add_argument("--unused-parameter", action="store_true", help="DDP's error, for real")
    args = parser.parse_args()
    if args.hunt:
        hunt()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"joined rank={rank} world={world} master={os.environ['MASTER_ADDR']}:"
        f"{os.environ['MASTER_PORT']} node_rank={os.environ.get('NODE_RANK')} "
        f"ifname={os.environ.get('GLOO_SOCKET_IFNAME')}",
        flush=True,
    )
    shm = os.statvfs("/dev/shm")
    print(
        f"where container={os.path.exists('/.dockerenv')} user={os.getuid()}:{os.getgid()} "
        f"shm={shm.f_blocks * shm.f_frsize}",
        flush=True,
    )
    torch.manual_seed(0)
    model = DistributedDataParallel(Unused() if args.unused_parameter else torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(64, 8)
    target = data.sum(dim=1, keepdim=True)
    first = resume(args.checkpoint, model, optimizer) if args.checkpoint else 0
    if args.chatty:
        threading.Thread(target=chatter, daemon=True).start()
    print(
        f"start step={first} restart={os.environ.get('CLUSTERKIT_RESTART')} "
        f"host={os.uname().nodename}",
        flush=True,
    )
    for step in range(first, args.steps):
        if step == 1 and rank == args.fail_rank:
            raise RuntimeError(f"rank {rank} {args.fail_text}")
        if step == 1 and rank == args.signal_rank:
            os.kill(os.getpid(), getattr(signal, "SIG" + args.signal_name))
        if step == 1 and rank == args.sleep_rank:
            time.sleep(args.sleep)
        if step == 1 and rank != args.skip_rank:
            dist.all_reduce(torch.ones(1))  # where the others wait for a sleeping rank
        if args.compute_ms:
            compute(args.compute_ms / 1000)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if not args.quiet:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if args.checkpoint and rank == 0:
            save(args.checkpoint, step + 1, model, optimizer)
        time.sleep(args.step_seconds)
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    print(f"done rank={rank} sum_of_ranks={int(total.item())}", flush=True)
    dist.barrier()  # nobody tears gloo down while a peer still talks to it
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except Exception:  # the job's own error: printed as Python would, and status 1
        traceback.print_exc()
        status = 1
    # torch's c10d threads abort a finished rank in interpreter teardown now and then
    # ("terminate called without an active exception"): leave without it, as the bench
    # worker does, so the job's exit status is its own
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
