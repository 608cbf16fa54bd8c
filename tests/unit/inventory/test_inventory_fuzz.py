"""Fuzz the inventory readers: any YAML or INI text (from the grammar and its neighbours) ends
in an Inventory or one InventoryError line naming the file, never a traceback, and quickly."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterkit.errors import InventoryError
from clusterkit.inventory import Inventory
from clusterkit.settings.loader import load_inventory

SECONDS_PER_INPUT = 5.0
SETTINGS = settings(
    max_examples=150,
    deadline=None,  # the bound is checked below, on wall time, with room for a busy machine
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same inputs every run: a failure is reproducible
)

names = st.sampled_from(
    ["n1", "node01", "gpu-a.lab", "10.0.0.1", "fe80::1", "[fe80::1]:2222", "n[01:03]",
     "n[a:c]", "n[1:9:4]", "n[3:1]", "n[01:100]", "n[1:99999999999]", "h:22", "h:", "---",
     "x$(id)", "-o", "a b", "n[", "n[1-3]", "ünï", "", "all", "ungrouped", "{}", "[x]"]
)  # fmt: skip
keys = st.sampled_from(
    ["ansible_host", "ansible_port", "ansible_user", "ansible_ssh_common_args",
     "ansible_connection", "ansible_group_priority", "ansible_python_interpreter",
     "ansible_ssh_private_key_file", "clusterkit", "x", "", "a b", "=", "k=v"]
)  # fmt: skip
values = st.one_of(
    st.sampled_from(
        ["1", "22", "0x1F", "True", "None", "[1, 2]", "{'a': 1}", "(1,", "'q", '"q"', "1e999",
         "{{ x }}", "{{ x | default(1) }}", "{% if %}", "-o ProxyCommand='nc %h %p'", "-J b",
         "local", "ssh", "docker", "auto", "/usr/bin/python3", "a#b", "[[[[[[[[[[", "9" * 5000]
    ),
    st.text(max_size=12),
)  # fmt: skip


@st.composite
def ini_text(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["section", "host", "var", "child", "comment", "noise"]))
        group = draw(st.sampled_from(["all", "gpu", "web", "g:x", "a b", "ungrouped"]))
        if kind == "section":
            suffix = draw(st.sampled_from(["", ":vars", ":children", ":hosts", ":bogus", " "]))
            lines.append(f"[{group}{suffix}]")
        elif kind == "host":
            pairs = draw(st.lists(st.tuples(keys, values), max_size=3))
            lines.append(" ".join([draw(names), *(f"{k}={v}" for k, v in pairs)]))
        elif kind == "var":
            lines.append(f"{draw(keys)} = {draw(values)}")
        elif kind == "child":
            lines.append(group)
        elif kind == "comment":
            lines.append(draw(st.sampled_from(["# c", "; c", "", "   "])))
        else:
            lines.append(draw(st.text(max_size=20)))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))


scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), values)
host_vars = st.one_of(st.none(), st.dictionaries(keys, scalars, max_size=3), scalars)
groups = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "hosts": st.one_of(st.none(), st.dictionaries(names, host_vars, max_size=4), names),
            "vars": st.one_of(st.none(), st.dictionaries(keys, scalars, max_size=3), scalars),
        },
    ),
    lambda children: st.fixed_dictionaries(
        {}, optional={"children": st.dictionaries(st.sampled_from(["a", "b", "all"]), children)}
    ),
    max_leaves=6,
)
yaml_documents = st.one_of(
    st.dictionaries(st.sampled_from(["all", "gpu", "ungrouped", "plugin", "a"]), groups),
    scalars,
    st.lists(scalars, max_size=3),
)


@st.composite
def yaml_text(draw: st.DrawFn) -> str:
    text = yaml.safe_dump(draw(yaml_documents), sort_keys=False, allow_unicode=True)
    for _ in range(draw(st.integers(0, 3))):  # neighbours of valid YAML: small corruptions
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from(["", ":", "- ", "\t", "{", "'", "&a", "*a"]))
            + (text[at + draw(st.integers(0, 2)) :])
        )
    return text


def assert_clean_outcome(text: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        started = time.monotonic()
        with mock.patch(
            "clusterkit.inventory.viaansible.find_ansible_inventory", lambda environ: None
        ):
            try:
                result = load_inventory(path)
            except InventoryError as error:
                message = str(error)
                assert message.startswith(str(path)), message
                assert "\n" not in message, message
            else:
                assert isinstance(result, Inventory) and result.hosts
        assert time.monotonic() - started < SECONDS_PER_INPUT


@SETTINGS
@given(ini_text(), st.sampled_from(["hosts", "hosts.ini", "inventory.yaml"]))
def test_ini_like_input_ends_in_an_inventory_or_one_error(text: str, name: str) -> None:
    assert_clean_outcome(text, name)


@SETTINGS
@given(yaml_text(), st.sampled_from(["inventory.yaml", "hosts", "inventory.json"]))
def test_yaml_like_input_ends_in_an_inventory_or_one_error(text: str, name: str) -> None:
    assert_clean_outcome(text, name)


@SETTINGS
@given(st.text(max_size=200), st.sampled_from(["inventory.yml", "hosts.ini"]))
def test_any_text_ends_in_an_inventory_or_one_error(text: str, name: str) -> None:
    assert_clean_outcome(text, name)
