"""Time `clusterkit lint` on a generated 10,000-line project against `python -m py_compile` of
the same files, in the same run, and print the ratio.

The project: an entry script importing 50 modules (a package and top-level modules) of 200
lines each, written like training code (functions, DataLoaders, collectives, classes), with
one mistake per module so the rules have findings to report. Measured twice each: the command
as a user runs it (`python -m clusterkit lint`, interpreter start and imports included) vs
`python -m py_compile` over every file (the anchor: Python reading and compiling the same
text), and the lint alone in-process (`lint_script`). Target: the command under 1 s.
Run: python benchmarks/bench_lint.py
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from clusterkit.lint import Context, lint_script

TARGET_S = 1.0
MODULES = 50
LINES_PER_MODULE = 200

BLOCK = '''
def step_{n}(model, batch, rank):
    """One training step of part {n}."""
    loss = model(batch.to(rank)).sum()
    loss.backward()
    value = torch.zeros(1)
    dist.all_reduce(value)
    if rank == 0:
        print("step", {n}, value.item())
    return loss


class Part{n}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear({n} + 4, 4)

    def forward(self, x):
        return self.layer(x)

'''


def module_text(index: int) -> str:
    lines = [
        "import os",
        "import torch",
        "import torch.distributed as dist",
        "from torch.utils.data import DataLoader, TensorDataset",
        "",
        f"def loader_{index}():",
        "    data = TensorDataset(torch.zeros(64, 4))",
        "    return DataLoader(data, batch_size=8, shuffle=True)",
        "",
    ]
    n = 0
    while len(lines) < LINES_PER_MODULE:
        lines += BLOCK.format(n=index * 1000 + n).splitlines()
        n += 1
    return "\n".join(lines[:LINES_PER_MODULE]) + "\n"


def build(root: Path) -> list[Path]:
    (root / "parts").mkdir()
    (root / "parts" / "__init__.py").write_text("")
    files = [root / "parts" / "__init__.py"]
    for index in range(MODULES):
        folder = root / "parts" if index % 2 else root
        path = folder / f"mod{index}.py"
        path.write_text(module_text(index))
        files.append(path)
    imports = [f"from parts import mod{i}" if i % 2 else f"import mod{i}" for i in range(MODULES)]
    entry = root / "train.py"
    entry.write_text(
        "\n".join(imports)
        + "\nimport torch.distributed as dist\n"
        + "dist.init_process_group('nccl')\ndist.destroy_process_group()\n"
    )
    return [entry, *files]


def timed(function: Callable[[], object], repeats: int = 5) -> tuple[float, float]:
    """Median (wall, CPU) seconds over `repeats` runs after one warm-up. CPU time (this
    process and its children) is what a shared, loaded machine does not inflate."""
    function()
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), _cpu()
        function()
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _cpu() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files = build(root)
        lines = sum(len(path.read_text().splitlines()) for path in files)
        result = lint_script("train.py", root, Context(nodes=2, nproc_per_node=8))
        assert len(result.files) == len(files), "every module was followed"

        def command() -> object:
            argv = [sys.executable, "-m", "clusterkit", "lint", "--nodes", "2", "train.py"]
            return subprocess.run(argv, cwd=root, capture_output=True, check=False)

        def anchor() -> object:
            argv = [sys.executable, "-m", "py_compile", *map(str, files)]
            return subprocess.run(argv, cwd=root, capture_output=True, check=True)

        ours, theirs = timed(command), timed(anchor)
        alone = timed(lambda: lint_script("train.py", root, Context(2, 8)))
    print(f"project: {len(files)} files, {lines} lines, {len(result.findings)} findings")
    for name, (wall, cpu) in (
        ("python -m clusterkit lint", ours),
        ("python -m py_compile (anchor)", theirs),
        ("lint_script alone (in-process)", alone),
    ):
        print(f"{name}: {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU")
    print(f"lint / anchor: {ours[1] / theirs[1]:.2f} (CPU); "
          f"lint CPU / target {TARGET_S * 1000:.0f} ms: {ours[1] / TARGET_S:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
