"""Key files against the real cluster: a key path naming a FIFO once held `check` forever
(SIGTERM and Ctrl-C did not end it), because paramiko opened the path and waited for a
writer. Now the run ends at once with the host and the file named."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.cluster.test_hardening_transport import STATIC_ONLY, clusterkit, errors_by_host
from tests.support.netcluster import NetCluster


def test_an_inventory_key_file_that_is_a_fifo_is_one_line_and_exit_2(
    cluster: NetCluster, tmp_path: Path
) -> None:
    fifo = tmp_path / "key-fifo"
    os.mkfifo(fifo)
    key = {"ansible_ssh_private_key_file": str(fifo)}
    inventory = cluster.inventory(tmp_path / "inv.yaml", extra_vars=key)
    started = time.monotonic()
    done = clusterkit("check", str(inventory), *STATIC_ONLY, timeout=60)
    assert time.monotonic() - started < 30
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"ansible_ssh_private_key_file: {fifo}: not a regular file (a FIFO)" in done.stderr
    assert "(host node1)" in done.stderr


def test_an_identity_file_that_is_a_fifo_fails_each_host_at_once(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """ssh_config's IdentityFile is read at connect time, with the same bounds."""
    fifo = tmp_path / "identity-fifo"
    os.mkfifo(fifo)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  IdentityFile {fifo}\n")
    no_key = {"ansible_ssh_private_key_file": None}
    inventory = cluster.inventory(tmp_path / "inv.yaml", extra_vars=no_key)
    started = time.monotonic()
    done = clusterkit("check", str(inventory), "--ssh-config", str(config), "--format", "json",
                      *STATIC_ONLY, timeout=90)  # fmt: skip
    assert time.monotonic() - started < 60
    assert done.returncode == 3, done.stderr
    errors = errors_by_host(json.loads(done.stdout))
    assert set(errors) == {node.name for node in cluster.nodes}
    for name, finding in errors.items():
        assert finding["found"] == "auth"
        assert finding["message"] == f"{name}: key file {fifo}: not a regular file (a FIFO)"
