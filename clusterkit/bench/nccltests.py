"""The nccl-tests `all_reduce_perf` text report and `-J` JSON: format ours, parse anyone's.

The parser reads real nccl-tests output (any 2.x header variant, NCCL INFO lines and
`mpirun --tag-output` prefixes mixed in) as well as what `clusterkit bench` prints, into the
same shape as the JSON result, so scripts and tests can compare the two.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from clusterkit.bench.results import BenchResult, CollectiveResult
from clusterkit.node import bench_table
from clusterkit.safefiles import write_file

__all__ = ["TableError", "format_table", "format_tables", "parse_json", "parse_table", "write_json"]


def format_table(result: CollectiveResult) -> str:
    """The nccl-tests report of one collective's result, as the worker prints it."""
    return bench_table.format_table(dict(result))


def format_tables(result: BenchResult) -> str:
    """One nccl-tests report per collective measured, as the worker prints them."""
    return bench_table.format_tables(dict(result))


_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_PLACE = rf"\s+({_NUMBER}|N/A)\s+({_NUMBER}|N/A)\s+({_NUMBER}|N/A)\s+(-?\d+|N/A)"
_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+){_PLACE}(?:{_PLACE})?\s*$")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(-?\d+)"
    r"\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_CONFIG = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_KEYED = re.compile(r"(warmup iters|iters|agg iters|validation|graph):\s*(-?\d+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_TITLE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_AVG = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUMBER}|N/A|nan|inf)")


class TableError(ValueError):
    """The text holds no nccl-tests result rows."""


def _value(text: str, kind: type) -> Any:
    return None if text == "N/A" else kind(text)


def _place(fields: tuple[str, ...]) -> dict[str, Any] | None:
    time, algbw, busbw, wrong = fields
    if time is None or time == "N/A":
        return None
    return {
        "time": float(time),
        "alg_bw": _value(algbw, float),
        "bus_bw": _value(busbw, float),
        "nwrong": _value(wrong, int),
    }


def parse_table(text: str) -> dict[str, Any]:
    """Parse one nccl-tests report (all_reduce_perf, all_gather_perf, ...; the title line
    names it in config.collective) into {config, devices, results, average_bus_bandwidth,
    out_of_bounds}. Rows with a single place (nccl-tests built with one column) land in
    `in_place`. Raises TableError when no row is found."""
    config: dict[str, Any] = {}
    devices: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    average: float | None = None
    out_of_bounds: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw).strip()
        if match := _TITLE.match(line):
            config["collective"] = match[1]
        elif match := _CONFIG.match(line):
            config.update(
                nThread=int(match[1]), nGpus=int(match[2]), minBytes=int(match[3]),
                maxBytes=int(match[4]),
            )  # fmt: skip
            for key, value in _KEYED.findall(line):
                config[key.replace(" ", "_")] = int(value)
        elif match := _DEVICE.match(line):
            devices.append(
                {
                    "rank": int(match[1]), "group": int(match[2]), "pid": int(match[3]),
                    "host": match[4], "device": int(match[5]), "bus_id": match[6],
                    "name": match[7],
                }
            )  # fmt: skip
        elif match := _OOB.match(line):
            out_of_bounds = {"count": int(match[1]), "status": match[2]}
        elif match := _AVG.match(line):
            average = None if match[1] == "N/A" else float(match[1])
        elif match := _ROW.match(line):
            first, second = match.groups()[5:9], match.groups()[9:13]
            two_places = second[0] is not None
            results.append(
                {
                    "size": int(match[1]),
                    "count": int(match[2]),
                    "type": match[3],
                    "redop": match[4],
                    "root": int(match[5]),
                    "out_of_place": _place(first) if two_places else None,
                    "in_place": _place(second) if two_places else _place(first),
                }
            )
    if not results:
        raise TableError("no nccl-tests result rows found")
    return {
        "config": config,
        "devices": devices,
        "results": results,
        "average_bus_bandwidth": average,
        "out_of_bounds": out_of_bounds,
    }


def parse_json(text: str) -> dict[str, Any]:
    """Read a `-J` JSON result (nccl-tests' or ours); raise TableError on anything else."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise TableError(f"not JSON: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise TableError("JSON has no `results` list")
    return data


def write_json(result: dict[str, Any], path: str | Path) -> None:
    write_file(path, json.dumps(result, indent=1, default=str) + "\n")
