"""Which nodes and settings `check --slurm*` takes, and its errors (no Slurm needed)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.cli.requests import CheckRun, Connection
from clusterkit.commands.common import check_plan
from clusterkit.environment import Environment
from clusterkit.errors import ConfigError, UsageError
from clusterkit.report import Report
from clusterkit.settings.loader import load_inventory
from clusterkit.slurm.check import failing_hosts, slurm_stages
from clusterkit.slurm.stages import InStep, SrunConnectStage
from clusterkit.slurm.target import SlurmRequest, SlurmTarget, slurm_target
from clusterkit.stages.lists import check_stages
from clusterkit.transport.srun import SrunSession
from tests.support.cli import run_cli

NO_SLURM = {"PATH": "/nonexistent"}  # no scontrol: our own hostlist parser


def test_allocation_nodes_master_and_interpreter() -> None:
    env = {"SLURM_JOB_NODELIST": "gpu[01-02],login1", "SLURM_JOB_ID": "42", **NO_SLURM}
    target = slurm_target(SlurmRequest(allocation=True), None, env)
    assert [h.name for h in target.inventory.hosts] == ["gpu01", "gpu02", "login1"]
    assert target.job_id == "42" and target.source == "SLURM_JOB_NODELIST"
    assert target.inventory.settings.master == "gpu01"
    assert {h.python_interpreter for h in target.inventory.hosts} == {sys.executable}


def test_settings_file_gives_pins_ports_and_interpreter(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "clusterkit:\n  master: n2\n  master_port: 29600\n  expect:\n    driver: '>=550'\n"
        "ansible_python_interpreter: /opt/venv/bin/python\n"
    )
    target = slurm_target(SlurmRequest(nodes="n[1-2]", settings=str(path)), None, NO_SLURM)
    settings = target.inventory.settings
    assert (settings.master, settings.master_port) == ("n2", 29600)
    assert settings.expect.driver == ">=550"
    assert target.job_id is None  # outside an allocation
    assert target.inventory.hosts[0].python_interpreter == "/opt/venv/bin/python"


def test_bad_settings_files_are_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("clusterkit:\n  master_port: 99999\n")
    with pytest.raises(Exception, match="master_port"):
        slurm_target(SlurmRequest(nodes="n1", settings=str(path)), None, NO_SLURM)
    path.write_text("clusterkat: {}\n")
    with pytest.raises(ConfigError, match="unknown key 'clusterkat'"):
        slurm_target(SlurmRequest(nodes="n1", settings=str(path)), None, NO_SLURM)


def test_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not inside a Slurm allocation"):
        slurm_target(SlurmRequest(allocation=True), None, NO_SLURM)
    with pytest.raises(UsageError, match="cannot be combined"):
        slurm_target(SlurmRequest(allocation=True, nodes="n1"), None, NO_SLURM)
    with pytest.raises(UsageError, match="not a single node name"):
        slurm_target(SlurmRequest(nodes="n1,-oProxyCommand=x"), None, NO_SLURM)
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  hosts:\n    n1: {}\n")
    with pytest.raises(UsageError, match="n2, not in inventory"):
        slurm_target(SlurmRequest(nodes="n[1-2]"), load_inventory(inventory), NO_SLURM)


def test_inventory_alongside_supplies_hosts_and_settings(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    n1: {ansible_host: 10.0.0.1}\n    n2: {ansible_host: 10.0.0.2}\n"
        "  vars:\n    clusterkit: {master_port: 29501}\n"
    )
    target = slurm_target(SlurmRequest(nodes="n2,n1"), load_inventory(inventory), NO_SLURM)
    assert [(h.name, h.address) for h in target.inventory.hosts] == [
        ("n2", "10.0.0.2"),
        ("n1", "10.0.0.1"),
    ]
    assert target.inventory.settings.master == "n2"  # the first Slurm node
    assert target.inventory.settings.master_port == 29501


@pytest.mark.parametrize("command", ["check", "bench"])
def test_cli_exit_2_without_allocation_and_for_misplaced_flags(command: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for argv, message in (
        (["--slurm"], "not inside a Slurm allocation"),
        (["--transport", "srun"], "--transport srun needs Slurm nodes"),
        (["--settings", "x.yaml"], "--settings goes with --slurm"),
    ):
        done = run_cli([command, *argv], env=env, timeout=60)
        assert done.status == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr


def test_exclude_list_names_failing_hosts_in_order() -> None:
    findings = [
        Finding("parity.driver", Status.FAIL, "x", hosts=["n3"]),
        Finding("gpu.ecc", Status.ERROR, "x", hosts=["n1"]),
        Finding("env.clock", Status.WARN, "x", hosts=["n2"]),
    ]
    report = Report(
        command="check", inventory=None, findings=findings, hosts={}, stages={}, details={},
        text_blocks={}, strict=False, seconds=0.0,
    )  # fmt: skip
    assert failing_hosts(report, ["n1", "n2", "n3"]) == ["n1", "n3"]


def test_every_stage_that_acts_on_nodes_runs_in_a_step(tmp_path: Path) -> None:
    """A node stage left unwrapped would fall back to one srun step per node."""
    if shutil.which("srun") is None:
        pytest.skip("srun not installed (apt-get install slurm-client)")
    target = slurm_target(SlurmRequest(nodes="n[1-2]"), None, NO_SLURM)
    target = SlurmTarget(target.inventory, "7", target.source, "srun")  # inside job 7
    run = CheckRun(connection=Connection(forks=4), timeout=10.0)
    environ = {"PATH": os.environ.get("PATH", os.defpath)}  # where srun was found
    stages = slurm_stages(
        target, check_stages(check_plan(run, Environment()), target.inventory), environ
    )
    kinds = {stage.name: type(stage) for stage in stages}
    assert kinds.pop("connect") is SrunConnectStage
    assert kinds.pop("static") is not InStep
    assert kinds and all(kind is InStep for kind in kinds.values()), kinds
    assert {"probe", "storage", "network", "image", "bench"} <= set(kinds)


def test_an_srun_session_takes_single_node_names_only() -> None:
    """A hostlist or a comma in a name would make more tasks than the layout has names, and
    shift every node's output onto another's name."""
    for bad in ("gpu[1-2]", "a,b"):
        with pytest.raises(UsageError, match=r"srun: .* is not a single node name"):
            SrunSession([bad], job_id="1", env={})


def test_the_transport_is_srun_inside_the_allocation_that_holds_every_node() -> None:
    inside = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_ID": "9", **NO_SLURM}
    assert slurm_target(SlurmRequest(nodes="n[1-2]"), None, inside).transport == "srun"
    assert slurm_target(SlurmRequest(nodes="n[1-4]"), None, inside).transport == "ssh"
    chosen = SlurmRequest(nodes="n[1-2]", transport="ssh")
    assert slurm_target(chosen, None, inside).transport == "ssh"
    assert slurm_target(SlurmRequest(nodes="n[1-2]"), None, NO_SLURM).transport == "ssh"
