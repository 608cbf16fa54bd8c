"""clusterkit's inventory reader against the real `ansible-inventory --list`, as the oracle.

For each fixture both must agree on: the host list, every host's group membership (direct or
through child groups), every resolved variable (connection variables and `clusterkit`
included), and the connection a host gets. For each malformed fixture both must refuse it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import jinja2
import pytest

from clusterkit.errors import InventoryError
from clusterkit.settings.loader import load_inventory

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "inventories"
VALID = [
    FIXTURES / "ranges" / "inventory.yaml",
    FIXTURES / "precedence" / "inventory.yaml",
    FIXTURES / "varsdirs" / "inventory.yaml",
    FIXTURES / "shapes" / "inventory.yaml",
    REPO / "inventory.example.yaml",
]
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))
ANSIBLE_INVENTORY = shutil.which("ansible-inventory")

pytestmark = pytest.mark.skipif(
    ANSIBLE_INVENTORY is None, reason="ansible-inventory (ansible-core) is not installed"
)


def ansible_inventory(
    path: Path | list[Path], tmp_path: Path, enabled: str = "yaml"
) -> subprocess.CompletedProcess[str]:
    """Run the real ansible-inventory on the sources: only the `enabled` plugins (yaml by
    default), failures are failures."""
    paths = path if isinstance(path, list) else [path]
    config = tmp_path / "ansible.cfg"  # an empty config: no user or system settings leak in
    config.write_text("[defaults]\n")
    env = dict(
        os.environ,
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="True",  # clusterkit refuses a broken source
        ANSIBLE_INVENTORY_ENABLED=enabled,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CONFIG=str(config),
    )
    assert ANSIBLE_INVENTORY is not None
    return subprocess.run(
        [ANSIBLE_INVENTORY, *(arg for p in paths for arg in ("-i", str(p))), "--list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def _untagged(value: Any) -> Any:
    """`{"__ansible_unsafe": text}` (how --list writes text Ansible never templates) -> text."""
    if isinstance(value, dict):
        if len(value) == 1 and "__ansible_unsafe" in value:
            return value["__ansible_unsafe"]
        return {key: _untagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    return value


def _members(listing: dict[str, Any], group: str) -> set[str]:
    """Hosts of a group in `--list` output, through its children as well."""
    entry = listing.get(group, {})
    hosts = set(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts |= _members(listing, child)
    return hosts


def _expected_connection(name: str, hostvars: dict[str, Any]) -> dict[str, Any]:
    """The connection Ansible's ssh plugin would use, read from Ansible's resolved vars."""

    def last_set(*names: str) -> Any:
        values = [hostvars[n] for n in names if hostvars.get(n) is not None]
        if not values:
            return None
        value = values[-1]
        if isinstance(value, str) and "{{" in value:  # the plugin templates it at connect time
            value = jinja2.Template(value).render({**hostvars, "inventory_hostname": name})
        return value

    key_file = last_set("ansible_private_key_file", "ansible_ssh_private_key_file")
    port = last_set("ansible_port", "ansible_ssh_port")
    return {
        "address": last_set("ansible_host", "ansible_ssh_host") or name,
        "port": None if port is None else int(port),
        "user": last_set("ansible_user", "ansible_ssh_user"),
        "key_file": None if key_file is None else os.path.expanduser(key_file),
        "connection": "local" if hostvars.get("ansible_connection") == "local" else "ssh",
    }


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.parent.name if p.parent != REPO else p.name)
def test_same_hosts_groups_and_vars_as_ansible(path: Path, tmp_path: Path) -> None:
    assert_same_as_ansible([path], tmp_path, "yaml")


def assert_same_as_ansible(
    paths: list[Path], tmp_path: Path, enabled: str, via_ansible: bool = False
) -> None:
    """Hosts, groups, every variable and the connection agree with ansible-inventory."""
    result = ansible_inventory(paths, tmp_path, enabled)
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    hostvars = _untagged(listing.pop("_meta")["hostvars"])
    groups = list(listing)

    inventory = load_inventory(paths, via_ansible=via_ansible)

    all_hosts = _members(listing, "all")
    assert {host.name for host in inventory.hosts} == all_hosts
    assert len(inventory.hosts) == len(all_hosts)  # no duplicates
    for host in inventory.hosts:
        theirs = {group for group in groups if host.name in _members(listing, group)}
        assert set(host.groups) == theirs, host.name
        expected_vars = hostvars.get(host.name, {})
        assert host.vars == expected_vars, host.name
        assert host.vars.get("clusterkit") == expected_vars.get("clusterkit"), host.name
        ours = {key: getattr(host, key) for key in _expected_connection(host.name, {})}
        assert ours == _expected_connection(host.name, expected_vars), host.name


def test_cluster_settings_match_ansible_for_the_example(tmp_path: Path) -> None:
    example = REPO / "inventory.example.yaml"
    listing = json.loads(ansible_inventory(example, tmp_path).stdout)
    inventory = load_inventory(example)
    for name, hostvars in listing["_meta"]["hostvars"].items():
        assert hostvars["clusterkit"] == inventory.host(name).vars["clusterkit"]
    theirs, ours = hostvars["clusterkit"], inventory.settings
    assert (ours.master, ours.master_port, ours.rdzv_port) == (
        theirs["master"],
        theirs["master_port"],
        theirs["rdzv_port"],
    )
    assert (ours.interface, ours.image) == (theirs["interface"], theirs["image"])
    assert ours.expect.gpus_per_node == theirs["expect"]["gpus_per_node"]


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_both_refuse_malformed_inventories(path: Path, tmp_path: Path) -> None:
    result = ansible_inventory(path, tmp_path)
    assert result.returncode != 0, f"ansible-inventory accepted {path.name}"
    refused = ("No inventory was parsed", "Completely failed to parse inventory source")
    assert any(text in result.stderr for text in refused), result.stderr
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


STYLES = FIXTURES / "styles"
NATIVE = {
    "ini-rules": [FIXTURES / "ini" / "rules.ini"],
    "kubespray": [STYLES / "kubespray" / "inventory.ini"],
    "deepops": [STYLES / "deepops" / "inventory"],
    "kolla-ansible": [STYLES / "kolla" / "multinode"],
    "k3s-ansible-ini": [STYLES / "k3s" / "hosts.ini"],
    "k3s-ansible-yaml": [STYLES / "k3s" / "inventory.yml"],
    "k3s-directory": [STYLES / "k3s"],
    "stackhpc-two-directories": [STYLES / "stackhpc" / "common", STYLES / "stackhpc" / "site"],
    "yaml-then-ini": [FIXTURES / "precedence" / "inventory.yaml", STYLES / "kubespray"],
    "ini-then-yaml-same-hosts": [STYLES / "k3s" / "hosts.ini", STYLES / "k3s" / "inventory.yml"],
}  # fmt: skip


@pytest.mark.parametrize("name", list(NATIVE))
def test_ini_directories_and_several_sources_like_ansible(name: str, tmp_path: Path) -> None:
    assert_same_as_ansible(NATIVE[name], tmp_path, "yaml,ini")


INVALID_INI = sorted((FIXTURES / "invalid-ini").glob("*.ini"))


@pytest.mark.parametrize("path", INVALID_INI, ids=lambda p: p.stem)
def test_both_refuse_malformed_ini_inventories(path: Path, tmp_path: Path) -> None:
    result = ansible_inventory(path, tmp_path, "yaml,ini")
    assert result.returncode != 0, f"ansible-inventory accepted {path.name}"
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:"), message
    assert "\n" not in message


PLUGIN = FIXTURES / "plugin"
THROUGH_ANSIBLE = {
    "constructed-plugin": [PLUGIN / "01-static.yml", PLUGIN / "02-constructed.yml"],
    "inventory-script": [PLUGIN / "script.py"],
    "toml": [PLUGIN / "hosts.toml"],
    "directory-with-plugin-and-script": [PLUGIN],
}


@pytest.mark.parametrize("name", list(THROUGH_ANSIBLE))
def test_plugins_and_scripts_resolve_through_ansible(name: str, tmp_path: Path) -> None:
    """Only when asked (--inventory-via-ansible): resolving them runs their code."""
    assert_same_as_ansible(
        THROUGH_ANSIBLE[name], tmp_path, "auto,script,yaml,ini,toml", via_ansible=True
    )


def test_constructed_groups_and_composed_vars_reach_the_hosts() -> None:
    inventory = load_inventory(THROUGH_ANSIBLE["constructed-plugin"], via_ansible=True)
    gpu1 = inventory.host("gpu1")
    assert "gpu_nodes" in gpu1.groups and "rack_r1" in gpu1.groups
    assert gpu1.vars["node_rank"] == 1
    assert (gpu1.address, gpu1.user) == ("10.1.0.1", "ops")
    assert inventory.host("cpu1").port == 2222
    assert "gpu_nodes" not in inventory.host("cpu1").groups


@pytest.mark.parametrize("name", ["ini-rules", "stackhpc-two-directories"])
def test_inventory_via_ansible_agrees_with_the_native_readers(name: str, tmp_path: Path) -> None:
    assert_same_as_ansible(NATIVE[name], tmp_path, "yaml,ini", via_ansible=True)
    native = load_inventory(NATIVE[name])
    through = load_inventory(NATIVE[name], via_ansible=True)
    # Host order may differ: Ansible's listing is walked group by group, not in file order.
    assert {h.name: h for h in native.hosts} == {h.name: h for h in through.hosts}


def test_a_stalled_inventory_script_is_killed_at_the_deadline(tmp_path: Path) -> None:
    marker = tmp_path / "script.pid"
    script = tmp_path / "slow.py"
    script.write_text(
        "#!/usr/bin/env python3\nimport os, time\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    script.chmod(0o755)
    environ = {**os.environ, "CLUSTERKIT_ANSIBLE_INVENTORY_TIMEOUT": "5"}
    started = time.monotonic()
    with pytest.raises(InventoryError, match="did not finish within 5 s"):
        load_inventory(script, via_ansible=True, environ=environ)
    assert time.monotonic() - started < 60
    if marker.exists():  # the script had started: it must be gone with its process group
        pid = int(marker.read_text())
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] != "Z"


def test_duplicate_keys_warn_with_file_and_line_like_ansible(tmp_path: Path) -> None:
    path = FIXTURES / "duplicates" / "inventory.yaml"
    assert_same_as_ansible([path], tmp_path, "yaml")  # the last value wins in both
    ansible_warned = ansible_inventory(path, tmp_path).stderr
    inventory = load_inventory(path)
    vars_file = path.parent / "group_vars" / "all.yml"
    expected = [(path, 5, "a"), (path, 9, "y"), (vars_file, 2, "z")]
    for file, line, key in expected:
        assert f"duplicate mapping key '{key}'" in ansible_warned
        assert f"{file}:{line}:" in ansible_warned
        assert f"{file}:{line}: duplicate key {key!r}: using the last value only" in (
            inventory.warnings
        )


_GEN_NAMES = ["n1", "node01", "gpu-a.lab", "10.0.0.1", "fe80::1", "[fe80::2]:2222", "n[01:03]",
              "n[a:c]", "n[1:9:4]", "h:22", "web1", "db[1:2]"]  # fmt: skip
_GEN_GROUPS = ["all", "gpu", "web", "db", "ungrouped", "k8s_cluster", "kube-node"]
_GEN_KEYS = ["rack", "x", "y", "rank", "motd", "k8s_role"]  # become is refused: not here
_GEN_VALUES = ["1", "22", "0x1F", "True", "None", "[1, 2]", "{'a': 1}", "(1,", "'q'", '"q"',
               "1e3", "{{ x }}", "a#b", "a b", "007", "-5", "1_000", "b'xy'", "...", "1+2j",
               "'a' 'b'", "[1, [2, (3,)]]", "{1, 2}", " spaced ", "x=y", "'",
               "\"a'b\""]  # fmt: skip


def _generated_ini(seed: int, neighbours: float = 0.1) -> str:
    """An INI inventory from the grammar and its neighbours: sections of every kind in any
    order, host lines with quoted and unquoted values of every literal type, vars lines with
    and without spaces and comments, children lines, comments; mostly well-formed (each line
    fits its section nine times in ten), so both the accepting and refusing paths are taken."""
    rng = random.Random(seed)

    def value() -> str:
        text = rng.choice(_GEN_VALUES)
        if " " in text or "'" in text or '"' in text:
            return text if rng.random() < neighbours else '"' + text.replace('"', "") + '"'

        return rng.choice([text, f'"{text}"', f"'{text}'"])

    lines, state, group = [], "hosts", "ungrouped"
    for _ in range(rng.randint(3, 16)):
        roll = rng.random()
        if roll < 0.25:
            state = rng.choice(["hosts", "hosts", "vars", "children"])
            suffix = "" if state == "hosts" else f":{state}"
            group = rng.choice(_GEN_GROUPS)
            lines.append(f"[{group}{suffix}]")
            continue
        if roll > 1 - neighbours:  # a neighbour: any kind of line in any section
            state = rng.choice(["hosts", "vars", "children"])
        if roll > 0.97:
            lines.append(rng.choice(["# c", "; c", "", "  # indented"]))
        elif state == "hosts":
            pairs = [f"{rng.choice(_GEN_KEYS)}={value()}" for _ in range(rng.randint(0, 3))]
            lines.append(" ".join([rng.choice(_GEN_NAMES), *pairs]))
        elif state == "vars":
            separator = rng.choice(["=", " = ", "= "])
            comment = rng.choice(["", "", " # c"])
            lines.append(f"{rng.choice(_GEN_KEYS)}{separator}{rng.choice(_GEN_VALUES)}{comment}")
        else:
            lines.append(rng.choice([g for g in _GEN_GROUPS[1:] if g != group] or ["gpu"]))
    lines += [f"[{group}]" for group in _GEN_GROUPS[1:] if rng.random() < 0.8]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(30))
def test_generated_ini_inventories_resolve_like_ansible(seed: int, tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(_generated_ini(seed))
    result = ansible_inventory(path, tmp_path, "ini")
    if result.returncode != 0:
        with pytest.raises(InventoryError):
            load_inventory(path)
        return
    listing = json.loads(result.stdout)
    if not _members(listing, "all"):
        with pytest.raises(InventoryError, match="defines no hosts"):
            load_inventory(path)
        return
    clashes = [w for w in load_inventory(path).warnings if "both a group and a host" in w]
    if clashes:  # Ansible's listing mixes such a host up with the group; both warn about it
        assert "Found both group and host with same name" in result.stderr
        return
    assert_same_as_ansible([path], tmp_path, "ini")


@pytest.mark.parametrize("seed", range(10))
def test_generated_pairs_of_sources_merge_like_ansible(seed: int, tmp_path: Path) -> None:
    sources = []
    for index in range(2):
        directory = tmp_path / f"source{index}"
        (directory / "group_vars").mkdir(parents=True)
        (directory / "group_vars" / "all.yml").write_text(f"source: {index}\nx: from-{index}\n")
        path = directory / "hosts.ini"
        path.write_text(_generated_ini(1000 + 2 * seed + index, neighbours=0.0))
        sources.append(path)
    result = ansible_inventory(sources, tmp_path, "ini")
    if result.returncode != 0:
        with pytest.raises(InventoryError):
            load_inventory(sources)
        return
    if not _members(json.loads(result.stdout), "all"):
        with pytest.raises(InventoryError, match="defines no hosts"):
            load_inventory(sources)
        return
    assert_same_as_ansible(sources, tmp_path, "ini")
