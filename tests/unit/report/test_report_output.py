"""`--output FILE`: the report is written whole or not at all, on a real (tiny, full) disk."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.report import emit
from tests.unit.report.test_report import sample_report


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs of its own, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    """Write until the disk refuses another byte."""
    with open(disk / "filler", "wb", buffering=0) as stream:
        with contextlib.suppress(OSError):
            while stream.write(b"\0" * 4096):
                pass
        with pytest.raises(OSError, match="No space left"):
            stream.write(b"\0" * 4096)


@pytest.mark.parametrize("fmt", ["json", "text", "junit"])
def test_a_full_disk_leaves_the_previous_report_whole(
    small_disk: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report_file = small_disk / "report.out"
    report_file.write_text("the previous report\n")
    report_file.chmod(0o640)
    fill(small_disk)
    with pytest.raises(UsageError, match="No space left on device") as caught:
        emit(sample_report(), fmt, str(report_file), Environment())
    assert "previous report is left" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert report_file.read_text() == "the previous report\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "report.out"]


def test_a_report_replaces_the_old_one_whole_and_keeps_its_mode(small_disk: Path) -> None:
    report_file = small_disk / "report.json"
    report_file.write_text("old")
    report_file.chmod(0o640)
    emit(sample_report(), "json", str(report_file), Environment())
    assert json.loads(report_file.read_text())["command"] == "check"
    assert report_file.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in small_disk.iterdir()) == ["report.json"]


def test_a_new_report_gets_the_usual_mode(small_disk: Path) -> None:
    old = os.umask(0o022)
    try:
        emit(sample_report(), "json", str(small_disk / "new.json"), Environment())
    finally:
        os.umask(old)
    assert (small_disk / "new.json").stat().st_mode & 0o777 == 0o644
