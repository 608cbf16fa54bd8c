"""Stage `storage`: the folders the job shares (`clusterkit.shared_paths`) really shared:
a token written on the master read back on every node (storage/stage.py)."""

from __future__ import annotations

from clusterkit.stages.base import Stage, StageResult, no_hosts_reason
from clusterkit.stages.session import Session

SHARED_SECONDS = 30.0


class StorageStage(Stage):
    name = "storage"

    def __init__(self, seconds: float = SHARED_SECONDS) -> None:
        self.seconds = seconds

    def skip_reason(self, session: Session) -> str | None:
        why = super().skip_reason(session) or no_hosts_reason(session)
        if not why and not session.inventory.settings.shared_paths:
            why = "no clusterkit.shared_paths in the inventory"
        return why

    def run(self, session: Session) -> StageResult:
        from clusterkit.storage.stage import run_storage_stage

        return run_storage_stage(session, session.bounded(self.seconds))
