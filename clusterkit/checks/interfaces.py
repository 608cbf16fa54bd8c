"""Which of a node's interfaces could carry the collectives, judged by name and kind.

Pure knowledge of how NCCL and gloo pick an interface: the job-environment check counts the
candidates on each node (checks/job_env.py), and the network stage chooses the one a job
will use (net/ifname.py).
"""

from __future__ import annotations

# Names NCCL skips unless told otherwise (prefixes).
DEFAULT_EXCLUDED = ("lo", "docker")
# Names container runtimes, hypervisors and overlay networks give their own interfaces.
VIRTUAL_NAMES = (
    *DEFAULT_EXCLUDED, "veth", "virbr", "br-", "cni", "flannel", "cali", "cilium", "podman",
    "weave", "kube-", "tun", "tap",
)  # fmt: skip
# Kinds (node/prelude.py interface_kind) that carry a machine's own traffic.
HOST_KINDS = ("device", "bond", "vlan", "team")
# Kinds that never carry the collectives of their own: a bridge does only where it holds the
# route to the master (a host whose NIC is enslaved to br0), which callers check first.
NEVER_KINDS = ("loopback", "bridge", "tun")


def interface_rank(name: str, kind: str | None) -> int | None:
    """How fit an interface is to carry the collectives: 0 a NIC, bond, VLAN or IPoIB; 1 a
    virtual one (veth, macvlan), fit only where nothing better exists (a container's eth0);
    None never (loopback, bridges, tunnels, container runtimes' names). Facts without a
    kind (older probes) are judged by name alone."""
    if kind in NEVER_KINDS or name.startswith(VIRTUAL_NAMES):
        return None
    return 0 if kind is None or kind in HOST_KINDS else 1
