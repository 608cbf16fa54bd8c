"""The attempts of one `clusterkit launch`: run, and on a failure decide, recover, run again.

gate (every host checked) -> the node set (--nnodes: healthy hosts, the rest spares) ->
attempt: the job on the set -> on failure: every rank already stopped; the fault put down
to a node or to the job (clusterkit/launch/faults.py), the action chosen by the pure policy
(clusterkit/launch/recovery.py) -> a node fault, while --max-restarts allows: the node left
out, a spare taken, the new set re-checked (probe, static, network, and the bench with
--recheck bench; a spare that fails is left out too), the master chosen among healthy nodes
-> the same command again with CLUSTERKIT_RESTART=N. A job fault is run again only while
--max-restarts-on-errors allows. Without any of these flags the loop runs one attempt: the
launch as it always was. The command hands in how stages run (over SSH, or each in a job
step under srun) and which stages make the check: both live above this layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from clusterkit.contract.names import StageName
from clusterkit.contract.session import NoProgress, Session, SessionOptions
from clusterkit.contract.stage import Stage
from clusterkit.escape import printable
from clusterkit.facts import FactsByHost, HostFacts, collected
from clusterkit.inventory.model import Inventory
from clusterkit.launch.faults import Fault, classify
from clusterkit.launch.incidents import Incident, attempt_folder_name, restart_minutes
from clusterkit.launch.job import JobOutcome, SuperviseOptions
from clusterkit.launch.plan import LaunchSettings
from clusterkit.launch.recovery import (
    RestartBudget,
    RestartsUsed,
    decide,
    may_replace,
    recoverable,
    shortage,
)
from clusterkit.launch.spares import NodePool, problems_by_host
from clusterkit.launch.stage import LaunchStage, outcome_details
from clusterkit.launch.watch import node_devices
from clusterkit.safefiles import PrivateFolder

# The re-check of a new node set: fast, seconds rather than the bench's minutes.
RECHECK_STAGES: tuple[StageName, ...] = ("probe", "static", "network")
# What a failed attempt's survivors say of themselves.
POSTMORTEM_STAGES: tuple[StageName, ...] = ("probe", "static")
RESTART_VARIABLE = "CLUSTERKIT_RESTART"  # the attempt number, 0 first: resume when > 0


@dataclass(frozen=True)
class RecoveryOptions:
    """What the launch's flags say of its attempts and of their re-checks."""

    budget: RestartBudget = field(default_factory=RestartBudget)  # the restarts allowed
    strict: bool = False  # a warning fails a node's re-check (--strict)
    forks: int | None = None  # hosts checked at once (--forks); None: all of them
    skip: frozenset[StageName] = frozenset()  # stages never run (--skip)
    recheck: str = "fast"  # "bench": the re-check of a new node set runs the bench too


