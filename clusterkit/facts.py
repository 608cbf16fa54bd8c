"""The probe's facts, typed: what clusterkit/node/collector.py sends about a host.

The node's JSON is parsed once, here, on arrival (`parse_facts`, with the checker in
shape.py): every value is checked against these types, so the checks read typed facts and
a renamed or retyped fact is a mypy error in the check that reads it, not a check that
silently skips. A node is not trusted: facts of the wrong shape, an unknown key included,
fail that host's probe with the path of the first bad value.

Every section is `total=False`: a collector that failed or timed out sends only
`{"error": why}` (its own check reports it), and some keys exist only on some nodes (GPU
nodes, torch imported). The collector runs on Python 3.8 without clusterkit, so it cannot
import these types; `PROBE_VERSION` is shared with it instead (a unit test holds the two
equal, and runs the real collector's output through `parse_facts` strictly). Change the
collector's output, and these types, the version and that test change with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypedDict, TypeVar, cast

from clusterkit.shape import shape_problem

PROBE_VERSION = 2  # clusterkit/node/collector.py sends the same


class SystemFacts(TypedDict, total=False):
    os: str
    kernel: str
    arch: str
    cpus: int | None
    cpu_model: str | None
    memory_bytes: int | None
    boot_id: str | None
    error: str


class HostnameFacts(TypedDict, total=False):
    hostname: str
    fqdn: str
    addresses: list[str]
    error: str | None  # the name's lookup failed (the collector itself ran)


# One GPU as `nvidia-smi --query-gpu` prints it: every value a string, None for [N/A] or a
# field this driver does not know (then named in GpuFacts.fields_unknown).
GpuDevice = TypedDict(
    "GpuDevice",
    {
        "index": str | None,
        "uuid": str | None,
        "name": str | None,
        "driver_version": str | None,
        "memory.total": str | None,
        "memory.used": str | None,
        "pci.bus_id": str | None,
        "persistence_mode": str | None,
        "ecc.mode.current": str | None,
        "ecc.errors.uncorrected.volatile.total": str | None,
        "compute_cap": str | None,
        "serial": str | None,
        "remapped_rows.correctable": str | None,
        "remapped_rows.uncorrectable": str | None,
        "remapped_rows.pending": str | None,
        "remapped_rows.failure": str | None,
        "retired_pages.single_bit_ecc.count": str | None,
        "retired_pages.double_bit.count": str | None,
        "retired_pages.pending": str | None,
        "pcie.link.gen.current": str | None,
        "pcie.link.gen.max": str | None,
        "pcie.link.width.current": str | None,
        "pcie.link.width.max": str | None,
        "clocks_event_reasons.active": str | None,
        "temperature.gpu": str | None,
        "temperature.memory": str | None,
        "temperature.gpu.tlimit": str | None,
        "ecc.errors.corrected.volatile.sram": str | None,
        "ecc.errors.corrected.aggregate.sram": str | None,
        "ecc.errors.uncorrected.aggregate.sram": str | None,
        "vbios_version": str | None,
        "inforom.img": str | None,
        "reset_status.reset_required": str | None,
        "reset_status.drain_and_reset_recommended": str | None,
        # sysfs AER counters by the kernel's names; None where the kernel keeps none
        "pcie.aer_correctable": dict[str, int] | None,
    },
    total=False,
)


class GpuFacts(TypedDict, total=False):
    present: bool
    count: int
    devices: list[GpuDevice]
    reason: str  # why there are none (no nvidia-smi)
    fields_unknown: list[str]
    driver: str
    cuda_driver: str | None  # the highest CUDA version the driver runs
    nvlink: None
    error: str


class PythonFacts(TypedDict, total=False):
    version: str
    executable: str
    implementation: str
    error: str


class EnvFacts(TypedDict, total=False):
    """The node's variables that the checks read, by name: the probe asks for these (its
    `env_names` option, ENV_NAMES) and collects nothing else, since any other may hold a
    secret. A check that needs another variable adds it here."""

    # NCCL settings left over from debugging (checks/health.py, bench/gate.py)
    NCCL_P2P_DISABLE: str
    NCCL_SHM_DISABLE: str
    NCCL_IB_DISABLE: str
    NCCL_ALGO: str
    NCCL_PROTO: str
    NCCL_NET_GDR_LEVEL: str
    NCCL_CHECKS_DISABLE: str
    NCCL_DEBUG: str
    # the transport NCCL and gloo use (net/ifname.py, checks)
    NCCL_SOCKET_IFNAME: str
    GLOO_SOCKET_IFNAME: str
    NCCL_IB_HCA: str
    NCCL_NET: str
    # the job's own settings, which must agree with what was checked
    MASTER_ADDR: str
    MASTER_PORT: str
    WORLD_SIZE: str
    RANK: str
    LOCAL_RANK: str
    NODE_RANK: str
    CUDA_VISIBLE_DEVICES: str
    NVIDIA_VISIBLE_DEVICES: str
    NVIDIA_DISABLE_REQUIRE: str
    error: str


ENV_NAMES = tuple(name for name in EnvFacts.__annotations__ if name != "error")


class DockerFacts(TypedDict, total=False):
    docker: str | None
    nvidia_container_runtime: str | None
    nvidia_ctk: str | None
    nvidia_ctk_version: str | None
    nvidia_ctk_error: str
    runtimes: list[str]
    daemon_json_error: str
    error: str


class InterfaceFacts(TypedDict, total=False):
    mtu: int | None
    state: str | None
    kind: str | None
    addresses: list[str]  # "address/prefixlen"
    flags: list[str]


class Route(TypedDict):
    dst: str
    dev: str


class NetworkFacts(TypedDict, total=False):
    interfaces: dict[str, InterfaceFacts]
    routes: list[Route] | None
    error: str


class Limit(TypedDict):
    soft: int | None  # None: unlimited
    hard: int | None


class LimitsFacts(TypedDict, total=False):
    memlock: Limit
    nofile: Limit
    shm_bytes: int | None
    error: str


class ClockFacts(TypedDict, total=False):
    synchronized: bool | None
    source: str | None
    offset_seconds: float | None  # + when this clock is ahead
    max_error_seconds: float
    error: str


class IbPort(TypedDict, total=False):
    port: str
    state: str
    phys_state: str | None
    rate_gbps: float | None
    rate: str | None
    link_layer: str | None
    counters: dict[str, int]


class IbDevice(TypedDict, total=False):
    name: str
    ports: list[IbPort]


class InfinibandFacts(TypedDict, total=False):
    devices: list[IbDevice]
    error: str


class GpuProcess(TypedDict, total=False):
    gpu_uuid: str
    pid: int
    used_memory_mib: int | None
    name: str | None


class GpuProcessesFacts(TypedDict, total=False):
    processes: list[GpuProcess]
    reason: str
    error: str


class NvlinkGpu(TypedDict, total=False):
    index: int
    uuid: str | None
    links: list[float | None]  # GB/s per link, None when inactive


class NvlinkFacts(TypedDict, total=False):
    gpus: list[NvlinkGpu]
    active_links: list[int]
    present: bool
    errors: dict[str, dict[str, dict[str, int]]]  # GPU index -> link -> counter -> count
    errors_error: str
    reason: str
    error: str


class MemoryFacts(TypedDict, total=False):
    total_bytes: int | None
    available_bytes: int | None
    error: str


class KernelEvent(TypedDict, total=False):
    kind: Literal["xid", "sxid"]
    pci: str  # DDDD:BB:DD, lower case
    code: int
    pid: int | str | None
    name: str | None
    text: str
    time: str | None
    fatal: bool | None  # the severity the line names (NVLink5 Xids 144-150, SXid records)
    at: int  # where in the log read it starts: orders events and the driver's load


class DriverLoad(TypedDict, total=False):
    """The driver's last load: events before `at` were seen by a driver since reloaded."""

    at: int
    time: str | None
    count: int


