"""Stages over one run session: what `check`, `bench` and `launch` are composed of.

A command opens a `Session` (the inventory, the open transports, what the stages learned so
far), lists its stages and hands both to `run_stages`; the runner decides whether each stage
runs, how many hosts it may act on at once, and records what it found.

Layer: stages. Start at: runner.py.
"""

from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult
from clusterkit.stages.runner import build_report, run_stages

__all__ = ["Session", "Stage", "StageResult", "build_report", "run_stages"]
