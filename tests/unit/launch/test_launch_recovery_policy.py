"""The recovery policy on a table of faults: one row per kind of fault and state of the
restarts, and the action it leads to. The faults are made by the classifier from what a
failed attempt reports, as the launch makes them."""

from __future__ import annotations

import pytest

from clusterkit.launch.failure import Failure
from clusterkit.launch.faults import Fault, classify
from clusterkit.launch.recovery import (
    RestartBudget,
    RestartsUsed,
    decide,
    may_replace,
    recoverable,
    shortage,
)
from clusterkit.launch.stacks import Group

TRACEBACK = ("Traceback (most recent call last):", "ValueError: bad batch at step 5")
NO_NODE = "no node restarts left (--max-restarts)"
NO_JOB = "a job fault is not retried (--max-restarts-on-errors)"


def lost() -> Fault:
    return classify([Failure("node2", None, None, 1.0, lost=True)])


def oom_kill() -> Fault:
    killed = Failure("node2", 3, -9, 1.0, pid=4242)
    return classify([killed], oom_pids={"node2": [4242]})


def hardware_watch() -> Fault:
    return classify([], hardware=("node3", "node3 during the run: Xid 79"))


def ecc_in_output() -> Fault:
    line = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    return classify([Failure("node1", 0, 1, 1.0, last_lines=(line,))])


def failing_own_checks() -> Fault:
    failed = Failure("node2", 2, 1, 1.0, last_lines=TRACEBACK)
    return classify([failed], node_problems={"node2": ["gpu.remap: a row remap is pending"]})


def straggler() -> Fault:
    return classify([], straggler=("node4", "node4 holds the job back: 3.1x the median step"))


def hang_one_node_elsewhere() -> Fault:
    groups = [
        Group("allreduce", (0, 1, 2, 3), ("node1", "node2")),
        Group("dataloader", (4, 5), ("node3",)),
    ]
    return classify([], hang_groups=groups)


def hang_alike() -> Fault:
    return classify([], hang_groups=[Group("allreduce", (0, 1, 2, 3), ("node1", "node2"))])


def exception() -> Fault:
    return classify([Failure("node1", 0, 1, 1.0, last_lines=TRACEBACK)])


NODE_FAULTS = {
    "lost": (lost, "lost"),
    "oom kill": (oom_kill, "failed"),
    "hardware watch": (hardware_watch, "node-fault"),
    "ecc in output": (ecc_in_output, "failed"),
    "failing own checks": (failing_own_checks, "failed"),
    "straggler (--straggler-fault)": (straggler, "slow"),
    "hang, one node elsewhere": (hang_one_node_elsewhere, "hung"),
}
JOB_FAULTS = {"exception": (exception, "failed"), "hang, every rank alike": (hang_alike, "hung")}

ROWS = [
    # (case, budget, used, expected action, expected why)
    *[
        pytest.param(kind, RestartBudget(node=1), RestartsUsed(), "replace", "", id=f"{kind}-spare")
        for kind in NODE_FAULTS
    ],
    *[
        pytest.param(
            kind,
            RestartBudget(node=2, job=5),
            RestartsUsed(node=2),
            "stop",
            NO_NODE,
            id=f"{kind}-no-node-restarts-left",
        )
        for kind in NODE_FAULTS
    ],
    pytest.param(
        "lost",
        RestartBudget(job=3),
        RestartsUsed(),
        "stop",
        NO_NODE,
        id="node-fault-only-job-restarts-allowed",
    ),
    *[
        pytest.param(kind, RestartBudget(job=1), RestartsUsed(), "restart", "", id=f"{kind}-again")
        for kind in JOB_FAULTS
    ],
    *[
        pytest.param(
            kind,
            RestartBudget(node=3, job=1),
            RestartsUsed(job=1),
            "stop",
            NO_JOB,
            id=f"{kind}-no-job-restarts-left",
        )
        for kind in JOB_FAULTS
    ],
    pytest.param(
        "exception",
        RestartBudget(node=3),
        RestartsUsed(),
        "stop",
        NO_JOB,
        id="job-fault-only-node-restarts-allowed",
    ),
    pytest.param(
        "exception", RestartBudget(), RestartsUsed(), "stop", NO_JOB, id="job-fault-no-flags"
    ),
    pytest.param(
        "lost", RestartBudget(), RestartsUsed(), "stop", NO_NODE, id="node-fault-no-flags"
    ),
]


@pytest.mark.parametrize(("case", "budget", "used", "action", "why"), ROWS)
def test_each_fault_and_state_leads_to_its_action(
    case: str, budget: RestartBudget, used: RestartsUsed, action: str, why: str
) -> None:
    make, result = {**NODE_FAULTS, **JOB_FAULTS}[case]
    fault = make()
    assert fault.node is (case in NODE_FAULTS), fault  # the row's fault is of its kind
    decision = decide(result, fault, used, budget)
    assert (decision.action, decision.why) == (action, why)


@pytest.mark.parametrize("result", ["succeeded", "stopped", "interrupted"])
def test_an_attempt_that_did_not_fail_ends_the_launch(result: str) -> None:
    """Stopped at --time-limit, interrupted by the user, or done: never run again, even
    with every restart left and a fault at hand."""
    budget = RestartBudget(node=5, job=5)
    assert not recoverable(result)
    assert decide(result, lost(), RestartsUsed(), budget).action == "end"
    assert decide(result, None, RestartsUsed(), budget).action == "end"


def test_the_survivors_are_asked_only_while_a_node_restart_is_left() -> None:
    assert may_replace(RestartsUsed(node=0), RestartBudget(node=1))
    assert not may_replace(RestartsUsed(node=1), RestartBudget(node=1, job=4))


@pytest.mark.parametrize(
    ("healthy", "least", "why"),
    [(2, 2, None), (3, 2, None), (1, 2, "1 healthy nodes left, --nnodes needs 2")],
)
def test_too_few_healthy_nodes_after_the_spares_stop_the_launch(
    healthy: int, least: int, why: str | None
) -> None:
    assert shortage(healthy, least) == why
