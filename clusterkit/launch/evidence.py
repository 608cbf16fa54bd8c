"""What a hang leaves in --log-dir: each rank's stack and each rank's flight record, one file
each, named only by checked values (the host from the plan, the rank an int)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from clusterkit.launch.stacks import RankStack
from clusterkit.safefiles import PrivateFolder


def write_stacks(folder: PrivateFolder, parsed: list[RankStack]) -> None:
    for stack in parsed:
        folder.write(f"stacks-{stack.host}-{stack.rank:d}.txt", stack.render())


def write_records(folder: PrivateFolder, records: Mapping[tuple[str, int], Any]) -> None:
    for (host, rank), entries in records.items():
        text = json.dumps({"host": host, "rank": rank, "entries": entries}, indent=1)
        folder.write(f"flight-{host}-{rank:d}.json", text + "\n")
