"""The control side past 1024 open files, as a few hundred hosts take it: every wait on a
channel or on a ProxyCommand's pipe still works (select() cannot watch a descriptor numbered
1024 or more; every command then failed)."""

from __future__ import annotations

import json
import resource
import shlex
import subprocess
import sys
from pathlib import Path

from tests.cluster.test_inventory_bastion import _bastion_command, _behind_bastion
from tests.support.netcluster import NetCluster

REPO = Path(__file__).resolve().parents[2]
PADDING = 1100  # descriptors held open before clusterkit starts: every later one is past 1024

# Opens PADDING descriptors, then runs the CLI in the same process.
_PADDED_MAIN = (
    "import os, sys\n"
    "held = [os.open(os.devnull, os.O_RDONLY) for _ in range(int(sys.argv[1]))]\n"
    "from clusterkit.__main__ import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _lift() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))


def test_check_with_descriptors_past_1024_reaches_direct_and_proxied_hosts(
    cluster: NetCluster, tmp_path: Path
) -> None:
    _behind_bastion(cluster)  # node2 and node3 only through node1's ProxyCommand
    proxy = shlex.quote(_bastion_command(cluster))
    common = f"-o UserKnownHostsFile={cluster.known_hosts_path}"
    inventory = cluster.inventory(
        tmp_path / "inventory.yaml",
        nodes=cluster.nodes[:3],
        host_vars={
            name: {"ansible_ssh_common_args": f"{common} -o ProxyCommand={proxy}"}
            for name in ("node2", "node3")
        },
    )
    done = subprocess.run(
        [sys.executable, "-c", _PADDED_MAIN, str(PADDING), "check", str(inventory),
         "--format", "json", "--skip", "bench,image", "--connect-timeout", "20"],
        preexec_fn=_lift, capture_output=True, text=True, timeout=240, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    problems = [f for f in report["findings"] if f["status"] in ("fail", "error")]
    assert done.returncode == 0, problems or done.stderr
    for name in ("node1", "node2", "node3"):
        host = report["hosts"][name]
        assert host["reachable"] and host["facts"]["hostname"]["hostname"] == name
    assert report["stages"]["network"] == "ran"
