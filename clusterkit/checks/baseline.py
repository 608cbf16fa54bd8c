"""Drift from a known-good baseline: parity compares nodes with each other, so an upgrade
that reached every node passes it; the baseline remembers the state that last trained well
and names every difference from it, even when all nodes changed together.

Pure: `snapshot` turns facts (and the bench's bus bandwidth) into the baseline's content,
`drift_findings` compares one with the current run. Reading and writing the file is
report/baseline.py's job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict, cast

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import gpu_firmware, nccl_version, torch_cuda
from clusterkit.checks.registry import CheckId
from clusterkit.escape import printable
from clusterkit.facts import FactsByHost, HostFacts, collected
from clusterkit.inventory.model import Expectations
from clusterkit.versions import Constraint
from clusterkit.words import counted

BASELINE_VERSION = 1  # raised when a key is renamed, retyped or removed
CHECK: CheckId = "baseline.drift"
BANDWIDTH_DROP = 0.10  # bus bandwidth this much below the baseline's warns: bench noise is less
VALUE_MAX = 64  # characters of a node's value shown in a message


class HostState(TypedDict, total=False):
    """One node's known-good state (a key is absent where the node did not report it)."""

    driver: str
    cuda_driver: str
    kernel: str
    torch: str
    torch_cuda: str
    nccl: str
    python: str
    gpu_model: str
    gpu_count: int
    vbios: str
    interfaces: dict[str, int | None]  # hardware-backed interface -> MTU


class Baseline(TypedDict):
    """The file's content (docs/report.md, "Baseline"); JSON with sorted keys."""

    baseline_version: int
    probe_version: int
    clusterkit_version: str
    taken: str  # the day it was saved, YYYY-MM-DD (UTC)
    hosts: dict[str, HostState]
    bus_bandwidth_gbps: dict[str, dict[str, float]]  # collective -> size in bytes -> GB/s


def _gpu_models(f: HostFacts) -> str | None:
    names = sorted({d.get("name") or "?" for d in collected(f.get("gpus")).get("devices", [])})
    return ", ".join(names) or None


# (key, what a person calls it, extractor, the `expect` pin that decides its drift)
FIELDS: tuple[tuple[str, str, Callable[[HostFacts], object], str | None], ...] = (
    ("driver", "driver", lambda f: collected(f.get("gpus")).get("driver"), "driver"),
    ("cuda_driver", "driver's CUDA", lambda f: collected(f.get("gpus")).get("cuda_driver"), None),
    ("kernel", "kernel", lambda f: collected(f.get("system")).get("kernel"), None),
    ("torch", "torch", lambda f: collected(f.get("torch")).get("version"), "torch"),
    ("torch_cuda", "torch CUDA build", torch_cuda, "cuda"),
    ("nccl", "NCCL", nccl_version, "nccl"),
    ("python", "Python", lambda f: collected(f.get("python")).get("version"), "python"),
    ("gpu_model", "GPU model", _gpu_models, None),
    ("gpu_count", "GPU count", lambda f: collected(f.get("gpus")).get("count"), "gpus_per_node"),
    ("vbios", "GPU VBIOS", lambda f: gpu_firmware(f, "vbios_version"), None),
)
# Interfaces that come and go with containers and jobs are not the machine's state.
TRANSIENT_KINDS = frozenset({"loopback", "bridge", "tun", "virtual"})


def host_state(facts: HostFacts) -> HostState:
    state: dict[str, object] = {}
    for key, _, extract, _ in FIELDS:
        value = extract(facts)
        if value is not None:
            state[key] = value
    interfaces = collected(facts.get("network")).get("interfaces") or {}
    state["interfaces"] = {
        name: one.get("mtu")
        for name, one in interfaces.items()
        if one.get("kind") not in TRANSIENT_KINDS and name != "lo"  # kind None: unreadable
    }
    return cast(HostState, state)  # FIELDS' keys, with the types their extractors return


def snapshot(
    facts: FactsByHost,
    bandwidth: Mapping[str, Mapping[int, float]],
    *,
    taken: str,
    versions: tuple[str, int],
) -> Baseline:
    """The baseline of a run: every host's state, the bench's bus bandwidth (GB/s) per
    collective and size; `versions` is (clusterkit's, the probe's)."""
    return Baseline(
        baseline_version=BASELINE_VERSION,
        probe_version=versions[1],
        clusterkit_version=versions[0],
        taken=taken,
        hosts={host: host_state(f) for host, f in sorted(facts.items())},
        bus_bandwidth_gbps={
            op: {str(size): round(v, 3) for size, v in sorted(sizes.items())}
            for op, sizes in sorted(bandwidth.items())
        },
    )


def flat_state(state: HostState) -> dict[str, object]:
    """key -> value, each interface's MTU as `mtu:NAME`."""
    flat: dict[str, object] = {k: v for k, v in state.items() if k != "interfaces"}
    for name, mtu in (state.get("interfaces") or {}).items():
        flat[f"mtu:{name}"] = mtu
    return flat


def _what(key: str) -> str:
    if key.startswith("mtu:"):
        return f"MTU of {_shown(key[4:])}"
    return next(what for k, what, _, _ in FIELDS if k == key)


