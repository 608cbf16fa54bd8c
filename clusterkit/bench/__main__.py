"""Local use on one machine, under torchrun: `torchrun --nproc-per-node 8 -m clusterkit.bench`.

Every rank runs the worker; rank 0 prints the nccl-tests table, applies the gate (the same
threshold precedence as `clusterkit bench`, with this machine's GPUs as the fabric) and sets
the exit status: 0 passed or report only, 1 below the threshold or wrong data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from clusterkit.bench import gate, thresholds
from clusterkit.bench.nccltests import format_table
from clusterkit.bench.results import BenchResult, MalformedResult, parse_result
from clusterkit.facts import GpuDevice, HostFacts
from clusterkit.node import bench_worker as worker
from clusterkit.node.bench_common import EXIT_FAILED, LOG_PREFIX, BenchError, parse_size
from clusterkit.safefiles import write_file


def _local_facts(result: BenchResult) -> dict[str, HostFacts]:
    """The fabric as the worker saw it: GPU names and count (NVLink unknown here)."""
    names: list[str] = [d["name"] for d in result["devices"] if d["bus_id"] != "cpu"]
    devices: list[GpuDevice] = [{"name": name} for name in names]
    return {"localhost": {"gpus": {"count": len(names), "devices": devices, "nvlink": None}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--min-busbw", type=float, default=None)
    parser.add_argument("--gate-size", default=None)
    ours, rest = parser.parse_known_args(argv)
    try:
        raw = worker.run(rest)
        result = parse_result(raw) if raw is not None else None
    except BenchError as error:
        print(f"{LOG_PREFIX} error {error.kind}: {error}", file=sys.stderr)
        return error.exit_code
    except MalformedResult as error:  # the worker and bench/results.py disagree
        print(f"{LOG_PREFIX} error malformed: {error}", file=sys.stderr)
        return EXIT_FAILED
    if result is None:
        return 0
    threshold = thresholds.resolve_threshold(
        flag=ours.min_busbw,
        environ=os.environ,
        inventory_min_busbw=None,
        fabric=thresholds.detect_fabric(_local_facts(result)),
        backend=result["backend"],
    )
    gate_size = parse_size(ours.gate_size) if ours.gate_size else None
    verdict = gate.evaluate(result, threshold, gate_size)
    result["gate"] = verdict.to_dict()
    sys.stdout.write(format_table(result))
    output = worker.build_parser().parse_known_args(rest)[0].output_file
    if output:
        write_file(output, json.dumps(result, indent=1))
    hosts = sorted({d["host"] for d in result["devices"]})
    findings = [gate.busbw_finding(verdict, hosts), gate.correctness_finding(result, hosts)]
    slow = gate.slow_rank_finding(result, gate_size)
    findings += [slow] if slow else []
    for finding in findings:
        print(f"# {finding.status.value.upper():5} {finding.id}: {finding.message}")
    failed = any(f.status.value == "fail" for f in findings)
    return 1 if failed else 0


if __name__ == "__main__":
    worker.exit_now(main())
