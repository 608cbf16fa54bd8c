"""`check --slurm` with the srun transport: the same stages, each phase in one job step.

`SrunConnectStage` stands in for `connect`: every allocated node gets an SrunTransport (no
SSH, so nothing can be refused; a node whose slurmd does not start the step shows up in the
probe as unreachable). `InStep` wraps a stage that acts on nodes so that everything it runs
goes through ONE `srun` step over all nodes, opened before it and ended (or cancelled) after.
"""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult
from clusterkit.transport.srun import SrunSession
from clusterkit.words import counted


class SrunConnectStage(Stage):
    name = "connect"

    def __init__(self, srun: SrunSession, source: str) -> None:
        self.srun, self.source = srun, source

    def skip_reason(self, session: Session) -> str | None:
        return None

    def steps(self, session: Session) -> int:
        return 0

    def run(self, session: Session) -> StageResult:
        session.transports.update(self.srun.transports())
        hosts = list(session.transports)
        job = f"job {self.srun.job_id}" if self.srun.job_id else "a new allocation"
        return StageResult(
            [
                Finding(
                    "host.reachable",
                    Status.OK,
                    f"{counted(len(hosts), 'node')} from {self.source}, reached through srun steps "
                    f"in {job}",
                    hosts=hosts,
                )
            ]
        )


class InStep(Stage):
    """`stage`, with every command it starts on the nodes carried by one srun step."""

    def __init__(self, stage: Stage, srun: SrunSession, seconds: float) -> None:
        self.stage, self.srun, self.seconds = stage, srun, seconds
        self.name, self.together = stage.name, stage.together

    def skip_reason(self, session: Session) -> str | None:
        return self.stage.skip_reason(session)

    def skipped(self, reason: str) -> list[Finding]:
        return self.stage.skipped(reason)

    def steps(self, session: Session) -> int:
        return self.stage.steps(session)

    def run(self, session: Session) -> StageResult:
        # The step spans the session's nodes only: a launch's spares, and nodes it left
        # out (a crashed node would hold the step's start), are not in it.
        with self.srun.phase(self.name, self.seconds, list(session.transports)):
            return self.stage.run(session)
