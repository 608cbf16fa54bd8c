"""Link health inside and between nodes: NVLink links down and their error counters, and
InfiniBand/RoCE ports down, slow or erroring. Each problem names the host, the GPU or HCA,
the link or port and the counter. Pure functions over the probe's facts.

The counters run since the driver loaded (or were last cleared): one reading gives a count,
not a rate, so small counts warn and only the ones that mean corrupted data or a dead link
fail. Bounds and their sources are in docs/checks.md."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from clusterkit.checks.gpu_health import gpu_label
from clusterkit.checks.model import Finding, HostProblem, Status, graded, over_hosts, per_host
from clusterkit.checks.parity import Facts, sole_majority
from clusterkit.facts import HostFacts, IbPort, NvlinkGpu, collected, error_of
from clusterkit.inventory.model import Expectations

# More CRC errors on one link than this fails: DCGM's health watch fails NVLink CRC errors
# at 100 per second and warns below; without a rate, 100 since the driver loaded is the bound.
NVLINK_CRC_FAIL = 100
# Counters on an InfiniBand port above these warn (since the driver loaded): one link drop is
# a switch reboot or a reseat, more is a flapping link; a few symbol errors happen on any
# long high-speed link, more mean a marginal cable or transceiver.
IB_COUNTER_WARN = {"link_downed": 1, "symbol_error": 10, "link_error_recovery": 10,
                   "port_rcv_errors": 10}  # fmt: skip

# -- NVLink ---------------------------------------------------------------------------------


def _gpu_name(host_facts: HostFacts, index: str) -> str:
    """'GPU 3 (bus id, serial)' from nvidia-smi's query when it lists the index."""
    for gpu in collected(host_facts.get("gpus")).get("devices") or []:
        if gpu.get("index") == index:
            return gpu_label(gpu)
    return f"GPU {index}"


def _nvlink_gpus(host_facts: HostFacts) -> list[NvlinkGpu]:
    return collected(host_facts.get("nvlink")).get("gpus") or []


def _active(gpu: NvlinkGpu, link: int) -> bool:
    links = gpu.get("links") or []
    return link < len(links) and bool(links[link])


def inactive_links(facts: Facts) -> dict[str, dict[str, list[int]]]:
    """host -> {GPU index: links `<inactive>` where a peer has them up}: another GPU of the
    node, or the same GPU on most other NVLink nodes (a node whose fabric manager is down
    shows every link inactive)."""
    nvlink_hosts = [h for h, f in facts.items() if any(g.get("links") for g in _nvlink_gpus(f))]
    up_somewhere = [
        h for h in nvlink_hosts if any(collected(facts[h].get("nvlink")).get("active_links", []))
    ]
    if not up_somewhere:
        return {}
    down: dict[str, dict[str, list[int]]] = {}
    for host in nvlink_hosts:
        gpus = _nvlink_gpus(facts[host])
        others = [_nvlink_gpus(facts[h]) for h in nvlink_hosts if h != host]
        for position, gpu in enumerate(gpus):
            links = []
            for link, speed in enumerate(gpu.get("links") or []):
                if speed:
                    continue
                on_node = any(_active(g, link) for g in gpus if g is not gpu)
                same = [o[position] for o in others if position < len(o)]
                elsewhere = sum(_active(g, link) for g in same) * 2 > len(same) > 0
                if on_node or elsewhere:
                    links.append(link)
            if links:
                down.setdefault(host, {})[str(gpu.get("index"))] = links
    return down


def nvlink_down_evidence(facts: Facts, host: str, gpu_links: Mapping[str, list[int]]) -> str:
    """'GPU 2: 16 of 18 active, links 16, 17 inactive' for each GPU of the host."""
    parts = []
    for gpu in _nvlink_gpus(facts[host]):
        links = gpu_links.get(str(gpu.get("index")))
        if links:
            total = len(gpu.get("links") or [])
            active = total - sum(1 for speed in gpu.get("links") or [] if not speed)
            shown = ", ".join(str(n) for n in links)
            parts.append(f"GPU {gpu.get('index')}: {active} of {total} active, links {shown} "
                         "inactive")  # fmt: skip
    return "; ".join(parts)


def _numbered(item: tuple[str, object]) -> tuple[int, str]:
    """Sort key of a GPU or link number as a dict key: numbers in order, odd keys last."""
    key = item[0]
    return (int(key) if key.isdigit() else 1 << 30, key)


