"""What `check --slurm*` changes in `check`: the target, the transport, the exclude list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clusterkit.checks.model import Status
from clusterkit.contract.names import StageName
from clusterkit.contract.stage import Stage
from clusterkit.errors import UsageError
from clusterkit.report import Report
from clusterkit.safefiles import why, write_file
from clusterkit.slurm.allocation import open_srun_session
from clusterkit.slurm.stages import InStep, SrunConnectStage
from clusterkit.slurm.target import SlurmTarget
from clusterkit.transport.base import Transport
from clusterkit.transport.srun import STEP_SECONDS, SrunSession, SrunTransport

# Every stage but these acts on the nodes (probe, storage, network, image, bench, and any
# stage added later): each runs in one job step over all nodes.
NO_STEP_STAGES: tuple[StageName, ...] = ("connect", "static")
STEP_MARGIN = 30.0  # a phase's step outlives the stage's own bound by this much


def slurm_stages(
    target: SlurmTarget | None, stages: Sequence[Stage], environ: Mapping[str, str]
) -> list[Stage]:
    """The check's stages as they run on this target: unchanged over SSH; over srun, the
    connect stage hands out srun transports (closing them ends the steps and any allocation
    of our own) and each node stage runs in one job step. `environ` is the run's: srun,
    salloc and scancel run in it."""
    if target is None or target.transport == "ssh":
        return list(stages)
    srun = open_srun_session(target.inventory, target.job_id, environ)
    return [
        SrunConnectStage(srun, target.source) if stage.name == "connect" else stage
        for stage in in_steps(srun, stages)
    ]


def in_steps(srun: SrunSession, stages: Sequence[Stage]) -> list[Stage]:
    """Each stage that acts on the nodes carried by one step of `srun`."""
    return [
        InStep(stage, srun, _bound(stage)) if stage.name not in NO_STEP_STAGES else stage
        for stage in stages
    ]


def srun_session_of(transports: Mapping[str, Transport]) -> SrunSession | None:
    """The srun session behind a session's transports, or None when they are SSH's."""
    for transport in transports.values():
        if isinstance(transport, SrunTransport):
            return transport.session
    return None


def _bound(stage: Stage) -> float:
    seconds = getattr(stage, "seconds", None)
    return float(seconds) + STEP_MARGIN if seconds else STEP_SECONDS


def failing_hosts(report: Report, hosts: Sequence[str]) -> list[str]:
    """Hosts named by a failed or errored finding, in inventory order."""
    named = {
        host
        for finding in report.findings
        if finding.status in (Status.FAIL, Status.ERROR)
        for host in finding.hosts or ()
    }
    return [host for host in hosts if host in named]


def write_exclude_file(path: str, report: Report, hosts: Sequence[str]) -> None:
    """The failing nodes, comma-separated, for `sbatch --exclude=` (empty on a pass)."""
    names = failing_hosts(report, hosts) if report.exit_status != 0 else []
    try:
        write_file(path, ",".join(names) + ("\n" if names else ""))
    except OSError as error:
        raise UsageError(f"{path}: cannot write the exclude list: {why(error, path)}") from None
