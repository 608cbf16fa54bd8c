"""Image specs, locks and rendering: pure parts, no engine, no network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from clusterkit.errors import ConfigError
from clusterkit.image import lock as lockmod
from clusterkit.image.render import drifted, labels, rendered_files, spec_tag, write_rendered
from clusterkit.image.spec import load_spec

IMAGES = Path(__file__).resolve().parents[3] / "images"


def _report(torch_version: str, requires: list[str], extra: list[str] = ()) -> list[dict[str, Any]]:
    """The shape of `pip install --dry-run --report` entries (fields the lock reads)."""

    def entry(name: str, version: str, requires_dist: list[str] | None = None) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "version": version, "requires_dist": requires_dist},
            "download_info": {
                "url": f"https://files.example/{name}-{version}-py3-none-any.whl",
                "archive_info": {"hashes": {"sha256": "ab" * 32}},
            },
        }

    entries = [entry("torch", torch_version, requires)]
    for item in [*requires, *extra]:
        name, _, version = item.partition(" (==")
        if version:
            entries.append(entry(name, version.split(")")[0]))
    return entries


CU124 = [
    'nvidia-cuda-runtime-cu12 (==12.4.127) ; platform_system == "Linux"',
    'nvidia-cudnn-cu12 (==9.1.0.70) ; platform_system == "Linux"',
    'nvidia-nccl-cu12 (==2.21.5) ; platform_system == "Linux"',
    "filelock",
]


@pytest.fixture
def cuda_spec(tmp_path: Path):
    shutil.copy(IMAGES / "train-cu124" / "image.yaml", tmp_path / "image.yaml")
    return load_spec(tmp_path)


def test_shipped_specs_load_and_locks_are_current():
    for name in ("train-cu124", "cpu-torch"):
        spec = load_spec(IMAGES / name)
        assert lockmod.stale_reason(spec) is None, name
        assert drifted(spec, lockmod.read_lock(spec)) == [], name


def test_shipped_cuda_lock_pins_what_torch_2_5_1_requires():
    lock = lockmod.read_lock(load_spec(IMAGES / "train-cu124"))
    assert lock["torch"]["cuda"] == "12.4"
    assert lock["torch"]["nccl"] == "2.21.5"
    assert lock["torch"]["cudnn"] == "9.1.0.70"
    assert lock["torch"]["min_driver"] == "550.54.14"
    assert lock["torch"]["driver_floor"] == "525"
    assert lock["base"]["digest"].startswith("sha256:")
    assert all(len(p["sha256"]) == 64 for p in lock["packages"])


def test_torch_facts_come_from_the_wheel_requires_dist(cuda_spec):
    facts = lockmod.torch_facts(cuda_spec, _report("2.5.1", CU124))
    assert (facts["cuda"], facts["cudnn"], facts["nccl"]) == ("12.4", "9.1.0.70", "2.21.5")
    assert facts["min_driver"] == "550.54.14"


def test_lock_refuses_a_wheel_built_for_another_cuda(cuda_spec):
    other = [r.replace("12.4.127", "12.6.77") for r in CU124]
    with pytest.raises(ConfigError, match=r"built for CUDA 12\.6"):
        lockmod.torch_facts(cuda_spec, _report("2.5.1", other))


def test_lock_refuses_an_nccl_other_than_the_spec_expects(cuda_spec):
    other = [r.replace("2.21.5", "2.20.5") for r in CU124]
    with pytest.raises(ConfigError, match=r"pins NCCL 2\.20\.5"):
        lockmod.torch_facts(cuda_spec, _report("2.5.1", other))


def test_cpu_variant_refuses_a_cuda_wheel(tmp_path: Path):
    shutil.copy(IMAGES / "cpu-torch" / "image.yaml", tmp_path / "image.yaml")
    spec = load_spec(tmp_path)
    with pytest.raises(ConfigError, match="variant is cpu"):
        lockmod.torch_facts(spec, _report("2.13.0", CU124))
    assert lockmod.torch_facts(spec, _report("2.13.0+cpu", ["filelock"]))["cuda"] is None


# torch 2.10 and later on PyPI (the default index, a CUDA 13 build with no +cu local tag) name
# their CUDA runtime through a meta-package with extras, as in torch 2.11.0+cu130's METADATA:
#   cuda-toolkit[cublas,cudart,...,nvtx]==13.0.2 ; platform_system == "Linux"
# and cuda-toolkit's own extras pull nvidia-cuda-runtime, nvidia-cublas, ... (versions here as
# pip resolved them for torch 2.11.0; the shape is what matters).
CU130_VIA_TOOLKIT = [
    "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,"
    'nvtx]==13.0.2 ; platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3 ; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.13.0.50 ; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.28.9 ; platform_system == "Linux"',
    "filelock",
]


def _default_index_report(torch_version: str) -> list[dict[str, Any]]:
    """torch from the default index, and what pip resolved with it."""
    report = _report(torch_version, CU130_VIA_TOOLKIT)
    toolkit = next(e for e in report if e["metadata"]["name"] == "torch")
    toolkit = {**toolkit, "metadata": {"name": "cuda-toolkit", "version": "13.0.2",
               "requires_dist": ['nvidia-cuda-runtime==13.0.96.*; extra == "cudart"']}}  # fmt: skip
    runtime = {**toolkit, "metadata": {"name": "nvidia-cuda-runtime", "version": "13.0.96"}}
    others = [
        {**toolkit, "metadata": {"name": name, "version": version}}
        for name, version in (("cuda-bindings", "13.0.3"), ("nvidia-cudnn-cu13", "9.13.0.50"),
                              ("nvidia-nccl-cu13", "2.28.9"))
    ]  # fmt: skip
    return [report[0], toolkit, runtime, *others]


def test_cpu_variant_refuses_a_cuda_build_that_pulls_cuda_in_through_a_meta_package(
    tmp_path: Path,
):
    """Issue 37: `image lock images/cpu-torch` wrote torch 2.13.0 (CUDA 13) and its CUDA
    packages into a `variant: cpu` lock: no +cu tag and no nvidia-cuda-runtime pin on torch."""
    shutil.copy(IMAGES / "cpu-torch" / "image.yaml", tmp_path / "image.yaml")
    spec = load_spec(tmp_path)
    with pytest.raises(ConfigError, match=r"CUDA 13\.0 build but the variant is cpu"):
        lockmod.torch_facts(spec, _default_index_report("2.13.0"))
    # torch pinning no runtime itself, its other CUDA packages still give it away
    only_cudnn = _report("2.13.0", ['nvidia-cudnn-cu13==9.13.0.50 ; platform_system == "Linux"'])
    with pytest.raises(ConfigError, match="variant is cpu"):
        lockmod.torch_facts(spec, only_cudnn)


def test_cpu_variant_takes_an_nvidia_package_the_spec_asks_for_itself(tmp_path: Path):
    shutil.copy(IMAGES / "cpu-torch" / "image.yaml", tmp_path / "image.yaml")
    spec = load_spec(tmp_path)
    report = _report("2.13.0+cpu", ["filelock (==3.16.1)"], extra=["nvidia-ml-py (==12.560.30)"])
    assert lockmod.torch_facts(spec, report)["cuda"] is None


def test_a_cuda_variant_reads_cuda_from_the_toolkit_meta_package(tmp_path: Path):
    text = (IMAGES / "train-cu124" / "image.yaml").read_text().replace("cu124", "cu130")
    (tmp_path / "image.yaml").write_text(re.sub(r"(?m)^\s*nccl:.*$", "", text))
    spec = load_spec(tmp_path)
    facts = lockmod.torch_facts(spec, _default_index_report("2.13.0"))
    assert (facts["cuda"], facts["nccl"], facts["min_driver"]) == ("13.0", "2.28.9", "580.65.06")


def test_manylinux_platforms_cover_older_tags():
    tags = lockmod.manylinux_platforms("2.28")
    assert tags[0] == "manylinux_2_28_x86_64"
    assert {"manylinux2014_x86_64", "manylinux1_x86_64", "manylinux_2_17_x86_64"} <= set(tags)


def test_stale_lock_is_detected_after_a_spec_change(tmp_path: Path):
    for name in ("image.yaml", "image.lock.json"):
        shutil.copy(IMAGES / "train-cu124" / name, tmp_path / name)
    assert lockmod.stale_reason(load_spec(tmp_path)) is None
    text = (tmp_path / "image.yaml").read_text().replace("numpy==1.26.4", "numpy==2.0.0")
    (tmp_path / "image.yaml").write_text(text)
    assert "spec changed" in (lockmod.stale_reason(load_spec(tmp_path)) or "")


def test_render_is_deterministic_and_drift_is_caught(tmp_path: Path):
    for name in ("image.yaml", "image.lock.json"):
        shutil.copy(IMAGES / "train-cu124" / name, tmp_path / name)
    spec = load_spec(tmp_path)
    lock = lockmod.read_lock(spec)
    assert rendered_files(spec, lock) == rendered_files(load_spec(tmp_path), lock)
    write_rendered(spec, lock)
    assert drifted(spec, lock) == []
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("--require-hashes", ""))
    assert drifted(spec, lock) == ["Dockerfile"]


def test_dockerfile_pins_base_hashes_constraints_and_labels(cuda_spec):
    lock = lockmod.read_lock(load_spec(IMAGES / "train-cu124"))
    text = rendered_files(cuda_spec, lock)["Dockerfile"]
    assert f"FROM nvidia/cuda:12.4.1-base-ubuntu22.04@{lock['base']['digest']}" in text
    assert "--require-hashes" in text and "PIP_CONSTRAINT=/etc/pip/constraint.txt" in text
    assert "syntax=" not in text and "--mount" not in text  # classic builder only
    found = labels(cuda_spec, lock)
    assert found["org.opencontainers.image.created"] == "1970-01-01T00:00:00Z"
    assert found["io.clusterkit.nccl"] == "2.21.5"
    assert found["io.clusterkit.min-driver"] == "550.54.14"
    assert found["org.opencontainers.image.version"] == spec_tag(cuda_spec, lock)
    constraints = rendered_files(cuda_spec, lock)["constraints.txt"]
    assert "nvidia-nccl-cu12==2.21.5" in constraints and "--hash" not in constraints


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("variant: cu124", "variant: rocm"), "torch.variant: 'rocm' must be"),
        (("image: nvidia/cuda:12.4.1-base-ubuntu22.04", "image: a@sha256:00"), "base.image: "),
        (('python: "3.10"', 'python: "three"'), "python: 'three' must be"),
        (("network: infiniband", "network: carrier-pigeon"), "network: 'carrier-pigeon' must"),
        (("  ipc: host", "  ipc: host\n  shm_bytes: 1"), "runtime.shm_bytes: unknown key"),
    ],
)
def test_bad_specs_name_the_file_line_and_key(tmp_path: Path, edit, message):
    text = (IMAGES / "train-cu124" / "image.yaml").read_text()
    assert edit[0] in text
    text = text.replace(edit[0], edit[1])
    marker = edit[1].splitlines()[-1].strip()
    line = next(n for n, row in enumerate(text.splitlines(), 1) if marker in row)
    (tmp_path / "image.yaml").write_text(text)
    with pytest.raises(ConfigError) as error:
        load_spec(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'image.yaml'}:{line}: {message}")


def test_spec_hash_ignores_location_but_not_content(tmp_path: Path):
    one, two = tmp_path / "a", tmp_path / "b"
    for folder in (one, two):
        folder.mkdir()
        shutil.copy(IMAGES / "train-cu124" / "image.yaml", folder / "image.yaml")
    assert load_spec(one).sha256() == load_spec(two).sha256()
    (two / "image.yaml").write_text((two / "image.yaml").read_text().replace("16g", "8g") + "\n")
    (two / "image.yaml").write_text(
        (two / "image.yaml").read_text().replace("memlock: unlimited", "memlock: default")
    )
    assert load_spec(one).sha256() != load_spec(two).sha256()


def test_shipped_specs_use_public_bases_pinned_by_digest():
    """Anyone can build them: no loopback registry, a digest pin on every base."""
    for name in ("train-cu124", "cpu-torch"):
        spec = load_spec(IMAGES / name)
        assert not spec.base_image.startswith(("127.", "localhost")), name
        assert spec.base_digest and spec.base_digest.startswith("sha256:"), name


def test_cpu_image_pins_apt_and_runs_as_a_user():
    spec = load_spec(IMAGES / "cpu-torch")
    text = rendered_files(spec, lockmod.read_lock(spec))["Dockerfile"]
    install = next(row for row in text.splitlines() if "apt-get install" in row)
    for pin in ("ca-certificates=20230311+deb12u1", "python3=3.11.2-1+b1", "python3-venv="):
        assert pin in install
    assert "hadolint ignore=DL3008" not in text  # every package is pinned
    assert " python3 " not in install + " "  # the implicit name gave way to the pin
    rows = text.splitlines()
    user = rows.index("USER 1000:1000")
    assert "useradd --create-home --uid 1000" in text
    assert all(not row.startswith("RUN") for row in rows[user:])  # nothing after needs root


def test_every_shipped_spec_pins_every_apt_package():
    """A rebuild installs the same packages: each name in each spec's `apt-get install` has
    an exact version, and nothing asks hadolint to look away (DL3008)."""
    specs = sorted(IMAGES.glob("*/image.yaml"))
    assert {path.parent.name for path in specs} >= {"cpu-torch", "train-cu124"}
    for path in specs:
        spec = load_spec(path.parent)
        text = rendered_files(spec, lockmod.read_lock(spec))["Dockerfile"]
        installs = [row for row in text.splitlines() if "apt-get install" in row]
        assert installs, path
        for row in installs:
            names = [word.strip("'") for word in row.split("install", 1)[1].split()]
            packages = [word for word in names if not word.startswith("-") and word != "\\"]
            assert packages and all("=" in word for word in packages), (path, packages)
        assert "DL3008" not in text, path
    cuda = rendered_files(*_with_lock("train-cu124"))["Dockerfile"]
    assert "rdma-core=39.0-1" in cuda and "'python3=3.10.6-1~22.04.1'" in cuda


def _with_lock(name: str):
    spec = load_spec(IMAGES / name)
    return spec, lockmod.read_lock(spec)


def test_unpinned_apt_is_marked_for_hadolint(tmp_path: Path):
    text = (IMAGES / "train-cu124" / "image.yaml").read_text()
    (tmp_path / "image.yaml").write_text(re.sub(r"\napt:\n(  - .*\n)+", "\n", text, count=1))
    spec = load_spec(tmp_path)
    assert spec.apt == () and spec.tags == ("2.5.1-cu124",)
    dockerfile = rendered_files(spec, lockmod.read_lock(load_spec(IMAGES / "train-cu124")))
    assert "hadolint ignore=DL3008" in dockerfile["Dockerfile"]
    assert " rdma-core " in dockerfile["Dockerfile"]  # the implicit InfiniBand package, bare


def test_oci_labels_come_from_the_spec_with_defaults(tmp_path: Path, cuda_spec):
    lock = lockmod.read_lock(load_spec(IMAGES / "train-cu124"))
    found = labels(cuda_spec, lock)
    assert found["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert found["org.opencontainers.image.vendor"] == "clusterkit"
    assert "org.opencontainers.image.source" not in found  # no source: no invented URL
    text = (IMAGES / "train-cu124" / "image.yaml").read_text()
    text = text.replace("licenses: Apache-2.0\nvendor: clusterkit\n", "")
    text += (
        "source: https://git.example.org/ml/train\nlicenses: MIT OR (BSD-3-Clause AND Apache-2.0)\n"
    )
    text += "vendor: Example ML\n"
    (tmp_path / "image.yaml").write_text(text)
    found = labels(load_spec(tmp_path), lock)
    assert found["org.opencontainers.image.source"] == "https://git.example.org/ml/train"
    assert found["org.opencontainers.image.url"] == "https://git.example.org/ml/train"
    assert found["org.opencontainers.image.licenses"] == "MIT OR (BSD-3-Clause AND Apache-2.0)"
    assert found["org.opencontainers.image.vendor"] == "Example ML"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("licenses: Apache-2.0 OR", "licenses: 'Apache-2.0 OR' must be an SPDX"),
        ("licenses: GPL; rm -rf /", "licenses: 'GPL; rm -rf /' must be an SPDX"),
        ("url: ftp://example.org/x", "url: 'ftp://example.org/x' must be a https or http URL"),
        ('vendor: "ACME $(id)"', "vendor: 'ACME $(id)' may not hold"),
    ],
)
def test_bad_oci_label_values_are_refused(tmp_path: Path, line: str, message: str):
    text = (IMAGES / "train-cu124" / "image.yaml").read_text()
    text = text.replace("licenses: Apache-2.0\nvendor: clusterkit\n", "") + line + "\n"
    (tmp_path / "image.yaml").write_text(text)
    with pytest.raises(ConfigError) as error:
        load_spec(tmp_path)
    assert message in str(error.value)
