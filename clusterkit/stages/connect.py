"""Stage `connect`: open one connection per host (bounded pool), kept for every later stage."""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from clusterkit.words import counted


class ConnectStage(Stage):
    name = "connect"

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options

    def skip_reason(self, session: Session) -> str | None:
        return None  # every later stage needs it

    def steps(self, session: Session) -> int:
        return len(session.inventory.hosts)

    def run(self, session: Session) -> StageResult:
        done = session.progress.done
        connections = connect_all(
            session.inventory,
            self.options,
            on_done=lambda host, error: done(host, error.kind if error else None),
        )
        session.transports.update(connections.transports)
        session.unreachable.update(connections.failures)
        return StageResult(connection_findings(session, connections.key_notices))


def connection_findings(session: Session, key_notices: dict[str, str]) -> list[Finding]:
    """host.reachable: one OK over the connected hosts, one ERROR per host that was not;
    host.key: a WARN per host whose changed key was accepted only because checking is off."""
    findings = [
        Finding(
            "host.reachable",
            Status.ERROR,
            f"{name}: {error.detail}",
            hosts=[name],
            found=error.kind,
            remedy=error.hint,
        )
        for name, error in session.unreachable.items()
    ]
    findings += [
        Finding(
            "host.key",
            Status.WARN,
            f"{name}: {what}; accepted only because --host-key-policy is off",
            hosts=[name],
            found="hostkey-mismatch",
            remedy="check the node; if it was reinstalled, update known_hosts (ssh-keygen -R)",
        )
        for name, what in key_notices.items()
    ]
    if session.transports:
        findings.insert(
            0,
            Finding(
                "host.reachable",
                Status.OK,
                f"{len(session.transports)} of "
                f"{counted(len(session.inventory.hosts), 'host')} connected",
                hosts=list(session.transports),
            ),
        )
    return findings
