"""The probe's torch reader on a fake install, and its imports; its parsers run over their
recorded cases in tests/unit/node/test_parser_cases.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.node import probe_python
from tests.support.nodescripts import write_composed

SMI = Path(__file__).parent.parent.parent / "fixtures" / "nvidia-smi"
CASES = Path(__file__).parent.parent.parent / "fixtures" / "parsers"
COLLECTOR = "collector"


def test_every_recorded_summary_is_a_banner_case() -> None:
    """A new recording with a banner gets its case in
    tests/fixtures/parsers/probe_gpu.parse_banner/ (tests/unit/node/test_parser_cases.py runs
    them all, with the parsers' other recorded cases)."""
    with_banner = {p.name for p in SMI.glob("*.txt") if "| NVIDIA-SMI " in p.read_text()}
    assert with_banner == {
        "classic-550.127.05-a40x10.txt",
        "classic-550.54.14-h100x1.txt",
        "r610-610.43.02-b200-head.txt",
        "r610-610.57.04-rtx3090.txt",
    }
    cases = [json.loads(c.read_text()) for c in (CASES / "probe_gpu.parse_banner").glob("*.json")]
    covered = {case.get("output_file") for case in cases if "expected" in case}
    assert {f"nvidia-smi/{name}" for name in with_banner} <= covered


def _fake_torch(root: Path, version_py: str) -> None:
    package = root / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('libcudnn.so.9: cannot open')\n")
    (package / "version.py").write_text(version_py)


def _collect_torch(root: Path, options: dict, python: str = sys.executable) -> dict:
    """collect_torch in a fresh interpreter that finds the fake torch first, from the probe
    as nodes get it (composed, no clusterkit on the path)."""
    node = write_composed(COLLECTOR, root / "node").parent
    code = (
        "import json, sys; import collector; "
        f"print(json.dumps(collector.collect_torch({options!r})))"
    )
    done = subprocess.run(
        [python, "-S", "-c", code],
        capture_output=True, text=True, timeout=60, check=True,
        env={"PYTHONPATH": f"{root}:{node}", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return json.loads(done.stdout)


CUDA_VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
__version__ = '2.5.1+cu124'
debug = False
cuda: Optional[str] = '12.4'
git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'
hip: Optional[str] = None
"""


def test_torch_facts_read_from_version_py_without_import(tmp_path: Path) -> None:
    _fake_torch(tmp_path, CUDA_VERSION_PY)
    facts = _collect_torch(tmp_path, {})
    assert facts["present"] is True
    assert facts["version"] == "2.5.1+cu124"
    assert facts["cuda"] == "12.4"
    assert facts["hip"] is None
    assert facts["path"] == str(tmp_path / "torch")
    assert "imported" not in facts and "import_error" not in facts  # no GPUs: no import


def test_numpy_beside_torch_is_a_fact(tmp_path: Path) -> None:
    _fake_torch(tmp_path, CUDA_VERSION_PY)
    assert _collect_torch(tmp_path, {})["numpy"] is False  # -S: only PYTHONPATH is searched
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("")
    assert _collect_torch(tmp_path, {})["numpy"] is True


def test_torch_import_failure_is_reported(tmp_path: Path) -> None:
    _fake_torch(tmp_path, CUDA_VERSION_PY)
    facts = _collect_torch(tmp_path, {"gpus_present": True})
    assert "libcudnn.so.9" in facts["import_error"]
    assert facts["version"] == "2.5.1+cu124"


def test_rocm_build_read_from_version_py(tmp_path: Path) -> None:
    _fake_torch(
        tmp_path, "__version__ = '2.4.0+rocm6.1'\ncuda = None\nhip = '6.1.40091-a8dbc0c19'\n"
    )
    facts = _collect_torch(tmp_path, {})
    assert (facts["version"], facts["cuda"], facts["hip"]) == (
        "2.4.0+rocm6.1",
        None,
        "6.1.40091-a8dbc0c19",
    )


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a Python without torch")
def test_no_torch_is_reported_missing(tmp_path: Path) -> None:
    # The probe falls back to full site processing before calling torch missing, so this
    # needs an interpreter that really has no torch (Debian's, beside the one running tests).
    facts = _collect_torch(tmp_path, {}, python="/usr/bin/python3")
    assert facts["present"] is False
    assert facts["reason"] == "torch not importable"


def test_nccl_wheel_version_from_dist_info(tmp_path: Path) -> None:
    _fake_torch(tmp_path, CUDA_VERSION_PY)
    (tmp_path / "nvidia_nccl_cu12-2.21.5.dist-info").mkdir()
    (tmp_path / "nvidia_nccl_cu11-2.19.3.dist-info").mkdir()  # an older wheel left behind
    (tmp_path / "nvidia_cudnn_cu12-9.1.0.70.dist-info").mkdir()
    assert _collect_torch(tmp_path, {})["nccl_wheel"] == "2.21.5"


def test_no_nccl_wheel_is_none(tmp_path: Path) -> None:
    (tmp_path / "nvidia_nccl_cu12-2.21.5.egg-link").mkdir()  # not a dist-info folder
    assert probe_python._nccl_wheel([str(tmp_path), str(tmp_path / "missing")]) is None


def test_probe_imports_stay_light(tmp_path: Path) -> None:
    """The probe starts once per node per check: modules that cost milliseconds each to
    import (and shutil pulls in compression codecs) must not creep back in."""
    heavy = ("shutil", "platform", "ctypes.util", "importlib.metadata", "encodings.idna")
    code = (
        "import json, sys, collector\n"
        "collector.probe({})\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
    )
    node = write_composed(COLLECTOR, tmp_path).parent
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True, text=True, timeout=60, check=True,
        env={"PYTHONPATH": str(node), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert json.loads(done.stdout.splitlines()[-1]) == []
