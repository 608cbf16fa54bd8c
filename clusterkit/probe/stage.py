"""Stage `probe`: the collector (clusterkit/node/collector.py) on every host, one round trip
each; its facts are what the `static` stage (stages/static.py) checks."""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult
from clusterkit.probe.runner import probe_all
from clusterkit.transport.base import Transport


class ProbeStage(Stage):
    """Facts from every connected host into `session.facts`; a host without facts gets a
    probe.ran error (its reason also in `session.failures`). A host whose facts the session
    already holds is not probed again: a launch's re-check reuses what its survivors said
    moments before, in the post-mortem, and probes only the spares it takes."""

    name = "probe"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def skip_reason(self, session: Session) -> str | None:
        return None  # with no host connected it finds nothing, and says so through connect

    def steps(self, session: Session) -> int:
        return len(_unprobed(session))

    def run(self, session: Session) -> StageResult:
        # `seconds` is each host's bound: with fewer workers than hosts, the stage takes a
        # wave of them at a time and lasts as many times as long.
        transports = _unprobed(session)
        waves = -(-len(transports) // max(1, session.workers))
        probed = probe_all(
            transports,
            session.inventory,
            session.bounded(self.seconds * max(1, waves)),
            workers=session.workers,
            on_done=session.progress.done,
            host_seconds=self.seconds,
        )
        session.facts.update(probed.facts)
        session.failures.update(probed.failures)
        return StageResult(
            [
                Finding("probe.ran", Status.ERROR, f"{host}: {why}", hosts=[host])
                for host, why in probed.failures.items()
            ]
        )


def _unprobed(session: Session) -> dict[str, Transport]:
    return {host: t for host, t in session.transports.items() if host not in session.facts}