def _shown(value: object) -> str:
    text = "none" if value is None else printable(value)
    return text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 3] + "..."


def drift_findings(
    baseline: Baseline,
    facts: FactsByHost,
    bandwidth: Mapping[str, Mapping[int, float]],
    expect: Expectations,
) -> list[Finding]:
    """One finding per change (a value, old -> new, and the nodes it changed on), per node the
    baseline does not know, and per bus bandwidth drop; one `ok` finding when nothing moved.
    A change warns, unless `expect` pins that value: then the pin decides (ok or fail)."""
    since = f"since the baseline of {_shown(baseline['taken'])}"
    now = {host: flat_state(host_state(f)) for host, f in facts.items() if f}
    findings = _value_changes(baseline, now, expect, since)
    findings += _new_hosts(baseline, now, since)
    findings += _bandwidth_drops(baseline, bandwidth, since)
    if not findings:
        hosts = sorted(set(now) & set(baseline["hosts"]))
        message = f"no drift on {counted(len(hosts), 'node')} {since}"
        findings.append(Finding(CHECK, Status.OK, message, hosts=hosts))
    return findings


def _value_changes(
    baseline: Baseline, now: Mapping[str, dict[str, object]], expect: Expectations, since: str
) -> list[Finding]:
    changes: dict[tuple[str, str, str], list[str]] = {}
    for host, state in now.items():
        if host not in baseline["hosts"]:
            continue
        before = flat_state(baseline["hosts"][host])
        for key in sorted(set(before) | set(state)):
            if before.get(key) != state.get(key):
                change = (key, _shown(before.get(key)), _shown(state.get(key)))
                changes.setdefault(change, []).append(host)
    compared = sum(1 for host in now if host in baseline["hosts"])
    return [
        _change_finding(key, old, new, sorted(hosts), compared, expect, since)
        for (key, old, new), hosts in changes.items()
    ]


def _change_finding(
    key: str,
    old: str,
    new: str,
    hosts: list[str],
    compared: int,
    expect: Expectations,
    since: str,
) -> Finding:
    where = (
        f"on all {counted(compared, 'node')}"
        if len(hosts) == compared and compared > 1
        else f"on {', '.join(hosts)}"
        if len(hosts) <= 4
        else f"on {len(hosts)} of {compared} nodes"
    )
    message = f"{_what(key)} {old} -> {new} {where} {since}"
    status, pinned = _pinned(key, new, expect)
    return Finding(
        CHECK,
        status,
        message + pinned,
        hosts=hosts,
        expected=old,
        found={host: new for host in hosts},
        remedy=None
        if status is Status.OK
        else "if the change is wanted, save a new baseline (check --save-baseline FILE) or pin "
        "the value in clusterkit.expect; else return the nodes to the baseline",
    )


def _pinned(key: str, new: str, expect: Expectations) -> tuple[Status, str]:
    """(status, what the message adds): a pinned value's drift is judged by the pin."""
    pin = dict((k, p) for k, _, _, p in FIELDS).get(key)
    wanted = getattr(expect, pin) if pin else None
    if pin is None or wanted is None:
        return Status.WARN, ""
    if pin == "gpus_per_node":
        meets = new == str(wanted)
    else:
        try:
            meets = Constraint(str(wanted)).matches(new)
        except ValueError:
            meets = False
    verdict = "which it meets" if meets else "which it does not meet"
    return (Status.OK if meets else Status.FAIL), f" (pinned by expect.{pin} {wanted}, {verdict})"


def _new_hosts(
    baseline: Baseline, now: Mapping[str, dict[str, object]], since: str
) -> list[Finding]:
    new = sorted(host for host in now if host not in baseline["hosts"])
    if not new:
        return []
    message = f"{', '.join(new[:8])}{' ...' if len(new) > 8 else ''} not in the baseline {since}"
    remedy = "save a new baseline (check --save-baseline FILE) once the new nodes are known good"
    return [Finding(CHECK, Status.WARN, message, hosts=new, remedy=remedy)]


def _bandwidth_drops(
    baseline: Baseline, bandwidth: Mapping[str, Mapping[int, float]], since: str
) -> list[Finding]:
    findings = []
    for op, sizes in sorted(bandwidth.items()):
        known = baseline["bus_bandwidth_gbps"].get(op, {})
        for size, value in sorted(sizes.items()):
            before = known.get(str(size))
            if not before or value >= before * (1 - BANDWIDTH_DROP):
                continue
            drop = round(100 * (1 - value / before))
            message = (
                f"{op} bus bandwidth down {drop}% at {size_words(size)} ({before:.3g} -> "
                f"{value:.3g} GB/s) {since}"
            )
            findings.append(
                Finding(CHECK, Status.WARN, message, expected=before, found=value, stage="bench")
            )
    return findings


def size_words(size: int) -> str:
    """Bytes as nccl-tests' sizes read: 1 GiB, 16 MiB, 512 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def typed_baseline(raw: Mapping[str, Any]) -> Baseline:
    """For callers that checked `raw`'s shape against Baseline (shape.shape_problem)."""
    return cast(Baseline, raw)
