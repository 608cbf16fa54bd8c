"""Stage `image`: the inventory's image present, pinned and runnable on every node
(image/stage.py)."""

from __future__ import annotations

from clusterkit.stages.base import Stage, StageResult, no_hosts_reason
from clusterkit.stages.session import Session

IMAGE_SECONDS = 180.0


class ImageStage(Stage):
    name = "image"

    def __init__(self, seconds: float = IMAGE_SECONDS) -> None:
        self.seconds = seconds

    def skip_reason(self, session: Session) -> str | None:
        why = super().skip_reason(session) or no_hosts_reason(session)
        if not why and not session.inventory.settings.image:
            why = "no image named in the inventory (clusterkit.image)"
        return why

    def run(self, session: Session) -> StageResult:
        from clusterkit.image.stage import run_image_stage

        return run_image_stage(session, session.bounded(self.seconds))
