"""ansible_python_interpreter as Ansible users write it: a path, or `/usr/bin/env NAME`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusterkit.errors import InventoryError
from clusterkit.settings.loader import load_inventory


def interpreter(tmp_path: Path, value: str) -> str | None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        yaml.safe_dump({"all": {"hosts": {"n1": {"ansible_python_interpreter": value}}}})
    )
    return load_inventory(path).hosts[0].python_interpreter


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/usr/bin/python3", "/usr/bin/python3"),
        ("/usr/bin/env python3", "python3"),
        ("env python3.11", "python3.11"),
        ("  /usr/bin/env   python3 ", "python3"),
        ("'/opt/my python/bin/python3'", "/opt/my python/bin/python3"),
    ],
)
def test_interpreter_command_becomes_one_program(tmp_path: Path, value: str, expected: str) -> None:
    assert interpreter(tmp_path, value) == expected


@pytest.mark.parametrize(
    "value", ["/usr/bin/env -S python3 -E", "python3 -E", "/usr/bin/env A=1 python3", "'unclosed"]
)
def test_interpreter_with_other_arguments_is_refused_by_name(tmp_path: Path, value: str) -> None:
    with pytest.raises(InventoryError, match="ansible_python_interpreter"):
        interpreter(tmp_path, value)
