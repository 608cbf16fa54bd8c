"""NVLink as `nvidia-smi nvlink` prints it: each GPU's links and their error counters.

A node library, not a program: the probe (collector.py) reads the links once per check, and
the launch runner's hardware watch (launch_watch.py) reads them again while a job runs, so a link
`check` calls down is the link the watch calls down. Inserted after the prelude by the
node-script composer (clusterkit/transport/nodescript.py). Stdlib only, Python 3.8+, no
`from __future__` (it is inserted mid-file).
"""

import re

NVLINK_LINE = re.compile(r"^\s*Link (\d+): (.+?)\s*$")
NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: (\S+)\))?\s*$")
NVLINK_COUNTER = re.compile(r"^\s*Link (\d+): ([A-Za-z][A-Za-z ]*?) Errors?: (\d+)\s*$")


def parse_nvlink_status(text):
    """`nvidia-smi nvlink --status`: per GPU, its links as GB/s (None when `<inactive>`).
    A GPU without NVLink lists no link."""
    gpus = []  # type: list[dict]
    for line in text.splitlines():
        gpu = NVLINK_GPU.match(line)
        if gpu:
            gpus.append({"index": int(gpu.group(1)), "uuid": gpu.group(3), "links": []})
            continue
        link = NVLINK_LINE.match(line)
        if link and gpus:
            speed = re.match(r"([\d.]+) GB/s", link.group(2))
            gpus[-1]["links"].append(float(speed.group(1)) if speed else None)
    return gpus


def parse_nvlink_errors(text):
    """`nvidia-smi nvlink --errorcounters`: {GPU index: {link: {counter: count}}}, counters
    named as printed, lower case (`replay`, `recovery`, `crc`); `N/A` values are left out."""
    counters = {}  # type: dict[str, dict[str, dict[str, int]]]
    gpu = None
    for line in text.splitlines():
        header = NVLINK_GPU.match(line)
        if header:
            gpu = counters.setdefault(header.group(1), {})
            continue
        match = NVLINK_COUNTER.match(line)
        if match and gpu is not None:
            link = gpu.setdefault(match.group(1), {})
            link[match.group(2).strip().lower()] = int(match.group(3))
    return counters


def links_up(gpus):
    """{GPU index: the numbers of its links that are up} of parse_nvlink_status's GPUs."""
    return {gpu["index"]: {n for n, speed in enumerate(gpu["links"]) if speed} for gpu in gpus}
