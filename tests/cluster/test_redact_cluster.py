"""Secrets a node prints, in any quoting, never reach the report or stderr. A node's tool
quoting `HF_TOKEN="..."`, `'api_key': '...'`, `Authorization: Bearer ...` or a URL with a
password once reached the text report, the JSON and stderr verbatim."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.cluster.test_hardening_transport import STATIC_ONLY, clusterkit
from tests.support.cli import run_cli
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


def test_a_jobs_printed_secrets_are_redacted_on_stdout_and_in_the_log_dir(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """Every rank prints the same quoted secrets: the `host/rank: line`s relayed on stdout and
    the ranks' logs under --log-dir used to carry them verbatim, while every other output was
    redacted."""
    job = tmp_path / "job.py"
    job.write_text(f"for line in {SAID.splitlines()!r}:\n    print(line, flush=True)\n")
    logs = tmp_path / "logs"
    inventory = cluster.inventory(tmp_path / "inventory.yaml", nodes=cluster.nodes[:2])
    done = run_cli(
        ["launch", str(inventory), "--no-check", "--log-dir", str(logs), "--", str(job)],
        timeout=300,
    )
    assert done.status == 0, done.stderr[-3000:]
    written = [path.read_text() for path in sorted(logs.rglob("*-[0-9].log"))]
    assert len(written) == 2  # one log per rank
    for rank, node in enumerate(cluster.nodes[:2]):
        assert f"{node.name}/{rank}: HF_TOKEN=[redacted]" in done.stdout, done.stdout[-3000:]
    assert all("https://user:[redacted]@registry.example/x" in log for log in written)
    for output in [done.stdout, done.stderr, *written]:
        for secret in SECRETS:
            assert secret not in output