def _nvlink_counter_problems(host: str, host_facts: HostFacts) -> list[HostProblem]:
    nvlink = collected(host_facts.get("nvlink"))
    problems: list[HostProblem] = []
    if nvlink.get("errors_error"):
        evidence = f"NVLink error counters unreadable: {nvlink['errors_error']}"
        problems.append((Status.WARN, host, evidence, "run `nvidia-smi nvlink -e` by hand"))
    for index, links in sorted((nvlink.get("errors") or {}).items(), key=_numbered):
        name = _gpu_name(host_facts, index)
        for link, counters in sorted(links.items(), key=_numbered):
            for counter, count in sorted(counters.items()):
                if count <= 0:
                    continue
                status = (
                    Status.FAIL if "crc" in counter and count > NVLINK_CRC_FAIL else Status.WARN
                )
                evidence = f"{name} link {link}: {count} {counter} errors"
                action = (
                    f"{name}: watch whether the count rises under load (`nvidia-smi nvlink -e "
                    f"-i {index}`); reset the GPU (`nvidia-smi -r -i {index}`) or drain the node "
                    "and open a support case if it does (a failing link ends in Xid 74)"
                )
                problems.append((status, host, evidence, action))
    return problems


def nvlink_error_findings(facts: Facts) -> list[Finding]:
    """gpu.nvlink-errors: none when no node read NVLink error counters (no NVLink)."""
    checked = [h for h, f in facts.items()
               if {"errors", "errors_error"} & set(collected(f.get("nvlink")))]  # fmt: skip
    if not checked:
        return []
    problems = [p for host in checked for p in _nvlink_counter_problems(host, facts[host])]
    return graded(
        "gpu.nvlink-errors",
        checked,
        problems,
        what="NVLink error counters",
        ok="no NVLink link has replay, recovery or CRC errors",
    )


# -- InfiniBand ports -----------------------------------------------------------------------


def _ports(host_facts: HostFacts) -> Iterable[tuple[str, str, IbPort]]:
    for device in collected(host_facts.get("infiniband")).get("devices") or []:
        for port in device.get("ports") or []:
            yield str(device.get("name")), str(port.get("port")), port


def _is_up(port: IbPort) -> bool:
    state = str(port.get("state") or "").upper()
    return state == "ACTIVE" and port.get("phys_state") in (None, "LinkUp")


def _down_status(port: IbPort, peers: Mapping[str, IbPort], alone: bool) -> Status | None:
    """How a port that is not up counts; None: not in use. Among peers, a port down on most
    of them is unused. Alone (node-check), a port that never came up (no link_downed count,
    no physical link) may be an uncabled spare and warns; one that went down, or trained
    without becoming ACTIVE, fails."""
    if port.get("phys_state") == "Disabled":
        return None
    if alone:
        went_down = port.get("counters", {}).get("link_downed", 0) > 0
        return Status.FAIL if went_down or port.get("phys_state") == "LinkUp" else Status.WARN
    unused = peers and sum(not _is_up(p) for p in peers.values()) * 2 >= len(peers)
    return None if unused else Status.FAIL


def _port_problems(facts: Facts, host: str, alone: bool = False) -> list[HostProblem]:
    problems: list[HostProblem] = []
    for hca, number, port in _ports(facts[host]):
        where = f"{hca} port {number}"
        peers = {h: p for h in facts if h != host
                 for name, n, p in _ports(facts[h]) if (name, n) == (hca, number)}  # fmt: skip
        action = (f"{where}: check the cable, transceiver and switch port (`ibstat {hca} "
                  f"{number}`, `mlxlink -d {hca} -p {number}`) and the subnet manager")  # fmt: skip
        if not _is_up(port):
            status = _down_status(port, peers, alone)
            if status is not None:
                evidence = f"{where} {port.get('state')}/{port.get('phys_state')}"
                if status is Status.WARN:
                    evidence += " (never up since the driver loaded: an uncabled spare?)"
                problems.append((status, host, evidence, action))
            continue
        rates = {
            h: p.get("rate_gbps") for h, p in peers.items() if _is_up(p) and p.get("rate_gbps")
        }
        # Peers split evenly between two rates (1 against 1) set no rate to fall short of.
        usual = sole_majority(rates)[1] if rates else None
        rate = port.get("rate_gbps")
        if usual and rate and rate < usual:
            evidence = f"{where} at {rate:g} Gb/s ({port.get('rate')}), its peers {usual:g} Gb/s"
            problems.append((Status.FAIL, host, evidence, action))
        counters = port.get("counters") or {}
        high = [f"{name} {counters[name]}" for name, bound in IB_COUNTER_WARN.items()
                if counters.get(name, 0) > bound]  # fmt: skip
        if high:
            problems.append((Status.WARN, host, f"{where}: {', '.join(high)}", action))
    return problems


def ib_port_findings(facts: Facts, *, alone: bool = False) -> list[Finding]:
    """ib.port: none when no node has an RDMA port (/sys/class/infiniband is empty). `alone`:
    one node judged by itself (node-check), where no peer says which ports are in use."""
    checked = [h for h, f in facts.items() if any(True for _ in _ports(f))]
    if not checked:
        return []
    problems = [p for host in checked for p in _port_problems(facts, host, alone)]
    return graded(
        "ib.port",
        checked,
        problems,
        what="InfiniBand/RoCE ports",
        ok="every RDMA port in use is ACTIVE/LinkUp at its peers' rate with few link errors",
    )


