"""`launch`'s pre-flight of the entry script (clusterkit/launch/entry.py) over the gate's
connections: every node the job starts on holds the same script, or nothing starts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from clusterkit.cli.launch import EntryCheck
from clusterkit.contract.session import Session
from clusterkit.escape import printable
from clusterkit.inventory.model import Inventory
from clusterkit.launch.entry import SECONDS, ask_nodes, entry_problems, entry_script
from clusterkit.slurm.check import srun_session_of
from clusterkit.status import ExitStatus
from clusterkit.words import counted

STEP_MARGIN = 30.0  # under Slurm, the step outlives the pre-flight's own bound by this much


def script_to_check(request: EntryCheck, inventory: Inventory) -> tuple[str | None, str]:
    """The entry script's path as the nodes open it, or None and why it is not checked. In
    an image the script is the image's, unless a relative path under --workdir (mounted)."""
    script, why = entry_script(request.job)
    if script is None or not inventory.settings.image:
        return script, why
    if not request.workdir or script.startswith("/"):
        return None, "the job runs in the image (checked with --workdir and a relative path)"
    return script, why


def entry_preflight(
    request: EntryCheck,
    inventory: Inventory,
    session: Session,
    active: Sequence[str],
    note: Callable[[str], None],
) -> ExitStatus | None:
    """None when every node in `active` holds the same entry script; else the exit status
    (1: missing, unreadable or another file on a node; 3: a node did not answer), every
    node named, one line each."""
    script, why = script_to_check(request, inventory)
    if script is None:
        note(printable(f"clusterkit: pre-flight: the entry script is not checked: {why}"))
        return None
    transports = {host: session.transports[host] for host in active}
    interpreters = {host.name: host.python_interpreter or "python3" for host in inventory.hosts}
    srun = srun_session_of(transports)
    step = srun.phase("entry", SECONDS + STEP_MARGIN, list(transports)) if srun else None
    with step or contextlib.nullcontext():
        answers = ask_nodes(transports, interpreters, script, request.workdir, request.forks)
    problems, unanswered = entry_problems(script, answers)
    for line in problems + unanswered:
        note(f"clusterkit: pre-flight: {line}")
    shown = printable(script[:200])
    if problems:
        note(
            f"clusterkit: pre-flight: nothing was started: the job needs the same {shown} on "
            "every node (copy it to each, or keep it on a shared path and give --workdir)"
        )
        if script in ("python", "python3"):
            note(
                "clusterkit: pre-flight: torchrun starts the script with the node's Python "
                "itself: give the script first, `-- train.py ARGS`, without `python`"
            )
        return ExitStatus.FAILED
    if unanswered:
        note("clusterkit: pre-flight: not every node answered: nothing was started")
        return ExitStatus.INCOMPLETE
    (answer, *_) = answers.values()
    note(
        f"clusterkit: pre-flight: {shown} is the same file on {counted(len(answers), 'node')} "
        f"(sha256 {answer.sha256[:12]})"
    )
    return None
