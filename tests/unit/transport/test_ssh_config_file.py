"""`--ssh-config` names a file clusterkit reads: a FIFO or device there is one line and exit 2
at once (a FIFO used to hold the run forever, waiting for a writer); `-F /dev/null` style
still means an empty config."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from clusterkit.errors import UsageError
from clusterkit.transport.endpoint import MAX_SSH_CONFIG_BYTES, load_ssh_config
from tests.support.cli import run_cli


def test_an_ssh_config_that_is_a_fifo_is_one_line_and_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "config"
    os.mkfifo(fifo)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts:\n    node1: {ansible_host: 192.0.2.1}\n")
    started = time.monotonic()
    done = run_cli(
        ["check", inventory, "--ssh-config", fifo, "--skip", "network,bench"], timeout=60
    )
    assert done.status == 2, done.stderr
    assert time.monotonic() - started < 30
    assert done.stderr.strip().splitlines()[-1] == (
        f"clusterkit: error: {fifo}: cannot read SSH config: not a regular file (a FIFO)"
    )


def test_dev_null_is_an_empty_config_and_a_file_is_read(tmp_path: Path) -> None:
    assert load_ssh_config("/dev/null").lookup("n1")["hostname"] == "n1"
    config = tmp_path / "config"
    config.write_text("Host n1\n  HostName 10.0.0.1\n  User alice\n")
    assert load_ssh_config(str(config)).lookup("n1")["user"] == "alice"
    with pytest.raises(UsageError, match=r"not a regular file \(a directory\)"):
        load_ssh_config(str(tmp_path))
    huge = tmp_path / "huge"
    huge.write_text("#" * (MAX_SSH_CONFIG_BYTES + 1))  # /dev/zero-like, but finite here
    with pytest.raises(UsageError, match="more than an SSH config's 1048576"):
        load_ssh_config(str(huge))
    with pytest.raises(UsageError, match="cannot read SSH config: No such file"):
        load_ssh_config(str(tmp_path / "missing"))
