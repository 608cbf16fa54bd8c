"""Wall time of `clusterkit check --slurm` over srun job steps vs over SSH, same nodes.

Builds a real Slurm (tests/support/slurmcluster.py) over N namespace nodes, holds a job
allocation of all of them (as `salloc -N N` would), and from a shell "inside" it runs
(a) `clusterkit check --slurm --transport srun` and (b) `clusterkit check INV --slurm
--transport ssh`, alternating, R times each, for two scopes: static (probe only) and
static + network. The medians and their ratio are printed, with the machine's busy CPU
(every node shares this machine's cores). No target: this reports what each path costs.
Run as root: python benchmarks/bench_slurm.py [--nodes N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import busy_cpu_seconds  # noqa: E402
from tests.support.netcluster import NetCluster  # noqa: E402
from tests.support.slurmcluster import SlurmCluster  # noqa: E402

RUN_TIMEOUT = 600.0
SCOPES = {"static": "network,bench,image", "static+network": "bench,image"}


def timed_check(env: dict[str, str], args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, busy CPU seconds, exit status) of one `clusterkit check`."""
    cpu_before = busy_cpu_seconds()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "clusterkit", "check", "--format", "json", *args],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode not in (0, 1) or not done.stdout:
        raise SystemExit(f"check {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    json.loads(done.stdout)
    return wall, busy_cpu_seconds() - cpu_before, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        NetCluster(options.nodes) as net,
        SlurmCluster(net) as slurm,
        slurm.allocation(options.nodes) as job,
    ):
        settings = {"interface": "eth0"}
        inventory = net.inventory(Path(tmp) / "inv.yaml", clusterkit=settings)
        env = {
            **os.environ,
            "SLURM_CONF": str(slurm.conf),
            "SLURM_JOB_ID": job,
            "SLURM_JOB_NODELIST": f"node[1-{options.nodes}]",
        }
        settings_path = Path(tmp) / "settings.yaml"
        settings_path.write_text(yaml.safe_dump({"clusterkit": settings}))
        paths = {
            "srun": ["--slurm", "--transport", "srun", "--settings", str(settings_path)],
            "ssh": [str(inventory), "--slurm", "--transport", "ssh"],
        }
        print(f"{options.nodes} nodes, {options.repeat} runs each, Slurm job {job}")
        for scope, skip in SCOPES.items():
            walls: dict[str, list[float]] = {"srun": [], "ssh": []}
            for _ in range(options.repeat):
                for name, args in paths.items():
                    wall, cpu, status = timed_check(env, [*args, "--skip", skip])
                    walls[name].append(wall)
                    print(f"  {scope:15} {name:5} {wall:6.2f} s  cpu {cpu:5.2f} s  exit {status}")
            srun, ssh = (statistics.median(walls[name]) for name in ("srun", "ssh"))
            print(f"{scope}: median srun {srun:.2f} s, ssh {ssh:.2f} s, srun/ssh {srun / ssh:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
