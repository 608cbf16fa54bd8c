"""The hardware watch, judged on the control side: what a node's launch runner saw appear
while the job ran (clusterkit/node/launch_watch.py, HardwareWatch), graded with `check`'s own rules.
Pure.

A fault `check` fails a node for (an Xid the catalog wants a reset or reboot for, a pending
row remap, a GPU gone, an NVLink link up at the start gone down, an RDMA port gone down)
stops the job at once as a node fault on the node's own evidence: seconds after the kernel
logged it, not when NCCL's timeout expires.
Anything `check` only warns about (a thermal or power slowdown, an application's Xid,
`link_downed` rising, an OOM kill of a rank) is told once and kept. A node speaks only for
itself: an event naming a device its facts do not list is dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import cast

from clusterkit.checks import gpu_health, xid
from clusterkit.checks.model import Status
from clusterkit.checks.xid import normal_bus_id
from clusterkit.escape import printable
from clusterkit.facts import GpuDevice, HostFacts, collected
from clusterkit.launch.messages import WatchEvent

GPU_KINDS = frozenset({"xid", "sxid", "gpu", "gpu-gone", "nvlink-down"})
PORT_KINDS = frozenset({"ib-port", "ib-flap"})


@dataclass(frozen=True)
class Graded:
    """One watch event as `check` would judge it: FAIL stops the job as a node fault."""

    host: str
    status: Status
    what: str  # one line, node text made printable

    @property
    def fatal(self) -> bool:
        return self.status is Status.FAIL

    def line(self) -> str:
        word = "node fault" if self.fatal else "warning"
        return f"{self.host}: {word} during the run: {self.what}"


def node_devices(facts: HostFacts) -> frozenset[str]:
    """The devices a node may name: its GPUs' bus ids as the kernel log writes them
    (nvidia-smi's at the check) and its RDMA ports as `hca/port`."""
    devices = collected(facts.get("gpus")).get("devices") or []
    found = {bus for gpu in devices if (bus := normal_bus_id(gpu.get("pci.bus_id")))}
    for hca in collected(facts.get("infiniband")).get("devices") or []:
        found.update(f"{hca.get('name')}/{port.get('port')}" for port in hca.get("ports") or [])
    return frozenset(found)


def own_events(
    events: list[WatchEvent], devices: Collection[str] | None
) -> tuple[list[WatchEvent], list[str]]:
    """The events naming this node's own devices, and why each other was dropped. `devices`
    None: the node's devices are not known (launched without a check): kept."""
    kept: list[WatchEvent] = []
    dropped: list[str] = []
    for event in events:
        device = event["device"]
        names_device = event["kind"] in GPU_KINDS or event["kind"] in PORT_KINDS
        if names_device and devices is not None and device not in devices:
            dropped.append(f"hardware: {event['kind']} names {device!r:.70}, not this node's")
        else:
            kept.append(event)
    return kept, dropped


def grade(host: str, event: WatchEvent) -> Graded:
    """What `check` says of the event: its status and one line."""
    kind, device = event["kind"], printable(event["device"])
    if kind in ("xid", "sxid"):
        verdict = xid.classify(kind, event["code"], event["text"], event["fatal"])
        name = "Xid" if kind == "xid" else "SXid"
        what = (
            f"{name} {event['code']} ({verdict.mnemonic}) on {device}: {xid.NEEDS[verdict.action]}"
        )
        return Graded(host, verdict.severity, f"{what}: {printable(event['text'][:120])}")
    if kind == "gpu":
        return _gpu_row(host, device, event["fields"])
    if kind == "gpu-gone":
        return Graded(host, Status.FAIL, f"GPU {device} is no longer listed by nvidia-smi")
    if kind == "nvlink-down":  # fabric.nvlink-down fails a link down where its peers' are up
        what = f"NVLink link {event['code']} of GPU {device} went down"
        return Graded(host, Status.FAIL, f"{what} ({printable(event['text'])})")
    if kind == "ib-port":
        return Graded(
            host, Status.FAIL, f"RDMA port {device} went down ({printable(event['text'])})"
        )
    if kind == "ib-flap":
        return Graded(host, Status.WARN, f"RDMA port {device}: {printable(event['text'])}")
    return Graded(host, Status.WARN, printable(event["text"]))  # oom: the job's memory


def _gpu_row(host: str, device: str, fields: Mapping[str, str]) -> Graded:
    """nvidia-smi's row graded by the gpu_health check's own rules (remaps, slowdowns)."""
    gpu = cast(GpuDevice, {"pci.bus_id": device, **fields})
    problems = gpu_health.row_remap_problems(gpu) + gpu_health.clock_reason_problems(gpu)
    if not problems:
        return Graded(host, Status.OK, f"GPU {device}: nothing wrong")
    status = Status.FAIL if any(p[0] is Status.FAIL for p in problems) else Status.WARN
    return Graded(host, status, f"GPU {device}: " + "; ".join(printable(p[1]) for p in problems))
