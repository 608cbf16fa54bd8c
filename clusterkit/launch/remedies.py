"""What to do about the common errors a job raises: one line in clusterkit's own words. Pure.

A job's first failure usually ends in one of a few errors that people meet again and again
(out of GPU memory, DDP's unused parameters, a device index past the node's GPUs, a taken
rendezvous port, a store nobody reaches). The failure's last lines only *select* a remedy:
the remedy is a fixed text of ours, never a quote of the job (so nothing the job prints is
echoed by it), and it never names a node (a job's output is no evidence against a node).
Each rule matches a phrase torch 2.13 (or CUDA) prints; the recordings it was checked on
are in tests/fixtures/job-errors/. Only the last MAX_LINES lines are read, each cut to
MAX_CHARS, and the patterns have no nested repetition: a hostile line costs linear time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_LINES = 40  # the failure keeps its last 20 lines; a caller may pass a few more
MAX_CHARS = 4096  # per line: DDP's message is ~600 characters, a CUDA OOM one ~500


@dataclass(frozen=True)
class Remedy:
    """A known job error: a stable key (for JSON readers), what it is, what to do."""

    key: str
    cause: str
    advice: str

    def line(self) -> str:
        return f"{self.cause}: {self.advice}"


@dataclass(frozen=True)
class _Rule:
    needs: tuple[re.Pattern[str], ...]  # each must match some line
    remedy: Remedy


def _rule(key: str, cause: str, advice: str, *patterns: str) -> _Rule:
    return _Rule(tuple(re.compile(p) for p in patterns), Remedy(key, cause, advice))


# Most specific first: the first rule whose patterns all match wins.
_RULES = (
    _rule(
        "cuda-oom",
        "a rank ran out of GPU memory",
        "lower the per-GPU batch size (keep the global one with gradient accumulation), or "
        "use activation checkpointing, bf16 or sharding (FSDP); when much memory is reserved "
        "but unallocated, try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        r"CUDA out of memory|CUDA error: out of memory",
    ),
    _rule(
        "ddp-static-graph",
        "DDP's static_graph=True saw the model use other parameters than in the first step",
        "drop static_graph=True, or use the same parameters in every step",
        r"Expected to have finished reduction in the prior iteration",
        r"training graph has changed in this iteration",
    ),
    _rule(
        "ddp-unused-parameters",
        "DDP found parameters that got no gradient in the last step",
        "pass find_unused_parameters=True to DistributedDataParallel, or make every output "
        "of forward() count in the loss; TORCH_DISTRIBUTED_DEBUG=DETAIL names the parameters",
        r"Expected to have finished reduction in the prior iteration",
    ),
    _rule(
        "invalid-device-ordinal",
        "a rank asked for a GPU index the node does not have",
        "index devices by LOCAL_RANK, not RANK (torch.cuda.set_device(int(os.environ"
        "['LOCAL_RANK']))), and start no more ranks per node than it has GPUs "
        "(--nproc-per-node; CUDA_VISIBLE_DEVICES narrows what a rank sees)",
        r"invalid device ordinal",
    ),
    _rule(
        "rendezvous-port-in-use",
        "the rendezvous port is already taken on the master",
        "another job or a leftover process listens on it: stop it, or set "
        "clusterkit.master_port to a free port (`clusterkit check` tests it in its network "
        "stage); a script must not start its own store on MASTER_PORT",
        r"server socket has failed to (?:listen|bind)",
        r"EADDRINUSE|[Aa]ddress already in use",
    ),
    _rule(
        "store-unreachable",
        "the ranks could not reach the rendezvous store at init_process_group",
        "leave MASTER_ADDR and MASTER_PORT to torchrun (a script that sets them, e.g. to "
        "localhost, points elsewhere), and run `clusterkit check`: its network stage tests "
        "the path to the master's port through every firewall",
        r"client socket has (?:timed out after|failed to connect to)",
    ),
    _rule(
        "ranks-unreachable",
        "the ranks could not connect to each other at init_process_group",
        "a firewall or the wrong interface blocks the ports the ranks open: run "
        "`clusterkit check` (its network stage tests them) and set clusterkit.interface "
        "to the interface it validates",
        r"Gloo connectFullMesh failed|init_process_group",
        r"Gloo connectFullMesh failed|Connection refused|Connection timed out|Socket Timeout",
    ),
)


def remedy_for(lines: Sequence[str]) -> Remedy | None:
    """The remedy for the error in a failure's last lines, or None when none is known."""
    window = [line[:MAX_CHARS] for line in lines[-MAX_LINES:]]
    for rule in _RULES:
        if all(any(p.search(line) for line in window) for p in rule.needs):
            return rule.remedy
    return None
