"""Can the job use the GPUs? Visible to torch, free, and of an architecture torch was built for.

The DDP guides' usual dead jobs: a rank that sees fewer GPUs than the job places on the node,
a GPU a previous job still holds, a build of torch without kernels for the GPU ("no kernel
image is available"), and a CPU wheel of torch on a GPU node. Pure functions over facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from clusterkit.checks.model import Finding, Status, over_hosts, per_host
from clusterkit.checks.parity import Facts
from clusterkit.facts import GpuFacts, HostFacts, TorchFacts, collected
from clusterkit.inventory.model import Expectations
from clusterkit.versions import torch_wheels

Remedy = Callable[[str, list[str]], "str | None"]
DEFAULT_BUSY_MIB = 1024  # memory in use on an idle GPU stays far below this
NO_GPU = "no host with NVIDIA GPUs reported facts"


def _gpu_hosts(facts: Facts) -> dict[str, GpuFacts]:
    """Hosts whose nvidia-smi answered with at least one GPU: their GPU facts."""
    gpus = {host: collected(f.get("gpus")) for host, f in facts.items()}
    return {host: found for host, found in gpus.items() if found.get("count")}


def _cuda_torch(f: HostFacts) -> TorchFacts:
    """torch's facts where it is a CUDA build that was imported (device facts known)."""
    torch = collected(f.get("torch"))
    return torch if torch.get("cuda") and torch.get("imported") else TorchFacts()


def busy_findings(facts: Facts, busy_mib: int = DEFAULT_BUSY_MIB) -> list[Finding]:
    """gpu.busy: compute processes already on a GPU, or memory in use above `busy_mib`."""
    gpu_hosts = _gpu_hosts(facts)
    busy: dict[str, str] = {}
    for host, gpus in gpu_hosts.items():
        index = {d.get("uuid"): d.get("index") for d in gpus.get("devices", [])}
        apps = collected(facts[host].get("gpu_processes")).get("processes") or []
        parts = [
            f"GPU {index.get(app.get('gpu_uuid'), '?')}: pid {app.get('pid')} "
            f"({app.get('name') or '?'}, {app.get('used_memory_mib', '?')} MiB)"
            for app in apps
        ]
        taken = {str(index.get(app.get("gpu_uuid"))) for app in apps}
        for device in gpus.get("devices", []):
            used = _int(device.get("memory.used"))
            if used is not None and used > busy_mib and str(device.get("index")) not in taken:
                parts.append(f"GPU {device.get('index')}: {used} MiB in use, no process listed")
        if parts:
            busy[host] = "; ".join(parts)
    return [
        over_hosts(
            "gpu.busy",
            busy,
            list(gpu_hosts),
            ok=f"no compute process and under {busy_mib} MiB in use on every GPU",
            failed=f"GPUs already in use (a previous job still running?): {per_host(busy)}",
            expected=f"no process, <= {busy_mib} MiB used",
            remedy="stop those processes (kill PID; nvidia-smi shows them) or drain the node; "
            "clusterkit.gpu_busy_mib sets the memory threshold",
            unchecked=NO_GPU,
        )
    ]


def visibility_findings(facts: Facts, expect: Expectations) -> list[Finding]:
    """gpu.visible: the GPUs the job will use are the GPUs its ranks can see."""
    checked: list[str] = []
    hidden: dict[str, str] = {}
    for host, gpus in _gpu_hosts(facts).items():
        smi = int(gpus["count"])
        wanted = expect.gpus_per_node or smi
        torch = _cuda_torch(facts[host])
        visible_env = collected(facts[host].get("env")).get("CUDA_VISIBLE_DEVICES")
        why = ""
        if torch:
            seen = int(torch.get("device_count") or 0)
            if seen < wanted:
                why = (
                    f"torch sees {seen} of the {wanted} GPUs the job uses (nvidia-smi lists {smi})"
                )
        elif visible_env is not None:
            listed = _visible_count(visible_env)
            if listed < wanted:
                why = f"CUDA_VISIBLE_DEVICES exposes {listed} of the {wanted} GPUs the job uses"
        elif not collected(facts[host].get("torch")).get("cuda"):
            continue  # a CPU build of torch sees no GPU at all: torch.cpu-build says so
        checked.append(host)
        if why:
            if visible_env is not None and "CUDA_VISIBLE_DEVICES" not in why:
                why += f"; CUDA_VISIBLE_DEVICES={visible_env}"
            hidden[host] = why
    return [
        over_hosts(
            "gpu.visible",
            hidden,
            checked,
            ok="every rank can see the GPUs the job places on its node",
            failed=f"fewer GPUs visible than the job uses: {per_host(hidden)}",
            remedy="unset or fix CUDA_VISIBLE_DEVICES (and NVIDIA_VISIBLE_DEVICES in containers) "
            "in the nodes' environment; check dmesg for GPUs that fell off the bus",
            unchecked="no GPU host with a CUDA build of torch (or CUDA_VISIBLE_DEVICES)",
        )
    ]


