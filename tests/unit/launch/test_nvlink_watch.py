"""NVLink in the hardware watch: a link up at the job's start and down now is a node fault on
the node's own evidence, one down from the start is not news. The node side reads
`nvidia-smi nvlink --status` with the probe's parser (clusterkit/node/nvlink.py); the answers
here are the real recording tests/fixtures/nvidia-smi/nvlink-status-h100-pcie-x2.txt (source in
that folder's README.md), as recorded and with one of its links turned `<inactive>`."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.checks.model import Status
from clusterkit.launch.messages import parse_control
from clusterkit.launch.watch import grade, own_events
from clusterkit.node.launch_watch import HardwareWatch
from clusterkit.node.nvlink import links_up, parse_nvlink_status
from tests.unit.launch.test_hardware_watch import Node, event, shipped_watch_sample

SMI = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"
RECORDED = (SMI / "nvlink-status-h100-pcie-x2.txt").read_text()
ROWS = (
    "00000000:18:00.0, No, No, 0x0000000000000001\n00000000:33:00.0, No, No, 0x0000000000000001\n"
)
INDEXES = "0, 00000000:18:00.0\n1, 00000000:33:00.0\n"


def link_down(text: str, gpu: int, link: int) -> str:
    """The recording with GPU `gpu`'s link `link` printed as the driver prints one down."""
    block = text.split("GPU ")
    lines = block[gpu + 1].splitlines(keepends=True)
    lines[link + 1] = f"\t Link {link}: <inactive>\n"
    block[gpu + 1] = "".join(lines)
    return "GPU ".join(block)


class NvlinkNode(Node):
    """A node whose nvidia-smi answers the watch's three calls: the links from a file."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(tmp_path, monkeypatch)
        self.status = tmp_path / "nvlink-status.txt"
        self.status.write_text(RECORDED)
        self.tool(
            "nvidia-smi",
            f'case "$1" in\n nvlink) cat {self.status} ;;\n'
            f" --query-gpu=index,pci.bus_id) printf '{INDEXES}' ;;\n"
            f" *) printf '{ROWS}' ;;\nesac",
        )
        monkeypatch.setattr("clusterkit.node.launch_watch.SMI_SECONDS", 0.0)


@pytest.fixture
def nvnode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NvlinkNode:
    return NvlinkNode(tmp_path, monkeypatch)


def test_the_recording_parses_to_the_links_up() -> None:
    up = links_up(parse_nvlink_status(RECORDED))
    assert up[0] == up[1] == {0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15}
    assert 4 not in links_up(parse_nvlink_status(link_down(RECORDED, 0, 4)))[0]
    assert 0 not in links_up(parse_nvlink_status(link_down(RECORDED, 1, 0)))[1]


def test_a_link_up_at_the_start_and_down_now_is_told_once_by_its_gpus_bus(
    nvnode: NvlinkNode,
) -> None:
    watch = HardwareWatch(set())
    watch.start()
    assert watch.sample() == []  # links 4, 5, 10, 11, 16, 17 were down from the start
    nvnode.status.write_text(link_down(RECORDED, 1, 7))
    (told,) = watch.sample()
    assert (told["kind"], told["device"], told["code"]) == ("nvlink-down", "0000:33:00", 7)
    assert told["text"] == "GPU 1 link 7: up at the job's start, down now"
    assert watch.sample() == []  # told once


def test_no_answer_or_no_gpu_listed_is_never_every_link_down(nvnode: NvlinkNode) -> None:
    """An nvidia-smi that prints nothing (a wedged or reloading driver) or fails says
    nothing of the links; a GPU gone from the list is told as gone, not as its links."""
    watch = HardwareWatch(set())
    watch.start()
    nvnode.status.write_text("")
    assert watch.sample() == []
    nvnode.status.write_text(RECORDED.split("GPU 1:")[0])  # GPU 1 not listed
    assert [e["kind"] for e in watch.sample()] == []


def test_a_node_without_nvlink_is_not_asked_again(nvnode: NvlinkNode) -> None:
    nvnode.status.write_text(RECORDED.replace("26.562 GB/s", "<inactive>"))
    watch = HardwareWatch(set())
    watch.start()
    assert watch.nvlinks is None and watch.nvlink_events() == []


def test_a_link_down_is_a_node_fault_and_names_the_link_and_gpu() -> None:
    down = event("nvlink-down", "0000:33:00", 7, text="GPU 1 link 7: up at the job's start")
    graded = grade("node3", down)
    assert graded.status is Status.FAIL and graded.fatal
    assert graded.line().startswith(
        "node3: node fault during the run: NVLink link 7 of GPU 0000:33:00 went down"
    )
    kept, dropped = own_events([down], frozenset({"0000:18:00"}))  # another node's GPU
    assert kept == [] and "'0000:33:00', not this node's" in dropped[0]
    assert parse_control({"event": "hardware", "events": [down]}) == (
        {"event": "hardware", "events": [down]},
        [],
    )


def test_the_runner_composed_for_a_node_watches_nvlink_without_clusterkit(
    tmp_path: Path, nvnode: NvlinkNode
) -> None:
    """The shipped text carries the NVLink library beside the kernel-log one."""
    down = link_down(RECORDED, 0, 3)
    events = shipped_watch_sample(tmp_path, f"open({str(nvnode.status)!r}, 'w').write({down!r})")
    assert [(e["kind"], e["device"], e["code"]) for e in events] == [
        ("nvlink-down", "0000:18:00", 3)
    ]
