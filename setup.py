"""Ship playbooks/ inside the wheel as clusterkit/playbooks/, where `clusterkit provision`
looks first. The repository keeps them at the top level, where Ansible users expect them;
an editable install finds them there."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"


class BuildPyWithPlaybooks(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not (PLAYBOOKS / "site.yml").is_file():
            raise SystemExit(f"cannot build clusterkit: {PLAYBOOKS}/site.yml is missing")
        target = Path(self.build_lib) / "clusterkit" / "playbooks"
        shutil.rmtree(target, ignore_errors=True)  # no stale file from an earlier build
        shutil.copytree(PLAYBOOKS, target, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithPlaybooks})
