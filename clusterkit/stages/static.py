"""Stage `static`: the pure checks over the facts the `probe` stage returned (checks/)."""

from __future__ import annotations

from clusterkit.checks import static_findings
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult


class StaticStage(Stage):
    """Every check that needs only the facts: parity, pins, health, the job's variables.
    Pure, no network."""

    name = "static"

    def steps(self, session: Session) -> int:
        return 0  # instant: no progress phase

    def skip_reason(self, session: Session) -> str | None:
        return None

    def run(self, session: Session) -> StageResult:
        inventory = session.inventory
        findings = static_findings(
            session.facts,
            inventory.settings.expect,
            inventory.path,
            busy_mib=inventory.settings.gpu_busy_mib,
            machine_only=session.options.machine_only,
            inventory=inventory,
        )
        return StageResult(findings)
