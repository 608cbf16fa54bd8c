"""Run `ansible-playbook` on the shipped playbooks: find them, build the argv, and run it as a
bounded subprocess whose output streams straight through. Ansible is GPL-3.0 and a separate
tool: it is only ever executed, never imported."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusterkit.errors import ConfigError, ExternalToolError
from clusterkit.status import ExitStatus

PLAYBOOK = "site.yml"
PLAYBOOKS_ENV = "CLUSTERKIT_PLAYBOOKS"
# Time ansible-playbook gets to stop after SIGTERM before its process group is killed.
STOP_GRACE_SECONDS = 10.0


class AnsibleMissing(ExternalToolError):
    """ansible-playbook is not on PATH: the user must install it, nothing ran (exit 2)."""

    exit_status = ExitStatus.USAGE


@dataclass(frozen=True)
class PlaybookRun:
    """What `clusterkit provision` asks of ansible-playbook."""

    inventory: str
    playbook: Path
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    limit: str | None = None
    check: bool = False
    diff: bool = False
    extra: tuple[str, ...] = ()  # passed through verbatim (-e VARS, -v)


def playbook_candidates(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where site.yml may live, in order: $CLUSTERKIT_PLAYBOOKS (in `environ`; None: this
    process's), inside the installed package (package data), beside the package in a source
    checkout."""
    package = Path(__file__).resolve().parent.parent  # the clusterkit package
    candidates = [package / "playbooks", package.parent / "playbooks"]
    override = (os.environ if environ is None else environ).get(PLAYBOOKS_ENV)
    if override:
        candidates.insert(0, Path(override))
    return candidates


def find_playbook(environ: Mapping[str, str] | None = None) -> Path:
    candidates = playbook_candidates(environ)
    for folder in candidates:
        if (folder / PLAYBOOK).is_file():
            return folder / PLAYBOOK
    searched = ", ".join(str(folder) for folder in candidates)
    raise ConfigError(
        f"playbooks/{PLAYBOOK} not found (searched {searched})",
        hint=f"set {PLAYBOOKS_ENV} to the playbooks folder of a clusterkit checkout",
    )


def ansible_playbook(environ: Mapping[str, str] | None = None) -> str:
    """ansible-playbook on the PATH of `environ` (None: this process's)."""
    search = None if environ is None else environ.get("PATH", os.defpath)
    path = shutil.which("ansible-playbook", path=search)
    if path is None:
        raise AnsibleMissing("ansible-playbook is not installed (not on PATH)", hint=install_hint())
    return path


def install_hint() -> str:
    """The one command that installs ansible-playbook where this clusterkit runs: into its
    own virtualenv (the README's .venv), or with pip for this Python."""
    here = Path(sys.executable).parent
    if (here / "ansible-playbook").is_file():
        return f"it is in {here}: put that folder on PATH (`source {here}/activate`)"
    command = f"{shlex.quote(sys.executable)} -m pip install ansible-core"
    if sys.prefix != sys.base_prefix:  # a virtualenv: its bin folder must be on PATH too
        return f"install it: `{command}` (the `provision` extra), then put {here} on PATH"
    return f"install it: `{command}` (or your distribution's ansible-core package)"


def build_argv(run: PlaybookRun, executable: str = "ansible-playbook") -> list[str]:
    """The ansible-playbook command line; every value is its own argv item (no shell)."""
    argv = [executable, "-i", run.inventory, str(run.playbook)]
    if run.tags:
        argv += ["--tags", ",".join(run.tags)]
    if run.skip_tags:
        argv += ["--skip-tags", ",".join(run.skip_tags)]
    if run.limit:
        argv += ["--limit", run.limit]
    if run.check:
        argv.append("--check")
    if run.diff:
        argv.append("--diff")
    return argv + list(run.extra)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole process group (ssh children included), SIGKILL after the grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=STOP_GRACE_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _release_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def run_playbook(
    argv: Sequence[str],
    timeout: float,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run ansible-playbook in `environ` (None: this process's) with its output on our
    stdout/stderr (the process's descriptors); its exit code.

    It gets its own process group: Ctrl-C or the deadline stop it and every ssh it started.
    """
    # A stop signal (Ctrl-C, SIGTERM, SIGHUP) landing inside Popen() would unwind before we
    # hold the child, and leave it running: hold those signals back until we do. The child
    # gets them back before it starts ansible-playbook.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if environ is None else dict(environ),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_release_stop_signals,
        )
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one that came meanwhile lands here
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(process)
        raise ExternalToolError(
            f"ansible-playbook ran past {timeout:.0f} s and was stopped",
            hint="raise --timeout for long runs such as driver installs",
        ) from None
    except BaseException:  # KeyboardInterrupt above all: nothing may outlive us
        _stop(process)
        raise