# -- drain reasons (node-check) -------------------------------------------------------------

HCA_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def _digits(value: object) -> str:
    text = str(value)
    return text if text.isdigit() and len(text) <= 4 else "?"


def drain_notes(host: str, host_facts: HostFacts) -> list[str]:
    """Short words for a Slurm drain reason, one per failing link of this node judged alone:
    `GPU 2 NVLink 7,9 down needs reset`, `GPU 0 NVLink 17 CRC errors needs reset`,
    `IB mlx5_3 port 1 down needs link check`. Node text never reaches it: indexes and link
    numbers must be digits and an HCA name a plain name, else `?`; counts stay out, so the
    same fault keeps the same reason."""
    notes = []
    for index, links in inactive_links({host: host_facts}).get(host, {}).items():
        shown = ",".join(_digits(link) for link in links)
        notes.append(f"GPU {_digits(index)} NVLink {shown} down needs reset")
    errors = collected(host_facts.get("nvlink")).get("errors") or {}
    for index, gpu_links in errors.items():
        for link, counters in gpu_links.items():
            if any("crc" in counter and count > NVLINK_CRC_FAIL
                   for counter, count in counters.items()):  # fmt: skip
                notes.append(f"GPU {_digits(index)} NVLink {_digits(link)} CRC errors needs reset")
    for hca, number, port in _ports(host_facts):
        if not _is_up(port) and _down_status(port, {}, True) is Status.FAIL:
            name = hca if HCA_NAME.fullmatch(hca) else "?"
            notes.append(f"IB {name} port {_digits(number)} down needs link check")
    return notes


# -- the inventory's expectation (clusterkit.expect.ib_ports, ib_rate_gbps) -----------------


def _expected_port_problems(
    host_facts: HostFacts, ports: int | None, rate: float | None
) -> list[str]:
    """What falls short of the expectation on one node: too few ports up (each port that is
    not up named with its state), an up port slower than the rate (named with its rate)."""
    found = list(_ports(host_facts))
    up = [(hca, number, port) for hca, number, port in found if _is_up(port)]
    problems = []
    if ports is not None and len(up) < ports:
        down = [f"{hca} port {number} {port.get('state')}/{port.get('phys_state')}"
                for hca, number, port in found if not _is_up(port)]  # fmt: skip
        shown = f" ({', '.join(down)})" if down else ""
        problems.append(f"{len(up)} of {ports} RDMA ports up{shown}")
    if rate is not None:
        problems += [
            f"{hca} port {number} at {port.get('rate_gbps') or 0:g} Gb/s ({port.get('rate')}) "
            f"below {rate:g} Gb/s"
            for hca, number, port in up
            if (port.get("rate_gbps") or 0) < rate
        ]
    return problems


def ib_expect_findings(facts: Facts, expect: Expectations) -> list[Finding]:
    """expect.infiniband: with `expect.ib_ports` and/or `expect.ib_rate_gbps`, every node has
    that many RDMA ports ACTIVE/LinkUp, each at that rate or more. Unlike ib.port, which
    compares nodes with each other, this needs no peer: one node alone (node-check), or every
    node with the same missing port, is still held to the inventory. None when neither is set."""
    ports, rate = expect.ib_ports, expect.ib_rate_gbps
    if ports is None and rate is None:
        return []
    # a node whose collector failed has no evidence either way: its own error says why
    answered = {
        host: f
        for host, f in facts.items()
        if f.get("infiniband") is not None and not error_of(f.get("infiniband"))
    }
    bad = {
        host: "; ".join(problems)
        for host, f in answered.items()
        if (problems := _expected_port_problems(f, ports, rate))
    }
    speed = f"at {rate:g} Gb/s or more" if rate is not None else ""
    if ports is None:
        wanted = f"every RDMA port that is up {speed}"
    else:
        wanted = f"{ports} RDMA ports up" + (f", each {speed}" if speed else "")
    return [
        over_hosts(
            "expect.infiniband",
            bad,
            list(answered),
            ok=f"every node meets clusterkit.expect: {wanted}",
            failed=f"RDMA ports short of clusterkit.expect ({wanted}): {per_host(bad)}",
            expected=wanted,
            remedy="check each named port's cable, transceiver and switch port (`ibstat HCA "
            "PORT`, `mlxlink -d HCA -p PORT`) and the subnet manager; a port at a lower rate "
            "trained down (a bad cable or a lane down)",
            unchecked="no node reported its RDMA ports",
        )
    ]
