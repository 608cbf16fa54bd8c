"""Secrets a node prints, in any quoting, never reach the report or stderr. A node's tool
quoting `HF_TOKEN="..."`, `'api_key': '...'`, `Authorization: Bearer ...` or a URL with a
password once reached the text report, the JSON and stderr verbatim."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.cluster.test_hardening_transport import STATIC_ONLY, clusterkit
from tests.support.netcluster import NetCluster

SECRETS = ["hf_Q7mZ2pL9xV4kR8tY", "AKx9/Lm+Qp2Zs7Wv", "hunter2-Vz8q", "eyJhbGciOi.Jz9qX",
           "pa55-Wq9z"]  # fmt: skip
SAID = (
    f"HF_TOKEN=\"{SECRETS[0]}\" AWS_SECRET_ACCESS_KEY='{SECRETS[1]} x' "
    f'{{"password": "{SECRETS[2]}"}} Authorization: Bearer {SECRETS[3]}\n'
    f"pulling https://user:{SECRETS[4]}@registry.example/x"
)


def test_a_nodes_quoted_secrets_stay_out_of_every_output(
    cluster: NetCluster, cluster_inventory: Path, tmp_path: Path
) -> None:
    node = cluster.nodes[2]
    tool = node.bin_dir / "nvidia-smi"
    wrapper = tool.read_bytes()
    tool.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(SAID)} >&2\nexit 9\n")
    report = tmp_path / "report.json"
    try:
        as_json = clusterkit("check", str(cluster_inventory), *STATIC_ONLY, "--format", "json",
                             "-o", str(report))  # fmt: skip
        as_text = clusterkit("check", str(cluster_inventory), *STATIC_ONLY, "-v")
    finally:
        tool.write_bytes(wrapper)  # the GPU wrapper back: reset keeps an unchanged one
    outputs = [report.read_text(), as_json.stdout, as_json.stderr, as_text.stdout, as_text.stderr]
    assert "nvidia-smi exited 9" in report.read_text()  # the node's words did arrive
    assert "[redacted]" in report.read_text() and "[redacted]" in as_text.stdout
    for secret in SECRETS:
        for output in outputs:
            assert secret not in output
