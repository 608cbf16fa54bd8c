"""Logging set up once from -v/-vv: quiet libraries and no tracebacks by default, debug at -vv."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit import cli, logs
from tests.support.cli import CliRun, run_cli


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, threading.excepthook)
    ours = logging.getLogger("clusterkit").level
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    threading.excepthook = saved[2]
    logging.getLogger("clusterkit").setLevel(ours)


def _emit(verbosity: int) -> str:
    stream = io.StringIO()
    logs.configure(verbosity, stream)
    try:
        raise EOFError("socket closed")
    except EOFError:
        logging.getLogger("paramiko.transport").error("Exception (client): banner", exc_info=True)
        logging.getLogger("clusterkit.transport.ssh").warning("node1: lost\n  twice", exc_info=True)
    logging.getLogger("clusterkit.transport.connect").info("node1: connected")
    logging.getLogger("clusterkit.transport.ssh").debug("node1: exit 0")
    return stream.getvalue()


@pytest.mark.usefixtures("restore_logging")
def test_default_shows_only_clusterkit_warnings_on_one_line() -> None:
    assert _emit(0) == "clusterkit: warning: node1: lost twice\n"


@pytest.mark.usefixtures("restore_logging")
def test_v_adds_progress_but_no_library_record_or_traceback() -> None:
    lines = _emit(1).splitlines()
    assert lines == ["clusterkit: warning: node1: lost twice", "clusterkit: info: node1: connected"]


@pytest.mark.usefixtures("restore_logging")
def test_vv_shows_library_debug_records_and_tracebacks() -> None:
    text = _emit(2)
    assert "paramiko.transport: Exception (client): banner" in text
    assert "Traceback (most recent call last)" in text and "EOFError: socket closed" in text
    assert "clusterkit.transport.ssh: node1: exit 0" in text


@pytest.mark.usefixtures("restore_logging")
def test_configuring_again_replaces_the_handler() -> None:
    logs.configure(0, io.StringIO())
    logs.configure(2, io.StringIO())
    names = [h.get_name() for h in logging.getLogger().handlers]
    assert names.count("clusterkit-stderr") == 1


@pytest.mark.usefixtures("restore_logging")
def test_a_dead_thread_is_one_warning_line_without_traceback() -> None:
    stream = io.StringIO()
    logs.configure(0, stream)

    def fail() -> None:
        raise RuntimeError("worker broke")

    thread = threading.Thread(target=fail, name="kill-node2")
    thread.start()
    thread.join()
    assert stream.getvalue() == "clusterkit: warning: thread kill-node2 stopped: worker broke\n"


def _leaf_parsers(parser=None, path=()):
    parser = parser or cli.build_parser()
    children = [
        (name, child)
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, child in action.choices.items()
    ]
    if path:  # every command and step: `cost` runs itself and has a step (`cost prices`)
        yield path, parser
    for name, child in children:
        yield from _leaf_parsers(child, (*path, name))


def test_every_command_takes_v_and_vv() -> None:
    commands = dict(_leaf_parsers())
    expected = {("check",), ("bench",), ("cost",), ("cost", "prices", "update"), ("provision",)}
    expected.add(("image", "build"))
    assert expected <= set(commands)
    for path, parser in commands.items():
        assert "-v" in parser._option_string_actions, path
    assert cli.parse(["check", "-vv"]).verbose == 2
    assert cli.parse(["-v", "check"]).verbose == 1  # a command's absent -v keeps the top one
    assert cli.parse(["image", "lock", "-v"]).verbose == 1
    assert cli.parse(["check"]).verbose == 0


# --- a whole run: paramiko's thread fails on a server that is not SSH -------------------------


@pytest.fixture
def not_ssh(tmp_path: Path) -> Iterator[Path]:
    """An inventory whose one host accepts TCP and closes at once (no SSH banner)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        f"all:\n  hosts:\n    node1: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
    )
    yield inventory
    stop.set()
    server.close()
    thread.join(5)


def _check(inventory: Path, capfd: pytest.CaptureFixture[str], *flags: str) -> CliRun:
    """The run; nothing of it may reach the test process's own streams either (where the
    default thread hook prints a dying thread's traceback, and a stray handler writes)."""
    argv = ["check", str(inventory), "--format", "json", "--skip", "network,bench,image"]
    argv += ["--host-key-policy", "off", "--connect-timeout", "5", "--ssh-config", "/dev/null"]
    done = run_cli([*argv, *flags])
    assert tuple(capfd.readouterr()) == ("", "")
    return done


PHASE_LINE = re.compile(r"clusterkit: [\w-]+: .*in \d+\.\d s( \(.*\))?")


def without_phase_lines(stderr: str) -> list[str]:
    """stderr less the one line per finished phase that a piped run prints (see progress)."""
    return [line for line in stderr.splitlines() if not PHASE_LINE.fullmatch(line)]


@pytest.mark.usefixtures("restore_logging")
def test_a_failed_handshake_is_one_line_without_traceback(
    not_ssh: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    done = _check(not_ssh, capfd)
    assert done.status == 3
    # neither paramiko's records nor its thread's traceback
    assert without_phase_lines(done.stderr) == []
    assert re.search(r"^clusterkit: connect: 0 of 1 host ok in .*\(node1: ", done.stderr, re.M)
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "host.reachable")
    assert "\n" not in finding["message"]
    assert "node1" in finding["message"] and "protocol banner" in finding["message"]
    verbose = _check(not_ssh, capfd, "-v")
    lines = without_phase_lines(verbose.stderr)
    assert len(lines) == 1, verbose.stderr
    assert lines[0].startswith("clusterkit: info: node1: not connected (protocol)")


@pytest.mark.usefixtures("restore_logging")
def test_vv_shows_paramiko_debug_records_and_the_traceback(
    not_ssh: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    done = _check(not_ssh, capfd, "-vv")
    assert done.status == 3
    assert "clusterkit: debug: " in done.stderr
    assert "paramiko.transport: " in done.stderr
    assert "Traceback (most recent call last)" in done.stderr


@pytest.mark.usefixtures("restore_logging")
def test_a_refused_port_is_quiet_too(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        f"all:\n  hosts:\n    node1: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
    )
    done = _check(inventory, capfd)
    assert done.status == 3 and without_phase_lines(done.stderr) == []
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "host.reachable")
    assert "connection refused" in finding["message"]
