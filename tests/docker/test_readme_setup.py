"""The README's first set-up command, verbatim, on a stock Debian 12.

The container is the debootstrapped bookworm base (tests/support/docker_env.py) with only what
the README asks of the OS: python3 and python3-venv. The system Python there is
externally managed (PEP 668), so an install that bypasses the project venv fails, as it does
for a user. The checkout is copied in as git sees it (tracked and untracked, not ignored).
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import docker
import pytest

from tests.support import docker_env

REPO = Path(__file__).resolve().parents[2]
# This machine reaches its package registries through the CA bundle it trusts (pip's `cert`
# setting here); the container trusts the same bundle, as a machine on this network would.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CONTAINER_CA_BUNDLE = "/opt/host-ca/ca-certificates.crt"  # apt's ca-certificates owns the other
README = REPO / "README.md"
OS_PACKAGES = "python3 python3-venv"


def readme_setup_commands() -> list[str]:
    """The shell lines of the README's set-up block (comments dropped), in order."""
    text = README.read_text()
    section = text[text.index("## Set-up") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README's Set-up section has no ```sh block"
    return [
        line.strip()
        for line in block.group(1).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_readme_names_two_commands_and_ci_runs_the_second() -> None:
    commands = readme_setup_commands()
    assert len(commands) == 2, commands
    ci = (REPO / ".ci" / "run").read_text()
    assert "exec bash scripts/test.sh" in ci and commands[1] == "bash scripts/test.sh"


def checkout_tarball(target: Path) -> Path:
    """The working tree as a user's checkout holds it (tracked and untracked, not ignored),
    under tmp/clusterkit, with this machine's CA bundle beside it."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    archive = target / "checkout.tar"
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, (item.decode() for item in listed)):
            if (REPO / name).exists():
                tar.add(REPO / name, arcname=f"tmp/clusterkit/{name}", recursive=False)
        if HOST_CA_BUNDLE.is_file():
            tar.add(HOST_CA_BUNDLE, arcname=CONTAINER_CA_BUNDLE.lstrip("/"))
    return archive


@pytest.mark.slow
def test_readme_first_command_runs_verbatim_on_stock_debian(
    engine: str, client: docker.DockerClient, tmp_path: Path
) -> None:
    first = readme_setup_commands()[0]
    base = docker_env.ensure_base_image()
    archive = checkout_tarball(tmp_path)
    script = (
        "set -e\n"
        "export DEBIAN_FRONTEND=noninteractive\n"
        "apt-get update -qq -o APT::Update::Error-Mode=any >/dev/null\n"
        f"apt-get install -y -qq --no-install-recommends {OS_PACKAGES} >/dev/null\n"
        # The premise: this Python refuses installs outside a venv.
        "ls /usr/lib/python3*/EXTERNALLY-MANAGED >/dev/null\n"
        "cd /tmp/clusterkit\n"
        "if python3 -m pip --version >/dev/null 2>&1; then echo 'unexpected system pip'; fi\n"
        f"{first}\n"
    )
    # The host's network: a user's machine reaches its mirrors directly (no bridge, no NAT).
    container = client.containers.create(
        base,
        ["bash", "-c", script],
        working_dir="/",
        network_mode="host",
        environment={"PIP_CERT": CONTAINER_CA_BUNDLE} if HOST_CA_BUNDLE.is_file() else {},
    )
    try:
        with archive.open("rb") as data:
            container.put_archive("/", data.read())
        container.start()
        result = container.wait(timeout=900)
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    # The install succeeded and `clusterkit check` of the container itself ran to a verdict:
    # PASS, or FAIL for what a bare machine lacks (torch for the job's Python), never an error.
    status = result["StatusCode"]
    assert status in (0, 1), output[-4000:]
    assert "unexpected system pip" not in output
    assert re.search(rf"verdict: (PASS|FAIL) \(exit {status}\)", output), output[-4000:]
    assert re.search(r"OK\s+host.reachable\s+localhost", output), output[-4000:]
