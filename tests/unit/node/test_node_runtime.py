"""The node-side runtime (node/prelude.py) and the control side's one way to run a node
script and say why it gave no result (transport/nodescript.py), on real processes of this
machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterkit import framing
from clusterkit.errors import TransportError
from clusterkit.node import prelude
from clusterkit.node.prelude import ToolError, find_tool, read_interfaces, run_tool
from clusterkit.probe.runner import probe_host
from clusterkit.transport.base import CommandResult, Deadline
from clusterkit.transport.local import LocalTransport
from clusterkit.transport.nodescript import (
    NodeScriptError,
    ScriptFailure,
    compose,
    decode_result,
    failure_of,
    run_node_script,
    shipment,
)

USES_PRELUDE = "import sys, time\nfrom clusterkit.node.prelude import emit\n"


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up, what
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """No such process, or only its zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --- the prelude --------------------------------------------------------------------------


def test_run_tool_kills_the_tool_and_its_children_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"timeout: sh did not answer within 0.5 s") as caught:
        run_tool(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; sleep 60"], 0.5)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 10
    child = int(pid_file.read_text())
    wait_for(lambda: gone(child), 20, "the tool's own child outlived the timeout")


def test_run_tool_reports_absent_and_failing_tools() -> None:
    with pytest.raises(ToolError, match="absent: no-such-tool-xyz not found") as absent:
        run_tool(["no-such-tool-xyz"], 5)
    assert absent.value.kind == "absent"
    with pytest.raises(ToolError, match="sh exited 3: boom") as failed:
        run_tool(["sh", "-c", "echo boom; exit 3"], 5)
    assert failed.value.kind == "failed"
    with pytest.raises(ToolError, match="sh exited 2: on stderr"):
        run_tool(["sh", "-c", "echo on stdout; echo on stderr >&2; exit 2"], 5)
    assert run_tool(["sh", "-c", "echo fine"], 5) == "fine\n"


def test_find_tool_looks_on_path_then_in_sbin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o755)
    (tmp_path / "data").write_text("")
    monkeypatch.setenv("PATH", f"{tmp_path / 'missing'}:{tmp_path}")
    assert find_tool("tool") == str(tmp_path / "tool")
    assert find_tool("data") is None and find_tool("no-such-tool") is None
    assert find_tool(str(tmp_path / "tool")) == str(tmp_path / "tool")  # a path as it is
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    (sbin / "iptables-save").write_text("#!/bin/sh\n")
    (sbin / "iptables-save").chmod(0o755)
    monkeypatch.setattr(prelude, "SBIN_DIRS", (str(sbin),))
    assert find_tool("iptables-save") == str(sbin / "iptables-save")  # not on PATH


def test_read_interfaces_from_sysfs_and_ip() -> None:
    interfaces, error = read_interfaces(10)
    assert error is None
    lo = next(item for item in interfaces if item["name"] == "lo")
    assert lo["up"] is True and isinstance(lo["mtu"], int) and "LOOPBACK" in lo["flags"]
    assert {"family": "inet", "address": "127.0.0.1", "prefixlen": 8} in lo["addresses"]
    assert [item["name"] for item in interfaces] == sorted(item["name"] for item in interfaces)


def test_read_interfaces_without_ip_keeps_sysfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(prelude, "SBIN_DIRS", ())
    interfaces, error = read_interfaces(10)
    assert error == "absent: ip not found"
    lo = next(item for item in interfaces if item["name"] == "lo")
    assert lo["up"] is True and lo["flags"] is None and lo["addresses"] == []


def test_a_signal_takes_the_tools_down_with_the_script(tmp_path: Path) -> None:
    """TERM to the script (the control side's kill of its group) kills the tools, which lead
    groups of their own, and the script exits 143 at once."""
    pid_file = tmp_path / "tool.pid"
    script = tmp_path / "script.py"
    script.write_text(
        compose(
            "import threading, time\n"
            "from clusterkit.node.prelude import run_tool, stop_tools_on_signals\n"
            "stop_tools_on_signals()\n"
            f"argv = ['sh', '-c', 'echo $$ > {pid_file}; exec sleep 300']\n"
            "threading.Thread(target=run_tool, args=(argv, 300), daemon=True).start()\n"
            "time.sleep(300)\n"
        )
    )
    process = subprocess.Popen([sys.executable, "-S", str(script)])
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 30, "no tool")
        tool = int(pid_file.read_text())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 143
        wait_for(lambda: gone(tool), 20, "the tool outlived the script")
    finally:
        process.kill()
        process.wait()


# --- running a node script: its result or the one reason ----------------------------------


def run_script(text: str, *args: str, seconds: float = 30, **options) -> dict:
    return run_node_script(
        LocalTransport("node1"),
        compose(USES_PRELUDE + text),
        list(args),
        interpreter=options.pop("interpreter", sys.executable),
        deadline=Deadline.after(seconds),
        what="the test script",
        **options,
    )


