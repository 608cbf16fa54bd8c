"""The rules' ids and texts, the finding every rule returns, and the cluster context the
rules are judged with. The ids are a public contract (JSON `rule`, `launch`'s lines);
docs/lint.md lists each with its source and tests/unit/lint/test_lint_rules.py holds the two
together."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(str, enum.Enum):
    FAIL = "fail"  # breaks or hangs the job on the planned cluster
    WARN = "warn"  # trains wrongly or untidily; `--strict` makes it fail


@dataclass(frozen=True)
class Rule:
    id: str
    title: str  # what is wrong, in a few words
    why: str  # why it breaks on a cluster


@dataclass(frozen=True)
class Context:
    """What the cluster plans: None where it is not known (no inventory given)."""

    nodes: int | None = None
    nproc_per_node: int | None = None

    @property
    def world_size(self) -> int | None:
        if self.nodes is None or self.nproc_per_node is None:
            return None
        return self.nodes * self.nproc_per_node

    def by_nodes(self) -> Severity | None:
        """A habit that is harmless on one node: silent there, failing on two or more,
        a warning when the node count is unknown."""
        if self.nodes is None:
            return Severity.WARN
        return Severity.FAIL if self.nodes > 1 else None


@dataclass(frozen=True)
class LintFinding:
    rule: str
    severity: Severity
    path: str  # as the user wrote the script's folder, then the file inside it
    line: int
    message: str  # what is wrong here
    fix: str  # the line to write instead

    @property
    def why(self) -> str:
        return RULES[self.rule].why if self.rule in RULES else ""


def _rules(*rows: tuple[str, str, str]) -> dict[str, Rule]:
    return {rule_id: Rule(rule_id, title, why) for rule_id, title, why in rows}


RULES: dict[str, Rule] = _rules(
    (
        "lint.master-localhost",
        "MASTER_ADDR or the rendezvous address is set to this machine",
        "every node then looks for rank 0 on itself: the other nodes wait at the rendezvous "
        "until it times out",
    ),
    (
        "lint.spawn-under-torchrun",
        "the script starts its own ranks with multiprocessing spawn",
        "torchrun already starts one process per rank; each of them spawning more gives "
        "duplicate ranks that never complete the rendezvous",
    ),
    (
        "lint.world-size-device-count",
        "the world size is this node's GPU count",
        "torch.cuda.device_count() counts one node's GPUs; with more nodes the job has more "
        "ranks, and the process group waits for ranks that never come or refuses extra ones",
    ),
    (
        "lint.world-size-hardcoded",
        "the world size is a number written in the script",
        "the job's world size is the planned nodes times ranks per node; a different number "
        "hangs the rendezvous or leaves ranks out",
    ),
    (
        "lint.device-global-rank",
        "the GPU is chosen by the global rank",
        "from the second node on the global rank is larger than the node's GPU count: "
        "`invalid device ordinal`, or two ranks on one GPU",
    ),
    (
        "lint.local-rank-argument",
        "the script expects a --local_rank argument",
        "torchrun never passes --local_rank (it sets LOCAL_RANK): the script exits on a "
        "required argument, or every rank takes the default and uses the same GPU",
    ),
    (
        "lint.shuffle-no-sampler",
        "a shuffled DataLoader without a DistributedSampler in a distributed script",
        "every rank then reads the whole dataset: the ranks train on the same samples and "
        "an epoch is world-size times longer than it should be",
    ),
    (
        "lint.sampler-and-shuffle",
        "DataLoader given both shuffle=True and a sampler",
        "torch refuses this at run time (sampler option is mutually exclusive with "
        "shuffle), after the cluster time is spent",
    ),
    (
        "lint.sampler-no-set-epoch",
        "a shuffling DistributedSampler whose set_epoch is never called",
        "without set_epoch every epoch uses the same order (pytorch/pytorch#31232)",
    ),
    (
        "lint.collective-in-except",
        "a collective (barrier, all_reduce, ...) in an except block",
        "when a peer has died the other ranks wait in it until the process-group timeout "
        "(30 minutes by default) instead of failing at once",
    ),
    (
        "lint.collective-on-one-rank",
        "a collective called only on one rank",
        "every rank must enter a collective; the ones that do wait for the others forever",
    ),
    (
        "lint.no-destroy-process-group",
        "the process group is never destroyed",
        "the ranks may exit with NCCL work pending; torch warns, and a rank can hang or "
        "leak its communicator at exit",
    ),
    (
        "lint.data-parallel",
        "torch.nn.DataParallel in a multi-node script",
        "DataParallel drives the GPUs of one process: it never spans nodes, and under "
        "torchrun every rank tries to use every GPU of its node",
    ),
    (
        "lint.unreadable",
        "a file of the script could not be read or parsed",
        "the job fails at import on every rank",
    ),
    (
        "lint.limit",
        "part of the script was not linted (too many or too large files)",
        "what was not read was not checked",
    ),
)
