"""The Prometheus text exposition format, for node_exporter's textfile collector: a check's
verdicts become series the monitoring a cluster already runs can graph and alert on.

Every value comes from the report (findings, the hosts' facts, the bench's details); nothing
is measured here. Names follow Prometheus's conventions (`clusterkit_` prefix, base units in
the name); label values are node text, so each is made printable, cut to LABEL_MAX characters
and escaped, and labels only ever carry hosts, check ids, GPU indices, codes and sizes, never
free text, so the number of series stays bounded by the cluster's size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from clusterkit.checks.gpu_health import SLOWDOWN_REASONS
from clusterkit.checks.model import Status
from clusterkit.checks.xid import group_events
from clusterkit.escape import printable
from clusterkit.facts import GpuDevice, HostFacts, collected
from clusterkit.report.model import Report

LABEL_MAX = 128  # characters of a label value, after escaping control characters
PREFIX = "clusterkit_"
GB = 1e9  # the bench's GB/s are nccl-tests' (10^9 bytes)

# Every metric this module writes: name -> (help, what one series is). docs/report.md lists
# the same; tests/unit/report/test_prometheus.py holds the two together.
METRICS: dict[str, str] = {
    "clusterkit_check_status": "worst status of a check on a host: 0 ok, 1 skip, 2 warn, "
    "3 error, 4 fail (host empty: a finding about no host)",
    "clusterkit_verdict": "1 for the run's verdict (pass, fail, incomplete), 0 for the others",
    "clusterkit_verdict_timestamp_seconds": "when the verdict was reached, Unix time",
    "clusterkit_run_duration_seconds": "wall time of the whole run",
    "clusterkit_findings": "findings of the run per status",
    "clusterkit_gpu_remapped_rows": "rows remapped on a GPU, by cause",
    "clusterkit_gpu_remapped_rows_pending": "1 when a GPU has a row remap pending (reset it)",
    "clusterkit_gpu_remapped_rows_failed": "1 when a GPU's row remapping failed",
    "clusterkit_gpu_retired_pages": "pages retired on a GPU (Volta and older), by cause",
    "clusterkit_gpu_retired_pages_pending": "1 when a GPU has a page retirement pending",
    "clusterkit_gpu_xid_events": "Xid events in the kernel log since the driver's last load, "
    "per GPU and code",
    "clusterkit_gpu_pcie_link_width_lanes": "current PCIe link width of a GPU",
    "clusterkit_gpu_pcie_link_max_width_lanes": "maximum PCIe link width of a GPU",
    "clusterkit_gpu_clock_event_reason_active": "1 when a slowdown reason holds a GPU's clocks",
    "clusterkit_bench_bus_bandwidth_bytes_per_second": "bus bandwidth of the bench across "
    "every node, per collective and size (nccl-tests' busbw, out of place)",
    "clusterkit_bench_group_bus_bandwidth_bytes_per_second": "bus bandwidth of one group of "
    "nodes (a pair by default) of bench --find-slow, slowest rank",
    "clusterkit_bench_node_bus_bandwidth_bytes_per_second": "bus bandwidth of one node alone "
    "(bench --per-node), slowest rank",
}

REASON_LABELS = {
    bit: name.lower().replace(" ", "_") for bit, name in SLOWDOWN_REASONS.items()
}  # 0x8 "HW slowdown" -> hw_slowdown


class Sample(NamedTuple):
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def label_value(text: object) -> str:
    """Node text as a label value: one printable line, at most LABEL_MAX characters, with the
    exposition format's escapes (backslash, double quote, newline)."""
    value = printable(text)
    if len(value) > LABEL_MAX:
        value = value[: LABEL_MAX - 3] + "..."
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_prometheus(report: Report, *, now: float) -> str:
    """The report as text exposition format: each metric's HELP and TYPE, then its samples,
    every series once. `now` is the verdict's time (Unix seconds)."""
    samples = [
        *run_samples(report, now),
        *status_samples(report),
        *gpu_samples(report),
        *bench_samples(report.details.get("bench")),
    ]
    return "".join(_metric_block(name, samples) for name in METRICS)


def _metric_block(name: str, samples: list[Sample]) -> str:
    """One metric's lines, sorted; a series written twice (a node listing two GPUs with one
    index, two names alike once cut) keeps its first value: a scrape refuses duplicates."""
    lines: dict[str, str] = {}
    for sample in samples:
        if sample.name == name and math.isfinite(sample.value):
            series = _series(sample)
            lines.setdefault(series, f"{series} {_value(sample.value)}\n")
    if not lines:
        return ""
    return f"# HELP {name} {METRICS[name]}\n# TYPE {name} gauge\n" + "".join(
        lines[series] for series in sorted(lines)
    )


def _series(sample: Sample) -> str:
    labels = ",".join(f'{key}="{label_value(value)}"' for key, value in sample.labels)
    return f"{sample.name}{{{labels}}}" if labels else sample.name