@dataclass
class Attempts:
    """One launch's attempts over a pool of connected, checked hosts."""

    recovery: RecoveryOptions
    inventory: Inventory
    gate_session: Session  # its transports serve every attempt; closed by the caller
    pool: NodePool
    options: SuperviseOptions
    run_id: str
    settings_for: Callable[[Inventory, FactsByHost, Mapping[str, Any], str], LaunchSettings]
    note: Callable[[str], None]
    # The check's stages for an inventory (what the re-check and the post-mortem pick from).
    check_stages: Callable[[Inventory], list[Stage]]
    # How stages run on a session: as they are over SSH; each in one job step under srun.
    run_stages: Callable[[Session, list[Stage]], None]
    # Told of every node a node fault leaves out, with why, and whether the node's own
    # evidence says so (Slurm: drain only then, or say how).
    left_out: Callable[[str, str, bool], None] = lambda host, why, its_own: None
    incidents: list[Incident] = field(default_factory=list)
    outcome: JobOutcome | None = None
    facts: FactsByHost = field(default_factory=dict)  # of the running node set
    facts_details: Mapping[str, Any] = field(default_factory=dict)  # its stages' details
    # What the survivors of the last attempt said of themselves in its post-mortem: the
    # re-check that follows reuses it and probes only the spares.
    fresh_facts: dict[str, HostFacts] = field(default_factory=dict)
    attempt: int = 0
    node_restarts: int = 0
    job_restarts: int = 0
    started: float = field(default_factory=time.monotonic)

    def run(self, facts: FactsByHost, details: Mapping[str, Any]) -> JobOutcome | None:
        """Attempts until one ends for good; the last outcome, or None when the first
        could not start (a node gone since the gate)."""
        self.facts, self.facts_details = facts, details
        while True:
            session = self._session(self.pool.active)
            settings = self.settings_for(session.inventory, facts, details, self._run_id())
            settings = replace(
                settings, extra_env={**settings.extra_env, RESTART_VARIABLE: str(self.attempt)}
            )
            self._announce(settings)
            outcome = self._run_attempt(session, settings)
            if outcome is None or not recoverable(outcome.result):
                return outcome  # succeeded, interrupted, or stopped at --time-limit
            self.outcome = outcome
            next_set = self._recover(outcome)
            if next_set is None:
                return outcome
            self.facts, self.facts_details = next_set
            facts, details = next_set
            self.attempt += 1

    def _say(self, text: str) -> None:
        """A line of ours; it quotes findings and ranks' lines: node data, made inert."""
        self.note(printable(text))

    # --- one attempt --------------------------------------------------------------------

    def _run_id(self) -> str:
        return self.run_id if self.attempt == 0 else f"{self.run_id}-{self.attempt}"

    def _announce(self, settings: LaunchSettings) -> None:
        nodes = [node.name for node in settings.nodes]
        spares = self.pool.spares
        what = f"attempt {self.attempt}" if self.attempt else "the job"
        self.note(
            f"clusterkit: {what} on {', '.join(nodes)} (master {settings.master_addr}:"
            f"{settings.master_port})" + (f"; spares: {', '.join(spares)}" if spares else "")
        )

    def _run_attempt(self, session: Session, settings: LaunchSettings) -> JobOutcome | None:
        incident = self.incidents[-1] if self.incidents and self.attempt else None
        folder = self._attempt_folder()
        options = replace(self.options, on_running=self._on_running(incident), log_dir=folder)
        # What the node set's facts list is all each node's hardware watch may name.
        options.devices = {host: node_devices(facts) for host, facts in self.facts.items()}
        stage = LaunchStage(settings, options, gated=False, strict=self.recovery.strict)
        try:
            self.run_stages(session, [stage])
        finally:
            if folder is not None:
                folder.close()
        if stage.outcome is None:
            self._say(f"clusterkit: nothing was started: {session.stages.get('launch')}")
        return stage.outcome

    def _attempt_folder(self) -> PrivateFolder | None:
        """This attempt's own folder in --log-dir, `attempt-N`, checked like --log-dir
        itself: a restart never overwrites the rank logs and stacks of the fault that caused
        it. One that cannot be used is told, and the attempt runs without logs."""
        top = self.options.log_dir
        if top is None:
            return None
        try:
            return PrivateFolder.open(top.child(attempt_folder_name(self.attempt)))
        except OSError as error:
            self._say(f"clusterkit: --log-dir: attempt {self.attempt} is not logged: {error}")
            return None

    def _on_running(self, incident: Incident | None) -> Callable[[], None] | None:
        if incident is None:
            return None

        def running() -> None:
            incident.running_s = time.time() - incident.began
            since = (
                f"the fault (last heard {incident.detect_s:.1f} s before it was detected)"
                if incident.onset is not None and incident.detect_s >= 0.05
                else "the fault was detected"
            )
            self.note(
                f"clusterkit: recovered: every rank of attempt {self.attempt} runs, "
                f"{incident.running_s:.1f} s after {since}"
            )

        return running

    # --- between attempts ---------------------------------------------------------------

    def _recover(self, outcome: JobOutcome) -> tuple[dict[str, HostFacts], dict[str, Any]] | None:
        """The facts and details of the node set of the next attempt, or None: stop here."""
        stopped = time.time()  # the attempt has ended: every rank stopped
        detected = _wall(outcome.detected_at)
        onset = None if outcome.onset_at is None else _wall(outcome.onset_at)
        self.fresh_facts = {}
        survivors = [h for h in self.pool.active if not _lost(outcome, h)]
        may_restart = may_replace(self._used(), self.recovery.budget)
        evidence = self._postmortem(survivors) if may_restart else ({}, {})
        fault = classify(
            outcome.all_failures,
            hang_groups=outcome.hang.groups if outcome.hang else (),
            hang_missing=outcome.hang.missing if outcome.hang else (),
            node_problems=evidence[0],
            oom_pids=evidence[1],
            straggler=_straggler(outcome),
            hardware=_hardware(outcome),
        )
        incident = Incident(self.attempt, detected, fault, evidence=outcome.evidence, onset=onset)
        incident.stop_s = stopped - incident.began
        self.incidents.append(incident)
        decision = decide(outcome.result, fault, self._used(), self.recovery.budget)
        if decision.action in ("stop", "end"):
            incident.action = f"stop: {decision.why}"
            self._say(f"clusterkit: {incident.line()}")
            return None
        if decision.action == "restart":
            self.job_restarts += 1
            incident.action = f"run again on the same nodes (job restart {self.job_restarts})"
            self._say(f"clusterkit: {incident.line()}")
            return dict(self.facts), dict(self.facts_details)
        self.node_restarts += 1
        return self._replace_nodes(incident, fault)

    def _used(self) -> RestartsUsed:
        return RestartsUsed(node=self.node_restarts, job=self.job_restarts)

    def _replace_nodes(
        self, incident: Incident, fault: Fault
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        incident.excluded = self.pool.exclude({h: [fault.reason] for h in fault.hosts})
        for host in incident.excluded:
            self.left_out(host, fault.reason, host in fault.own_evidence)
        found = self.settle(incident)
        incident.recheck_s = time.time() - incident.began
        return found

    def settle(
        self, incident: Incident | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Fill the set from the spares and re-check it until every node passes: its facts
        and details, or None when too few healthy nodes are left. Also before the first
        attempt when the gate left the master out: nobody tested the paths to the new one."""
        while True:
            taken = self.pool.fill(first=incident is None)
            if incident is not None:
                incident.spares += taken
            if (short := shortage(len(self.pool.active), self.pool.count.least)) is not None:
                self._stop(incident, short)
                return None
            if incident is not None:
                incident.action = self._restart_words(incident.excluded, incident.spares)
                self._say(f"clusterkit: {incident.line()}")
            session = self._session(self.pool.active, recheck=True)
            problems, whole = problems_by_host(
                session.findings, self.pool.active, strict=self.recovery.strict
            )
            if whole:
                self._stop(incident, f"the re-check failed: {whole[0]}")
                return None
            if not problems:
                return dict(session.facts), dict(session.details)
            for host, why in problems.items():
                self._say(f"clusterkit: {host} fails the re-check, left out: {why[0]}")
            left_out = self.pool.exclude(problems)
            for host in left_out:
                self.left_out(host, problems[host][0], True)  # its own failing checks
            if incident is not None:
                incident.excluded += left_out

    def _stop(self, incident: Incident | None, why: str) -> None:
        if incident is None:
            self._say(f"clusterkit: {why}: nothing was started")
            return
        incident.action = f"stop: {why}"
        self._say(f"clusterkit: {incident.line()}")

    def _restart_words(self, excluded: Sequence[str], spares: Sequence[str]) -> str:
        left_out = f"left out {', '.join(excluded)}; " if excluded else ""
        taken = f"spare {', '.join(spares)} taken; " if spares else "no spare; "
        return (
            f"{left_out}{taken}re-checking, then attempt {self.attempt + 1} on "
            f"{len(self.pool.active)} nodes (node restart {self.node_restarts} of "
            f"{self.recovery.budget.node})"
        )

    def _postmortem(
        self, hosts: Sequence[str]
    ) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
        """What the nodes still answering say of themselves now: failing checks (a new Xid,
        a pending remap) and the pids the kernel's OOM killer killed."""
        if not hosts:
            return {}, {}
        session = self._session(hosts, stages=POSTMORTEM_STAGES)
        self.fresh_facts = dict(session.facts)
        problems, _ = problems_by_host(session.findings, hosts, strict=False)
        kills = {host: _oom_pids(session.facts.get(host)) for host in hosts}
        return problems, kills

    def _session(
        self, hosts: Sequence[str], *, recheck: bool = False, stages: Sequence[StageName] = ()
    ) -> Session:
        """A session over `hosts` on the gate's connections, with `stages` of the check (or
        the re-check's) run; the master is the inventory's while it is among them."""
        inventory = subset(self.inventory, hosts)
        transports = {h: self.gate_session.transports[h] for h in hosts}
        session = Session(
            inventory,
            None,
            SessionOptions(forks=self.recovery.forks, skip=self.recovery.skip),
            progress=NoProgress(),
            transports=transports,
        )
        if recheck:  # what the post-mortem just probed is not probed again
            session.facts.update({h: f for h, f in self.fresh_facts.items() if h in hosts})
        wanted: set[StageName] = set(stages) or (set(RECHECK_STAGES) if recheck else set())
        if recheck and self.recovery.recheck == "bench":
            wanted.add("bench")
        if wanted:
            chosen = [s for s in self.check_stages(inventory) if s.name in wanted]
            self.run_stages(session, chosen)
        return session

    def details(self) -> dict[str, Any]:
        """The launch's record in the JSON report: the last outcome and every incident."""
        data: dict[str, Any] = outcome_details(self.outcome) if self.outcome else {}
        minutes = restart_minutes(self.incidents)
        data.update(
            attempts=self.attempt + 1,
            nodes=list(self.pool.active),
            excluded=dict(self.pool.excluded),
            spares_used=list(self.pool.spares_used),
            incidents=[incident.to_dict() for incident in self.incidents],
            restart_min=None if minutes is None else round(minutes, 3),
        )
        return data


def subset(inventory: Inventory, hosts: Sequence[str]) -> Inventory:
    """The inventory of these hosts only, in their order; when its master is not among
    them, the first of them is the master (by address, as MASTER_ADDR will name it)."""
    chosen = tuple(inventory.host(name) for name in hosts)
    settings = inventory.settings
    if inventory.master.name not in hosts and chosen:
        settings = replace(settings, master=chosen[0].address)
    return replace(inventory, hosts=chosen, settings=settings)


def _lost(outcome: JobOutcome, host: str) -> bool:
    return any(item.lost and item.host == host for item in outcome.all_failures)


def _oom_pids(facts: HostFacts | None) -> list[int]:
    """The pids the kernel's OOM killer killed on this node since boot."""
    log = collected((facts or HostFacts()).get("kernel_log"))
    return [pid for kill in log.get("oom_kills", []) if (pid := kill.get("pid")) is not None]


def _straggler(outcome: JobOutcome) -> tuple[str, str] | None:
    """(host, why) when the attempt was stopped for a straggler (--straggler-fault)."""
    found = outcome.straggler
    return (found.host, found.describe()) if outcome.result == "slow" and found else None


def _hardware(outcome: JobOutcome) -> tuple[str, str] | None:
    """(host, why) when the node's hardware watch stopped the attempt (launch/watch.py)."""
    found = outcome.hardware_fault
    return (found.host, f"{found.host} during the run: {found.what}") if found else None


def _wall(monotonic: float | None) -> float:
    """A monotonic moment as wall clock time (now when unknown)."""
    if monotonic is None:
        return time.time()
    return time.time() - (time.monotonic() - monotonic)
