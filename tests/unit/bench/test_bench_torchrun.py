"""The worker under real torchrun on this machine: 3 gloo ranks over loopback.

Slow (torch start-up, a few seconds each) but local: no daemon, no root.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clusterkit import framing
from clusterkit.bench.nccltests import parse_table
from clusterkit.bench.results import parse_frame, parse_result

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

WORKER = Path(__file__).resolve().parents[3] / "clusterkit" / "node" / "bench_worker.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _torchrun(
    tmp_path: Path,
    *args: str,
    module: bool = False,
    env: dict[str, str] | None = None,
    ranks: int = 3,
) -> subprocess.CompletedProcess[str]:
    target = ["-m", "clusterkit.bench"] if module else [str(WORKER)]
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), *target, *args,
    ]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_three_ranks_table_parses_and_matches_json(tmp_path: Path) -> None:
    json_path = tmp_path / "result.json"
    done = _torchrun(
        tmp_path, "-b", "64K", "-e", "1M", "-f", "4", "-n", "3", "-w", "1",
        "--expect-world-size", "3", "-J", str(json_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    table = parse_table(done.stdout)
    result = json.loads(json_path.read_text())
    assert parse_result(result) == result  # the shape the control side declares, strictly
    assert result["world_size"] == 3 and result["backend"] == "gloo"
    assert [r["size"] for r in table["results"]] == [65536, 262144, 1048576]
    assert [r["size"] for r in result["results"]] == [65536, 262144, 1048576]
    for row, ours in zip(table["results"], result["results"]):
        assert row["in_place"]["bus_bw"] == pytest.approx(ours["in_place"]["bus_bw"], abs=0.006)
        assert row["in_place"]["nwrong"] == 0 and ours["in_place"]["nwrong"] == 0
        for place in ("out_of_place", "in_place"):  # both measured, both printed
            assert row[place]["bus_bw"] == pytest.approx(ours[place]["bus_bw"], abs=0.006)
            assert row[place]["nwrong"] == 0 and ours[place]["bus_bw"] > 0
        assert len(ours["rank_times_us"]) == 3
    assert table["out_of_bounds"] == {"count": 0, "status": "OK"}
    assert [d["rank"] for d in table["devices"]] == [0, 1, 2]
    assert sorted(done.stderr.count(f"rank {r} joined") for r in range(3)) == [1, 1, 1]


@pytest.mark.parametrize("module", [False, True])
def test_ranks_leave_without_the_interpreter_teardown(tmp_path: Path, module: bool) -> None:
    """torch's c10d threads abort a finished rank in teardown now and then (SIGABRT after
    the results): the worker leaves before it. An exit hook in every rank shows whether
    the teardown ran."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import atexit, os\n"
        "if 'LOCAL_RANK' in os.environ:\n"
        f"    path = os.path.join({str(tmp_path)!r}, 'teardown-' + os.environ['LOCAL_RANK'])\n"
        "    atexit.register(lambda: open(path, 'w').close())\n"
    )
    done = _torchrun(
        tmp_path, "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", module=module,
        env={"PYTHONPATH": f"{hooks}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Collective test concluded" in done.stdout  # flushed before leaving
    assert sorted(p.name for p in tmp_path.glob("teardown-*")) == []
    premise = subprocess.run(
        [sys.executable, "-c", "pass"], env={**os.environ, "LOCAL_RANK": "9",
        "PYTHONPATH": str(hooks)}, check=True, timeout=60,
    )  # fmt: skip
    assert premise.returncode == 0 and (tmp_path / "teardown-9").exists()


def test_wrong_world_size_is_caught_before_timing(tmp_path: Path) -> None:
    """One rank: with several, whichever fails first has torchrun stop the others, rank 0
    too before it writes its frame now and then (the launcher then reads the stderr line)."""
    done = _torchrun(
        tmp_path, "-b", "1K", "-e", "1K", "--expect-world-size", "4", "--frame", ranks=1
    )
    assert done.returncode != 0
    assert "error world-size: WORLD_SIZE is 1 but 4 ranks were expected" in done.stderr
    report = parse_frame(framing.decode(done.stdout.encode()))  # checked strictly
    assert "error" in report and (report["error"]["kind"], report["error"]["rank"]) == (
        "world-size",
        0,
    )
    assert "joined" not in done.stderr  # failed before the process group even formed
    assert "# Avg bus bandwidth" not in done.stdout


def test_local_module_entry_gates_and_names_the_source(tmp_path: Path) -> None:
    args = ("-b", "64K", "-e", "64K", "-n", "2", "-w", "1")
    failing = _torchrun(tmp_path, *args, "--min-busbw", "1000000", module=True)
    assert failing.returncode != 0
    assert "FAIL  bench.busbw" in failing.stdout and "--min-busbw 1e+06" in failing.stdout
    passing = _torchrun(tmp_path, *args, "--min-busbw", "0.000001", module=True)
    assert passing.returncode == 0, passing.stderr[-2000:]
    assert "OK    bench.busbw" in passing.stdout
    assert parse_table(passing.stdout)["results"][0]["size"] == 65536


# Makes numpy absent for every rank, exactly as on a node without it: the import fails
# with ModuleNotFoundError (torch itself still loads, and warns).
NO_NUMPY_SITECUSTOMIZE = """\
import sys
import threading
import time


class NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError("No module named 'numpy'", name=name)
        return None


sys.meta_path.insert(0, NoNumpy())
"""

OBJECT_GATHER = """\
import torch.distributed as dist

dist.init_process_group("gloo")
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, {"rank": dist.get_rank()})
"""


def test_bench_runs_on_nodes_without_numpy(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "no-numpy"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(NO_NUMPY_SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(blocker))
    # the premise: without numpy, torch's own object collectives fail
    probe = tmp_path / "object_gather.py"
    probe.write_text(OBJECT_GATHER)
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(probe),
    ]  # fmt: skip
    premise = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert premise.returncode != 0 and "Numpy is not available" in premise.stderr
    done = _torchrun(tmp_path, "-b", "64K", "-e", "128K", "-f", "2", "-n", "2", "-w", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Numpy is not available" not in done.stderr
    assert parse_table(done.stdout)  # the rows of every size


def test_a_group_measures_only_after_the_go(tmp_path: Path) -> None:
    """--find-slow's barrier: rank 0 writes `ready` once the group has joined and times
    nothing until `go` exists; the launcher's part is played here."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    stamps: dict[str, float] = {}

    def launcher() -> None:
        end = time.monotonic() + 110
        while not (barrier / "ready").exists() and time.monotonic() < end:
            time.sleep(0.05)
        stamps["ready"] = time.monotonic()
        time.sleep(2)  # the other groups are still joining
        stamps["go"] = time.time()
        (barrier / "go").touch()

    thread = threading.Thread(target=launcher, daemon=True)
    thread.start()
    args = ("-b", "64K", "-e", "64K", "-n", "2", "-w", "1", "-J", str(tmp_path / "r.json"))
    done = _torchrun(tmp_path, *args, "--barrier-dir", str(barrier), "--barrier-timeout", "100")
    thread.join(5)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "go" in stamps, "rank 0 never wrote the ready file"
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["started"] + result["duration_s"] > stamps["go"]  # timed after the go
    assert "measuring anyway" not in done.stderr


def test_a_group_without_a_go_measures_after_its_timeout_over_its_window(
    tmp_path: Path,
) -> None:
    """No go: measured anyway. --fill 2: each block runs as many ops as fill 2 s."""
    args = ("-b", "64K", "-e", "64K", "-n", "1", "-w", "1", "-J", str(tmp_path / "r.json"))
    barrier = ("--barrier-dir", str(tmp_path), "--barrier-timeout", "2")
    done = _torchrun(tmp_path, *args, *barrier, "--fill", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "ready").exists()
    assert "no go within 2s: measuring anyway" in done.stderr
    assert parse_table(done.stdout)["results"][0]["size"] == 65536
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["config"]["fill_seconds"] == 2
    # the wait for the go is exact; the windows are sized from a timed probe of one op, so
    # their length follows the machine's load (a probe slowed by a busy moment sizes them
    # short): only the wait is a bound
    assert result["duration_s"] >= 2