def _value(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def run_samples(report: Report, now: float) -> Iterator[Sample]:
    command = (("command", report.command),)
    for verdict in ("pass", "fail", "incomplete"):
        value = float(verdict == report.verdict)
        yield Sample("clusterkit_verdict", (*command, ("verdict", verdict)), value)
    yield Sample("clusterkit_verdict_timestamp_seconds", command, round(now, 3))
    yield Sample("clusterkit_run_duration_seconds", command, round(report.seconds, 3))
    for status, count in report.counts().items():
        yield Sample("clusterkit_findings", (*command, ("status", status)), float(count))


def status_samples(report: Report) -> Iterator[Sample]:
    """One series per (check, host): the worst status any finding gave it (a check may have
    several findings for one host: the `ok` summary and an error)."""
    worst: dict[tuple[str, str], Status] = {}
    for finding in report.findings:
        for host in finding.hosts or [""]:
            key = (finding.id, host)
            if key not in worst or finding.status.rank > worst[key].rank:
                worst[key] = finding.status
    for (check, host), status in worst.items():
        labels = (("check", check), ("host", host))
        yield Sample("clusterkit_check_status", labels, float(status.rank))


def gpu_samples(report: Report) -> Iterator[Sample]:
    for host, entry in report.hosts.items():
        facts = entry.get("facts")
        if not facts:
            continue
        for device in collected(facts.get("gpus")).get("devices") or []:
            gpu = (("host", host), ("gpu", str(device.get("index") or "")))
            yield from device_samples(device, gpu)
        yield from xid_samples(host, facts)


# (metric, nvidia-smi field, cause label or None); Yes/No fields read as 1/0
_DEVICE_FIELDS: tuple[tuple[str, str, str | None], ...] = (
    ("clusterkit_gpu_remapped_rows", "remapped_rows.correctable", "correctable"),
    ("clusterkit_gpu_remapped_rows", "remapped_rows.uncorrectable", "uncorrectable"),
    ("clusterkit_gpu_remapped_rows_pending", "remapped_rows.pending", None),
    ("clusterkit_gpu_remapped_rows_failed", "remapped_rows.failure", None),
    ("clusterkit_gpu_retired_pages", "retired_pages.single_bit_ecc.count", "single_bit_ecc"),
    ("clusterkit_gpu_retired_pages", "retired_pages.double_bit.count", "double_bit_ecc"),
    ("clusterkit_gpu_retired_pages_pending", "retired_pages.pending", None),
    ("clusterkit_gpu_pcie_link_width_lanes", "pcie.link.width.current", None),
    ("clusterkit_gpu_pcie_link_max_width_lanes", "pcie.link.width.max", None),
)


def device_samples(device: GpuDevice, gpu: tuple[tuple[str, str], ...]) -> Iterator[Sample]:
    fields: Mapping[str, Any] = device
    for name, field, cause in _DEVICE_FIELDS:
        value = _number(fields.get(field))
        if value is not None:
            yield Sample(name, (*gpu, ("cause", cause)) if cause else gpu, value)
    mask = _mask(device.get("clocks_event_reasons.active"))
    if mask is not None:
        for bit, reason in REASON_LABELS.items():
            labels = (*gpu, ("reason", reason))
            yield Sample("clusterkit_gpu_clock_event_reason_active", labels, float(mask & bit > 0))


def xid_samples(host: str, facts: HostFacts) -> Iterator[Sample]:
    """Xid counts per (GPU, code), only those since the driver's last load: what came
    before it was cleared by the reload (checks/xid.py judges the same way)."""
    counts: dict[tuple[str, str, int], int] = {}
    for group in group_events(facts, "xid"):
        if group["counted"]:
            key = (group["index"] or "", group["pci"], group["code"])
            counts[key] = counts.get(key, 0) + group["count"]
    for (index, pci, code), count in counts.items():
        labels = (("host", host), ("gpu", index), ("pci", pci), ("code", str(code)))
        yield Sample("clusterkit_gpu_xid_events", labels, float(count))


def _number(value: object) -> float | None:
    """nvidia-smi's numbers and Yes/No flags; None for [N/A], absent or unreadable."""
    text = str(value).strip() if value is not None else ""
    if text in ("Yes", "No"):
        return float(text == "Yes")
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _mask(value: object) -> int | None:
    try:
        return int(str(value).strip(), 16) if value else None
    except ValueError:
        return None


def bench_samples(bench: object) -> Iterator[Sample]:
    """details.bench: the global run per collective and size, --find-slow's groups and
    --per-node's nodes (docs/bench.md)."""
    if not isinstance(bench, dict):
        return
    yield from _global_samples(bench.get("result"))
    yield from _group_samples(bench.get("find_slow"))
    yield from _node_samples(bench.get("per_node"))


def _global_samples(result: object) -> Iterator[Sample]:
    if not isinstance(result, dict) or "error" in result:
        return
    for one in [result, *(result.get("more_collectives") or [])]:
        collective = str(one.get("config", {}).get("collective", "")).removesuffix("_perf")
        for row in one.get("results") or []:
            place = row.get("out_of_place") or row.get("in_place") or {}
            labels = (("collective", collective), ("size_bytes", str(row.get("size"))))
            yield from _bandwidth("clusterkit_bench_bus_bandwidth_bytes_per_second", labels, place)


def _group_samples(find_slow: object) -> Iterator[Sample]:
    if not isinstance(find_slow, dict):
        return
    size = (("size_bytes", str(find_slow.get("bytes"))),)
    for entry in find_slow.get("rounds") or []:
        for group in entry.get("groups") or []:
            hosts = ",".join(str(h) for h in group.get("hosts") or [])
            labels = (("round", str(entry.get("round"))), ("hosts", hosts), *size)
            name = "clusterkit_bench_group_bus_bandwidth_bytes_per_second"
            yield from _bandwidth(name, labels, group)


def _node_samples(per_node: object) -> Iterator[Sample]:
    if not isinstance(per_node, dict):
        return
    size = (("size_bytes", str(per_node.get("bytes"))),)
    for host, node in (per_node.get("nodes") or {}).items():
        labels = (("host", str(host)), *size)
        yield from _bandwidth("clusterkit_bench_node_bus_bandwidth_bytes_per_second", labels, node)


def _bandwidth(name: str, labels: tuple[tuple[str, str], ...], entry: object) -> Iterable[Sample]:
    value = entry.get("bus_bw", entry.get("busbw")) if isinstance(entry, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return [Sample(name, labels, float(value) * GB)]
    return []
