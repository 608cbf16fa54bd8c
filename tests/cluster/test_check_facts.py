"""What the nodes themselves hold, end to end: the job interpreter's own venv, no secret of the
node's environment, busy GPUs, the job's variables, a second interface, shared storage."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.cluster.test_check_spine import STATIC_ONLY, check, finding
from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster, node_python

SECRET = "nvapi-9fQ2kR7sW4tokenvalue"
SYSTEM_PYTHON = "/usr/bin/python3"


def fake_torch(site_packages: Path, version: str) -> None:
    """A package named torch whose files say `version` (a CPU build): what a wheel leaves."""
    package = site_packages / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text(f"__version__ = '{version}'\ncuda = None\nhip = None\n")
    (package / "__init__.py").write_text("from .version import __version__\n")


def base_interpreter(root: Path) -> Path:
    """A base Python install of its own (its prefix is `root`, its stdlib the system's), so
    that torch can be put in the *base* site-packages without touching the machine's."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    real = Path(subprocess.check_output([SYSTEM_PYTHON, "-c", "import sys; print(sys.executable)"],
                                        text=True).strip()).resolve()  # fmt: skip
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    shutil.copy2(real, root / "bin" / "python3")
    stdlib = subprocess.check_output(
        [SYSTEM_PYTHON, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"], text=True
    ).strip()
    (root / "lib" / version).symlink_to(stdlib)
    return root / "bin" / "python3"


def site_of(python: Path) -> Path:
    """The first site folder `python` itself uses (full site processing, as a job runs)."""
    out = subprocess.check_output(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"], text=True
    )
    return Path(out.strip())


def imported_torch(node, python: Path) -> str | None:
    """What `import torch` gives the job's interpreter on the node, over SSH: version or None."""
    code = "import torch; print(torch.__version__)"
    done = subprocess.run(
        node.ssh_argv(str(python), "-c", f"'{code}'"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        assert "No module named 'torch'" in done.stderr, done.stderr
        return None
    return done.stdout.strip()


@pytest.fixture
def venvs(tmp_path: Path) -> dict[str, Path]:
    """A base install with torch 2.50.0 and two venvs over it: one with torch 2.99.0, one
    with none. The job's interpreter is the venv's python."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} is needed to build a base install")
    base = base_interpreter(tmp_path / "base")
    fake_torch(site_of(base), "2.50.0")
    made = {}
    for name, torch in (("other", "2.99.0"), ("none", None)):
        target = tmp_path / f"venv-{name}"
        subprocess.run([str(base), "-m", "venv", "--without-pip", str(target)], check=True,
                       timeout=120)  # fmt: skip
        if torch:
            fake_torch(site_of(target / "bin" / "python"), torch)
        made[name] = target / "bin" / "python"
    return made


def test_facts_are_what_the_venv_imports(
    cluster: NetCluster, tmp_path: Path, venvs: dict[str, Path]
) -> None:
    node1, node2 = cluster.nodes[0], cluster.nodes[1]
    assert imported_torch(node1, venvs["other"]) == "2.99.0"
    assert imported_torch(node2, venvs["none"]) is None
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        host_vars={
            node1.name: {"ansible_python_interpreter": str(venvs["other"])},
            node2.name: {"ansible_python_interpreter": str(venvs["none"])},
        },
    )
    status, report, _ = check(inventory)
    assert status == 1
    torch_on = {name: host["facts"]["torch"] for name, host in report["hosts"].items()}
    assert torch_on[node1.name]["version"] == "2.99.0"  # the venv's, not the base's 2.50.0
    assert torch_on[node1.name]["path"].startswith(str(venvs["other"].parent.parent))
    assert torch_on[node2.name]["present"] is False  # the base's torch is not the job's
    assert finding(report, "torch.present", "fail")["hosts"] == [node2.name]


def test_a_secret_in_the_node_environment_never_reaches_the_report(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """The job's interpreter runs with NVIDIA_API_KEY and friends set on the node."""
    wrapper = tmp_path / "python-with-secrets"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export NVIDIA_API_KEY={SECRET} NCCL_TOKEN={SECRET} CUDA_PASSWORD={SECRET}\n"
        "export NCCL_SOCKET_IFNAME=eth0\n"
        f'exec {node_python()} "$@"\n'
    )
    wrapper.chmod(0o755)
    inventory = cluster.inventory(tmp_path / "inv.yaml", python_interpreter=str(wrapper))
    written = tmp_path / "report.json"
    status, report, _ = check(inventory)
    assert status == 0, [f for f in report["findings"] if f["status"] in ("fail", "error")]
    assert SECRET not in json.dumps(report)
    env = report["hosts"]["node1"]["facts"]["env"]
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"  # the environment was read, the secret left out
    assert "NVIDIA_API_KEY" not in env
    done = run_cli(
        ["check", str(inventory), *STATIC_ONLY, "--format", "json", "-o", str(written)],
        timeout=120,
    )
    assert done.status == 0, done.stderr
    assert SECRET not in written.read_text() + done.stdout + done.stderr
    assert json.loads(written.read_text())["hosts"]["node2"]["facts"]["env"]


def test_a_gpu_held_by_a_leftover_process_fails_naming_it(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    cluster.nodes[2].set_gpus(processes=[{"gpu": 6, "pid": 4242, "name": "python",
                                          "used_memory": 30000}])  # fmt: skip
    cluster.nodes[1].set_gpus(nvlink=[26.562] * 17 + [None])
    status, report, _ = check(cluster_inventory)
    assert status == 1
    busy = finding(report, "gpu.busy", "fail")
    assert busy["hosts"] == ["node3"]
    assert "GPU 6: pid 4242 (python, 30000 MiB)" in busy["message"]
    nvlink = report["hosts"]["node2"]["facts"]["nvlink"]
    assert nvlink["active_links"] == [17] * 8 and nvlink["present"] is True
    assert report["hosts"]["node1"]["facts"]["nvlink"]["present"] is False


def test_job_variables_and_a_second_interface_on_the_nodes(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node2's job environment points elsewhere; node3 has a second routable interface."""
    node2, node3 = cluster.nodes[1], cluster.nodes[2]
    wrapper = tmp_path / "python-with-job-vars"
    wrapper.write_text(
        "#!/bin/sh\nexport MASTER_ADDR=10.99.0.1 MASTER_PORT=1234 WORLD_SIZE=3\n"
        f'exec {node_python()} "$@"\n'
    )
    wrapper.chmod(0o755)
    dummy = ["ip", "-n", node3.netns, "link"]
    subprocess.run([*dummy, "add", "ck-extra0", "type", "veth", "peer", "name", "ck-extra1"],
                   check=True, timeout=20)  # fmt: skip
    try:
        subprocess.run(["ip", "-n", node3.netns, "addr", "add", "192.168.213.3/24", "dev",
                        "ck-extra0"], check=True, timeout=20)  # fmt: skip
        for end in ("ck-extra1", "ck-extra0"):  # a second NIC (a veth pair: no dummy module)
            subprocess.run([*dummy, "set", end, "up"], check=True, timeout=20)
        inventory = cluster.inventory(
            tmp_path / "inv.yaml",
            clusterkit={"interface": None},
            host_vars={node2.name: {"ansible_python_interpreter": str(wrapper)}},
        )
        status, report, _ = check(inventory)
    finally:
        subprocess.run([*dummy, "del", "ck-extra0"], check=False, timeout=20)
    assert status == 1
    job = finding(report, "env.job-vars", "fail")
    assert job["hosts"] == [node2.name]
    assert "MASTER_ADDR=10.99.0.1" in job["message"] and "MASTER_PORT=1234" in job["message"]
    assert "WORLD_SIZE=3 (checked: 4)" in job["message"]  # 4 nodes x 1 gloo rank (CPU torch)
    ifname = finding(report, "env.socket-ifname", "warn")
    assert ifname["hosts"] == [node3.name]
    assert "NCCL_SOCKET_IFNAME=eth0" in ifname["message"]


def test_shared_path_token_is_read_back_on_every_node_but_one(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """Nodes share this machine's filesystem; node3 gets its own folder mounted over one path
    (`ip netns exec` bind-mounts /etc/netns/NS/X over /etc/X for the node's sshd)."""
    node3 = cluster.nodes[2]
    name = f"ck-shared-{uuid.uuid4().hex[:8]}"
    common, own = Path("/etc") / name, Path("/etc/netns") / node3.netns / name
    shared_tmp = tmp_path / "shared"
    for folder in (common, own, shared_tmp):
        folder.mkdir(parents=True)
    try:
        node3.stop_sshd()
        node3.start_sshd()  # its sessions now see `own` at /etc/<name>
        inventory = cluster.inventory(
            tmp_path / "inv.yaml", clusterkit={"shared_paths": [str(shared_tmp), str(common)]}
        )
        status, report, _ = check(inventory)
    finally:
        own.rmdir()
        node3.stop_sshd()
        node3.start_sshd()
        common.rmdir()
    assert status == 1
    shared = finding(report, "storage.shared", "fail")
    assert shared["hosts"] == [node3.name]
    assert str(common) in shared["message"] and str(shared_tmp) not in shared["message"]
    assert finding(report, "storage.free")["status"] in ("ok", "warn")
    reads = report["details"]["storage"]["reads"]
    assert reads["node1"][str(shared_tmp)]["free_bytes"] > 0
    assert not list(shared_tmp.iterdir())  # the token file was removed again


def test_gpus_hidden_by_the_job_environment_fail_the_node(
    cluster: NetCluster, tmp_path: Path
) -> None:
    node2 = cluster.nodes[1]
    wrapper = tmp_path / "python-two-gpus"
    wrapper.write_text(f'#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=0,1\nexec {node_python()} "$@"\n')
    wrapper.chmod(0o755)
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        host_vars={node2.name: {"ansible_python_interpreter": str(wrapper)}},
    )
    status, report, _ = check(inventory)
    assert status == 1
    visible = finding(report, "gpu.visible", "fail")
    assert visible["hosts"] == [node2.name]
    assert "CUDA_VISIBLE_DEVICES exposes 2 of the 8 GPUs" in visible["message"]
