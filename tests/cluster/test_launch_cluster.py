"""`clusterkit launch` on real hosts: namespace nodes with sshd, real torchrun, gloo on CPU.

Three nodes run one rank each of tests/support/ddp_job.py (a tiny DDP model). The gate is
the real check (the bench stage skipped to save time: the network stage is what proves the
master port and the mesh); the job's output comes back through the real SSH connections.
After every test no process of the job may remain on any node.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster, Node

JOB = str(Path(__file__).resolve().parents[1] / "support" / "ddp_job.py")
NODES = 3


def inventory(cluster: NetCluster, tmp_path: Path) -> Path:
    return cluster.inventory(tmp_path / "inventory.yaml", nodes=cluster.nodes[:NODES])


def launch_args(path: Path, *options: str, job: tuple[str, ...] = ()) -> list[str]:
    """The words after `clusterkit` of a launch of the DDP job (the bench stage skipped)."""
    return ["launch", str(path), "--skip", "bench", *options, "--", JOB, *job]


def launch_argv(path: Path, *options: str, job: tuple[str, ...] = ()) -> list[str]:
    """A launch as a process of its own, for the tests that signal it."""
    return [sys.executable, "-m", "clusterkit", *launch_args(path, *options, job=job)]


def launch(
    path: Path, *options: str, job: tuple[str, ...] = (), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """A launch run in-process: the ranks' `host/rank: line`s reach the run's stdout."""
    words = launch_args(path, *options, job=job)
    done = run_cli(words, timeout=timeout)
    return subprocess.CompletedProcess(words, done.status, done.stdout, done.stderr)


def communicate_all(processes: list[subprocess.Popen[str]], seconds: float) -> list[str]:
    """Every process's output by one shared deadline; past it, all are killed and the
    failure shows what each one printed (the one that hung is rarely the first)."""
    end = time.monotonic() + seconds
    outputs: list[str] = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=max(1.0, end - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
        outputs += [process.communicate()[0] for process in processes[len(outputs) :]]
        tails = [f"--- {p.args[-1]} ---\n{out[-2500:]}" for p, out in zip(processes, outputs)]
        pytest.fail(f"no exit within {seconds:.0f} s:\n" + "\n".join(tails))
    return outputs


def run_id_of(stderr: str) -> str:
    found = re.search(r"launching run ([0-9a-f]+) on", stderr)
    assert found, stderr[-2000:]
    return found[1]


def wait_until_clean(cluster: NetCluster, run_id: str | None = None, seconds: float = 15.0) -> None:
    """No process on any node of this cluster and none of this run's folders left (sshd
    reaps sessions lazily: wait for the condition, do not sleep a fixed time). Folders are
    matched by run id: other clusters on this machine may be running jobs of their own."""
    end = time.monotonic() + seconds
    pattern = f"/tmp/clusterkit-launch-{run_id}-*" if run_id else None
    while True:
        left = {n.name: [p.command for p in n.processes()] for n in cluster.nodes}
        left = {name: commands for name, commands in left.items() if commands}
        folders = glob.glob(pattern) if pattern else []
        if (not left and not folders) or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert left == {}
    assert folders == []


def test_a_ddp_job_trains_to_the_end_with_the_checked_settings(
    cluster: NetCluster, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    done = launch(inventory(cluster, tmp_path), "--log-dir", str(logs), job=("--steps", "3"))
    assert done.returncode == 0, done.stderr[-3000:]
    master = cluster.nodes[0].address  # the address every node resolved node1 to
    for rank, node in enumerate(cluster.nodes[:NODES]):
        joined = (
            f"{node.name}/{rank}: joined rank={rank} world={NODES} master={master}:29500 "
            f"node_rank={rank} ifname=eth0"
        )
        assert joined in done.stdout, done.stdout[-3000:]
        assert f"{node.name}/{rank}: done rank={rank} sum_of_ranks=3" in done.stdout
        log = (logs / "attempt-0" / f"{node.name}-{rank}.log").read_text()
        assert "step 2 loss" in log and log.count("\n") >= 5
    assert "check passed" in done.stderr
    assert "job succeeded" in done.stderr
    wait_until_clean(cluster, run_id_of(done.stderr))


def test_the_gate_refuses_a_blocked_master_port_and_starts_nothing(
    cluster: NetCluster, tmp_path: Path
) -> None:
    cluster.nodes[0].iptables("-I", "INPUT", "-p", "tcp", "--dport", "29500", "-j", "DROP")
    done = launch(inventory(cluster, tmp_path))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "nothing was started" in done.stderr
    assert "net.rendezvous" in done.stdout  # the check's report says why
    assert "joined" not in done.stdout and "launching" not in done.stderr
    wait_until_clean(cluster)


def test_a_raising_rank_stops_the_job_everywhere_and_is_named(
    cluster: NetCluster, tmp_path: Path
) -> None:
    done = launch(
        inventory(cluster, tmp_path),
        job=("--fail-rank", "2", "--steps", "50", "--step-seconds", "0.2"),
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "job failed" in done.stderr
    assert "rank 2 on node3 exited with status 1" in done.stderr
    assert "last lines of rank 2 on node3:" in done.stderr
    assert "RuntimeError: rank 2 fails on purpose" in done.stderr
    assert "done rank=" not in done.stdout  # nobody ran to the end
    wait_until_clean(cluster, run_id_of(done.stderr))


def test_a_failed_launchs_report_says_so_and_is_no_gate(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """The --check-output report of a launch whose job failed said `verdict: pass` with no
    launch.job finding, and `--check-report` then started on it."""
    path = inventory(cluster, tmp_path)
    report = tmp_path / "launch.json"
    done = launch(
        path, "--check-output", str(report), "--format", "json",
        job=("--fail-rank", "1", "--steps", "50", "--step-seconds", "0.2"),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    saved = json.loads(report.read_text())
    assert saved["verdict"] == "fail" and saved["exit_status"] == 1
    (job,) = [f for f in saved["findings"] if f["id"] == "launch.job"]
    assert job["status"] == "fail" and job["hosts"] == ["node2"]
    assert saved["details"]["launch"]["result"] == "failed"
    wait_until_clean(cluster, run_id_of(done.stderr))
    again = launch(path, "--check-report", str(report), job=("--steps", "1"))
    assert again.returncode == 2 and "not pass" in again.stderr
    assert "joined" not in again.stdout
    saved["verdict"] = "pass"  # even a report edited to pass records the failed launch
    report.write_text(json.dumps(saved))
    again = launch(path, "--check-report", str(report), job=("--steps", "1"))
    assert again.returncode == 2, again.stderr[-2000:]
    assert "it records a launch that did not succeed ('failed')" in again.stderr
    wait_until_clean(cluster)


def rank_process(node: Node, rank: int) -> int | None:
    """The pid of a rank on a node: the job's process whose environment torchrun gave RANK
    (torchrun's own process, which also names the script, has none)."""
    for process in node.processes():
        if "ddp_job.py" not in process.command or "torch.distributed.run" in process.command:
            continue
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in environ:
                return process.pid
    return None


def test_a_rank_killed_by_a_signal_is_named_and_every_other_rank_stopped(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """kill -9 of rank 2's process on node3, as the OOM killer would: the report names the
    host, the rank and the signal, exits 128 + 9, and nothing of the job is left anywhere."""
    argv = launch_argv(
        inventory(cluster, tmp_path), "--no-check",
        job=("--steps", "100000", "--step-seconds", "0.1"),
    )  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    seen: set[str] = set()
    for line in process.stdout:  # every rank trains before the kill
        if " step " in f" {line.split(': ', 1)[-1]}":
            seen.add(line.split(":", 1)[0])
        if len(seen) == NODES:
            break
    assert seen == {"node1/0", "node2/1", "node3/2"}
    node3 = cluster.nodes[2]
    victim = rank_process(node3, 2)
    assert victim is not None, [p.command for p in node3.processes()]
    node3.exec(["kill", "-9", str(victim)], check=True)
    killed = time.monotonic()
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGKILL, stderr[-3000:]
    assert "job failed" in stderr
    assert "rank 2 on node3 was killed by SIGKILL" in stderr, stderr[-3000:]
    assert "done rank=" not in stdout  # the others were stopped, not run to their end
    assert time.monotonic() - killed < 60  # failure grace + stop grace, on a busy machine
    wait_until_clean(cluster, run_id_of(stderr))


@pytest.mark.parametrize("stacks", ["py-spy", "faulthandler"])
def test_a_sleeping_rank_is_reported_hung_and_singled_out(
    cluster: NetCluster, tmp_path: Path, stacks: str
) -> None:
    hang_timeout = 15.0  # above a busy machine's slowest step; the sleep is 600 s
    logs = tmp_path / "logs"
    argv = launch_argv(
        inventory(cluster, tmp_path),
        "--hang-timeout", str(hang_timeout), "--stacks", stacks, "--log-dir", str(logs),
        job=("--sleep-rank", "2", "--steps", "3"),
    )  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last_progress = [0.0]

    def watch_stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            last_progress[0] = time.monotonic()
            del line

    reader = threading.Thread(target=watch_stdout, daemon=True)
    reader.start()
    _, stderr = process.communicate(timeout=300)
    ended = time.monotonic()
    reader.join(5)
    assert process.returncode == 124, stderr[-3000:]
    # The report came within the hang timeout plus the dump and stop time.
    assert ended - last_progress[0] < hang_timeout + 25, stderr[-2000:]
    summary = re.search(r"the job hung \(no rank advanced for 15 s \(.*?\)\): (.*)", stderr)
    assert summary, stderr[-3000:]
    # The flight records say where the ranks parted, the stacks where each one waits.
    parted = "ranks 0-1 (node1, node2) wait in all_reduce #{n} of process group 0; rank 2 "
    seq = re.search(r"wait in all_reduce #(\d+) of process group 0", summary[1])
    assert seq and parted.format(n=seq[1]) in summary[1], summary[1]
    assert f"(node3) never entered it: its last was #{int(seq[1]) - 1}" in summary[1]
    assert re.search(r"stacks: ranks 0-1 in all_reduce at ddp_job\.py:\d+", summary[1])
    record = json.loads((logs / "attempt-0" / "flight-node3-2.json").read_text())
    assert record["rank"] == 2 and record["entries"][-1]["seq"] == int(seq[1]) - 1
    odd = re.search(r"odd one out: rank 2 on node3 at ddp_job\.py:\d+ in main (.*)", stderr)
    assert odd and "time.sleep(args.sleep)" in odd[1], stderr[-2000:]
    dump = (logs / "attempt-0" / "stacks-node3-2.txt").read_text()
    assert f", {stacks})" in dump and "time.sleep(args.sleep)" in dump
    assert "all_reduce" in (logs / "attempt-0" / "stacks-node1-0.txt").read_text()
    wait_until_clean(cluster, run_id_of(stderr))


def test_ctrl_c_leaves_no_process_on_any_node(cluster: NetCluster, tmp_path: Path) -> None:
    argv = launch_argv(
        inventory(cluster, tmp_path), job=("--steps", "100000", "--step-seconds", "0.1")
    )
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    seen: set[str] = set()
    end = time.monotonic() + 240
    for line in process.stdout:  # every rank trains before the interrupt
        if " step " in f" {line.split(': ', 1)[-1]}":
            seen.add(line.split(":", 1)[0])
        if len(seen) == NODES or time.monotonic() > end:
            break
    assert seen == {"node1/0", "node2/1", "node3/2"}
    running = [p.command for n in cluster.nodes for p in n.processes()]
    assert any("torch.distributed.run" in command for command in running)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    assert "clusterkit: interrupted" in stderr
    wait_until_clean(cluster, run_id_of(stderr))


def test_sigterm_stops_the_job_like_ctrl_c_and_exits_143(
    cluster: NetCluster, tmp_path: Path
) -> None:
    argv = launch_argv(inventory(cluster, tmp_path), job=("--steps", "100000"))
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if ": step " in line:
            break
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr[-2000:]
    assert "terminated (SIGTERM)" in stderr
    wait_until_clean(cluster, run_id_of(stderr))


def test_printed_commands_run_by_hand_form_the_same_job(
    cluster: NetCluster, tmp_path: Path
) -> None:
    folder = tmp_path / "plan"
    printing = launch_args(
        inventory(cluster, tmp_path), "--print-dir", str(folder), job=("--steps", "2")
    )
    done = run_cli(printing, timeout=300)  # in-process: the plan is printed to the run's stdout
    assert done.status == 0, done.stderr[-2000:]
    assert "### node3 (node rank 2 of 3)" in done.stdout
    wait_until_clean(cluster)  # printing starts nothing
    nodes = cluster.nodes[:NODES]
    by_hand = [
        subprocess.Popen(
            node.ssh_argv("sh", str(folder / f"{node.name}.sh")),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in nodes
    ]
    outputs = communicate_all(by_hand, seconds=240)
    master = nodes[0].address
    for rank, (process, output) in enumerate(zip(by_hand, outputs)):
        assert process.returncode == 0, output[-3000:]
        assert f"[rank{rank}]:joined rank={rank} world={NODES} master={master}:29500" in output
        assert f"[rank{rank}]:done rank={rank} sum_of_ranks=3" in output
    # torchrun by hand leaves its log folder: this run's only (others may be running)
    run_id = re.search(r"/clusterkit-launch-([0-9a-f]+)-n0\.XXXXXXXXXX", done.stdout)
    assert run_id, done.stdout[-2000:]
    for folder_left in glob.glob(f"/tmp/clusterkit-launch-{run_id[1]}-*"):
        subprocess.run(["rm", "-rf", folder_left], check=False)
    wait_until_clean(cluster, run_id[1])


def test_a_saved_passing_report_stands_in_for_the_check(
    cluster: NetCluster, tmp_path: Path
) -> None:
    path = inventory(cluster, tmp_path)
    report = tmp_path / "report.json"
    checked = run_cli(
        ["check", str(path), "--skip", "bench", "--format", "json", "-o", str(report)],
        timeout=300,
    )
    assert checked.status == 0, checked.stderr[-2000:]
    done = launch(path, "--check-report", str(report), job=("--steps", "1"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reusing the check report" in done.stderr
    assert "node3/2: done rank=2" in done.stdout
    wait_until_clean(cluster, run_id_of(done.stderr))
    old = time.time() - 7200
    os.utime(report, (old, old))
    stale = launch(path, "--check-report", str(report), job=("--steps", "1"))
    assert stale.returncode == 2
    assert "more than --max-age 3600" in stale.stderr
    assert "joined" not in stale.stdout
    wait_until_clean(cluster)


def test_no_check_launches_without_the_check_and_says_so(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """A blocked port the check would refuse: --no-check neither checks nor refuses."""
    cluster.nodes[2].iptables("-I", "INPUT", "-p", "tcp", "--dport", "1", "-j", "DROP")
    done = launch(inventory(cluster, tmp_path), "--no-check", job=("--steps", "1"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "launching WITHOUT checking the cluster" in done.stderr
    assert "(not checked)" in done.stderr and "check passed" not in done.stderr
    assert "node3/2: done rank=2 sum_of_ranks=3" in done.stdout
    wait_until_clean(cluster, run_id_of(done.stderr))


def test_a_node_that_goes_silent_is_lost_and_the_rest_stopped(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node3's link goes down mid-job: no heartbeat comes back, it is named lost (exit 3)
    and the other nodes' ranks are stopped."""
    argv = launch_argv(
        inventory(cluster, tmp_path),
        "--node-timeout", "12",
        job=("--steps", "100000", "--step-seconds", "0.1"),
    )  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("node3/2: step "):
            break
    node3 = cluster.nodes[2]
    subprocess.run(["ip", "link", "set", node3.host_veth, "down"], check=True)
    started = time.monotonic()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 3, stderr[-2000:]
    assert "node3 was lost" in stderr
    assert time.monotonic() - started < 12 + 45  # + stop grace, kill, sweep attempts
    for node in cluster.nodes[:2]:  # the reachable nodes are clean at once
        assert [p.command for p in node.processes()] == []
    # Back on the network, node3 learns its connection is gone and stops its own share.
    subprocess.run(["ip", "link", "set", node3.host_veth, "up"], check=True)
    wait_until_clean(cluster, run_id_of(stderr), seconds=90)


def test_a_hostile_job_finds_no_token_and_a_run_folder_only_root_can_enter(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """Every rank looks for the control token in every command line on its node (any user
    can read them) and forges the node process's exit report with what it finds; it finds
    nothing, so the job runs to its end. Its run folder was made fresh: 0700, root's own."""
    done = launch(inventory(cluster, tmp_path), job=("--steps", "2", "--hunt"))
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = run_id_of(done.stderr)
    for rank, node in enumerate(cluster.nodes[:NODES]):
        hunted = re.search(rf"{node.name}/{rank}: hunt tokens=(\d+) (.*)", done.stdout)
        assert hunted, done.stdout[-3000:]
        assert hunted[1] == "0"
        assert hunted[2].startswith(
            f"run_dir_mode=700 run_dir_uid=0 run_dir_name=clusterkit-launch-{run_id}-n{rank}."
        )
        assert f"{node.name}/{rank}: done rank={rank} sum_of_ranks=3" in done.stdout
    wait_until_clean(cluster, run_id)


def test_a_sigkilled_node_process_is_swept_with_its_run_folder(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node2's node process dies by SIGKILL mid-job: node2 is lost, the rest is stopped, and
    the sweep leaves no process and no run folder on any node."""
    argv = launch_argv(
        inventory(cluster, tmp_path), job=("--steps", "100000", "--step-seconds", "0.1")
    )
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("node2/1: step "):
            break
    torchrun = [p for p in cluster.nodes[1].processes() if "torch.distributed.run" in p.command]
    assert torchrun, [p.command for p in cluster.nodes[1].processes()]
    runner = int(Path(f"/proc/{torchrun[0].pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(runner, signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 3, stderr[-2000:]
    assert "node2 was lost" in stderr
    wait_until_clean(cluster, run_id_of(stderr), seconds=60)
