"""ansible_password and its aliases: read for SSH, never shown."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
import yaml

from clusterkit.errors import InventoryError
from clusterkit.inventory import Inventory
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.endpoint import ConnectOptions, resolve_endpoint

SECRET = "pw-4f1c9e-not-for-your-eyes"


def load(tmp_path: Path, **host_vars: object) -> Inventory:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"n1": host_vars}}}))
    return load_inventory(path)


@pytest.mark.parametrize("var", ["ansible_password", "ansible_ssh_pass", "ansible_ssh_password"])
def test_each_alias_sets_the_password(tmp_path: Path, var: str) -> None:
    host = load(tmp_path, **{var: SECRET}).hosts[0]
    assert host.password == SECRET
    endpoint = resolve_endpoint(host, ConnectOptions(), paramiko.SSHConfig())
    assert endpoint.password == SECRET
    for shown in (repr(host), repr(endpoint), str(host), str(endpoint)):
        assert SECRET not in shown


def test_a_bad_password_value_is_refused_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as raised:
        load(tmp_path, ansible_password=[SECRET])
    assert "ansible_password" in str(raised.value) and SECRET not in str(raised.value)
