"""What a failed attempt leads to: run again, leave nodes out for spares, or stop. Pure.

The decision is a function of typed inputs only: how the attempt ended, the fault it was
put down to (launch/faults.py), the restarts used and the restarts the flags allow. A node
fault costs a node restart (--max-restarts): the faulty nodes are left out and spares
taken; a job fault is run again on the same nodes only while --max-restarts-on-errors
allows. The loop that carries the decision out is launch/attempts.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterkit.launch.faults import Fault

# What a restart may cure; not a time limit. node-fault: the hardware watch stopped it.
RECOVERABLE = ("failed", "lost", "hung", "slow", "node-fault")

# end: the attempt's outcome is the launch's (it succeeded, was interrupted or stopped);
# stop: it failed and no restart is allowed; restart: the same nodes again (a job fault);
# replace: the faulty nodes left out, spares taken, the new set re-checked (a node fault).
Action = Literal["end", "stop", "restart", "replace"]


@dataclass(frozen=True)
class RestartBudget:
    """The restarts the flags allow: of node faults and of job faults."""

    node: int = 0  # --max-restarts
    job: int = 0  # --max-restarts-on-errors


@dataclass(frozen=True)
class RestartsUsed:
    node: int = 0
    job: int = 0


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str = ""  # a stop's reason, as the incident line names it


def recoverable(result: str) -> bool:
    """Whether an attempt that ended so may be followed by another."""
    return result in RECOVERABLE


def may_replace(used: RestartsUsed, budget: RestartBudget) -> bool:
    """Whether a node restart is left: only then are the survivors asked about themselves
    (the post-mortem that may blame a node on its own evidence)."""
    return used.node < budget.node


def decide(result: str, fault: Fault | None, used: RestartsUsed, budget: RestartBudget) -> Decision:
    """The action after an attempt that ended with `result`, its failure put down to
    `fault` (None when it did not fail)."""
    if fault is None or not recoverable(result):
        return Decision("end")
    if fault.node:
        if not may_replace(used, budget):
            return Decision("stop", "no node restarts left (--max-restarts)")
        return Decision("replace")
    if used.job >= budget.job:
        return Decision("stop", "a job fault is not retried (--max-restarts-on-errors)")
    return Decision("restart")


def shortage(healthy: int, least: int) -> str | None:
    """Why the job cannot go on when, spares taken, too few healthy nodes are left."""
    if healthy >= least:
        return None
    return f"{healthy} healthy nodes left, --nnodes needs {least}"
