"""Which node failed, decided from what every node printed (pure given the runs).

A bench that ends without a result is attributed here: each node's torchrun log (joined
ranks, the worker's `error KIND:` lines, torchrun's root-cause section and the signal that
killed a rank) is read into a NodeReport, and the findings name the node, and the rank,
that failed first, the ones that failed as a consequence and those clusterkit stopped. With
a result, the gate turns it into the bench's verdict. The frame a node prints is checked
here, where it arrives (bench/results.py): one of another shape is no result, and names
that node as a failed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit import framing
from clusterkit.bench import gate, nccllog, thresholds
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.results import (
    BenchResult,
    MalformedResult,
    WorkerError,
    collectives,
    parse_frame,
)
from clusterkit.checks.model import Finding, Status
from clusterkit.errors import TransportError
from clusterkit.facts import HostFacts
from clusterkit.inventory.model import Inventory
from clusterkit.transport.base import CommandResult, Deadline

NCCL_LOG_BEGIN = "--clusterkit-nccl-log--"
NCCL_LOG_END = "--clusterkit-nccl-log-end--"
_LOG_LINE = re.compile(r"^clusterkit-bench: (.*)$", re.M)
_JOINED = re.compile(r"rank (\d+) joined on (\S+)")
_ERROR = re.compile(r"error ([\w-]+): (.*)")
_ROOT_CAUSE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M
)
_ROOT_SECTION = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={10,}|\Z)", re.S)
_EXTERNAL_SIGNALS = {1, 2, 9, 15}  # SIGHUP, SIGINT, SIGKILL, SIGTERM
_SIGNAL = re.compile(r"Signal (\d+) \((\w+)\) received by PID")
_NO_TORCH = "No module named 'torch'"
# `python3 -m torch.distributed.run` without torch: the interpreter names itself first.
_NO_TORCH_INTERPRETER = re.compile(r"^(\S{1,200}): Error while finding module specification", re.M)
TORCH_REMEDY = (
    "install torch for that Python on every node, or run the bench in the cluster image "
    "(--image); set ansible_python_interpreter to the Python the job uses"
)


@dataclass
class NodeRun:
    """What one node's torchrun did, as seen from here."""

    host: str
    node_rank: int
    result: CommandResult | None = None
    error: TransportError | None = None
    ended_at: float | None = None
    killed: bool = False  # we sent the kill command before it ended

    @property
    def stdout(self) -> str:
        return self.result.stdout.decode("utf-8", "replace") if self.result else ""

    @property
    def stderr(self) -> str:
        return self.result.stderr.decode("utf-8", "replace") if self.result else ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok


def split_nccl_logs(stderr: str) -> tuple[str, str]:
    """Separate the node's own stderr from the NCCL log sections the node script appended."""
    own: list[str] = []
    logs: list[str] = []
    inside = False
    for line in stderr.splitlines():
        if line.startswith(NCCL_LOG_BEGIN):
            inside = True
        elif line.startswith(NCCL_LOG_END):
            inside = False
        elif inside:
            logs.append(line)
        else:
            own.append(line)
    return "\n".join(own), "\n".join(logs)


@dataclass
class NodeReport:
    """What one node printed, reduced to facts the verdict needs."""

    host: str
    joined: list[int]
    errors: list[tuple[str, str]]  # (kind, message) from the worker
    root_causes: list[tuple[int, int, str]]  # torchrun's first observed failure: rank, exit, signal
    result: BenchResult | None = None  # rank 0's, checked
    failure: WorkerError | None = None  # rank 0's error report instead of a result
    malformed: str = ""  # why the frame it printed was of another shape


def read_node(run: NodeRun) -> NodeReport:
    own, _ = split_nccl_logs(run.stderr)
    joined: list[int] = []
    errors: list[tuple[str, str]] = []
    for line in _LOG_LINE.findall(own):
        if match := _JOINED.match(line):
            joined.append(int(match[1]))
        elif match := _ERROR.match(line):
            errors.append((match[1], match[2].strip()))
    causes: list[tuple[int, int, str]] = []
    for section in _ROOT_SECTION.findall(own):
        for match in _ROOT_CAUSE.finditer(section):
            signal = _SIGNAL.search(section, match.end())
            causes.append((int(match[1]), int(match[3]), signal[2] if signal else ""))
    report = NodeReport(run.host, sorted(set(joined)), errors, causes)
    if run.result is not None:
        _read_frame(report, run.result.stdout)
    return report