class HostEvent(TypedDict, total=False):
    """A host fault the kernel logged: a machine check, an uncorrected memory error, a
    filesystem error or read-only remount."""

    kind: Literal["mce", "edac", "fs"]
    what: Literal["corrected", "logged", "uncorrected", "error", "read-only", "shutdown"]
    device: str | None  # the MCE bank, the EDAC memory controller (MC0), the block device
    count: int
    text: str
    time: str | None
    at: int


class OomKill(TypedDict, total=False):
    pid: int
    name: str
    time: str | None


class KernelLogFacts(TypedDict, total=False):
    events: list[KernelEvent]
    matched: int
    oom_kills: list[OomKill]
    driver_load: DriverLoad | None
    host_events: list[HostEvent]
    host_matched: int
    source: str
    error: str


class NvmeDevice(TypedDict, total=False):
    """One NVMe controller's SMART health (`nvme smart-log -o json`); a count is None where
    nvme-cli printed none, `error` where the log could not be read."""

    name: str  # nvmeN, checked on the node
    model: str | None
    serial: str | None
    critical_warning: int | None
    media_errors: int | None
    percent_used: int | None
    avail_spare: int | None
    spare_thresh: int | None
    num_err_log_entries: int | None
    error: str


class NvmeFacts(TypedDict, total=False):
    devices: list[NvmeDevice]
    count: int  # controllers listed (devices holds at most the first 16)
    reason: str  # why none were read (nvme-cli not installed)
    error: str


