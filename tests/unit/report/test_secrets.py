"""Secrets stay out of reports: the probe collects variables by name, reports are redacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import framing
from clusterkit.checks.model import Finding, Status
from clusterkit.environment import Environment
from clusterkit.facts import ENV_NAMES
from clusterkit.redact import REDACTED, is_secret_name, redact
from clusterkit.report import emit
from clusterkit.report.model import Report
from tests.support.nodescripts import write_composed

TOKEN = "nvapi-Zq3xT0pS3cr3tV4lu3"


@pytest.mark.parametrize(
    "name",
    ["NVIDIA_API_KEY", "HF_TOKEN", "NCCL_SECRET", "REGISTRY_PASSWORD", "DB_PASS",
     "AWS_CREDENTIALS", "WANDB_API_KEY"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["NCCL_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "PYTHONPATH", "key"]
)
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_replaces_values_in_dicts_lists_and_assignments() -> None:
    data = {
        "env": {"NVIDIA_API_KEY": TOKEN, "NCCL_SOCKET_IFNAME": "eth0"},
        "run_args": ["--gpus", "all", "-e", f"HF_TOKEN={TOKEN}", "-e", "NCCL_DEBUG=INFO"],
        "message": f"set NVIDIA_API_KEY={TOKEN}, NCCL_P2P_DISABLE=1",
    }
    clean = redact(data)
    assert TOKEN not in json.dumps(clean)
    assert clean["env"] == {"NVIDIA_API_KEY": REDACTED, "NCCL_SOCKET_IFNAME": "eth0"}
    assert clean["run_args"][3] == f"HF_TOKEN={REDACTED}"
    assert clean["run_args"][5] == "NCCL_DEBUG=INFO"
    assert clean["message"] == f"set NVIDIA_API_KEY={REDACTED}, NCCL_P2P_DISABLE=1"
    assert data["env"]["NVIDIA_API_KEY"] == TOKEN  # a copy: the facts themselves are kept


def _report_with_secret() -> Report:
    facts = {"env": {"NVIDIA_API_KEY": TOKEN, "NCCL_P2P_DISABLE": "1"}}
    finding = Finding(
        "env.nccl-debug-vars",
        Status.WARN,
        f"set: NCCL_P2P_DISABLE=1 NVIDIA_API_KEY={TOKEN}",
        hosts=["n1"],
        found={"n1": f"NVIDIA_API_KEY={TOKEN}"},
    )
    return Report(
        command="check",
        inventory=None,
        findings=[finding],
        hosts={"n1": {"reachable": True, "address": "10.0.0.1", "error": None, "facts": facts}},
        details={"image": {"env": {"NVIDIA_API_KEY": TOKEN}}},
    )


@pytest.mark.parametrize("fmt", ["json", "junit", "text"])
def test_no_format_prints_or_writes_a_secret(fmt: str, tmp_path) -> None:
    env = Environment()
    emit(_report_with_secret(), fmt, None, env)
    assert TOKEN not in env.stdout.getvalue() + env.stderr.getvalue()
    assert fmt == "text" or REDACTED in env.stdout.getvalue()
    target = tmp_path / "report.out"
    env = Environment()
    emit(_report_with_secret(), fmt, str(target), env)
    assert TOKEN not in target.read_text() + env.stdout.getvalue() + env.stderr.getvalue()


def test_probe_collects_only_the_variables_the_checks_read(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "NVIDIA_API_KEY": TOKEN,
        "NCCL_SOME_TOKEN": TOKEN,
        "TORCH_HUB_TOKEN": TOKEN,
        "CUDA_PASSWORD": TOKEN,
        "NCCL_SOCKET_IFNAME": "eth0",
        "MASTER_PORT": "29500",
    }
    done = subprocess.run(
        [sys.executable, "-S", str(write_composed("collector", tmp_path)),
         json.dumps({"env_names": ENV_NAMES})],  # what probe_host sends
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert TOKEN not in done.stdout
    facts = framing.decode(done.stdout.encode())["facts"]
    assert facts["env"] == {"NCCL_SOCKET_IFNAME": "eth0", "MASTER_PORT": "29500"}
    assert set(facts["env"]) <= set(ENV_NAMES)