def _read_frame(report: NodeReport, stdout: bytes) -> None:
    """The frame a node printed, checked: rank 0's result, its error report, or why it is
    neither (no frame at all: a node without rank 0, or one that died first)."""
    try:
        frame = parse_frame(framing.decode(stdout))
    except framing.NoFrame:
        return
    except framing.FrameError as error:  # begun but cut short, or not JSON: no result
        report.malformed = str(error)
        return
    except MalformedResult as error:
        report.malformed = str(error)
        return
    if "error" in frame:
        report.failure = frame["error"]
    else:
        report.result = frame


def judge(
    runs: list[NodeRun],
    inventory: Inventory,
    options: BenchOptions,
    nproc: int,
    deadline: Deadline,
) -> tuple[list[Finding], BenchResult | None]:
    """Findings from what every node printed. Pure given the runs."""
    reports = {run.host: read_node(run) for run in runs}
    hosts = [run.host for run in runs]
    result = next((r.result for r in reports.values() if r.result is not None), None)
    findings: list[Finding] = []
    world_errors = [
        (host, message)
        for host, report in reports.items()
        for kind, message in report.errors
        if kind == "world-size"
    ]
    if world_errors:
        findings.append(
            Finding(
                "bench.world-size",
                Status.FAIL,
                f"{world_errors[0][1]} (caught before timing)",
                hosts=sorted({host for host, _ in world_errors}),
                expected=len(runs) * nproc,
                remedy="check --nproc-per-node / clusterkit.expect.gpus_per_node and that every "
                "node runs the bench",
            )
        )
    if result is None and not world_errors:
        findings += failure_findings(runs, reports, deadline)
        return findings, None
    if result is None:
        return findings, None
    threshold = thresholds.resolve_threshold(
        flag=options.min_busbw,
        environ=options.environ,
        inventory_min_busbw=inventory.settings.bench.min_busbw,
        fabric=thresholds.detect_fabric(options.facts) if options.facts else None,
        backend=result["backend"],
    )
    findings += collective_findings(result, threshold, options.gate_size, hosts)
    findings.append(gate.correctness_finding(result, hosts))
    optional = [gate.slow_rank_finding(result, options.gate_size)]
    logs = {run.host: nccllog.parse_nccl_log(split_nccl_logs(run.stderr)[1]) for run in runs}
    optional.append(nccllog.socket_transport_finding(logs, options.facts))
    environments = {host: _variables(facts) for host, facts in options.facts.items()}
    environments["(control machine)"] = {
        k: v for k, v in options.environ.items() if k in nccllog.DEBUG_ONLY_NCCL_VARS
    }
    optional.append(nccllog.debug_vars_finding(environments))
    findings += [finding for finding in optional if finding is not None]
    return findings, result


def _variables(facts: HostFacts) -> dict[str, str]:
    """The node's collected variables by name (its `error` when it could not read them is
    a string too, and names no variable a check looks for)."""
    env = facts.get("env") or {}
    return {name: value for name, value in env.items() if isinstance(value, str)}


def collective_findings(
    result: BenchResult, threshold: thresholds.Threshold, gate_size: int | None, hosts: list[str]
) -> list[Finding]:
    """One busbw finding per collective measured, each against its own threshold (its
    verdict lands in that collective's result as "gate")."""
    findings = []
    for one in collectives(result):
        collective = gate.result_collective(one)
        if one.get("unsupported") or not one["results"]:
            findings.append(gate.unsupported_finding(one, hosts))
            continue
        verdict = gate.evaluate(
            one, thresholds.collective_threshold(threshold, collective), gate_size
        )
        one["gate"] = verdict.to_dict()
        findings.append(gate.busbw_finding(verdict, hosts, collective))
    return findings


def failure_findings(
    runs: list[NodeRun], reports: dict[str, NodeReport], deadline: Deadline
) -> list[Finding]:
    """No result: name the node (and rank) that failed first, and those that never joined."""
    if no_torch := torch_missing(runs):
        return [no_torch_finding(no_torch, [run.host for run in runs if run.killed])]
    culprits = [c for run in runs if (c := _culprit(run, reports[run.host])) is not None]
    culprits.sort()
    findings: list[Finding] = []
    stopped = [run.host for run in runs if run.killed]
    if culprits:
        first_host, message = culprits[0][2], culprits[0][3]
        others = sorted({c[2] for c in culprits[1:]} - {first_host})
        tail = f"; then failed too: {', '.join(others)}" if others else ""
        tail += f"; stopped by clusterkit: {', '.join(stopped)}" if stopped else ""
        findings.append(
            Finding(
                "bench.rank-failed",
                Status.FAIL,
                message + tail,
                hosts=[first_host],
                found=message,
                remedy=f"look at {first_host}: `dmesg`, the NCCL log in the JSON report, and the "
                "network stage findings",
            )
        )
    elif stopped:
        findings.append(
            Finding(
                "bench.timeout",
                Status.ERROR,
                f"no result before the deadline; stopped on {', '.join(stopped)}",
                hosts=stopped,
                remedy="raise --timeout, or reduce -e/-n; check the network stage",
            )
        )
    never = [run.host for run in runs if not reports[run.host].joined]
    if not findings and not never:  # every node ended well, yet no result: never a pass
        findings.append(_no_result_finding(runs))
    if never:
        everyone = len(never) == len(runs)
        findings.append(
            Finding(
                "bench.not-joined",
                Status.ERROR,
                "no rank joined on any node: the rendezvous never completed"
                if everyone
                else f"no rank joined from {', '.join(never)}",
                hosts=never,
                remedy="check that every node reaches the master port, that all TCP between "
                "nodes on clusterkit.interface is open, and the network stage findings",
            )
        )
    return findings


