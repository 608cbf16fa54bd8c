"""What a supervised job is given and what it gives back: the supervisor's options, and the
outcome of one attempt (with the hang's report when it hung). Data only: the supervisor
(launch/supervise.py) fills them, the launch and its report read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from clusterkit.launch import failure as failures
from clusterkit.launch import stacks
from clusterkit.launch.progress import Straggler
from clusterkit.launch.remedies import Remedy, remedy_for
from clusterkit.launch.watch import Graded
from clusterkit.safefiles import PrivateFolder

# No byte from a node for this long (its runner speaks at least every second): it is lost.
# Ten missed beats in a row: a loaded node delays a beat by a second or two, not ten.
NODE_TIMEOUT = 10.0
# After the other nodes reported their end, how long one may still run with no rank printing
# before it is stopped: a rank may still write a last checkpoint, but a node that keeps its
# heartbeat and never reports would hold the launch forever without --time-limit.
EXIT_WAIT = 600.0


@dataclass
class SuperviseOptions:
    hang_timeout: float | None = None  # None: no hang detection
    stop_grace: float = 5.0  # ranks get this long after SIGTERM before SIGKILL
    stacks: str = "auto"  # how ranks' stacks are read: auto, py-spy, faulthandler
    node_timeout: float = NODE_TIMEOUT
    exit_wait: float = EXIT_WAIT
    time_limit: float | None = None  # None: as long as it runs
    log_dir: PrivateFolder | None = None  # checked and held open by the caller
    out: TextIO | None = None  # where `host/rank: line` goes (default: stdout)
    note: Callable[[str], None] = print  # clusterkit's own messages
    on_running: Callable[[], None] | None = None  # called once every rank has printed
    straggler_fault: bool = False  # a straggler named during the run stops it as a node fault
    watch: bool = True  # each node's runner watches its hardware while the job runs
    # host -> the devices its facts list (launch/watch.py node_devices): a node's hardware
    # events name only these; None: not known (no check), every event read
    devices: Mapping[str, frozenset[str]] | None = None


@dataclass
class HangReport:
    groups: list[stacks.Group]
    stacks: list[stacks.RankStack]
    missing: list[str]  # hosts whose dumps did not come back
    reason: str
    malformed: list[str] = field(default_factory=list)  # "host: what was dropped"
    flight: list[str] = field(default_factory=list)  # where the flight records part

    @property
    def summary(self) -> str:
        return stacks.summary(self.groups)

    @property
    def odd_ones_out(self) -> list[str]:
        return stacks.odd_ones_out(self.groups)


@dataclass
class JobOutcome:
    status: int
    result: str  # succeeded, failed, lost, hung, slow, stopped, interrupted
    message: str
    first_failure: failures.Failure | None = None
    hang: HangReport | None = None
    node_codes: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0
    all_failures: list[failures.Failure] = field(default_factory=list)  # every one seen
    detected_at: float | None = None  # monotonic: the first failure, or the hang, seen
    onset_at: float | None = None  # monotonic: when it began (a lost node's last sign of life)
    running_at: float | None = None  # monotonic: every rank had printed (it runs)
    evidence: str | None = None  # the --log-dir folder this attempt's logs and stacks went to
    straggler: Straggler | None = None  # the node named as holding the job back, if any
    hardware: list[Graded] = field(default_factory=list)  # what the watch saw, each once
    hardware_fault: Graded | None = None  # the first watch event that stopped the job

    @property
    def remedy(self) -> Remedy | None:
        """What to do about the first failure's error, when it is a common one (our words,
        selected by its last lines, never quoting them)."""
        first = self.first_failure
        return None if first is None else remedy_for(first.last_lines)
