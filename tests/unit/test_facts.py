"""The probe's facts are typed (clusterkit/facts.py) and checked once, where they arrive.

The types must describe what the real collector sends, so the real collector runs here,
on this machine and with the GPU stand-in on its PATH (health fields, processes, NVLink);
a node's facts of another shape fail that host with the path of the bad value; and a
check reading a fact the types do not have is a mypy error.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clusterkit.errors import TransportError
from clusterkit.facts import (
    PROBE_VERSION,
    HostFacts,
    MalformedFacts,
    collected,
    error_of,
    parse_facts,
)
from clusterkit.framing import encode
from clusterkit.node import collector
from clusterkit.probe.runner import probe_host
from clusterkit.transport.base import Deadline
from clusterkit.transport.local import LocalTransport
from tests.support.netcluster import FAKE_NVIDIA_SMI, gpu_inventory

ROOT = Path(__file__).resolve().parents[2]
RECORDED = sorted((ROOT / "tests" / "fixtures" / "facts").glob("*.json"))


def _probe(env: dict[str, str] | None = None, options: dict[str, object] | None = None):
    transport = LocalTransport(env=env)
    return probe_host(transport, sys.executable, options or {}, Deadline.after(90))


def test_the_collector_sends_the_version_the_types_describe() -> None:
    assert collector.PROBE_VERSION == PROBE_VERSION


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_facts_have_the_typed_shape(path: Path) -> None:
    facts = parse_facts(json.loads(path.read_text()))
    assert collected(facts.get("system")).get("kernel")


def test_the_real_collector_on_this_machine_has_the_typed_shape() -> None:
    facts = _probe()  # probe_host parses strictly: an undeclared key would raise
    assert collected(facts.get("python")).get("version") == ".".join(map(str, sys.version_info[:3]))
    assert collected(facts.get("network")).get("interfaces")


def _gpu_node(tmp_path: Path) -> dict[str, str]:
    """A PATH whose nvidia-smi is the stand-in with 4 GPUs, NVLink, a process and a field the
    driver rejects: every optional part of the gpus, gpu_processes and nvlink sections."""
    gpus = gpu_inventory("node1", 0, 4, "H100 80GB HBM3", ecc_errors=0, persistence=True,
                         memory_mib=None)  # fmt: skip
    for gpu in gpus:
        gpu["nvlink"] = [26.562, None, 26.562]
    gpus[1]["remapped_rows.pending"] = "Yes"
    state = {"mode": "normal", "banner": "classic", "driver": "550.54.15", "cuda": "12.4",
             "gpus": gpus, "unknown_fields": ["temperature.memory"],
             "processes": [{"gpu": 0, "pid": 4242, "name": "python, train.py",
                            "used_memory": 2048}]}  # fmt: skip
    state_path = tmp_path / "gpu-state.json"
    state_path.write_text(json.dumps(state))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "nvidia-smi"
    stand_in = shlex.join([sys.executable, "-S", "-E", str(FAKE_NVIDIA_SMI), str(state_path)])
    wrapper.write_text(f'#!/bin/sh\nexec {stand_in} "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_the_real_collector_on_a_gpu_node_has_the_typed_shape(tmp_path: Path) -> None:
    facts = _probe(_gpu_node(tmp_path))
    gpus = collected(facts.get("gpus"))
    assert gpus.get("count") == 4 and gpus.get("fields_unknown") == ["temperature.memory"]
    assert gpus["devices"][1].get("remapped_rows.pending") == "Yes"
    processes = collected(facts.get("gpu_processes")).get("processes", [])
    assert [(p.get("pid"), p.get("name")) for p in processes] == [(4242, "python, train.py")]
    nvlink = collected(facts.get("nvlink"))
    assert nvlink.get("active_links") == [2, 2, 2, 2] and "errors" in nvlink


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda f: f["gpus"].update(count="8"), "facts.gpus.count: int expected, got '8'"),
        (lambda f: f["gpus"].update(count=True), "facts.gpus.count: int expected, got True"),
        (lambda f: f["gpus"]["devices"][0].update(index=0), "facts.gpus.devices[0].index"),
        (lambda f: f["network"]["interfaces"]["eth0"].update(up=True), "unknown key 'up'"),
        (lambda f: f.update(gpu={}), "facts: unknown key 'gpu'"),
        (lambda f: f["limits"]["memlock"].pop("soft"), "facts.limits.memlock: no 'soft'"),
        (lambda f: f["kernel_log"]["events"].append("Xid 79"), "facts.kernel_log.events[0]"),
        (lambda f: f["kernel_log"]["events"].append({"kind": "oops"}), "'oops' not allowed"),
        (lambda f: f.update(env={"NCCL_DEBUG": 1}), "facts.env.NCCL_DEBUG: str expected"),
        (lambda f: f.update(torch=[]), "facts.torch: an object expected, got []"),
    ],
)
def test_facts_of_another_shape_name_the_bad_value(edit, named: str) -> None:
    facts = json.loads((ROOT / "tests" / "fixtures" / "facts" / "healthy-h100.json").read_text())
    facts["network"] = {"interfaces": {"eth0": {"mtu": 1500, "addresses": []}}, "routes": None}
    edit(facts)
    with pytest.raises(MalformedFacts, match=re.escape(named)):
        parse_facts(facts)


def test_a_failed_collector_is_an_error_section_and_reads_as_empty() -> None:
    facts = parse_facts({"gpus": {"present": True, "error": "nvidia-smi: exit 9"}})
    assert error_of(facts.get("gpus")) == "nvidia-smi: exit 9"
    assert collected(facts.get("gpus")) == {} and collected(facts.get("torch")) == {}


def _hostile_interpreter(tmp_path: Path, result: object) -> str:
    """A `python3` on the node that answers with this result frame, whatever it is sent."""
    frame = tmp_path / "frame"
    frame.write_bytes(encode(result))
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\ncat >/dev/null\ncat {shlex.quote(str(frame))}\n")
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ({"probe_version": PROBE_VERSION, "facts": {"gpus": {"count": "all"}}},
         "malformed facts: facts.gpus.count: int expected, got 'all'"),
        ({"probe_version": PROBE_VERSION, "facts": {"torch": {"present": True, "x\x1b[2J": 1}}},
         "malformed facts: facts.torch: unknown key 'x\\x1b[2J'"),
        ({"probe_version": 99, "facts": {}}, f"facts of version 99, not {PROBE_VERSION}"),
        ({"probe_version": PROBE_VERSION}, "facts: an object expected, got None"),
    ],
)  # fmt: skip
def test_a_node_sending_facts_of_another_shape_fails_its_probe(
    tmp_path: Path, result: object, why: str
) -> None:
    """A node that controls its interpreter can answer anything: the host fails with the
    path of the bad value (escaped), and no check ever sees those facts."""
    python = _hostile_interpreter(tmp_path, result)
    started = time.monotonic()
    with pytest.raises(TransportError) as raised:
        probe_host(LocalTransport(host="node9"), python, {}, Deadline.after(30))
    assert raised.value.host == "node9"
    assert why in raised.value.detail
    assert "\x1b" not in raised.value.detail
    assert time.monotonic() - started < 30


def test_a_renamed_fact_is_a_type_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the typing is for: a check that reads a fact the collector does not send (here
    `driver_version` on the gpus section, which only devices have) fails mypy, through
    `.get` too (scripts/mypy_closed_facts.py), which plain mypy lets through as `object`."""
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "reader.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from clusterkit.facts import HostFacts, collected

            def driver(f: HostFacts) -> str | None:
                return collected(f.get("gpus")).get("driver_version")

            def count(f: HostFacts) -> int:
                return collected(f.get("gpus")).get("count", 0)

            def section(f: HostFacts) -> object:
                return f.get("gpu")
            """
        )
    )
    monkeypatch.chdir(ROOT)  # clusterkit is found from its checkout, as `mypy` in CI finds it
    out, _, status = api.run(
        [str(snippet), "--config-file", str(ROOT / "pyproject.toml"), "--strict",
         "--no-incremental", "--cache-dir", os.devnull, "--follow-imports", "silent"]
    )  # fmt: skip
    assert status == 1, out
    assert 'TypedDict "GpuFacts" has no key "driver_version"' in out
    assert 'TypedDict "HostFacts" has no key "gpu"' in out
    assert out.count("[typeddict-item]") == 2, out
    assert "reader.py:8:" not in out  # `count` reads a real fact: no error there


def test_typed_facts_stay_plain_json() -> None:
    """Reports, --check-output and the launch's report reader see the same JSON as before."""
    facts: HostFacts = parse_facts({"memory": {"total_bytes": 1, "available_bytes": None}})
    assert json.loads(json.dumps(facts)) == {"memory": {"total_bytes": 1, "available_bytes": None}}
