"""clusterkit node probe: runs ON each node, sent over stdin (clusterkit/transport/nodescript.py).

Stdlib only, Python 3.8+, and cheap to start: it runs once per node per check, so modules
that cost milliseconds to import (shutil, platform, ctypes.util, importlib.metadata) are
replaced by the few lines the probe needs from them. Every collector runs in its own thread
with its own timeout, so a wedged tool (nvidia-smi on a hung driver, a stuck docker daemon)
costs its timeout and an error entry, never the whole probe. Tools, result frame and file
and interface readers come from the node-side prelude, whose text replaces the import below
before the probe is sent (clusterkit/transport/nodescript.py).

This file is the composition: which facts, in which order, within which deadline. Each fact
is collected (and its tool's output parsed) in a node library of its concern, probe_gpu,
probe_host, probe_python, probe_net, probe_devices, inserted after the prelude.
"""

import json
import os
import sys
import time

from clusterkit.node.prelude import emit, stop_tools_on_signals
from clusterkit.node.probe_common import TOOL_TIMEOUT, run_parallel
from clusterkit.node.probe_devices import collect_dstate, collect_nvme
from clusterkit.node.probe_gpu import collect_gpu_processes, collect_gpus, collect_nvlink
from clusterkit.node.probe_host import (
    collect_clock,
    collect_docker,
    collect_hostname,
    collect_kernel_log,
    collect_limits,
    collect_memory,
    collect_system,
)
from clusterkit.node.probe_net import collect_infiniband, collect_network
from clusterkit.node.probe_python import (
    add_site_packages,
    collect_env,
    collect_python,
    collect_torch,
)

PROBE_VERSION = 2


COLLECTORS = (
    ("system", collect_system),
    ("hostname", collect_hostname),
    ("gpus", collect_gpus),
    ("python", collect_python),
    ("env", collect_env),
    ("docker", collect_docker),
    ("network", collect_network),
    ("limits", collect_limits),
    ("clock", collect_clock),
    ("infiniband", collect_infiniband),
    ("gpu_processes", collect_gpu_processes),
    ("nvlink", collect_nvlink),
    ("memory", collect_memory),
    ("kernel_log", collect_kernel_log),
    ("nvme", collect_nvme),
    ("dstate", collect_dstate),
)


def probe(options):
    started = time.monotonic()
    if sys.flags.no_site:
        add_site_packages()
    facts = {}

    def job(name, collector):
        def run():
            facts[name] = collector(options)

        return run

    # `host_devices: false` leaves NVMe and D state unread (benchmarks/bench_host_health.py)
    skipped = {"torch"} if options.get("host_devices", True) else {"torch", "nvme", "dstate"}
    jobs = {name: job(name, collector) for name, collector in COLLECTORS if name not in skipped}
    errors = run_parallel(jobs, options.get("timeout", TOOL_TIMEOUT + 5))
    for name, message in errors.items():
        facts[name] = {"error": message}
    # torch goes last: whether to import it depends on whether GPUs were found.
    options = dict(options, gpus_present=bool(facts.get("gpus", {}).get("count")))
    errors = run_parallel({"torch": job("torch", collect_torch)}, 70)
    if errors:
        facts["torch"] = {"error": errors["torch"]}
    return {"probe_version": PROBE_VERSION, "facts": facts, "seconds": time.monotonic() - started}


def main(argv):
    stop_tools_on_signals()
    options = json.loads(argv[1]) if len(argv) > 1 else {}
    emit(probe(options))
    # Daemon threads still blocked on a wedged tool must not keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
