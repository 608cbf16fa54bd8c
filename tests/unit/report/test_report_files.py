"""Report files (`check -o`, `node-check --output`, `launch --check-output`, `launch --trace`,
and every other file clusterkit writes) follow the rules `--log-dir` follows.

The attacker is another local user (`nobody`, a real process of theirs made with setuid) who
plants a symlink, a file or a FIFO in a shared sticky folder under the name clusterkit (root)
is about to write, aiming at a file only root may read or write.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.safefiles import UnsafePathError, check_writable, write_file
from tests.support.cli import run_cli

NOBODY = pwd.getpwnam("nobody").pw_uid
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: needs root")


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A folder like /tmp: everyone may add entries, only an entry's owner may swap it. It sits
    in /tmp itself, so that `nobody` can reach it (pytest's own folders are root's, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="clusterkit-sticky-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_text("root's secret\n")
    path.chmod(0o600)
    return path


def untouched(victim: Path) -> bool:
    info = victim.stat()
    return victim.read_text() == "root's secret\n" and stat.S_IMODE(info.st_mode) == 0o600


def as_nobody(*argv: str) -> None:
    """Run `argv` as the unprivileged user (setuid in the child), as they would."""
    subprocess.run(argv, user=NOBODY, group=NOBODY, check=True, timeout=30)


def refused_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        return int(taken.getsockname()[1])  # closed again: connections are refused at once


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        f"all:\n  hosts:\n    node1: {{ansible_host: 127.0.0.1, ansible_port: {refused_port()}}}\n"
    )
    return path


def runs(tmp_path: Path, flag: str, target: Path) -> list[str]:
    """The command line writing `target` with `flag`; the one host refuses connections."""
    inv = str(inventory(tmp_path))
    common = ["--ssh-config", "/dev/null", "--host-key-policy", "off", "--connect-timeout", "5"]
    if flag in ("--trace", "--check-output"):
        return ["launch", inv, *common, flag, str(target), "--", "true"]
    if flag == "-o":
        return ["check", inv, *common, "--skip", "network,bench", "-o", str(target)]
    return ["node-check", "--timeout", "20", "--output", str(target)]


FLAGS = ["-o", "--output", "--check-output", "--trace"]
WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|os\.replace\(|savefig\(path|open\([^)]*[\"']w")


@pytest.mark.parametrize("flag", FLAGS)
def test_a_link_planted_by_another_user_is_never_written_through(
    tmp_path: Path, sticky: Path, victim: Path, flag: str
) -> None:
    report = sticky / "report.json"
    as_nobody("ln", "-s", str(victim), str(report))
    done = run_cli(runs(tmp_path, flag, report), timeout=120)
    assert done.status == 2, done.stderr
    shown = "-o" if flag == "--output" else flag  # node-check's --output is -o too
    assert done.stderr.startswith(f"clusterkit: error: {shown} {report}: cannot write"), done.stderr
    assert "symlink of user 'nobody'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert untouched(victim)
    assert report.is_symlink() and os.lstat(report).st_uid == NOBODY


@pytest.mark.parametrize("flag", ["-o", "--output"])
def test_a_fifo_at_the_report_path_is_an_error_at_once(tmp_path: Path, flag: str) -> None:
    """Our own FIFO that no one reads: the report used to wait for a reader forever."""
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = run_cli(runs(tmp_path, flag, fifo), timeout=90)
    assert done.status == 2, done.stderr
    assert time.monotonic() - started < 60
    error = done.stderr.strip().splitlines()[-1]  # after the progress line
    assert error == (
        f"clusterkit: error: {fifo}: cannot write the report: is a FIFO that no process is "
        "reading: nothing was written"
    )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_another_users_file_or_fifo_in_a_sticky_folder_is_refused(
    sticky: Path, victim: Path
) -> None:
    as_nobody("sh", "-c", f"echo theirs > {sticky}/theirs.json; mkfifo {sticky}/fifo.json")
    as_nobody("ln", "-s", str(victim.parent / "absent"), str(sticky / "dangling.json"))
    for name, why in [
        ("theirs.json", "belongs to user 'nobody'"),
        ("fifo.json", "is a FIFO of user 'nobody'"),
        ("dangling.json", "is a symlink of user 'nobody'"),
    ]:
        for attempt in (check_writable, lambda path: write_file(path, "report")):
            with pytest.raises(UnsafePathError, match=why):
                attempt(sticky / name)
    assert (sticky / "theirs.json").read_text() == "theirs\n"
    assert not (victim.parent / "absent").exists()
    assert untouched(victim)


def test_every_writer_goes_through_the_checks(sticky: Path, victim: Path) -> None:
    """-J, --exclude-file, --digest-file, cost -o, --plot, catalogs and locks all call
    write_file: nothing else in clusterkit/ opens a file for writing by path."""
    root = Path(__file__).resolve().parents[3] / "clusterkit"
    writers = []
    for source in root.rglob("*.py"):
        if "node" in source.relative_to(root).parts or source.name == "safefiles.py":
            continue
        text = source.read_text()
        for found in WRITES.findall(text):
            writers.append(f"{source.relative_to(root)}: {found}")
    assert writers == []


def test_our_own_link_is_followed_and_its_target_replaced_whole(tmp_path: Path) -> None:
    """`-o latest.json` where latest.json is our link to runs/1.json (and /dev/stdout, root's
    link to the terminal or a pipe): the link stays, the file it names is the report."""
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "1.json"
    target.write_text("old")
    target.chmod(0o640)
    (tmp_path / "latest.json").symlink_to("runs/1.json")
    write_file(tmp_path / "latest.json", "new")
    assert (tmp_path / "latest.json").is_symlink()
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["1.json"]


def test_a_fifo_with_a_reader_and_dev_null_are_written_as_streams(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while True:  # the reader has the FIFO open once a writer's open no longer fails
        try:
            write_file(fifo, "through the pipe\n")
            break
        except UnsafePathError:
            assert time.monotonic() < deadline, "the reader never opened the FIFO"
            time.sleep(0.01)
    reader.join(10)
    assert received == [b"through the pipe\n"]
    write_file("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_directory_or_a_missing_folder_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="is a directory, not a file"):
        write_file(tmp_path / ".", "x")
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnsafePathError, match="is a directory, not a file"):
        check_writable(tmp_path / "dir")
    with pytest.raises(FileNotFoundError):
        check_writable(tmp_path / "missing" / "r.json")
    assert not (tmp_path / "missing").exists()
