"""Node health and the environment NCCL needs: GPUs, shared memory, limits, clock, variables."""

from __future__ import annotations

import math

from clusterkit.checks.model import Finding, Status, over_hosts
from clusterkit.checks.parity import Facts, parity_finding
from clusterkit.checks.registry import CheckId
from clusterkit.facts import ClockFacts, HostFacts, collected, error_of
from clusterkit.inventory.model import Expectations

GIB = 1024**3
LOW_MEMORY_FRACTION = 0.1
# Variables meant for debugging that slow NCCL down or hang it when left set in production.
NCCL_DEBUG_ONLY = (
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_CHECKS_DISABLE",
)


def _per_host(
    check_id: CheckId,
    status: Status,
    bad: dict[str, str],
    what: str,
    *,
    ok: str,
    checked: list[str],
    remedy: str | None = None,
    fix_tag: str | None = None,
    none: str = "no host reports it",
) -> Finding:
    if not checked:
        return Finding(check_id, Status.SKIP, f"not checked: {none}")
    failed = f"{what}: {group_hosts(bad)}"
    return over_hosts(
        check_id, bad, checked, ok=ok, failed=failed, status=status, remedy=remedy, fix_tag=fix_tag
    )


def group_hosts(by_host: dict[str, str]) -> str:
    """'why on h1, h2; other on h3': one clause per distinct reason, not one per host."""
    groups: dict[str, list[str]] = {}
    for host, why in by_host.items():
        groups.setdefault(why, []).append(host)
    return "; ".join(f"{why} on {', '.join(hosts)}" for why, hosts in groups.items())


def gpu_findings(facts: Facts) -> list[Finding]:
    failing = {h: error for h, f in facts.items() if (error := error_of(f.get("gpus")))}
    with_gpus = [h for h, f in facts.items() if collected(f.get("gpus")).get("count")]
    findings = [
        _per_host(
            "gpu.nvidia-smi",
            Status.FAIL,
            failing,
            "nvidia-smi failed",
            ok="nvidia-smi answers on every GPU host",
            checked=with_gpus + list(failing),
            none="no host has NVIDIA GPUs",
            remedy="check the driver on these nodes (dmesg | grep -i xid; nvidia-smi); "
            "reboot or drain them",
        )
    ]
    ecc: dict[str, str] = {}
    persistence: dict[str, str] = {}
    for host in with_gpus:
        devices = collected(facts[host].get("gpus")).get("devices", [])
        errors = [
            f"GPU {d.get('index')}: {d.get('ecc.errors.uncorrected.volatile.total')}"
            for d in devices
            if _positive(d.get("ecc.errors.uncorrected.volatile.total"))
        ]
        if errors:
            ecc[host] = "uncorrected ECC errors on " + ", ".join(errors)
        off = [str(d.get("index")) for d in devices if d.get("persistence_mode") == "Disabled"]
        if off:
            persistence[host] = "persistence mode off on GPU " + ", ".join(off)
    findings.append(
        _per_host(
            "gpu.ecc",
            Status.FAIL,
            ecc,
            "GPU memory errors",
            ok="no uncorrected ECC errors",
            checked=with_gpus,
            none="no host has NVIDIA GPUs",
            remedy="drain these nodes: uncorrected ECC errors corrupt results; "
            "reset the GPU (nvidia-smi -r) or replace it",
        )
    )
    findings.append(
        _per_host(
            "gpu.persistence",
            Status.WARN,
            persistence,
            "GPU persistence mode off (first CUDA call pays driver init, jobs start slowly)",
            ok="persistence mode on for every GPU",
            checked=with_gpus,
            none="no host has NVIDIA GPUs",
            fix_tag="nvidia",
        )
    )
    return findings


def gpu_presence_findings(facts: Facts, expect: Expectations) -> list[Finding]:
    """A node without NVIDIA GPUs runs CPU (gloo) jobs only: say so, unless the inventory
    says that is the plan (clusterkit.expect.gpus_per_node: 0)."""
    if expect.gpus_per_node == 0:
        return [
            Finding(
                "gpu.present",
                Status.SKIP,
                "not checked: the inventory expects no GPUs (gpus_per_node: 0)",
            )
        ]
    # Hosts whose GPU collector answered; a failed nvidia-smi is gpu.nvidia-smi's finding.
    answered = {h: collected(f.get("gpus")) for h, f in facts.items() if collected(f.get("gpus"))}
    without = {
        h: gpus.get("reason") or "nvidia-smi lists no GPU"
        for h, gpus in answered.items()
        if not gpus.get("count")
    }
    return [
        _per_host(
            "gpu.present",
            Status.WARN,
            without,
            "no NVIDIA GPU, so only CPU (gloo) jobs can run",
            ok="every node has NVIDIA GPUs",
            checked=list(answered),
            remedy="install the NVIDIA driver, or set clusterkit.expect.gpus_per_node: 0 for a "
            "CPU cluster",
            fix_tag="nvidia",
        )
    ]


def _memory_total(f: HostFacts) -> int | None:
    """The node's RAM in bytes; older probes report it in the system section."""
    memory = collected(f.get("memory")).get("total_bytes")
    return memory or collected(f.get("system")).get("memory_bytes")


def memory_parity_findings(facts: Facts) -> list[Finding]:
    """parity.memory: the same RAM on every node (in whole GiB: firmware reservations differ
    by a few MiB)."""
    totals = {h: round(size / GIB) for h, f in facts.items() if (size := _memory_total(f))}
    return [parity_finding("parity.memory", "host memory (GiB)", totals)]


