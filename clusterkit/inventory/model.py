"""The resolved inventory: hosts with their connection parameters and cluster settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Host:
    """One inventory host, connection variables already resolved with Ansible precedence."""

    name: str  # inventory name (what reports show)
    address: str  # ansible_host, default: name
    port: int | None = None  # ansible_port; None = ssh default (22 or ~/.ssh/config)
    user: str | None = None  # ansible_user
    key_file: str | None = None  # ansible_ssh_private_key_file / ansible_private_key_file
    proxy_jump: str | None = None  # from ansible_ssh_common_args/extra_args -J / ProxyJump
    proxy_command: str | None = None  # from ... -o ProxyCommand=..., tokens not yet expanded
    strict_host_key_checking: str | None = None  # from -o StrictHostKeyChecking=..., as written
    user_known_hosts_file: str | None = None  # from -o UserKnownHostsFile=...
    connection: str = "ssh"  # ansible_connection: "ssh" (also paramiko/smart) or "local"
    python_interpreter: str | None = None  # ansible_python_interpreter
    ssh_timeout: float | None = None  # ansible_ssh_timeout / ansible_timeout
    groups: tuple[str, ...] = ()  # every group the host belongs to, "all" included
    # Why this host cannot be reached as written (a connection variable only Ansible could
    # compute); the host is reported as failed, the rest of the inventory still runs.
    problem: str | None = None
    # ansible_password / ansible_ssh_pass: for SSH password authentication only. Never in a
    # repr, a message or a report (vars hold it too, so they stay out of the repr as well).
    password: str | None = field(default=None, repr=False, compare=False)
    vars: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@dataclass(frozen=True)
class Expectations:
    """Optional pins (`clusterkit.expect`); parity is checked with or without them."""

    gpus_per_node: int | None = None
    driver: str | None = None  # version constraint, e.g. ">=550" or "550.54.15"
    cuda: str | None = None
    torch: str | None = None
    nccl: str | None = None
    python: str | None = None
    ib_ports: int | None = None  # RDMA ports ACTIVE/LinkUp on every node (expect.infiniband)
    ib_rate_gbps: float | None = None  # the least rate each of them runs at, Gb/s


@dataclass(frozen=True)
class BenchSettings:
    """`clusterkit.bench`: the all-reduce sweep, gate and deadlines. The defaults here are the
    only ones: `check`'s bench stage and `clusterkit bench` both start from this object, and
    `clusterkit bench` flags win over it. Keys are named like the nccl-tests flags."""

    minbytes: str = "1M"  # -b, bytes with K/M/G (powers of 1024)
    maxbytes: str = "16M"  # -e
    stepfactor: int = 2  # -f
    iters: int = 20  # -n
    warmup_iters: int = 5  # -w
    datatype: str = "float"  # -d
    gate_size: str | None = None  # --gate-size; None: the largest size measured
    min_busbw: float | None = None  # GB/s; None: NCCL_TESTS_MIN_BW or the fabric default
    timeout: float = 300.0  # seconds for the whole run; everything is killed after it
    join_timeout: float = 60.0  # seconds ranks wait for each other
    find_slow: bool = False  # also measure groups of nodes in rounds to name a slow node
    find_slow_group: int = 2  # nodes per group
    find_slow_bytes: str | None = None  # all-reduce size of each group; None: maxbytes
    find_slow_fraction: float = 0.7  # slow: below this x its round's median busbw
    find_slow_rounds: int | None = None  # None: max(3, log_k N) (bench/pairing.py)
    find_slow_seconds: float = 5.0  # each group times each block over this window
    find_slow_status: str = "warn"  # status of a named node: warn or fail
    collectives: tuple[str, ...] = ("all_reduce",)  # --collective: which nccl-tests ops


@dataclass(frozen=True)
class NetworkSettings:
    """`clusterkit.network`: what the network stage checks beyond the rendezvous ports."""

    extra_ports: tuple[int, ...] = ()  # more ports every node must accept from every peer
    connect_timeout: float = 3.0  # seconds per connect attempt
    mesh: str = "auto"  # "full": every pair; "auto": full up to full_mesh_up_to nodes
    full_mesh_up_to: int = 64  # auto's all-pairs limit (docs/network.md has the numbers)


@dataclass(frozen=True)
class ProbeSettings:
    """`clusterkit.probe`: options sent to the node probe."""

    timeout: float = 15.0  # seconds the collectors may run on a node
    import_torch: bool = False  # import torch on every node, not only CUDA builds on GPU nodes

    def options(self) -> dict[str, Any]:
        """The JSON options the collector reads."""
        return {"timeout": self.timeout, "import_torch": self.import_torch}


@dataclass(frozen=True)
class SlurmSettings:
    """`clusterkit.slurm`: how the srun transport starts its job steps."""

    # Given to every srun step, e.g. ("--gres=gpu:8",) where ConstrainDevices would hide GPUs
    srun_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class CostSettings:
    """`clusterkit.cost`: inputs of `clusterkit cost`, each named like its flag (None: unset;
    the command applies flags over these, then the catalog and its own defaults)."""

    instance: str | None = None
    region: str | None = None
    gpus_per_node: int | None = None
    hours: float | None = None
    checkpoint_min: float | None = None
    restart_min: float | None = None
    preempt_rate: str | None = None  # a rate per node-hour or an advisor bucket, as text
    trace: str | None = None
    correlation: float | None = None
    capacity_wait_median: float | str | None = None  # hours, or "off"
    capacity_wait_mean: float | str | None = None  # hours, or "off"
    hardware_rate: float | None = None
    on_demand_price: float | None = None
    spot_price: float | None = None
    deadline: float | None = None
    interval: float | None = None
    hazard: str | None = None
    catalog: str | None = None
    max_price_age_days: float | None = None


@dataclass(frozen=True)
class ClusterSettings:
    """clusterkit's own settings, from the `clusterkit` variable (Ansible ignores it)."""

    master: str | None = None  # inventory host name or address; None = first host
    master_port: int = 29500
    rdzv_port: int = 29400
    interface: str | None = None  # what NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME will name
    expect: Expectations = field(default_factory=Expectations)
    image: str | None = None  # cluster image by tag or digest
    image_run_args: tuple[str, ...] | None = None  # docker run flags; None: the image's label
    bench: BenchSettings = field(default_factory=BenchSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    cost: CostSettings = field(default_factory=CostSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    gpu_busy_mib: int = 1024  # memory in use above which a GPU counts as busy (gpu.busy)
    # Folders every node must share (the checkpoint directory rank 0 writes, all ranks read)
    shared_paths: tuple[str, ...] = ()
    dcgm_level: int | None = None  # `dcgmi diag -r N` in check (the dcgm stage); None: off


@dataclass(frozen=True)
class Inventory:
    path: str | None  # None for the embedded local default
    hosts: tuple[Host, ...]
    settings: ClusterSettings = field(default_factory=ClusterSettings)
    # What Ansible would only warn about (skipped keys, non-group entries), "file:line: text".
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def master(self) -> Host:
        """The master host: settings.master when it names an inventory host, else the first."""
        wanted = self.settings.master
        for host in self.hosts:
            if wanted in (host.name, host.address):
                return host
        return self.hosts[0]
