"""The launch plan: each node's torchrun argv and environment, from the checked settings."""

from __future__ import annotations

import dataclasses
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from clusterkit.launch.plan import (
    LaunchSettings,
    PlanNode,
    build_plan,
    ranks_per_node,
    render_print,
)
from clusterkit.rundir import RUN_DIR


def settings(**changes) -> LaunchSettings:
    base = LaunchSettings(
        nodes=(PlanNode("node1", "/venv/bin/python"), PlanNode("node2"), PlanNode("node3")),
        master_addr="10.1.0.11",
        master_port=29501,
        nproc_per_node=2,
        script=("train.py", "--name", "it's a run; rm -rf /"),
        interface="ens5",
        join_timeout=120,
        torch_version="2.13.0+cu124",
        run_id="abc",
    )
    return dataclasses.replace(base, **changes)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_static_rendezvous_per_node() -> None:
    plan = build_plan(settings())
    assert [node.host for node in plan] == ["node1", "node2", "node3"]
    for rank, node in enumerate(plan):
        argv = list(node.argv)
        assert flag(argv, "--nnodes") == "3"
        assert flag(argv, "--node-rank") == str(rank)
        assert flag(argv, "--nproc-per-node") == "2"
        assert flag(argv, "--master-addr") == "10.1.0.11"
        assert flag(argv, "--master-port") == "29501"
        assert flag(argv, "--max-restarts") == "0"
        assert flag(argv, "--rdzv-conf") == "timeout=120"
        assert "--rdzv-endpoint" not in argv and "--rdzv-backend" not in argv
        assert argv[-3:] == ["train.py", "--name", "it's a run; rm -rf /"]
    assert plan[0].argv[:3] == ("/venv/bin/python", "-m", "torch.distributed.run")
    assert plan[1].argv[0] == "python3"


def test_environment_names_what_was_checked() -> None:
    env = build_plan(settings())[2].env
    assert env["MASTER_ADDR"] == "10.1.0.11"
    assert env["MASTER_PORT"] == "29501"
    assert env["WORLD_SIZE"] == "6"
    assert env["NNODES"] == "3"
    assert env["NODE_RANK"] == "2"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ens5"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"


@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [
        ("2.1.2", ["NCCL_ASYNC_ERROR_HANDLING"], ["TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                                  "TORCH_NCCL_TRACE_BUFFER_SIZE",
                                                  "TORCH_FR_BUFFER_SIZE"]),
        ("2.4.1", ["TORCH_NCCL_ASYNC_ERROR_HANDLING"], ["TORCH_NCCL_TRACE_BUFFER_SIZE",
                                                        "TORCH_FR_BUFFER_SIZE"]),
        ("2.6.0+cu124", ["TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"],
         ["TORCH_FR_BUFFER_SIZE"]),
        ("2.8.0", ["TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"],
         ["TORCH_NCCL_TRACE_BUFFER_SIZE"]),
        (None, ["TORCH_FR_BUFFER_SIZE"], ["NCCL_ASYNC_ERROR_HANDLING"]),
    ],
)  # fmt: skip
def test_diagnostic_variables_follow_the_torch_version(version, present, absent) -> None:
    env = build_plan(settings(torch_version=version))[0].env
    assert all(name in env for name in present), env
    assert not any(name in env for name in absent), env


def test_no_interface_sets_no_ifname() -> None:
    env = build_plan(settings(interface=None))[0].env
    assert "NCCL_SOCKET_IFNAME" not in env and "GLOO_SOCKET_IFNAME" not in env


def test_image_wraps_torchrun_in_docker_run_with_the_image_flags() -> None:
    plan = build_plan(
        settings(
            image="registry.local/train@sha256:" + "a" * 64,
            image_run_args=("--ipc", "host", "--ulimit", "memlock=-1:-1"),
            gpus=True,
            workdir="/data/job",
        )
    )
    argv = list(plan[1].argv)
    assert argv[:3] == ["docker", "run", "--rm"]
    assert flag(argv, "--name") == plan[1].container == "clusterkit-launch-abc-n1"
    assert flag(argv, "--ipc") == "host"
    assert flag(argv, "--ulimit") == "memlock=-1:-1"
    assert flag(argv, "--network") == "host"
    assert flag(argv, "--gpus") == "all"
    assert flag(argv, "-w") == "/data/job"
    passed = {argv[i + 1] for i, word in enumerate(argv) if word == "-e"}
    assert set(plan[1].env) <= passed  # values come from the caller's environment
    image_at = argv.index("registry.local/train@sha256:" + "a" * 64)
    assert argv[image_at + 1 : image_at + 4] == ["python3", "-m", "torch.distributed.run"]


