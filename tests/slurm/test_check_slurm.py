"""`clusterkit check --slurm` on a real Slurm: inside sbatch allocations, over srun steps."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import netcluster, slurmcluster
from tests.support.netcluster import NetCluster
from tests.support.slurmcluster import SlurmCluster

VENV_BIN = str(Path(sys.executable).parent)
SWEEP = {"minbytes": "256K", "maxbytes": "512K", "iters": 3, "warmup_iters": 1}
# Volatile facts: they differ between two probes of the same node a second apart.
VOLATILE = {
    "seconds", "boot_id", "clock", "pid", "uptime", "load", "temperature.gpu", "available_bytes",
    "scanned",  # dstate: how many processes the node had at that moment
}  # fmt: skip


def settings_file(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "clusterkit.yaml"
    path.write_text(yaml.safe_dump({"clusterkit": {"interface": "eth0", "bench": SWEEP, **extra}}))
    return path


def job_env(slurm: SlurmCluster) -> dict[str, str]:
    """What a user's job sees: the venv first on PATH (clusterkit, torchrun)."""
    return {"PATH": f"{VENV_BIN}:{os.environ['PATH']}", "SLURM_CONF": str(slurm.conf)}


def sbatch_check(
    slurm: SlurmCluster, tmp_path: Path, *args: str
) -> tuple[int, dict[str, Any], str]:
    """Run `clusterkit check --slurm` as the batch script of a real 3-node job."""
    report, log = tmp_path / "report.json", tmp_path / "job.log"
    script = tmp_path / "check.sbatch"
    command = " ".join(["clusterkit", "check", "--slurm", "--format", "json", *args])
    script.write_text(f"#!/bin/sh\n{command} --output {report}\n")
    job = slurm.sbatch(script, "-N3", f"--output={log}", env=job_env(slurm))
    slurm.wait_job(job, timeout=300)
    status = int(_exit_code(slurm, job))
    assert report.exists(), log.read_text()
    return status, json.loads(report.read_text()), log.read_text()


def _exit_code(slurm: SlurmCluster, job: int) -> str:
    text = slurm.run(["scontrol", "show", "job", str(job)]).stdout
    for word in text.split():
        if word.startswith("ExitCode="):
            return word.split("=", 1)[1].split(":")[0]
    raise AssertionError(f"no ExitCode for job {job}: {text}")


def findings(report: dict[str, Any], status: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["status"] == status]


@contextlib.contextmanager
def allocation(slurm: SlurmCluster, nodes: int = 3) -> Iterator[dict[str, str]]:
    """A running allocation of the first `nodes` nodes and the environment of a shell inside
    it (as salloc)."""
    with slurm.allocation(nodes) as job:
        yield {
            **os.environ,
            **job_env(slurm),
            "SLURM_JOB_ID": job,
            "SLURM_JOB_NODELIST": f"node[1-{nodes}]",
        }


def check_in(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "clusterkit", "check", "--format", "json", *args],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


# Slurm's own daemons, and the allocation a test holds (its batch script and sleep).
SLURM_OWN = ("slurmd ", "slurmstepd", "sleep infinity", "/bin/sh /")


def left_behind(slurm: SlurmCluster) -> list[str]:
    """Every process on the nodes that is not Slurm's own or the test's allocation. A
    process with no command line has exited and waits only for its parent to reap it
    (a zombie), so it is not left running."""
    return [
        f"{node.name}: {p.command[:100]}"
        for node in slurm.net.nodes
        for p in node.processes()
        if p.argv and not " ".join(p.argv).startswith(SLURM_OWN)
    ]


