"""A built wheel, not only the checkout, carries what the commands need at run time."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow
SOURCE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "clusterkit", "playbooks")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # pip builds in the source tree: build from a copy of what a release needs, so the
    # checkout gets no build/ folder and nothing outside these files can leak in.
    source = tmp_path_factory.mktemp("source")
    for name in SOURCE_FILES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (found,) = out.glob("clusterkit-*.whl")
    return found


def test_wheel_ships_every_playbook_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        "clusterkit/playbooks/" + path.relative_to(REPO / "playbooks").as_posix()
        for path in (REPO / "playbooks").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "clusterkit/playbooks/site.yml" in shipped
    assert "clusterkit/playbooks/.ansible-lint" in shipped
    assert shipped <= names, sorted(shipped - names)
    node_side = {f"clusterkit/node/{p.name}" for p in (REPO / "clusterkit" / "node").glob("*.py")}
    assert "clusterkit/node/collector.py" in node_side and node_side <= names


def test_installed_wheel_finds_its_own_playbooks(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path)
    # -S and an explicit path: only the unpacked wheel is importable, not this checkout.
    code = "from clusterkit.provision.playbook import find_playbook; print(find_playbook())"
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert Path(done.stdout.strip()) == tmp_path / "clusterkit" / "playbooks" / "site.yml"


def test_the_wheel_takes_its_version_from_the_package(wheel: Path) -> None:
    """One place: clusterkit/__init__.py; pyproject reads it, the wheel's metadata carries it."""
    from clusterkit import __version__
    from clusterkit.node import bench_table

    metadata = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert f"\nVersion: {__version__}\n" in text
    assert wheel.name.startswith(f"clusterkit-{__version__}-")
    assert __version__ == bench_table.VERSION
    assert not re.search(r"^version\s*=\s*\"", (REPO / "pyproject.toml").read_text(), re.M)
