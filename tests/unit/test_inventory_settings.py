"""The `clusterkit` variable -> ClusterSettings: defaults, values, one value per cluster."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clusterkit.errors import InventoryError
from clusterkit.inventory import Inventory, load_inventory


def load(tmp_path: Path, text: str) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return load_inventory(path)


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as caught:
        load(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_defaults_when_the_variable_is_absent(tmp_path: Path) -> None:
    inventory = load(tmp_path, "all:\n  hosts:\n    a:\n    b:\n")
    settings = inventory.settings
    assert (settings.master, settings.master_port, settings.rdzv_port) == (None, 29500, 29400)
    assert settings.interface is None and settings.image is None and settings.raw == {}
    assert settings.expect.gpus_per_node is None
    assert inventory.master.name == "a"


def test_all_fields_and_raw_sections(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars:
            clusterkit:
              master: b
              master_port: 29600
              rdzv_port: "29401"
              interface: ib0
              image: reg.example.com/ml:1@sha256:abc
              expect:
                gpus_per_node: 4
                driver: ">=550"
                cuda: 12.10
                torch: 2.4.1
                nccl: 2.21.5
                python: 3.11
              bench: {size_mb: 256}
              network: {timeout_s: 5}
              cost: {hourly: 2.5}
              probe: {timeout_s: 20}
          hosts:
            a:
            b:
              ansible_host: 10.0.0.2
        """,
    )
    settings = inventory.settings
    assert (settings.master, settings.master_port, settings.rdzv_port) == ("b", 29600, 29401)
    assert (settings.interface, settings.image) == ("ib0", "reg.example.com/ml:1@sha256:abc")
    expect = settings.expect
    assert (expect.gpus_per_node, expect.driver, expect.cuda) == (4, ">=550", "12.10")
    assert (expect.torch, expect.nccl, expect.python) == ("2.4.1", "2.21.5", "3.11")
    assert settings.raw["bench"] == {"size_mb": 256}
    assert settings.raw["cost"]["hourly"] == 2.5
    assert inventory.master.name == "b"


def test_master_may_be_an_address_of_a_host_or_an_unknown_name(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars: {clusterkit: {master: 10.0.0.2}}
          hosts: {a: null, b: {ansible_host: 10.0.0.2}}
        """,
    )
    assert inventory.master.name == "b"
    other = load(tmp_path, "all:\n  vars: {clusterkit: {master: head.dns}}\n  hosts: {a: }\n")
    assert other.settings.master == "head.dns"  # a DNS name outside the inventory is fine
    assert other.master.name == "a"


def test_settings_resolve_with_precedence_and_must_agree(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars: {clusterkit: {master_port: 1}}
          children:
            gpu:
              vars: {clusterkit: {master_port: 2}}
              hosts: {a: null, b: null}
        """,
    )
    assert inventory.settings.master_port == 2
    message = error(
        tmp_path,
        """
        all:
          vars: {clusterkit: {master_port: 1}}
          children:
            gpu:
              vars: {clusterkit: {master_port: 2}}
              hosts: {a: null}
          hosts: {b: null}
        """,
    )
    assert "inventory.yaml:3: clusterkit: differs between hosts 'a' and 'b'" in message
    assert "all.vars" in message


@pytest.mark.parametrize(
    ("block", "line", "key", "problem"),
    [
        ("{expect: {gpu_per_node: 8}}", 4, "clusterkit.expect.gpu_per_node", "did you mean"),
        ("{master_prot: 1}", 4, "clusterkit.master_prot", "unknown key"),
        ("{master_port: 0}", 4, "clusterkit.master_port", "integer 1..65535"),
        ("{rdzv_port: 65536}", 4, "clusterkit.rdzv_port", "integer 1..65535"),
        ("{master_port: http}", 4, "clusterkit.master_port", "integer"),
        ("{master_port: true}", 4, "clusterkit.master_port", "integer"),
        ("{master: [a, b]}", 4, "clusterkit.master", "must be a string"),
        ("{interface: ''}", 4, "clusterkit.interface", "must not be empty"),
        ("{expect: {gpus_per_node: many}}", 4, "clusterkit.expect.gpus_per_node", "integer"),
        ("{expect: {driver: {min: 550}}}", 4, "clusterkit.expect.driver", "must be a string"),
        ("{expect: [driver]}", 4, "clusterkit.expect", "must be a mapping"),
        ("{bench: fast}", 4, "clusterkit.bench", "must be a mapping"),
        ("[master]", 4, "clusterkit", "must be a mapping"),
        ("{image: '{{ image }}'}", 4, "clusterkit.image", "Jinja template"),
    ],
)
def test_invalid_settings_name_the_key_path(
    tmp_path: Path, block: str, line: int, key: str, problem: str
) -> None:
    message = error(tmp_path, f"all:\n  hosts: {{a: }}\n  vars:\n    clusterkit: {block}\n")
    assert f"inventory.yaml:{line}: {key}: " in message
    assert problem in message


def test_nested_key_errors_point_at_their_own_line(tmp_path: Path) -> None:
    message = error(
        tmp_path,
        """
        all:
          hosts: {a: }
          vars:
            clusterkit:
              master: a
              expect:
                gpus_per_node: 8
                drivers: ">=550"
        """,
    )
    assert "inventory.yaml:9: clusterkit.expect.drivers: unknown key" in message
    assert "did you mean clusterkit.expect.driver?" in message