class StuckProcess(TypedDict, total=False):
    pid: int
    name: str
    wchan: str | None  # the kernel function it waits in, where readable
    age_seconds: int


class DstateFacts(TypedDict, total=False):
    """Processes stuck in uninterruptible sleep (collector.collect_dstate says when one
    counts)."""

    processes: list[StuckProcess]
    count: int
    scanned: int
    error: str


class TorchFacts(TypedDict, total=False):
    present: bool
    interpreter: str
    reason: str
    path: str
    version: str | None
    cuda: str | None
    hip: str | None
    nccl_wheel: str | None
    numpy: bool
    # only where torch was imported:
    imported: bool
    import_error: str
    cuda_available: bool
    device_count: int
    nccl: str | None
    nccl_error: str
    arch_list: list[str]
    capabilities: list[str]
    error: str


class HostFacts(TypedDict, total=False):
    system: SystemFacts
    hostname: HostnameFacts
    gpus: GpuFacts
    python: PythonFacts
    env: EnvFacts
    docker: DockerFacts
    network: NetworkFacts
    limits: LimitsFacts
    clock: ClockFacts
    infiniband: InfinibandFacts
    gpu_processes: GpuProcessesFacts
    nvlink: NvlinkFacts
    memory: MemoryFacts
    kernel_log: KernelLogFacts | None  # None: not read (gpu_health off)
    torch: TorchFacts
    nvme: NvmeFacts
    dstate: DstateFacts


FactsByHost = Mapping[str, HostFacts]


class HostEntry(TypedDict, total=False):
    """A host in a report: where it is, whether it answered, its facts (docs/report.md)."""

    address: str
    reachable: bool
    error: str | None  # why it has no facts
    facts: HostFacts | None


class MalformedFacts(ValueError):
    """The node's facts do not have the shape of this version; the message names where."""


def parse_facts(raw: object) -> HostFacts:
    """The probe's facts, checked against HostFacts: raises MalformedFacts naming the first
    value of the wrong type or the first unknown key."""
    problem = shape_problem(raw, HostFacts, "facts")
    if problem is not None:
        raise MalformedFacts(problem)
    return cast(HostFacts, raw)


def error_of(section: Mapping[str, object] | None) -> str | None:
    """Why a collector sent no facts, or None when it did."""
    error = section.get("error") if section else None
    return error if isinstance(error, str) else None


_Section = TypeVar("_Section", bound=Mapping[str, object])


def collected(section: _Section | None) -> _Section:
    """A collector's facts, or an empty section when it failed or did not run (its error
    is reported by its own check): `collected(facts.get("gpus")).get("count")`."""
    if section is None or "error" in section:
        return cast(_Section, {})
    return section