def failure(text: str, **options) -> NodeScriptError:
    with pytest.raises(NodeScriptError) as caught:
        run_script(text, **options)
    assert isinstance(caught.value, TransportError) and caught.value.host == "node1"
    return caught.value


def test_the_result_comes_back_through_noise_with_the_arguments() -> None:
    text = "print('a banner')\nemit({'args': sys.argv[1:], 'main': __name__})\nprint('after')\n"
    assert run_script(text, '{"a": 1}', "two") == {"args": ['{"a": 1}', "two"], "main": "__main__"}


def test_a_script_killed_at_the_deadline_is_a_timeout() -> None:
    error = failure("time.sleep(60)\n", seconds=1.5)
    assert (error.failure, error.kind) == ("timeout", "timeout")
    assert "the test script did not finish in time (killed at the deadline)" in error.detail


def test_an_exit_without_a_result_names_the_status_and_stderr() -> None:
    error = failure("sys.stderr.write('disk full\\n')\nsys.exit(4)\n")
    assert (error.failure, error.kind) == ("exit", "protocol")
    assert error.detail == "the test script failed (exit 4): disk full"


def test_a_missing_interpreter_is_named() -> None:
    error = failure("emit({})\n", interpreter="/opt/nowhere/python3")
    assert error.detail == (
        "the test script failed (exit 127): /opt/nowhere/python3 not found on the node "
        "(set ansible_python_interpreter)"
    )


def test_exit_0_without_a_frame_is_no_result() -> None:
    error = failure("print('only chatter')\n")
    assert error.failure == "no-result"
    assert error.detail == "the test script ended without a result"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("sys.stdout.write('\\n--clusterkit-begin--\\n{\"a\": ')\n", "result frame is cut short"),
        ("print('\\n--clusterkit-begin--\\nnot json\\n--clusterkit-end--')\n", "is not JSON"),
        ("emit([1, 2])\n", "a result that is not an object"),
    ],
)
def test_a_broken_frame_is_named(text: str, reason: str) -> None:
    error = failure(text)
    assert error.failure == "broken" and reason in error.detail


def test_the_scripts_own_error_report_is_its_message() -> None:
    error = failure("emit({'error': 'no permission to read /etc/shadow'})\nsys.exit(1)\n")
    assert (error.failure, error.detail) == ("error", "no permission to read /etc/shadow")
    # where "error" is one of the facts (the image check), the payload comes back as it is
    kept = run_script("emit({'error': 'half done', 'present': True})\n", error_report=False)
    assert kept == {"error": "half done", "present": True}


def test_the_bootstrap_refuses_a_script_cut_short_on_stdin() -> None:
    data = compose(USES_PRELUDE + "emit({})\n").encode()
    argv, _ = shipment(sys.executable, data + b"# more than was sent", [])
    result = LocalTransport("node1").run(argv, stdin=data, deadline=Deadline.after(30))
    assert result.exit_code == 1 and b"cut short on stdin" in result.stderr
    assert failure_of(result, "x").message == (
        "x failed (exit 1): clusterkit: the node script was cut short on stdin"
    )


def _bootstrapped(text: bytes, code_of: bytes, magic: str) -> dict:
    """Run the bootstrap on `text`, shipping the bytecode of `code_of` under `magic`."""
    _, shipped = shipment(sys.executable, code_of, [])
    code = shipped[len(code_of) :]
    argv, _ = shipment(sys.executable, text, [])
    argv[5] = str(len(code))
    argv[7] = magic
    result = LocalTransport("node1").run(argv, stdin=text + code, deadline=Deadline.after(30))
    return decode_result(result.stdout, "the test script")


def test_a_node_with_this_bytecode_runs_the_shipped_code_and_any_other_the_text() -> None:
    """The text and the code differ here, so the answer says which one the node ran."""
    text = compose(USES_PRELUDE + "emit({'ran': 'text', 'args': sys.argv[1:]})\n").encode()
    other = compose(USES_PRELUDE + "emit({'ran': 'code', 'args': sys.argv[1:]})\n").encode()
    magic = shipment(sys.executable, text, [])[0][7]
    assert _bootstrapped(text, other, magic) == {"ran": "code", "args": []}
    assert _bootstrapped(text, other, "0d0d0a0d") == {"ran": "text", "args": []}


