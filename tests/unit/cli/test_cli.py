"""`clusterkit check` as people run it: its exit status, stdout and stderr (run in-process;
one test runs it as a program)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli

REPO = Path(__file__).resolve().parents[3]
STATIC_ONLY = ["--skip", "network,bench,image"]


def clusterkit(*args: str, cwd: Path | None = None) -> CliRun:
    return run_cli(args, cwd=cwd or REPO)


def assert_usage_error(done: CliRun, *words: str) -> None:
    assert done.status == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("clusterkit: error: ")
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["check", "--bogus"], ["--bogus"]),
        (["check", "--skip", "network,nope"], ["--skip", "nope"]),
        (["check", "--timeout", "soon"], ["--timeout"]),
        (["check", "--format", "yaml"], ["--format"]),
        (["check", "/nonexistent/inventory.yaml"], ["/nonexistent/inventory.yaml"]),
        (["chek", "inventory.yaml"], ["'chek'", "did you mean `clusterkit check`?"]),
        (["image", "bild"], ["'bild'", "did you mean `clusterkit image build`?"]),
    ],
)
def test_bad_input_is_a_one_line_usage_error(args: list[str], words: list[str]) -> None:
    done = clusterkit(*args)
    assert_usage_error(done, *words)
    assert done.stdout == ""


def test_malformed_inventory_names_the_file(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts: [a, b\n")
    assert_usage_error(clusterkit("check", str(inventory)), str(inventory))


def test_malformed_expect_pin_is_a_usage_error(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "  vars:\n    clusterkit:\n      expect:\n        torch: latest\n"
    )
    assert_usage_error(clusterkit("check", str(inventory), *STATIC_ONLY), "latest")


@pytest.fixture(scope="module")
def local_check(tmp_path_factory) -> tuple[CliRun, Path]:
    """One real check of this machine (no inventory), JSON to stdout and text to a file."""
    where = tmp_path_factory.mktemp("cli")
    done = clusterkit("check", "--format", "json", *STATIC_ONLY, cwd=where)
    return done, where


def test_check_without_inventory_checks_this_machine(local_check) -> None:
    done, _ = local_check
    assert done.status in (0, 1), done.stderr  # never usage (2) or incomplete (3)
    report = json.loads(done.stdout)
    assert report["exit_status"] == done.status
    assert report["verdict"] == {0: "pass", 1: "fail"}[done.status]
    assert report["inventory"] is None
    (host,) = report["hosts"].values()
    assert host["reachable"] is True
    assert host["facts"]["python"]["version"].count(".") == 2
    ids = {f["id"] for f in report["findings"]}
    assert {"host.reachable", "parity.driver", "torch.present", "env.shm"} <= ids
    assert all(report["stages"][s] == "skipped by --skip" for s in ("network", "bench", "image"))


def test_output_file_gets_the_report(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    done = clusterkit("check", "--format", "json", "--output", str(target), *STATIC_ONLY)
    assert done.status in (0, 1), done.stderr
    assert done.stdout == ""
    report = json.loads(target.read_text())
    assert report["exit_status"] == done.status
    assert done.stderr.strip().splitlines()[-1].startswith("verdict: ")


def test_output_to_an_unwritable_place_is_a_usage_error(tmp_path: Path) -> None:
    done = clusterkit("check", "--output", str(tmp_path / "no" / "dir" / "r.txt"), *STATIC_ONLY)
    assert_usage_error(done, "cannot write")


def test_plain_text_when_piped_ends_with_the_verdict(tmp_path: Path) -> None:
    done = clusterkit("check", *STATIC_ONLY)
    assert done.status in (0, 1), done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(("verdict: PASS (exit 0)", "verdict: FAIL (exit 1)"))
    assert "\x1b[" not in done.stdout  # no colour codes in a pipe


@pytest.mark.parametrize("command", ["check", "bench", "cost"])
def test_a_bad_setting_is_exit_2_at_load_before_any_connection(
    tmp_path: Path, command: str
) -> None:
    """The host is unreachable: had the value been read after connecting, the exit would be 3."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    node1: {ansible_host: 192.0.2.1}\n"
        "  vars:\n    clusterkit:\n      bench:\n        min_busbw: fast\n"
    )
    done = clusterkit(command, str(inventory))
    assert_usage_error(done, f"{inventory}:7: clusterkit.bench.min_busbw", "'fast'", "GB/s")


def _refused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: connecting is refused


def test_no_host_reached_gives_no_ok_and_no_torch_missing(tmp_path: Path) -> None:
    """0 of 2 hosts reached: pins and torch.present are skipped with the reason (no JUnit
    passes), the exit status is incomplete, and the hosts table claims nothing about torch."""
    port = _refused_port()
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n"
        f"    a: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
        f"    b: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
        "  vars:\n    clusterkit:\n      expect: {torch: 2.5.1, gpus_per_node: 8, cuda: '12.4'}\n"
    )
    done = clusterkit("check", str(inventory), "--format", "json", *STATIC_ONLY)
    assert done.status == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"]["ok"] == 0, [f for f in report["findings"] if f["status"] == "ok"]
    skipped = {f["id"]: f["message"] for f in report["findings"] if f["status"] == "skip"}
    assert {"expect.torch", "expect.gpus_per_node", "expect.cuda", "torch.present"} <= set(skipped)
    assert all("not checked" in skipped[i] for i in ("expect.torch", "torch.present"))
    junit = clusterkit("check", str(inventory), "--format", "junit", *STATIC_ONLY).stdout
    assert "<system-out>OK" not in junit
    text = clusterkit("check", str(inventory), *STATIC_ONLY).stdout
    rows = [line for line in text.splitlines() if line.strip().startswith(("a ", "b "))]
    assert len(rows) == 2 and not any("missing" in row for row in rows), text


def test_python_m_clusterkit_runs_the_same_entry_point() -> None:
    """The process boundary: `python -m clusterkit` exits with the documented status."""
    done = subprocess.run(
        [sys.executable, "-m", "clusterkit", "check", "--skip", "network,nope"],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("clusterkit: error: ") and "nope" in done.stderr
