"""The probe's parsers on real nvidia-smi output, and its torch reader on a fake install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.node import collector
from clusterkit.node.collector import (
    BASE_GPU_FIELDS,
    GPU_FIELDS,
    HEALTH_GPU_FIELDS,
    ToolError,
    parse_banner,
    parse_gpu_csv,
)
from tests.support.nodescripts import write_composed

SMI = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"
COLLECTOR = "collector"


@pytest.mark.parametrize(
    ("fixture", "driver", "cuda"),
    [
        ("classic-550.127.05-a40x10.txt", "550.127.05", "12.4"),
        ("classic-550.54.14-h100x1.txt", "550.54.14", "12.4"),
        ("r610-610.43.02-b200-head.txt", "610.43.02", "13.3"),
        ("r610-610.57.04-rtx3090.txt", "610.57.04", "13.3"),
    ],
)
def test_banner_of_every_recorded_summary(fixture: str, driver: str, cuda: str) -> None:
    assert parse_banner((SMI / fixture).read_text()) == {"driver": driver, "cuda": cuda}


def test_every_recorded_summary_is_covered() -> None:
    """A new recording with a banner must be added to the table above."""
    with_banner = {p.name for p in SMI.glob("*.txt") if "| NVIDIA-SMI " in p.read_text()}
    assert with_banner == {
        "classic-550.127.05-a40x10.txt",
        "classic-550.54.14-h100x1.txt",
        "r610-610.43.02-b200-head.txt",
        "r610-610.57.04-rtx3090.txt",
    }


@pytest.mark.parametrize(
    ("banner", "driver", "cuda"),
    [
        # older generations, classic layout
        ("| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4     |",
         "470.256.02", "11.4"),
        ("| NVIDIA-SMI 535.183.01             Driver Version: 535.183.01   CUDA Version: 12.2  |",
         "535.183.01", "12.2"),
        ("| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |",
         "580.65.06", "13.0"),
        # no CUDA user-space library installed
        ("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: N/A |",
         "550.54.15", None),
        ("| NVIDIA-SMI 610.57.04   KMD Version: 610.57.04   CUDA UMD Version: N/A |",
         "610.57.04", None),
    ],
)  # fmt: skip
def test_banner_generations(banner: str, driver: str, cuda: str | None) -> None:
    assert parse_banner(banner) == {"driver": driver, "cuda": cuda}


@pytest.mark.parametrize(
    "fixture", ["driver-unreachable.txt", "nvml-version-mismatch.txt", "query-gpu-csv-exporter.txt"]
)
def test_output_without_banner_is_a_tool_error(fixture: str) -> None:
    with pytest.raises(ToolError, match="no driver/CUDA version"):
        parse_banner((SMI / fixture).read_text())


# --query-gpu=BASE_GPU_FIELDS --format=csv,noheader,nounits, values as nvidia-smi prints them
H100_CSV = (
    "0, GPU-ad1516b7-3ce3-59df-bd39-e0342e9309d7, NVIDIA H100 80GB HBM3, 550.54.15, 81559, "
    "0, 00000000:19:00.0, Enabled, Enabled, 0, 9.0\n"
    "1, GPU-d204673b-a37f-5c32-8e8e-e8de25ad7ab8, NVIDIA H100 80GB HBM3, 550.54.15, 81559, "
    "1024, 00000000:34:00.0, Disabled, Enabled, 3, 9.0\n"
)
# A consumer card: no ECC, persistence not reported
RTX_CSV = (
    "0, GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa, NVIDIA GeForce RTX 2080 SUPER, 466.63, 8192, "
    "[N/A], 00000000:01:00.0, [N/A], [N/A], [Not Supported], 7.5\n"
)


def test_gpu_csv_fields_and_order() -> None:
    """Fields not asked (health fields a driver rejected) are there, as None."""
    gpus = parse_gpu_csv(H100_CSV, BASE_GPU_FIELDS)
    assert [set(g) for g in gpus] == [set(GPU_FIELDS)] * 2
    assert all(gpus[1][name] is None for name in HEALTH_GPU_FIELDS)
    assert {name: gpus[1][name] for name in BASE_GPU_FIELDS} == {
        "index": "1",
        "uuid": "GPU-d204673b-a37f-5c32-8e8e-e8de25ad7ab8",
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "550.54.15",
        "memory.total": "81559",
        "memory.used": "1024",
        "pci.bus_id": "00000000:34:00.0",
        "persistence_mode": "Disabled",
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": "3",
        "compute_cap": "9.0",
    }


def test_gpu_csv_not_available_values_become_none() -> None:
    (gpu,) = parse_gpu_csv(RTX_CSV, BASE_GPU_FIELDS)
    assert gpu["persistence_mode"] is None
    assert gpu["ecc.mode.current"] is None
    assert gpu["ecc.errors.uncorrected.volatile.total"] is None
    assert gpu["compute_cap"] == "7.5"


def test_gpu_csv_blank_lines_and_empty_output() -> None:
    both = parse_gpu_csv(H100_CSV, BASE_GPU_FIELDS)
    assert parse_gpu_csv("\n" + H100_CSV + "\n\n", BASE_GPU_FIELDS) == both
    assert parse_gpu_csv("") == []


@pytest.mark.parametrize("fixture", ["query-gpu-csv-exporter.txt", "query-gpu-invalid-field.txt"])
def test_gpu_csv_of_another_shape_is_rejected(fixture: str) -> None:
    """Another field list, or the error text of an unknown field, must not parse as GPUs."""
    with pytest.raises(ToolError, match="unexpected nvidia-smi CSV line"):
        parse_gpu_csv((SMI / fixture).read_text())


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
    assert collector._nccl_wheel([str(tmp_path), str(tmp_path / "missing")]) is None


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
