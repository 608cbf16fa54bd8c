"""Every check id a finding can carry, where it is documented and what it checks in one
line: the ids are a public contract (JSON `id`, JUnit test names, Slurm drain reasons).

`CheckId` names them for mypy: a Finding's id is a CheckId, so a misspelled or unregistered
id is a type error where the finding is made. The tables below say, for each id, its page
and what it checks; a dict keyed by CheckId cannot hold an unknown id, and importing this
module fails if an id lacks its line (the two lists are one declaration, held together).
tests/unit/architecture/test_check_registry.py holds these tables and the docs' tables to
each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

CheckId = Literal[
    # docs/checks.md
    "host.reachable",
    "host.key",
    "probe.ran",
    "parity.driver",
    "parity.cuda-driver",
    "parity.gpu-model",
    "parity.gpu-count",
    "parity.torch",
    "parity.torch-cuda",
    "parity.nccl",
    "parity.python",
    "parity.kernel",
    "parity.vbios",
    "parity.inforom",
    "parity.memory",
    "parity.nvlink",
    "parity.infiniband",
    "fabric.nvlink-down",
    "gpu.nvlink-errors",
    "ib.port",
    "docker.container-toolkit",
    "expect.gpus_per_node",
    "expect.driver",
    "expect.torch",
    "expect.nccl",
    "expect.python",
    "expect.cuda",
    "expect.infiniband",
    "torch.present",
    "torch.import",
    "torch.numpy",
    "compat.driver-cuda",
    "gpu.nvidia-smi",
    "gpu.ecc",
    "gpu.persistence",
    "gpu.row-remap",
    "gpu.retired-pages",
    "gpu.sram-ecc",
    "gpu.temperature",
    "gpu.pcie-width",
    "gpu.pcie-replay",
    "gpu.clock-reasons",
    "gpu.present",
    "gpu.xid",
    "nvswitch.sxid",
    "gpu.reset-required",
    "host.mce",
    "host.edac",
    "host.filesystem",
    "host.nvme",
    "host.dstate",
    "gpu.busy",
    "gpu.visible",
    "gpu.arch",
    "torch.cpu-build",
    "env.shm",
    "env.memlock",
    "env.clock",
    "env.nccl-debug-vars",
    "env.job-vars",
    "env.socket-ifname",
    "host.memory-free",
    "storage.shared",
    "storage.free",
    "dcgm.diag",
    "baseline.drift",
    # docs/network.md
    "net.stage",
    "net.interface",
    "net.subnet",
    "net.mtu",
    "net.ifname-mismatch",
    "net.master-resolve",
    "net.master-address",
    "net.hostname-loopback",
    "net.rendezvous-port-in-use",
    "net.port-in-use",
    "net.rendezvous",
    "net.mesh",
    "net.subnet-cut",
    "net.firewall",
    "net.firewall-unknown",
    # docs/bench.md
    "bench.busbw",
    "bench.busbw-all_gather",
    "bench.busbw-reduce_scatter",
    "bench.busbw-alltoall",
    "bench.correctness",
    "bench.world-size",
    "bench.rank-failed",
    "bench.not-joined",
    "bench.timeout",
    "bench.slow-rank",
    "bench.slow-node",
    "bench.node-busbw",
    "bench.nccl-socket-transport",
    "bench.nccl-debug-vars",
    # docs/images.md
    "image.present",
    "image.inspect",
    "image.digest",
    "image.spec-hash",
    "image.run",
    "image.versions",
    "image.driver",
    "image.shm",
    "image.memlock",
    "image.network",
    "image.disable-require",
    "image.infiniband",
    "image.stage",
    # docs/launch.md
    "launch.job",
]


@dataclass(frozen=True)
class CheckInfo:
    doc: str  # the page under docs/ whose table documents it
    what: str  # what it checks, in one line


def _table(doc: str, rows: dict[CheckId, str]) -> dict[CheckId, CheckInfo]:
    return {check_id: CheckInfo(doc, what) for check_id, what in rows.items()}


_CONNECT_PROBE_STATIC: dict[CheckId, str] = {
    "host.reachable": "every host connected; one error per host that was not, with why",
    "host.key": "a host whose key was accepted unverified because host-key checking is off",
    "probe.ran": "the node probe ran and its output could be read",
    "parity.driver": "same NVIDIA driver version on every host",
    "parity.cuda-driver": "same highest CUDA version the driver supports on every host",
    "parity.gpu-model": "same GPU models on every host",
    "parity.gpu-count": "same number of GPUs on every host",
    "parity.torch": "same torch version (with its local label) on every host",
    "parity.torch-cuda": "same CUDA build of torch on every host",
    "parity.nccl": "same NCCL (loaded by torch, else the wheel) on every host",
    "parity.python": "same Python version of the job's interpreter on every host",
    "parity.kernel": "same kernel release on every host",
    "parity.vbios": "same GPU VBIOS versions on every host (a difference warns)",
    "parity.inforom": "same GPU InfoROM image versions on every host (a difference warns)",
    "parity.memory": "same host memory (whole GiB) on every host",
    "parity.nvlink": "same NVLink (GPUs x active links per GPU) on every host",
    "parity.infiniband": "same InfiniBand/RoCE ports (state and rate) on every host",
    "fabric.nvlink-down": "no NVLink link inactive where the node's other GPUs or peers have it",
    "gpu.nvlink-errors": "no NVLink link with replay, recovery or CRC error counts",
    "ib.port": "every RDMA port ACTIVE/LinkUp, at its peers' rate, few link error counts",
    "docker.container-toolkit": "every GPU node has docker and the NVIDIA container runtime",
    "expect.gpus_per_node": "GPU count equals the clusterkit.expect pin on every host",
    "expect.driver": "driver matches the clusterkit.expect constraint",
    "expect.torch": "torch version matches the clusterkit.expect constraint",
    "expect.nccl": "NCCL version matches the clusterkit.expect constraint",
    "expect.python": "Python version matches the clusterkit.expect constraint",
    "expect.cuda": "the CUDA version of torch's build matches the clusterkit.expect constraint",
    "expect.infiniband": "every node has expect.ib_ports RDMA ports up, at expect.ib_rate_gbps",
    "torch.present": "torch is installed for the job's Python on every host",
    "torch.import": "import torch failed where the probe imported it",
    "torch.numpy": "numpy is importable by the job's Python wherever torch is",
    "compat.driver-cuda": "each node's driver against the CUDA version its torch was built for",
    "gpu.nvidia-smi": "nvidia-smi answered on every GPU node",
    "gpu.ecc": "no GPU reports uncorrected volatile ECC errors",
    "gpu.persistence": "persistence mode is Enabled on every GPU",
    "gpu.row-remap": "no GPU has a row remap pending or failed, or many uncorrectable remaps",
    "gpu.retired-pages": "no GPU (Volta and older) has a page retirement pending or a full table",
    "gpu.sram-ecc": "no GPU with many corrected, or any lifetime uncorrected, SRAM ECC errors",
    "gpu.temperature": "every GPU below its maximum operating temperature (T.Limit margin)",
    "gpu.pcie-width": "every GPU's PCIe link runs at its maximum width",
    "gpu.pcie-replay": "no GPU's PCIe link with many replay errors (AER) since boot",
    "gpu.clock-reasons": "no GPU clocks slowed by HW slowdown, thermal slowdown or power brake",
    "gpu.present": "every node whose GPU collector answered lists at least one NVIDIA GPU",
    "gpu.xid": "no Xid in the kernel log that needs a GPU reset, reboot or support case",
    "nvswitch.sxid": "no NVSwitch SXid in the kernel log that needs a reset or service",
    "gpu.reset-required": "no GPU the NVIDIA driver asks to reset (reset_status fields)",
    "host.mce": "no uncorrected machine-check error in the kernel log (corrected ones warn)",
    "host.edac": "no uncorrected memory error (EDAC UE) in the kernel log",
    "host.filesystem": "no filesystem remounted read-only or shut down (errors warn)",
    "host.nvme": "no NVMe drive with a critical warning or media errors (nvme smart-log)",
    "host.dstate": "no process stuck in uninterruptible sleep (D state) for long",
    "gpu.busy": "no compute process on any GPU",
    "gpu.visible": "torch sees at least the GPUs the job uses",
    "gpu.arch": "every GPU's compute capability",
    "torch.cpu-build": "a node with NVIDIA GPUs has a CPU-only build of torch",
    "env.shm": "/dev/shm is at least 1 GiB",
    "env.memlock": "the locked-memory limit is unlimited or large",
    "env.clock": "the clock is synchronised and within 0.5 s of NTP time",
    "env.nccl-debug-vars": "no debug-only NCCL variable set in the login environment",
    "env.job-vars": "the job's own variables on a node agree with what was checked",
    "env.socket-ifname": "a node with several candidate interfaces names the one to use",
    "host.memory-free": "MemAvailable is at least 10% of MemTotal on every node",
    "storage.shared": "a token written in each shared path on the master is read on every node",
    "storage.free": "free space in every shared path: at least 10 GiB and 5% of the filesystem",
    "dcgm.diag": "every DCGM diagnostic test (dcgmi diag -r N) passed on every GPU",
    "baseline.drift": "no difference from the known-good baseline (check --baseline FILE)",
}


_NETWORK: dict[CheckId, str] = {
    "net.stage": "a node could not run a step of the network stage",
    "net.interface": "the collective interface is missing, down or has no address on a node",
    "net.subnet": "a node's collective address shares no subnet with any peer",
    "net.mtu": "the collective interface's MTU differs",
    "net.ifname-mismatch": "NCCL and GLOO ifnames agree, on every node, with clusterkit.interface",
    "net.master-resolve": "the master name does not resolve, or resolves differently, on some node",
    "net.master-address": "the master name resolves to loopback, or to an address the master lacks",
    "net.hostname-loopback": "a node's own hostname resolves to loopback",
    "net.rendezvous-port-in-use": "the master's rendezvous port is taken",
    "net.port-in-use": "a node could not listen on a port of the mesh (another process has it)",
    "net.rendezvous": "some node cannot connect to the master's rendezvous ports",
    "net.mesh": "some node pair cannot open TCP on the mesh or extra ports",
    "net.subnet-cut": "two subnets cannot reach each other while their nodes reach others",
    "net.firewall": "the rule or policy that explains each blocked path, per node",
    "net.firewall-unknown": "a blocked path's firewall could not be read",
}


_BENCH: dict[CheckId, str] = {
    "bench.busbw": "slowest-rank busbw at the gate size vs the threshold",
    "bench.busbw-all_gather": "all_gather busbw (nccl-tests factor (n-1)/n) vs the threshold",
    "bench.busbw-reduce_scatter": "reduce_scatter busbw ((n-1)/n) vs the threshold",
    "bench.busbw-alltoall": "alltoall busbw ((n-1)/n) vs 0.5 x the threshold",
    "bench.correctness": "wrong elements after each collective measured (rank+1 filled)",
    "bench.world-size": "WORLD_SIZE equals nodes x ranks per node (caught before any timing)",
    "bench.rank-failed": "names the node (and rank) that failed first, or rank 0 without a result",
    "bench.not-joined": "nodes none of whose ranks joined, or not run for a partial world",
    "bench.timeout": "no result before the deadline",
    "bench.slow-rank": "a rank took >= 1.25 x the median time per op at the gate size",
    "bench.slow-node": "no node slow or failing in most of its groups (--find-slow)",
    "bench.node-busbw": "each node alone: busbw vs its intra-node threshold and the median",
    "bench.nccl-socket-transport": "NCCL used NET/Socket on a node with active InfiniBand",
    "bench.nccl-debug-vars": "no debug-only NCCL variable (NCCL_P2P_DISABLE, ...) in the run",
}


_IMAGE: dict[CheckId, str] = {
    "image.present": "the image is missing on a node",
    "image.inspect": "the node's engine could not be asked",
    "image.digest": "different images across nodes",
    "image.spec-hash": "io.clusterkit.spec-hash differs across nodes",
    "image.run": "the container did not run",
    "image.versions": "torch / CUDA / NCCL / python inside differ from the labels",
    "image.driver": "host driver at or above the CUDA floor of the image",
    "image.shm": "/dev/shm under 1 GiB without --ipc host",
    "image.memlock": "memlock limited inside the container",
    "image.network": "multi-node without --network host",
    "image.disable-require": "NVIDIA_DISABLE_REQUIRE set (hides a too-old driver)",
    "image.infiniband": "a node with RDMA devices runs the image with /dev/infiniband",
    "image.stage": "the image stage could not check any node",
}


_LAUNCH: dict[CheckId, str] = {
    "launch.job": "the job ran on every node and every rank exited 0 (or why not, and where)",
}


CHECKS: dict[CheckId, CheckInfo] = {
    **_table("checks.md", _CONNECT_PROBE_STATIC),
    **_table("network.md", _NETWORK),
    **_table("bench.md", _BENCH),
    **_table("images.md", _IMAGE),
    **_table("launch.md", _LAUNCH),
}


_UNDESCRIBED = set(get_args(CheckId)) - set(CHECKS)
if _UNDESCRIBED:
    raise ImportError(f"check ids without a table line: {sorted(_UNDESCRIBED)}")


def describe(check_id: str) -> str:
    """`id: what it checks (docs/PAGE)`, or the id alone when it is not registered."""
    info = next((info for known, info in CHECKS.items() if known == check_id), None)
    return f"{check_id}: {info.what} (docs/{info.doc})" if info else check_id
