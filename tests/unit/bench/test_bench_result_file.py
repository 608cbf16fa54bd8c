"""`clusterkit bench -J FILE` writes the file on failure too, saying why nothing was measured."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.support.cli import run_cli


def test_result_file_written_when_no_node_is_reached(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # closed again: connections are refused
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        f"all:\n  hosts:\n    node1: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
    )
    result = tmp_path / "result.json"
    result.write_text('{"results": [{"size": 1}]}')  # a stale file from an earlier run
    done = run_cli(
        ["bench", str(inventory), "-J", str(result), "--ssh-config", "/dev/null",
         "--host-key-policy", "off", "--connect-timeout", "5"],
        timeout=120,
    )  # fmt: skip
    assert done.status == 3, done.stdout + done.stderr
    written = json.loads(result.read_text())
    assert written["results"] == []
    assert written["error"]["check"] == "host.reachable"
    assert written["error"]["hosts"] == ["node1"]
    assert "refused" in written["error"]["message"]
