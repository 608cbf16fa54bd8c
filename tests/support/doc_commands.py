"""The `clusterkit ...` commands README.md and docs/*.md show a user, read as a shell would.

A command is a line of a fenced code block (no language, or sh/bash/shell/console) whose
first word, after a `$ ` prompt, is `clusterkit` (or a path ending in `/clusterkit`);
a trailing `\\` joins the next line, `# ...` is a comment, and `&&`, `||`, `;` and `|`
separate commands. Lines of output (`clusterkit: error: ...`, `remedy: ...`) start with
another word and are left out. The tests key each command by its words joined by spaces.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|", "&"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w-]*)")


def doc_files(repo: Path = REPO) -> list[Path]:
    """The documents a user reads: the README and every page of docs/."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, logical line) of every shell block: continuations joined."""
    fence: str | None = None
    shell = False
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match and (fence is None or match.group(1).startswith(fence)):
            fence = None if fence else match.group(1)
            shell = fence is not None and match.group(2).lower() in SHELL_BLOCKS
            continue
        if fence is None or not shell:
            continue
        start = start or number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending, start = "", 0


def commands_of_line(line: str) -> Iterator[list[str]]:
    """The clusterkit commands of one logical line, each as its words (no program name)."""
    lexer = shlex.shlex(line.strip().removeprefix("$ "), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: prose, not a command
        return
    command: list[str] = []
    for word in [*words, ";"]:
        if word not in SEPARATORS:
            command.append(word)
            continue
        if command and (command[0] == "clusterkit" or command[0].endswith("/clusterkit")):
            yield command[1:]
        command = []


def doc_commands(repo: Path = REPO) -> dict[str, list[str]]:
    """Every documented command ('check inventory.yaml --skip bench') -> where it is shown
    ('README.md:91')."""
    found: dict[str, list[str]] = {}
    for path in doc_files(repo):
        for number, line in shell_lines(path.read_text(encoding="utf-8")):
            for words in commands_of_line(line):
                where = f"{path.relative_to(repo)}:{number}"
                found.setdefault(" ".join(words), []).append(where)
    return found


# The training script the docs' commands name (`train.py --epochs 3`): a real gloo DDP job
# that lint passes, small enough to train in a second on the test cluster.
TRAIN = """\
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--ckpt", default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        optimizer.zero_grad()
        model(torch.ones(8, 4)).sum().backward()
        optimizer.step()
        print(f"rank {dist.get_rank()} of {dist.get_world_size()}: epoch {epoch}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch's c10d threads abort a finished rank in interpreter teardown now and then
    # ("terminate called without an active exception"): leave without it, as
    # tests/support/ddp_job.py does, so the exit status is the job's own
    sys.stdout.flush()
    os._exit(0)
"""


@dataclass(frozen=True)
class Here:
    """Run in-process in a folder holding `inventory.yaml` (inventory.example.yaml: its
    hosts are never contacted) and `train.py`; `status` is the exit status it must give."""

    status: int = 0


@dataclass(frozen=True)
class OnCluster:
    """Run in-process against the 4-node test cluster, `inventory.yaml` its inventory
    (tests/cluster/test_doc_commands_cluster.py), in document order in one folder."""

    status: int = 0


@dataclass(frozen=True)
class NotRun:
    """Not run by these tests, and why; where another test covers it, which."""

    why: str


Use = Here | OnCluster | NotRun

SLURM = "inside a Slurm allocation or on a Slurm node: tests/slurm/ runs it on a real Slurm"
INVENTORY_FORM = "an inventory form: tests/unit/inventory/ and tests/conformance/"
SYNOPSIS = NotRun("a synopsis: brackets mark optional flags, not a command to paste")

# Every command the docs show, and what these tests do with it. A command the docs gain must
# be added here; a command the docs lose must be taken out (test_doc_commands.py holds both).
USES: dict[str, Use] = {
    "check": Here(),
    "check inventory.yaml": OnCluster(),
    "check inventory.yaml --skip bench": OnCluster(),
    "check inventory.yaml --mesh full": OnCluster(),
    "check inventory.yaml --format json -o report.json": OnCluster(),
    "check inventory.yaml --format html -o report.html": OnCluster(),
    "launch inventory.yaml --check-output check.html --format html -- train.py": OnCluster(),
    "bench inventory.yaml --find-slow --per-node --format html -o bench.html": NotRun(
        "minutes of rounds on the test cluster: tests/cluster/test_find_slow_cluster.py runs "
        "--find-slow; the page from its details: tests/unit/report/test_report_html.py"
    ),
    "check inventory.yaml --fix-plan": OnCluster(),
    "bench inventory.yaml --min-busbw 40": OnCluster(status=1),  # gloo on veths: ~1 GB/s
    "bench inventory.yaml --find-slow": OnCluster(),
    "launch inventory.yaml --log-dir logs -- train.py --epochs 3": OnCluster(),
    "launch inventory.yaml --print-dir plan -- train.py": OnCluster(),
    "launch inventory.yaml --nnodes 4 --max-restarts 2 -- train.py": OnCluster(),
    "lint -i inventory.yaml train.py": Here(),
    "provision inventory.yaml --tags firewall --limit node4": NotRun(
        "changes the nodes as root through ansible-playbook: "
        "tests/playbooks/test_provision_real.py runs it on containers"
    ),
    "image lock images/cpu-torch": NotRun(
        "resolves the spec on PyPI and its base image in a registry: tests/docker/"
    ),
    "cost --nodes 4 --hours 72 --instance p5.48xlarge --region us-east-1 --preempt-rate 5-10% "
    "--plot cost.png": Here(),
    "cost prices update": NotRun("reads the AWS and Azure price endpoints: no network here"),
    "check --slurm": NotRun(SLURM),
    "bench --slurm --find-slow": NotRun(SLURM),
    "check --slurm-partition gpu --settings clusterkit.yaml": NotRun(SLURM),
    "node-check --slurm-drain": NotRun(SLURM),
    "bench inventory.yaml": OnCluster(),
    "bench inventory.yaml -b 8M -e 2G -f 2 -n 20 --min-busbw 300": NotRun(
        "20 all-reduces of up to 2 GB, sized for a GPU fabric: far too long on gloo over veths"
    ),
    "bench inventory.yaml --format json -o report.json -J allreduce.json": OnCluster(),
    "bench --slurm --settings clusterkit.yaml": NotRun(SLURM),
    "bench inventory.yaml --find-slow --group-size 4": NotRun(
        "needs 16 nodes or more; the test cluster has 4 (tests/unit/bench/test_bench_find_slow.py)"
    ),
    "cost --nodes 4 --hours 72 --instance p5.48xlarge --preempt-rate 0.02 --correlation 2 "
    "--restart-min 15 --deadline 90 --plot cost.png": Here(),
    "cost inventory.yaml --format json -o cost.json": Here(),
    "check hosts.ini": NotRun(INVENTORY_FORM),
    "check inventory/mycluster/": NotRun(INVENTORY_FORM),
    "check -i common/inventory -i site/inventory": NotRun(INVENTORY_FORM),
    "check static.yml -i constructed.yml": NotRun(INVENTORY_FORM),
    "check aws_ec2.yml --inventory-via-ansible": NotRun("an AWS dynamic inventory: credentials"),
    "check hosts.ini --inventory-via-ansible": NotRun(INVENTORY_FORM),
    "launch inventory.yaml -- train.py --epochs 3": OnCluster(),
    "launch inventory.yaml --skip bench -- train.py": OnCluster(),
    "launch inventory.yaml --log-dir logs -- train.py": OnCluster(),
    "launch inventory.yaml --nproc-per-node 4 -- train.py": OnCluster(),
    "check inventory.yaml --format json -o ok.json": OnCluster(),
    "launch inventory.yaml --check-report ok.json -- train.py": OnCluster(),
    "launch inventory.yaml --no-check -- train.py": OnCluster(),
    "launch inventory.yaml --print -- train.py": OnCluster(),
    "launch inventory.yaml --nnodes 4 --max-restarts 2 -- train.py --ckpt /shared/ckpt": (
        OnCluster()
    ),
    "launch inventory.yaml --nnodes 6:8 --max-restarts 3 --trace run.trace -- train.py": NotRun(
        "needs 6 to 8 nodes; the test cluster has 4 (tests/cluster/test_launch_resilient.py)"
    ),
    "lint train.py": Here(),
    "lint -i inventory.yaml train.py --epochs 3": Here(),
    "lint --nodes 2 --nproc-per-node 8 --format json train.py": Here(),
    "launch inventory.yaml --lint strict -- train.py": OnCluster(),
    "node-check --format prometheus -o /var/lib/node_exporter/textfile/clusterkit.prom": NotRun(
        "writes node_exporter's folder of a real node: tests/unit/report/test_prometheus.py runs "
        "node-check --format prometheus on this machine"
    ),
    "node-check [--settings FILE] [--slurm-drain] [--node-name NAME] [--strict]": SYNOPSIS,
    "check --slurm-partition gpu --settings /etc/clusterkit.yaml": NotRun(SLURM),
}


def doc_folder(folder: Path) -> Path:
    """`folder` with what the docs' commands name: inventory.yaml (the example) and train.py."""
    (folder / "inventory.yaml").write_text((REPO / "inventory.example.yaml").read_text())
    (folder / "train.py").write_text(TRAIN)
    return folder