def test_the_shipped_code_is_the_script_and_a_node_still_reports_a_syntax_error() -> None:
    argv, stdin = shipment(sys.executable, b"emit(1)\n", ["x"])
    assert argv[4:7] == ["8", str(len(stdin) - 10), "2"] and stdin.endswith(b"x\0")
    # nothing added where the script does not compile: the node says why
    assert shipment(sys.executable, b"def broken(:\n", [])[1] == b"def broken(:\n"
    error = failure("def broken(:\n    pass\n")
    assert error.failure == "exit" and "SyntaxError" in error.detail
    # the shipped code keeps the name a traceback shows
    error = failure("raise ValueError('boom')\n")
    assert 'File "clusterkit-node-script"' in error.detail and "ValueError: boom" in error.detail


def test_a_scripts_arguments_travel_on_stdin_never_in_its_command_line() -> None:
    """Every user of a node reads command lines in /proc: a launch token or a run folder
    named there could be raced or forged. The script still sees its arguments, whatever
    they hold (empty, spaces, newlines, non-UTF-8 bytes)."""
    secret = "clusterkit-" + "5e" * 8
    args = [secret, "", "two words", "line\nbreak", "caf\udce9"]
    text = compose(USES_PRELUDE + "emit({'args': sys.argv[1:]})\n").encode()
    argv, stdin = shipment(sys.executable, text, args)
    assert not any(secret in part for part in argv) and secret.encode() in stdin
    answer = LocalTransport("node1").run(argv, stdin=stdin, deadline=Deadline.after(30))
    assert decode_result(answer.stdout, "the test script") == {
        "args": [secret, "", "two words", "line\nbreak", "caf\udce9"]
    }


def test_failure_of_a_finished_conversation() -> None:
    """The network stage's steps: a report read up to END, or why the process ended."""
    assert decode_result(b"motd" + framing.encode({"phase": "facts"}), "facts step") == {
        "phase": "facts"
    }
    with pytest.raises(ScriptFailure, match=r"^network stage failed on the node: boom$"):
        decode_result(framing.encode({"error": "network stage failed on the node: boom"}), "x")
    ended = CommandResult("n", 0, b"", b"")
    assert failure_of(ended, "mesh step").message == "mesh step ended without a result"
    killed = CommandResult("n", -9, b"", b"")
    assert (
        failure_of(killed, "bound step").message
        == "bound step failed (exit -9): killed by signal 9"
    )
    lost = CommandResult("n", 0, b"x" * 10, b"", truncated=True)
    assert failure_of(lost, "x").failure == "broken"


def test_the_probe_runs_through_run_node_script() -> None:
    transport = LocalTransport("node1", env={**os.environ, "PATH": "/usr/bin:/bin"})
    facts = probe_host(transport, "/usr/bin/python3", {}, Deadline.after(60))
    assert facts["hostname"]["hostname"] and "lo" in facts["network"]["interfaces"]
    with pytest.raises(TransportError, match="the probe failed \\(exit 127\\): /nowhere/py"):
        probe_host(transport, "/nowhere/py", {}, Deadline.after(60))


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_interface_kinds_and_routes_read_from_real_sysfs() -> None:
    """Kinds come from sysfs, not names: a bridge, a veth pair, a tap and a tun named alike
    in a throwaway network namespace (`ip netns exec` mounts its own /sys/class/net)."""
    netns = f"ckkind{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True, timeout=20)
    try:
        for argv in (
            ["link", "add", "ckx0", "type", "bridge"],
            ["link", "add", "ckx1", "type", "veth", "peer", "name", "ckx2"],
            ["tuntap", "add", "ckx3", "mode", "tap"],
            ["tuntap", "add", "ckx4", "mode", "tun"],
            ["addr", "add", "10.77.0.1/24", "dev", "ckx1"],
            ["link", "set", "ckx1", "up"],
            ["link", "set", "ckx2", "up"],
        ):
            subprocess.run(["ip", "-n", netns, *argv], check=True, timeout=20)
        script = (
            "import json\n"
            "from clusterkit.node.collector import collect_network\n"
            "print(json.dumps(collect_network({})))\n"
        )
        out = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-c", script],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False, timeout=20)
    network = json.loads(out)
    kinds = {name: iface["kind"] for name, iface in network["interfaces"].items()}
    assert kinds == {
        "lo": "loopback", "ckx0": "bridge", "ckx1": "virtual", "ckx2": "virtual",
        "ckx3": "tun", "ckx4": "tun",
    }  # fmt: skip
    assert network["routes"] == [{"dst": "10.77.0.0/24", "dev": "ckx1"}]


def test_a_hardware_interface_reads_as_a_device() -> None:
    """This machine's own NICs (a `device` link in sysfs), where it has any."""
    names = [
        n for n in os.listdir("/sys/class/net") if os.path.exists(f"/sys/class/net/{n}/device")
    ]
    if not names:
        pytest.skip("no hardware network interface here")
    kinds = {item["name"]: item["kind"] for item in read_interfaces(10)[0]}
    assert {kinds[name] for name in names} <= {"device", "bond", "vlan", "wlan"}
