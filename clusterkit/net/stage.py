"""Stage `network`: the paths torch will use, tried between node pairs (net/steps.py)."""

from __future__ import annotations

from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult, no_hosts_reason

NETWORK_SECONDS = 90.0  # facts, the mesh and up to two retest rounds (net/steps.py)


class NetworkStage(Stage):
    name = "network"
    together = True  # facts, bound and mesh are barriers over every node

    def __init__(self, seconds: float = NETWORK_SECONDS, mesh: str | None = None) -> None:
        self.seconds, self.mesh = seconds, mesh  # mesh: --mesh, over the settings

    def skip_reason(self, session: Session) -> str | None:
        why = super().skip_reason(session) or no_hosts_reason(session)
        if not why and len(session.inventory.hosts) < 2:
            why = "a single host: there is no network path between nodes to check"
        return why

    def run(self, session: Session) -> StageResult:
        from clusterkit.net.steps import run_network_stage

        return run_network_stage(session, session.bounded(self.seconds), mesh=self.mesh)
