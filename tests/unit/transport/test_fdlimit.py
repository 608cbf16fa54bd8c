"""The open-file arithmetic, and the limit really lowered in a child process: raised up to the
hard limit when that is enough, refused with the numbers and the fix when it is not."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

from clusterkit.transport import fdlimit
from clusterkit.transport.fdlimit import (
    BASE_DESCRIPTORS,
    CHANNEL_DESCRIPTORS,
    PROXY_DESCRIPTORS,
    descriptors_needed,
    host_descriptors,
)

REPO = Path(__file__).resolve().parents[3]


def test_a_direct_host_holds_its_socket_and_channel_pipes() -> None:
    assert host_descriptors() == 1 + CHANNEL_DESCRIPTORS


def test_jump_hosts_and_a_proxy_command_add_theirs() -> None:
    assert host_descriptors(hops=3) == 3 + CHANNEL_DESCRIPTORS
    assert host_descriptors(proxy_command=True) == 1 + CHANNEL_DESCRIPTORS + PROXY_DESCRIPTORS


def test_need_grows_with_every_host_over_a_fixed_base() -> None:
    assert descriptors_needed([]) == BASE_DESCRIPTORS
    assert descriptors_needed([6] * 256) == BASE_DESCRIPTORS + 1536
    assert descriptors_needed([5, 8, 7]) == BASE_DESCRIPTORS + 20


def test_an_unlimited_hard_limit_is_capped_at_the_kernels_maximum() -> None:
    ceiling = fdlimit._ceiling(resource.RLIM_INFINITY)
    assert ceiling != resource.RLIM_INFINITY and ceiling >= 1024
    assert fdlimit._ceiling(4096) == 4096


def _limited(soft: int, hard: int, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run python `code` in a child whose RLIMIT_NOFILE was lowered before it started."""

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run(
        [sys.executable, "-c", code, *args],
        preexec_fn=lower,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )


def test_the_soft_limit_is_raised_to_the_hard_one_when_that_is_enough() -> None:
    code = (
        "import resource\n"
        "from clusterkit.transport.fdlimit import ensure_descriptors\n"
        "ensure_descriptors(200, 1064)\n"
        "print(*resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    done = _limited(256, 2048, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2048", "2048"]


def _inventory(path: Path, hosts: int) -> Path:
    """Hosts at TEST-NET addresses: never contacted, the run must stop before connecting."""
    names = {f"n{i}": {"ansible_host": f"192.0.2.{i % 250 + 1}"} for i in range(hosts)}
    path.write_text(yaml.safe_dump({"all": {"hosts": names, "vars": {"ansible_user": "root"}}}))
    return path


def test_a_run_needing_more_than_the_hard_limit_is_refused_before_connecting(
    tmp_path: Path,
) -> None:
    inventory = _inventory(tmp_path / "hosts.yaml", 40)
    need = BASE_DESCRIPTORS + 40 * host_descriptors()
    code = "import sys\nfrom clusterkit.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    started = time.monotonic()
    done = _limited(
        120, 120, code, "check", str(inventory), "--format", "json", "--connect-timeout", "60"
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("clusterkit: error: 40 hosts need up to"), done.stderr
    assert f"{need} open files" in message
    assert "hard limit (ulimit -Hn) allows 120" in message
    assert f"ulimit -n {need}" in message
    # Refused before any host was tried: a connect to TEST-NET would have taken 60 s.
    assert "connect: 0 of 40 hosts ok" in done.stderr and done.stdout == ""
    assert elapsed < 50


def test_the_same_run_goes_ahead_when_only_the_soft_limit_was_low(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path / "hosts.yaml", 40)
    code = "import sys\nfrom clusterkit.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    done = _limited(
        120, 4096, code, "check", str(inventory), "--format", "json", "--connect-timeout", "1"
    )
    # It connected (and found TEST-NET unreachable): exit 3 with a report, not a refusal.
    assert done.returncode == 3, done.stderr
    assert "open files" not in done.stderr
    assert '"reachable": false' in done.stdout
