"""A report of a whole cluster for the HTML report's tests and its docs screenshot: every node
with the facts of a real H100 probe (tests/fixtures/facts/healthy-h100.json), a real kernel
log of Xid 62 then Xid 45 on one node's GPU 0 (tests/fixtures/kernel-log/xid45-after-62.txt),
the network stage's details in the shape clusterkit/net/stage.py writes them (the matrix from
its own build_matrix), and bench --find-slow / --per-node details in the shape of the recorded
tests/fixtures/bench/per-node-find-slow-4nodes.json, grown to the node count."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.facts import HostEntry, parse_facts
from clusterkit.net.matrix import build_matrix
from clusterkit.node.kernellog import parse_kernel_log
from clusterkit.report.model import Report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RULE = "INPUT rule -A INPUT -p tcp -m tcp --dport 29400:29600 -j DROP"  # as net.firewall names it
PORT = 29501
BUSBW, SLOW_BUSBW = 182.4, 96.3  # GB/s of a pair, and of a pair holding the slow node


def fleet_report(
    count: int = 16,
    *,
    blocked: str | None = None,
    slow: str | None = None,
    xid: str | None = None,
    names: list[str] | None = None,
) -> Report:
    """`count` nodes; `blocked` drops the mesh ports (net.firewall names its rule), `slow` is
    the node the bench names, `xid` has the Xid log. With none of them, every check passes."""
    hosts = names or [f"node{n:02d}" for n in range(1, count + 1)]
    findings = [
        Finding(
            "gpu.xid", Status.OK, "no Xid since the driver's load", hosts=hosts, stage="static"
        ),
        *network_findings(hosts, blocked),
        *bench_findings(hosts, slow),
    ]
    if xid:
        findings[0].hosts = [h for h in hosts if h != xid]
        findings.append(
            Finding(
                "gpu.xid",
                Status.FAIL,
                f"{xid}: GPU 0 (0000:19:00): Xid 62 (micro-controller halt), then 3 x Xid 45",
                hosts=[xid],
                remedy="reset the GPU (nvidia-smi -r) or reboot the node",
                stage="static",
            )
        )
    return Report(
        command="check",
        inventory="inventory.yaml",
        findings=findings,
        hosts={host: host_entry(host, host == xid) for host in hosts},
        details={"network": network_details(hosts, blocked), "bench": bench_details(hosts, slow)},
        seconds=41.7,
    )


def host_entry(host: str, with_xid: bool) -> HostEntry:
    facts: dict[str, Any] = json.loads((FIXTURES / "facts" / "healthy-h100.json").read_text())
    if with_xid:
        log = (FIXTURES / "kernel-log" / "xid45-after-62.txt").read_text()
        facts["kernel_log"] = parse_kernel_log(log)
    return HostEntry(address=host, reachable=True, error=None, facts=parse_facts(facts))


def _latency(src: int, dst: int) -> float:
    return 0.00021 + ((src * 7 + dst * 3) % 11) * 0.00002


def network_details(hosts: list[str], blocked: str | None) -> dict[str, Any]:
    connects = [
        {
            "from": src,
            "round": 1,
            "peer": dst,
            "address": f"10.0.0.{hosts.index(dst) + 11}",
            "port": PORT,
            "role": "mesh",
            "result": "timeout" if dst == blocked else "ok",
            "detail": "" if dst == blocked else dst,
            **({} if dst == blocked else {"seconds": _latency(i, j)}),
        }
        for i, src in enumerate(hosts)
        for j, dst in enumerate(hosts)
        if src != dst
    ]
    return {"matrix": build_matrix(hosts, connects), "connects": connects, "errors": {}}


def network_findings(hosts: list[str], blocked: str | None) -> list[Finding]:
    if blocked is None:
        return [Finding("net.mesh", Status.OK, "every pair connects", hosts=hosts, stage="network")]
    paths = [f"{src} -> {blocked}:{PORT}" for src in hosts if src != blocked]
    return [
        Finding(
            "net.firewall",
            Status.FAIL,
            f"{blocked}: {RULE} blocks {', '.join(paths[:3])} and {len(paths) - 3} more",
            hosts=[blocked],
            found={blocked: {RULE: paths}},
            remedy=f"on {blocked}: iptables -I INPUT -i eth0 -s 10.0.0.0/24 -p tcp -j ACCEPT",
            stage="network",
        )
    ]


def _rounds(hosts: list[str], slow: str | None) -> list[dict[str, Any]]:
    """Pairs of a hypercube schedule, each round's ratios against its median."""
    rounds, bit = [], 1
    while bit < len(hosts):
        pairs = [
            (hosts[i], hosts[i ^ bit]) for i in range(len(hosts)) if i < (i ^ bit) < len(hosts)
        ]
        speeds = [SLOW_BUSBW if slow in pair else BUSBW for pair in pairs]
        median = sorted(speeds)[len(speeds) // 2]
        groups = [
            {
                "hosts": list(pair),
                "busbw": speed,
                "ratio": round(speed / median, 4),
                "seconds": 9.1,
                "together": True,
                "error": None,
            }
            for pair, speed in zip(pairs, speeds)
        ]
        rounds.append(
            {
                "round": len(rounds) + 1,
                "median_busbw": median,
                "groups": groups,
                "seconds": 9.2,
                "no_go": [],
                "not_ready": [],
            }
        )
        bit *= 2
    return rounds


def bench_details(hosts: list[str], slow: str | None) -> dict[str, Any]:
    rounds = _rounds(hosts, slow)

    def summary(host: str) -> dict[str, Any]:
        mine = [g for r in rounds for g in r["groups"] if host in g["hosts"]]
        return {
            "median_busbw": SLOW_BUSBW if host == slow else BUSBW,
            "median_ratio": statistics.median(g["ratio"] for g in mine),
            "slow_rounds": 0,
            "rounds": len(mine),
            "failed_rounds": 0,
        }

    find_slow = {
        "bytes": 1 << 28,
        "fraction": 0.7,
        "group_size": 2,
        "median_busbw": BUSBW,
        "rounds": rounds,
        "round_count": len(rounds),
        "slow": [slow] if slow else [],
        "nodes": {host: summary(host) for host in hosts},
    }
    alone = {host: 171.0 if host == slow else 366.0 + hosts.index(host) % 5 for host in hosts}
    median = sorted(alone.values())[len(alone) // 2]
    per_node = {
        "bytes": 1 << 28,
        "fraction": 0.7,
        "ranks_per_node": 8,
        "median_busbw": median,
        "nodes": {
            host: {
                "busbw": busbw,
                "ratio": round(busbw / median, 4),
                "status": "fail" if host == slow else "ok",
                "error": None,
                "threshold": None,
                "threshold_detail": "median of the nodes",
            }
            for host, busbw in alone.items()
        },
    }
    return {"find_slow": find_slow, "per_node": per_node}


def bench_findings(hosts: list[str], slow: str | None) -> list[Finding]:
    if slow is None:
        return [Finding("bench.slow-node", Status.OK, "no slow node", hosts=hosts, stage="bench")]
    return [
        Finding(
            "bench.slow-node",
            Status.FAIL,
            f"{slow}: {SLOW_BUSBW} GB/s in every group it joined, 0.53x the median",
            hosts=[slow],
            stage="bench",
        ),
        Finding(
            "bench.node-busbw",
            Status.FAIL,
            f"{slow}: 171 GB/s alone, 0.46x the median of the nodes",
            hosts=[slow],
            stage="bench",
        ),
    ]