def memory_free_findings(facts: Facts) -> list[Finding]:
    """host.memory-free: at least a tenth of the node's RAM available to the job."""
    checked = [h for h, f in facts.items() if _memory_total(f)]
    low: dict[str, str] = {}
    for host, f in facts.items():
        size, available = _memory_total(f), collected(f.get("memory")).get("available_bytes")
        if size and available is not None and available < size * LOW_MEMORY_FRACTION:
            low[host] = f"{available / GIB:.1f} of {size / GIB:.0f} GiB available"
    free = _per_host(
        "host.memory-free",
        Status.WARN,
        low,
        "little memory available (another job or a leak holds it; data loaders and pinned "
        "buffers will fail or swap)",
        ok="at least 10% of memory available on every node",
        checked=checked,
        remedy="find what holds the memory (ps aux --sort=-rss | head) or drain the node",
    )
    return [free]


def _positive(value: object) -> bool:
    try:
        return int(str(value)) > 0
    except ValueError:
        return False


# chrony holds nodes on one network within a millisecond of each other: half a second off
# means time sync is not doing its job, and one job's per-node logs and traces no longer line
# up (a warning).
CLOCK_WARN_SECONDS = 0.5
# Seconds off break things: freshly issued TLS certificates and tokens are "not yet valid"
# on a slow node, files on shared storage carry timestamps from the future or the past
# (make, checkpoint freshness checks), wall-clock deadlines across nodes disagree; and chrony
# slews at most about 0.08 s per second, so it takes a day to remove 7200 s (a failure).
CLOCK_FAIL_SECONDS = 5.0


def _finite(value: object) -> float | None:
    """A number from a node's facts, or None (facts are data: a string is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def clock_problem(clock: ClockFacts) -> tuple[Status, str] | None:
    """(status, what is wrong) for one node's clock facts, or None: the offset (chrony's
    estimate of this clock against NTP time) is checked, not only the synchronised flag."""
    offset = _finite(clock.get("offset_seconds"))
    size = abs(offset) if offset is not None else 0.0
    shown = f"offset {offset:+.3f} s" if offset else ""
    if size > CLOCK_FAIL_SECONDS:
        shown += f", more than {CLOCK_FAIL_SECONDS:g} s"
    elif size > CLOCK_WARN_SECONDS and clock.get("synchronized"):
        shown += f", more than {CLOCK_WARN_SECONDS:g} s"
    status = Status.FAIL if size > CLOCK_FAIL_SECONDS else Status.WARN
    if not clock.get("synchronized"):
        return status, "not synchronised" + (f" ({shown})" if shown else "")
    return (status, shown) if size > CLOCK_WARN_SECONDS else None


def environment_findings(facts: Facts) -> list[Finding]:
    small_shm: dict[str, str] = {}
    memlock: dict[str, str] = {}
    limits_checked: list[str] = []
    for host, f in facts.items():
        limits = collected(f.get("limits"))
        if not limits:
            continue
        limits_checked.append(host)
        shm = limits.get("shm_bytes")
        if shm is not None and shm < GIB:
            small_shm[host] = f"/dev/shm is {shm / 2**20:.0f} MiB"
        memlock_limit = limits.get("memlock")
        soft = memlock_limit["soft"] if memlock_limit else 0
        if soft is not None:
            memlock[host] = f"memlock limit {soft // 1024} KiB"
    clock_bad: dict[str, tuple[Status, str]] = {}
    clock_checked: list[str] = []
    for host, f in facts.items():
        clock = collected(f.get("clock"))
        if clock.get("synchronized") is None:
            continue
        clock_checked.append(host)
        problem = clock_problem(clock)
        if problem:
            clock_bad[host] = problem
    debug_vars = {
        host: ", ".join(
            f"{k}={v}" for k, v in collected(f.get("env")).items() if k in NCCL_DEBUG_ONLY
        )
        for host, f in facts.items()
    }
    debug_vars = {h: v for h, v in debug_vars.items() if v}
    return [
        _per_host(
            "env.shm",
            Status.WARN,
            small_shm,
            "/dev/shm under 1 GiB (NCCL's shared-memory transport fails to extend it)",
            ok="/dev/shm is at least 1 GiB",
            checked=limits_checked,
            fix_tag="shm",
        ),
        _per_host(
            "env.memlock",
            Status.WARN,
            memlock,
            "memlock not unlimited (RDMA memory registration fails or falls back)",
            ok="memlock is unlimited",
            checked=limits_checked,
            fix_tag="limits",
        ),
        _per_host(
            "env.clock",
            Status.FAIL if any(s is Status.FAIL for s, _ in clock_bad.values()) else Status.WARN,
            {host: why for host, (_, why) in clock_bad.items()},
            "clock off or not synchronised (scrambles cross-node logs, breaks time-limited "
            "credentials and wall-clock deadlines)",
            ok=f"clocks are synchronised, within {CLOCK_WARN_SECONDS:g} s",
            checked=clock_checked,
            fix_tag="time",
        ),
        _per_host(
            "env.nccl-debug-vars",
            Status.WARN,
            debug_vars,
            "debug-only NCCL variables set (slow or hanging collectives)",
            ok="no debug-only NCCL variables set",
            checked=list(facts),
            remedy="unset them in the job environment and the nodes' profiles",
        ),
    ]