def test_image_network_flag_is_not_doubled() -> None:
    argv = list(build_plan(settings(image="img:1", image_run_args=("--network=host",)))[0].argv)
    assert "--network" not in argv


def test_env_file_and_script_survive_a_real_shell(tmp_path) -> None:
    """Values with quotes, `$` and spaces come out of `sh` exactly as planned."""
    node = build_plan(settings(extra_env={"ODD": "a 'b' $HOME \"c\""}))[1]
    env_path = tmp_path / "node2.env"
    env_path.write_text(node.env_file())
    script = node.script(str(env_path)).replace(
        f"exec {node.command_line}", f'env; printf "%s\\0" {node.command_line}'
    )
    done = subprocess.run(
        ["sh", "-c", script, "sh"], capture_output=True, text=True, check=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    env_text, _, argv_text = done.stdout.rpartition("\n")
    seen = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    # the env file made the run folder itself: fresh, private, under the node's TMPDIR
    folder = Path(seen["CLUSTERKIT_RUN_DIR"])
    assert folder.parent == tmp_path and folder.name.startswith("clusterkit-launch-abc-n1.")
    assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name, value in node.env.items():
        assert seen[name] == value.replace(RUN_DIR, str(folder))
    assert "TORCH_FR_DUMP_TEMP_FILE" in node.env  # a value that names the folder was tried
    assert argv_text.split("\0")[:-1] == [part.replace(RUN_DIR, str(folder)) for part in node.argv]
    assert f"{folder}/torchrun" in argv_text


def test_print_shows_every_node_env_and_command() -> None:
    text = render_print(build_plan(settings()), "out")
    assert text.count("### node") == 3
    assert "set -a; . out/node3.env; set +a" in text
    assert "--node-rank 2" in text
    assert shlex.quote("it's a run; rm -rf /") in text


def test_empty_plans_are_refused() -> None:
    with pytest.raises(ValueError):
        build_plan(settings(nodes=()))
    with pytest.raises(ValueError):
        build_plan(settings(script=()))


def cuda_facts(count: int, cuda: str | None = "12.4") -> dict:
    return {"torch": {"present": True, "cuda": cuda}, "gpus": {"count": count}}


def test_ranks_per_node() -> None:
    assert ranks_per_node(3, 8, {}) == 3
    facts = {"a": cuda_facts(8), "b": cuda_facts(4)}
    assert ranks_per_node(None, None, facts) == 4
    assert ranks_per_node(None, 8, facts) == 8
    cpu = {"a": cuda_facts(8, None), "b": cuda_facts(8, None)}
    assert ranks_per_node(None, 8, cpu) == 1  # a CPU build of torch: one gloo rank
    assert ranks_per_node(None, None, {}) == 1


def test_without_facts_the_inventory_expectation_gives_the_ranks() -> None:
    """--no-check --print has no facts: it planned one rank per node on 8-GPU nodes."""
    assert ranks_per_node(None, 8, {}) == 8
    assert ranks_per_node(2, 8, {}) == 2  # the flag still wins


def test_an_unchecked_plan_says_so_instead_of_naming_the_check() -> None:
    checked = build_plan(settings())[0].env_file()
    assert "as the check resolved it" in checked and "NOTHING WAS CHECKED" not in checked
    text = build_plan(settings(checked=False))[1].env_file()
    assert "# NOTHING WAS CHECKED (--no-check)" in text
    assert "check resolved" not in text and "the check found" not in text
    assert "the interface the check validated" not in text
    assert "clusterkit.master as the inventory writes it" in text
    assert render_print(build_plan(settings(checked=False))).count("NOTHING WAS CHECKED") == 3


def test_container_jobs_run_as_the_node_user_so_they_can_write_the_run_folder():
    """Images run as a non-root USER; the run folder belongs to whoever started the job."""
    import os

    from clusterkit.node.launch_processes import as_this_user

    argv = as_this_user(["docker", "run", "--rm", "img", "torchrun"])
    assert argv[:4] == ["docker", "run", "--user", f"{os.getuid()}:{os.getgid()}"]
    assert as_this_user(["torchrun", "x.py"]) == ["torchrun", "x.py"]
    given = ["docker", "run", "--user", "5:5", "img"]
    assert as_this_user(given) == given
