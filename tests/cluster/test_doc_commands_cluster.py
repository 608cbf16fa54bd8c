"""Docs that run, on real hosts: every command README.md and docs/*.md show that needs a
cluster (OnCluster in tests/support/doc_commands.py) runs as written against the 4-node test
cluster, `inventory.yaml` being its inventory and `train.py` a real gloo DDP job, in the
order the docs show them (`check ... -o ok.json` comes before `launch --check-report ok.json`).

One word is substituted: the job script `train.py` becomes its absolute path. Written
relative, it is the nodes' login folder's (docs/launch.md), here /root on every node, which
every test on this machine shares; the launch pre-flight that finds it is tested on its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.doc_commands import USES, OnCluster, doc_commands, doc_folder
from tests.support.netcluster import NetCluster

SMALL_BENCH = {"maxbytes": "1M", "iters": 5, "warmup_iters": 1, "find_slow_seconds": 1}


def outcome(command: str, folder: Path, expected: int) -> str | None:
    """What is wrong with running `clusterkit COMMAND` in `folder` (None: nothing)."""
    words = command.split(" ")
    job = [str(folder / word) if word == "train.py" else word for word in words]
    done = run_cli(job, timeout=300)
    said = f"clusterkit {command}: exit {done.status}, not {expected}:\n{done.stdout[-2000:]}"
    if done.status != expected or "Traceback" in done.stderr:
        return f"{said}{done.stderr[-2000:]}"
    for flag in ("-o", "--check-output"):
        if flag in words and (wrong := written(folder / words[words.index(flag) + 1], expected)):
            return f"clusterkit {command}: {wrong}"
    if "--print-dir" in words and not list((folder / "plan").glob("node1.*")):
        return f"clusterkit {command}: no plan for node1 in plan/"
    return None


def written(path: Path, expected: int) -> str | None:
    """What is wrong with a report the command wrote (None: nothing)."""
    text = path.read_text() if path.is_file() else ""
    if path.suffix == ".json":
        status = json.loads(text or "{}").get("exit_status")
        return None if status == expected else f"{path.name} says exit {status}"
    return None if text.startswith("<!DOCTYPE html>") else f"{path.name}: no page"


@pytest.mark.slow
def test_the_docs_commands_run_on_the_test_cluster(
    cluster: NetCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = doc_folder(tmp_path)
    # The user's inventory may size the bench; this one keeps the many checks short.
    cluster.inventory(folder / "inventory.yaml", clusterkit={"bench": SMALL_BENCH})
    monkeypatch.chdir(folder)
    wanted = [
        (command, use.status)
        for command in doc_commands()
        if isinstance(use := USES.get(command), OnCluster)
    ]
    assert len(wanted) >= 20
    failures = [wrong for command, status in wanted if (wrong := outcome(command, folder, status))]
    assert not failures, "\n\n".join(failures)
