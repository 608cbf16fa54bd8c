"""Files written into folders other local users can reach: never through a planted link.

The attacker is another local user (`nobody`) who can write to a shared folder and plants a
symlink (or hard link) under the name clusterkit is about to write, aiming at a file of root's.
"""

from __future__ import annotations

import os
import pwd
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.safefiles import (
    PrivateFolder,
    UnsafePathError,
    name_problem,
    safe_child,
)

NOBODY = pwd.getpwnam("nobody").pw_uid
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: needs root")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file only root may read or write: what the planted links point at."""
    path = tmp_path / "victim"
    path.write_text("root's secret\n")
    path.chmod(0o600)
    return path


def untouched(victim: Path) -> bool:
    info = victim.stat()
    return (
        victim.read_text() == "root's secret\n"
        and stat.S_IMODE(info.st_mode) == 0o600
        and info.st_uid == os.geteuid()
    )


def shared_folder(tmp_path: Path, mode: int) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    return folder


def plant_link(link: Path, target: Path, owner: int = NOBODY) -> None:
    link.symlink_to(target)
    os.lchown(link, owner, -1)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "/etc/profile.d/x.sh", "a\0b", "x" * 256]
)
def test_names_that_leave_their_folder_are_refused(tmp_path: Path, name: str) -> None:
    assert name_problem(name) is not None
    with pytest.raises(UnsafePathError, match="file name"):
        safe_child(tmp_path, name)


def test_plain_names_stay_in_their_folder(tmp_path: Path) -> None:
    for name in ["node1.sh", "stacks-n1-0.txt", ".env", "fe80::1%eth0-3.log", "nœud.env"]:
        assert safe_child(tmp_path, name) == tmp_path / name


def test_new_files_are_owner_only_with_the_mode_asked(tmp_path: Path) -> None:
    old_umask = os.umask(0)  # even a permissive umask gives no more than asked
    try:
        with PrivateFolder.open(tmp_path / "new" / "plan") as folder:
            script = folder.write("n1.sh", "#!/bin/sh\n", 0o700)
            env = folder.write("n1.env", "A=1\n")
            with folder.open_new("n1-0.log") as log:
                log.write("line\n")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "new" / "plan").stat().st_mode) == 0o700
    assert stat.S_IMODE(script.stat().st_mode) == 0o700
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new" / "plan" / "n1-0.log").stat().st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "new" / "plan").iterdir()) == [
        "n1-0.log",
        "n1.env",
        "n1.sh",
    ]  # no temporary file left


def test_a_rerun_replaces_the_files_it_wrote(tmp_path: Path) -> None:
    with PrivateFolder.open(tmp_path) as folder:
        folder.write("n1.env", "A=1\n")
        with folder.open_new("n1-0.log") as log:
            log.write("first run\n")
    with PrivateFolder.open(tmp_path) as folder:
        folder.write("n1.env", "A=2\n")
        with folder.open_new("n1-0.log") as log:
            log.write("second run\n")
    assert (tmp_path / "n1.env").read_text() == "A=2\n"
    assert (tmp_path / "n1-0.log").read_text() == "second run\n"


@as_root
def test_a_world_writable_folder_that_is_not_sticky_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    folder = shared_folder(tmp_path, 0o777)
    plant_link(folder / "node1.sh", victim)
    with pytest.raises(UnsafePathError, match="others can write to this folder"):
        PrivateFolder.open(folder)
    with (
        pytest.raises(UnsafePathError, match="not sticky"),
        PrivateFolder.open(folder, create=False) as opened,
    ):
        opened.write("node1.sh", "#!/bin/sh\necho owned\n", 0o755)
    assert untouched(victim)


@as_root
def test_another_users_symlink_in_a_sticky_folder_is_refused(tmp_path: Path, victim: Path) -> None:
    folder = shared_folder(tmp_path, 0o1777)
    plant_link(folder / "node1.sh", victim)
    with PrivateFolder.open(folder) as opened:
        assert opened.shared
        with pytest.raises(UnsafePathError, match="belongs to user 'nobody'"):
            opened.write("node1.sh", "#!/bin/sh\necho owned\n", 0o755)
        with pytest.raises(UnsafePathError, match="belongs to user 'nobody'"):
            opened.open_new("node1.sh")
    assert untouched(victim)


@as_root
def test_our_own_old_link_in_a_sticky_folder_is_replaced_not_followed(
    tmp_path: Path, victim: Path
) -> None:
    folder = shared_folder(tmp_path, 0o1777)
    plant_link(folder / "node1.sh", victim, owner=os.geteuid())
    os.link(victim, folder / "node1.env")
    with PrivateFolder.open(folder) as opened:
        opened.write("node1.sh", "#!/bin/sh\n", 0o700)
        with opened.open_new("node1.env") as handle:
            handle.write("A=1\n")
    assert not (folder / "node1.sh").is_symlink()
    assert (folder / "node1.sh").read_text() == "#!/bin/sh\n"
    assert (folder / "node1.env").read_text() == "A=1\n"
    assert untouched(victim)


@as_root
def test_a_folder_reached_through_another_users_symlink_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    """/tmp/plan -> /etc/profile.d: the files would be written where root logs in."""
    target = tmp_path / "profile.d"
    target.mkdir()
    shared = shared_folder(tmp_path, 0o1777)
    plant_link(shared / "plan", target)
    with pytest.raises(UnsafePathError, match="is a symlink of user 'nobody'"):
        PrivateFolder.open(shared / "plan")
    assert list(target.iterdir()) == []


@as_root
def test_a_folder_inside_another_users_folder_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "logs").mkdir(parents=True)
    os.chown(theirs, NOBODY, -1)
    with pytest.raises(UnsafePathError, match="belongs to user 'nobody', who could swap"):
        PrivateFolder.open(theirs / "logs")


def _write_under_a_small_file_limit(path: Path, data: str) -> subprocess.CompletedProcess[str]:
    """PrivateFolder.write in a child whose files may not grow past 1000 bytes (a full disk,
    for that process only: a limit set in the test process would cut pytest's own output)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))

    code = (
        "import errno, sys\n"
        "from pathlib import Path\n"
        "from clusterkit.safefiles import PrivateFolder\n"
        "path = Path(sys.argv[1])\n"
        "try:\n"
        "    with PrivateFolder.open(path.parent, create=False) as folder:\n"
        "        folder.write(path.name, sys.argv[2], 0o644)\n"
        "except OSError as error:\n"
        "    print(errno.errorcode[error.errno])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path), data],
        capture_output=True, text=True, timeout=60, preexec_fn=limit,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip


def test_a_write_that_fails_leaves_the_old_file_whole(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    with PrivateFolder.open(tmp_path, create=False) as folder:
        folder.write(report.name, '{"verdict": "pass"}\n', 0o644)
    done = _write_under_a_small_file_limit(report, "x" * 5000)
    assert done.stdout.strip() == "EFBIG", done.stderr
    assert report.read_text() == '{"verdict": "pass"}\n'
    assert stat.S_IMODE(report.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left