def _visible_count(value: str) -> int:
    """Devices CUDA_VISIBLE_DEVICES lists; parsing stops at the first invalid entry, as CUDA's."""
    count = 0
    for item in value.split(","):
        item = item.strip()
        if not item or not (item.isdigit() or item.startswith(("GPU-", "MIG-"))):
            break
        count += 1
    return count


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def arch_findings(facts: Facts) -> list[Finding]:
    """gpu.arch: every GPU's compute capability has kernels in torch's build (arch_list)."""
    checked: list[str] = []
    missing: dict[str, str] = {}
    for host, gpus in _gpu_hosts(facts).items():
        torch = _cuda_torch(facts[host])
        arch_list = torch.get("arch_list") or []
        if not arch_list:
            continue
        checked.append(host)
        capabilities = set(torch.get("capabilities") or [])
        capabilities |= {cap for d in gpus.get("devices", []) if (cap := d.get("compute_cap"))}
        unsupported = sorted(c for c in capabilities if not runs_on(c, arch_list))
        if unsupported:
            missing[host] = (
                f"compute capability {', '.join(unsupported)} not in torch's arch list "
                f"({' '.join(arch_list)})"
            )
    return [
        over_hosts(
            "gpu.arch",
            missing,
            checked,
            ok="torch has kernels for every GPU's architecture",
            failed="torch was not built for these GPUs (CUDA error: no kernel image is "
            f"available): {per_host(missing)}",
            remedy="install a torch build whose CUDA version supports these GPUs (e.g. the "
            "cu128+ wheels for Blackwell), or build torch with TORCH_CUDA_ARCH_LIST",
            unchecked="no GPU host where torch (a CUDA build) was imported",
        )
    ]


_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")


def runs_on(capability: str, arch_list: list[str]) -> bool:
    """Whether a build with `arch_list` (torch.cuda.get_arch_list()) runs on a GPU of this
    compute capability: a cubin for the same major and a lower or equal minor (not an
    arch-specific `a` build of another minor), or PTX for an equal or lower capability,
    which the driver compiles."""
    major, _, minor = capability.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return True  # unknown: not ours to fail
    have = (int(major), int(minor))
    for entry in arch_list:
        match = _ARCH.match(entry)
        if not match:
            continue
        kind, built = match.group(1), (int(match.group(2)), int(match.group(3)))
        specific = bool(match.group(4))  # sm_90a runs on 9.0 only
        same_major = built[0] == have[0] and built[1] <= have[1]
        if kind == "sm" and same_major and (not specific or built == have):
            return True
        if kind == "compute" and built <= have and not specific:
            return True
    return False


def cpu_build_findings(facts: Facts, expect: Expectations) -> list[Finding]:
    """torch.cpu-build: a CPU-only torch on a node with GPUs cannot run a GPU job."""
    cpu_on_gpu: dict[str, str] = {}
    wheels: dict[str, None] = {}
    gpu_hosts = _gpu_hosts(facts)
    for host, gpus in gpu_hosts.items():
        torch = collected(facts[host].get("torch"))
        if torch.get("present") and not torch.get("cuda") and not torch.get("hip"):
            wheel = _wheel(torch, gpus)
            cpu_on_gpu[host] = f"torch {torch.get('version')} is a CPU build"
            wheels[wheel] = None
    needs_cuda = expect.cuda is not None or "+cu" in (expect.torch or "")
    return [
        over_hosts(
            "torch.cpu-build",
            cpu_on_gpu,
            list(gpu_hosts),
            status=Status.FAIL if needs_cuda else Status.WARN,
            ok="torch is a GPU build on every GPU node",
            failed="CPU-only torch on GPU nodes (the wheel from the CPU index): only gloo "
            "on CPU can run"
            + (" and the inventory expects CUDA" if needs_cuda else "")
            + f": {per_host(cpu_on_gpu)}",
            remedy="install a CUDA build of torch: " + " / ".join(wheels),
            unchecked=NO_GPU,
        )
    ]


def _wheel(torch: TorchFacts, gpus: GpuFacts) -> str:
    """The install line for the newest CUDA build of this torch release that the node's
    driver runs, among the builds the release really publishes (torch_versions.json); where
    the table does not know them, what to check instead of a guessed index."""
    version = str(torch.get("version") or "").split("+", 1)[0]
    supported = str(gpus.get("cuda_driver") or "")
    if not version:
        return "pip install torch (a CUDA build: not from the CPU index)"
    default, variants = torch_wheels(version)
    runs = [v for v in variants or () if not supported or _le(v, supported)]
    if runs:
        tag = "cu" + max(runs, key=_parts).replace(".", "")
        return f"pip install torch=={version} --index-url https://download.pytorch.org/whl/{tag}"
    if default and (not supported or _le(default, supported)):
        return f"pip install torch=={version} (PyPI's default wheel, a CUDA {default} build)"
    check = (
        f"check which CUDA builds torch {version} has (https://download.pytorch.org/whl/torch/: "
        f"the torch-{version}+cuXYZ files) and install one at or below CUDA {supported}"
    )
    if not variants and not default:
        return check
    known = f"CUDA {', '.join(variants)} builds" if variants else f"a CUDA {default} default wheel"
    return (
        f"torch {version} has {known}, newer than this driver's CUDA {supported}: upgrade "
        f"the driver, or {check}"
    )


def _parts(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def _le(left: str, right: str) -> bool:
    return _parts(left) <= _parts(right)