def _culprit(run: NodeRun, report: NodeReport) -> tuple[int, float, str, str] | None:
    """(priority, ended, host, message) when this node failed; None when it did not or when
    clusterkit stopped it. Node rank 0 runs rank 0, which must print a whole result: ending
    without one (a frame cut short, an error report, nothing), even with exit 0, fails it."""
    if run.killed:
        return None
    ended = run.ended_at or float("inf")
    if run.error is not None:
        return (0, ended, run.host, f"{run.host} dropped out: {run.error.detail}")
    if run.result is None:
        return None
    if run.result.timed_out:
        return (4, ended, run.host, f"{run.host} did not finish before the deadline")
    if run.result.exit_code != 0:
        died = [c for c in report.root_causes if c[1] < 0]
        if not died:
            detail = _last_error(report, run)
            return (
                3,
                ended,
                run.host,
                f"{run.host} failed (exit {run.result.exit_code}): {detail}",
            )
        rank, code, name = died[0]
        # Killed from outside (SIGKILL, OOM killer, SIGTERM) comes before a crash such
        # as gloo's abort, which is usually the consequence of losing a peer.
        priority = 1 if -code in _EXTERNAL_SIGNALS else 2
        return (
            priority,
            ended,
            run.host,
            f"rank {rank} on {run.host} died (signal {-code} {name})".strip(),
        )
    if report.malformed:
        return (3, ended, run.host, f"{run.host} sent a malformed result: {report.malformed}")
    if run.node_rank == 0 and report.result is None:
        said = f": {report.failure['message'][:300]}" if report.failure else ""
        message = f"{run.host} ran rank 0 and exited 0 without printing a result{said}"
        return (3, ended, run.host, message)
    return None


def _no_result_finding(runs: list[NodeRun]) -> Finding:
    """No result, and no node that failed or was stopped: still a failure, never a pass."""
    first = runs[0].host if runs else "(no node)"
    return Finding(
        "bench.rank-failed",
        Status.FAIL,
        f"no result came back from rank 0 on {first}, and no node said why",
        hosts=[first] if runs else [],
        remedy=f"look at {first}: its torchrun output in the JSON report",
    )


def torch_missing(runs: list[NodeRun]) -> dict[str, str]:
    """Nodes whose Python has no torch, and that Python (as it named itself, else "python3"):
    torchrun cannot start there, so the others wait for a rendezvous that never comes."""
    missing = {}
    for run in runs:
        own, _ = split_nccl_logs(run.stderr)
        if _NO_TORCH in own:
            named = _NO_TORCH_INTERPRETER.search(own)
            interpreter = named[1] if named else "python3"
            missing[run.host] = "".join(c for c in interpreter if c.isprintable())
    return missing


def no_torch_finding(missing: dict[str, str], stopped: list[str]) -> Finding:
    """Worded as check's torch.present: the cause, not the network it looks like."""
    where = ", ".join(f"{host} ({interpreter})" for host, interpreter in missing.items())
    others = [host for host in stopped if host not in missing]
    tail = f"; the others waited for it and were stopped: {', '.join(others)}" if others else ""
    return Finding(
        "bench.rank-failed",
        Status.FAIL,
        f"torch is not installed for the job's Python on {where}: no rank started there{tail}",
        hosts=list(missing),
        expected="torch importable",
        found="missing",
        remedy=TORCH_REMEDY,
    )


def _last_error(report: NodeReport, run: NodeRun) -> str:
    if report.errors:
        kind, message = report.errors[-1]
        return f"{kind}: {message}"[:300]
    if report.failure is not None:
        return report.failure["message"][:300]
    if report.malformed:
        return f"a malformed result: {report.malformed}"[:300]
    own, _ = split_nccl_logs(run.stderr)
    lines = [line for line in own.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
