"""Drain a node that fails its own check, and resume it once it passes, through scontrol.

Only a drain clusterkit set (its reason starts with "clusterkit:") is ever lifted: a node an
admin drained stays drained whatever clusterkit finds.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clusterkit.errors import ExternalToolError
from clusterkit.hostlist import check_node_name
from clusterkit.slurm.target import run_slurm_tool

REASON_PREFIX = "clusterkit:"
REASON_LIMIT = 200  # Slurm keeps the reason in its state; a long list of ids is cut
SCONTROL_SECONDS = 15.0


@dataclass(frozen=True)
class NodeState:
    state: str  # e.g. IDLE, MIXED+DRAIN, DOWN+DRAIN
    reason: str  # "" when none

    @property
    def draining(self) -> bool:
        return "DRAIN" in self.state.split("+") or self.state.startswith("DRAIN")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class Action:
    kind: str  # "drain", "resume", "keep"
    reason: str  # the drain reason, or why nothing is done


def drain_reason(check_ids: Sequence[str], notes: Sequence[str] = ()) -> str:
    """`clusterkit: ID,ID` and, when checks said what a device needs (`GPU 1 0000:38:00 Xid
    79 needs reboot`), those notes after a semicolon: an admin reading `sinfo -R` knows what
    to do. Notes hold no counts or times, so the same fault keeps the same reason."""
    reason = f"{REASON_PREFIX} {','.join(sorted(set(check_ids)))}"
    if notes:
        reason += "; " + "; ".join(dict.fromkeys(notes))
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 3] + "..."


def decide(node: NodeState, failing: Sequence[str], notes: Sequence[str] = ()) -> Action:
    """What to do with the node given the check ids that failed on it (pure)."""
    if failing:
        reason = drain_reason(failing, notes)
        if node.draining and not node.ours:
            return Action("keep", f"already drained by someone else ({node.reason or 'no reason'})")
        if node.draining and node.reason == reason:
            return Action("keep", f"already drained by clusterkit ({reason})")
        return Action("drain", reason)
    if node.draining and node.ours:
        return Action("resume", f"passes again (was: {node.reason})")
    if node.draining:
        return Action("keep", f"drained by someone else ({node.reason or 'no reason'}): left alone")
    return Action("keep", "passes")


def local_node_name(environ: Mapping[str, str]) -> str:
    """Slurm's name for this node: SLURMD_NODENAME when Slurm set it in the run's `environ`,
    else `hostname -s`; a UsageError unless it is one node's name (scontrol takes
    `gpu[01-64]` as a range)."""
    if name := environ.get("SLURMD_NODENAME"):
        return check_node_name(name, "SLURMD_NODENAME")
    return check_node_name(os.uname().nodename.split(".")[0], "hostname -s")


def _scontrol(environ: Mapping[str, str], *args: str) -> str:
    """scontrol ARGS, found on and run with the run's `environ`; its stdout."""
    try:
        done = run_slurm_tool(["scontrol", *args], environ, SCONTROL_SECONDS)
    except subprocess.TimeoutExpired:
        raise ExternalToolError(
            f"--slurm-drain: scontrol {args[0]} did not answer in {SCONTROL_SECONDS:g} s"
        ) from None
    except OSError as error:
        raise ExternalToolError(
            f"--slurm-drain: cannot run scontrol: {error.strerror or error}"
        ) from None
    if done is None:
        raise ExternalToolError("--slurm-drain: scontrol not found (install the Slurm client)")
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ExternalToolError(f"--slurm-drain: scontrol {' '.join(args[:2])} failed: {detail}")
    return done.stdout


# Slurm appends who set the reason and when: `Reason=fan swap [root@2026-11-26T03:00:37]`.
_REASON_STAMP = re.compile(r" \[[^\]\s]*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]")


def parse_node_state(text: str, name: str) -> NodeState:
    """The state and reason in `scontrol show node NAME -o` (one line). The reason is free
    text, `=` and brackets included, and the line's last field: it runs to Slurm's stamp."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    if state is None:
        raise ExternalToolError(f"--slurm-drain: Slurm does not know node {name!r}")
    reason = ""
    if found := re.search(r"(?:^|\s)Reason=(.*)", text[state.end() :]):
        rest = found.group(1)
        stamp = _REASON_STAMP.search(rest)
        reason = (rest[: stamp.start()] if stamp else rest).strip()
    return NodeState(state.group(1), reason)


def node_state(name: str, environ: Mapping[str, str]) -> NodeState:
    text = _scontrol(environ, "show", "node", check_node_name(name, "--slurm-drain"), "-o")
    return parse_node_state(text, name)


def apply(name: str, action: Action, environ: Mapping[str, str]) -> None:
    check_node_name(name, "--slurm-drain")
    if action.kind == "drain":
        _scontrol(environ, "update", f"nodename={name}", "state=drain", f"reason={action.reason}")
    elif action.kind == "resume":
        _scontrol(environ, "update", f"nodename={name}", "state=resume")


def left_out_reason(why: str) -> str:
    """The drain reason for a node a launch left out: `clusterkit: launch: WHY`, one line,
    cut to what Slurm keeps."""
    text = "".join(c if c.isprintable() else " " for c in why)  # node data among it
    reason = f"{REASON_PREFIX} launch: {' '.join(text.split())}"
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 3] + "..."


def drain_command(name: str, why: str) -> str:
    """The scontrol command an admin runs to drain a node a launch left out."""
    reason = left_out_reason(why)
    return shlex.join(
        ["scontrol", "update", f"nodename={check_node_name(name, 'drain')}", "state=drain",
         f"reason={reason}"]
    )  # fmt: skip


def drain_left_out(name: str, why: str, environ: Mapping[str, str]) -> str | None:
    """Drain a node a launch left out, unless someone else drained it already; None when
    done (or already drained), else why not (a user's job usually may not: scontrol says)."""
    try:
        state = node_state(name, environ)
        if state.draining and not state.ours:
            return None
        apply(name, Action("drain", left_out_reason(why)), environ)
    except ExternalToolError as error:
        return str(error)
    return None
