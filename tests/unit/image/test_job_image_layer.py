"""The test job image's layer (tests/support/job_image.py) from a checkout anywhere.

`docker load` refuses a layer that names one path twice. The layer writes its own /tmp
(mode 1777); a checkout under /tmp, and so its venv, brought /tmp in a second time as the
parent of the venv's files, and every container launch test failed in setup.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

from tests.support.job_image import write_layer


def _layer(files: list[str]) -> list[tarfile.TarInfo]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        write_layer(files, tar)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r") as tar:
        return tar.getmembers()


def test_a_venv_under_tmp_names_every_path_once() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="ck-layer-") as checkout:
        venv = Path(checkout) / ".venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        real = venv / "bin" / "python3.11"
        real.write_text("#!/bin/sh\n")
        os.symlink("python3.11", venv / "bin" / "python3")
        members = _layer([str(venv / "pyvenv.cfg"), str(venv / "bin" / "python3")])
    names = Counter(member.name for member in members)
    assert [name for name, count in names.items() if count > 1] == []
    by_name = {member.name: member for member in members}
    assert by_name["tmp"].isdir() and by_name["tmp"].mode == 0o1777
    inside = checkout.lstrip("/")
    assert f"{inside}/.venv/bin/python3.11" in by_name  # the link's target came along
    assert by_name[f"{inside}/.venv/bin/python3"].issym()
    assert names["etc/passwd"] == 1 and names["etc/group"] == 1


def test_tmp_is_in_the_layer_with_its_mode_when_no_file_is_under_it() -> None:
    members = {member.name: member for member in _layer(["/bin/sh"])}
    assert members["tmp"].mode == 0o1777
    assert "etc" in members and members["etc/passwd"].isfile()