def test_healthy_allocation_passes_every_stage_over_srun(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    status, report, log = sbatch_check(slurm, tmp_path, "--settings", str(settings_file(tmp_path)))
    bad = findings(report, "fail") + findings(report, "error")
    assert status == 0, (bad, log)
    assert set(report["hosts"]) == {"node1", "node2", "node3"}
    for name, entry in report["hosts"].items():
        assert entry["facts"]["hostname"]["hostname"] == name  # really that node
        assert entry["facts"]["gpus"]["count"] == 8
    assert report["stages"]["network"] == "ran" and report["stages"]["bench"] == "ran"
    reachable = [f for f in report["findings"] if f["id"] == "host.reachable"]
    assert "srun" in reachable[0]["message"]
    result = report["details"]["bench"]["result"]
    assert len({device["host"] for device in result["devices"]}) == 3
    assert slurm.steps() == []


def test_broken_nodes_fail_by_name(slurm: SlurmCluster, tmp_path: Path) -> None:
    node1, node2, node3 = slurm.net.nodes
    node2.set_gpus(driver="535.129.03", cuda="12.2")  # driver mismatch
    node3.set_gpus(mode="hang")  # nvidia-smi never answers
    # node2 refuses new connections from node1 (the mesh, torch's ports), slurmd's excepted.
    node2.iptables(
        "-I", "INPUT", "-p", "tcp", "-s", node1.address, "--dport", "1024:65535",
        "-m", "conntrack", "--ctstate", "NEW", "-j", "REJECT",
    )  # fmt: skip
    node2.iptables("-I", "INPUT", "-p", "tcp", "--dport", "6818", "-j", "ACCEPT")
    exclude = tmp_path / "exclude"
    status, report, log = sbatch_check(
        slurm, tmp_path, "--settings", str(settings_file(tmp_path)), "--exclude-file", str(exclude)
    )
    assert status == 1, log
    by_id = {f["id"]: f for f in findings(report, "fail") + findings(report, "error")}
    # node3's nvidia-smi never answers: node1 and node2 differ 1 against 1, and neither is
    # the odd one (a tie names no host); the mesh still names node2.
    driver = by_id["parity.driver"]
    assert driver["hosts"] == [] and "no value has a majority" in driver["message"]
    assert "node2 has 535.129.03" in driver["message"]
    hung = [f for f in by_id.values() if f["id"].startswith("gpu.") and "node3" in f["hosts"]]
    assert hung, by_id
    assert "node2" in by_id["net.mesh"]["hosts"]
    assert "network stage failed" in report["stages"]["bench"]
    assert {"node2", "node3"} <= set(exclude.read_text().strip().split(","))
    assert slurm.steps() == []
    assert left_behind(slurm) == []


def test_node_whose_slurmd_cannot_be_reached_is_named_and_the_others_checked(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """srun aborts a whole step when one node cannot launch it: the phase goes on without
    that node, which is reported by name (exit 3), as an unreachable host over SSH."""
    slurm.net["node3"].iptables("-I", "INPUT", "-p", "tcp", "--dport", "6818", "-j", "REJECT")
    with allocation(slurm) as env:
        status, report = check_in(
            env, "--slurm", "--settings", str(settings_file(tmp_path)), "--skip", "bench"
        )
    errors = findings(report, "error")
    assert status == 3, errors
    assert {tuple(f["hosts"]) for f in errors if f["id"] == "probe.ran"} == {("node3",)}, errors
    assert report["hosts"]["node1"]["facts"]["hostname"]["hostname"] == "node1"
    assert report["hosts"]["node2"]["facts"]["hostname"]["hostname"] == "node2"
    assert slurm.steps() == []


def test_srun_gives_the_same_facts_and_findings_as_ssh(slurm: SlurmCluster, tmp_path: Path) -> None:
    slurm.net["node3"].set_gpus(ecc_errors={1: 4})
    inventory = slurm.net.inventory(tmp_path / "inv.yaml", clusterkit={"interface": "eth0"})
    with allocation(slurm) as env:
        results = {
            transport: check_in(
                env, str(inventory), "--slurm", "--transport", transport, "--skip", "bench"
            )
            for transport in ("srun", "ssh")
        }
    (srun_status, srun), (ssh_status, ssh) = results["srun"], results["ssh"]
    assert srun_status == ssh_status == 1

    def verdicts(report: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
        return {
            (f["id"], f["status"], tuple(f["hosts"] or ()))
            for f in report["findings"]
            if f["id"] != "host.reachable"
        }

    assert verdicts(srun) == verdicts(ssh)
    for host in ("node1", "node2", "node3"):
        a, b = srun["hosts"][host]["facts"], ssh["hosts"][host]["facts"]
        assert set(a) == set(b)
        for section in a:
            if section in VOLATILE:
                continue
            assert _stable(a[section]) == _stable(b[section]), (host, section)


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_during_the_check_leaves_no_step(
    slurm: SlurmCluster, tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    slurm.net["node2"].set_gpus(mode="hang")  # the probe step lasts the nvidia-smi timeout
    with allocation(slurm) as env:
        process = subprocess.Popen(
            [sys.executable, "-m", "clusterkit", "check", "--slurm", "--format", "json",
             "--settings", str(settings_file(tmp_path))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not any("clusterkit-probe" in step for step in slurm.steps()):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no probe step appeared"
            time.sleep(0.05)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == status, stderr
        assert slurm.steps() == []
        deadline = time.monotonic() + 10
        while left_behind(slurm):
            assert time.monotonic() < deadline, left_behind(slurm)
            time.sleep(0.05)


@pytest.fixture
def four() -> Iterator[SlurmCluster]:
    """A Slurm of four nodes: pairs need four to give every node different partners."""
    reason = netcluster.unavailable_reason() or slurmcluster.unavailable_reason()
    if reason:
        pytest.skip(f"real Slurm cluster unavailable: {reason}")
    with NetCluster(4) as net, SlurmCluster(net) as built:
        yield built


def test_bench_find_slow_runs_its_rounds_over_srun_and_measures_every_node(
    four: SlurmCluster, tmp_path: Path
) -> None:
    """`bench --slurm` inside an allocation: the all-reduce, then the finder's rounds, each
    group a torchrun per node started through that node's relay; no step outlives the run."""
    bench = {**SWEEP, "find_slow_bytes": "256K", "find_slow_seconds": 1, "join_timeout": 120}
    exclude = tmp_path / "exclude"
    with allocation(four, nodes=4) as env:
        done = subprocess.run(
            [sys.executable, "-m", "clusterkit", "bench", "--slurm", "--find-slow",
             "--group-size", "2", "--timeout", "900", "--format", "json",
             "--settings", str(settings_file(tmp_path, bench=bench)),
             "--exclude-file", str(exclude)],
            capture_output=True, text=True, timeout=960, env=env, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    reachable = next(f for f in report["findings"] if f["id"] == "host.reachable")
    assert "srun" in reachable["message"]
    assert len({d["host"] for d in report["details"]["bench"]["result"]["devices"]}) == 4
    finding = next(f for f in report["findings"] if f["id"] == "bench.slow-node")
    slow = report["details"]["bench"]["find_slow"]
    assert finding["status"] == "ok", (finding, slow)
    assert slow["slow"] == [] and slow["round_count"] == slow["rounds_planned"] >= 2
    assert sorted(slow["nodes"]) == ["node1", "node2", "node3", "node4"]
    for entry in slow["rounds"]:  # every node measured in every round, in pairs, together
        assert sorted(h for g in entry["groups"] for h in g["hosts"]) == sorted(slow["nodes"])
        assert all(len(g["hosts"]) == 2 for g in entry["groups"])
        assert all(g["busbw"] and g["together"] and not g["error"] for g in entry["groups"])
    assert exclude.read_text() == ""  # a pass excludes nothing
    assert four.steps() == []
    assert left_behind(four) == []
