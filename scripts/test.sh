#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian 12 / Ubuntu 24.04 machine (as root), then
# run them all. Python packages go into the project's own virtualenv (.venv), never into the
# system Python, which refuses them (PEP 668). The cluster tests build real hosts (network
# namespaces with sshd and iptables), a Docker engine and a loopback registry; they need root,
# which CI has.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${CLUSTERKIT_VENV:-.venv}
SYSTEM_PACKAGES=(openssh-server openssh-client iptables iproute2 procps psmisc kmod
                 docker.io docker-registry debootstrap ca-certificates
                 slurmctld slurmd slurm-client munge
                 prometheus  # promtool and a server: the metrics tests (docs/report.md)
                 chromium  # headless browser: the HTML report's tests (docs/report.md)
                 fish)  # its completion script is run, not only read

if [ "$(id -u)" = 0 ]; then
  missing=()
  for package in "${SYSTEM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" \
      || missing+=("$package")
  done
  if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
    missing+=(python3-venv)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
else
  echo "not root: cluster and docker tests will be skipped" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check 'torch==2.13.0' -e '.[test]' \
  2> >(grep -v -e '^WARNING: Location' -e 'is ignored' >&2)
"$VENV/bin/python" -m pip check

# The venv's tools (ansible-inventory, ansible-playbook, hadolint, py-spy...) first on PATH,
# as an activated venv has them: tests that cannot find a tool skip instead of testing it.
export PATH="$PWD/$VENV/bin:$PATH"
"$VENV/bin/python" -m ruff check clusterkit tests benchmarks
"$VENV/bin/python" -m ruff format --check clusterkit tests benchmarks
"$VENV/bin/python" -m mypy  # files and strictness: [tool.mypy] in pyproject.toml
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
