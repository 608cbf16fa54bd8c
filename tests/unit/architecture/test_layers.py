"""Imports point one way: every module of clusterkit/ sits in a layer and imports only from
its own layer or those below, and no modules, nor packages, import each other, directly or
round a loop. Only the commands see the command line's parsed arguments.

Every import counts: at module level, inside functions and under TYPE_CHECKING. The layers
are written down here and in docs/architecture.md ("Layers"), bottom first.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "clusterkit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Bottom first. An entry is one module ("clusterkit.facts") or a package with everything in it
# ("clusterkit.checks.*"); the most specific entry that matches gives a module its layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Shipped to nodes that may lack clusterkit: the standard library only, and the version.
    ("node", ("clusterkit", "clusterkit.node.*")),
    # Shared and pure: errors, exit statuses, words, escaping, versions, private run folders.
    ("base", (
        "clusterkit.errors", "clusterkit.status", "clusterkit.words", "clusterkit.redact",
        "clusterkit.framing", "clusterkit.keyfiles", "clusterkit.versions", "clusterkit.rundir",
        "clusterkit.safefiles", "clusterkit.logs", "clusterkit.data.*",
        "clusterkit.environment",  # the run's streams, variables and folder, handed down by main
        "clusterkit.escape",  # every layer prints node text safely
        "clusterkit.hostlist",  # Slurm's node-name grammar, which the srun transport needs
    )),
    # The Inventory model and its readers, the transports, and how node programs travel.
    # The probe's facts as types, and the checker every node message passes on arrival.
    ("wire", (
        "clusterkit.inventory.*", "clusterkit.transport.*", "clusterkit.facts", "clusterkit.shape",
    )),
    # Pure functions over facts, and the Finding (with its Fix) that everything speaks.
    ("checks", ("clusterkit.checks.*",)),
    # What a stage is, the stages' names, and what the stages of one command share.
    ("stage contract", ("clusterkit.contract.*",)),
    # Each feature with its own stage (<feature>/stage.py) over the contract.
    ("features", (
        "clusterkit.probe.*", "clusterkit.storage.*", "clusterkit.net.*", "clusterkit.bench.*",
        "clusterkit.image.*", "clusterkit.dcgm.*", "clusterkit.cost.*", "clusterkit.provision.*",
        "clusterkit.launch.*",
        "clusterkit.lint.*",  # the training script, read statically and judged for the plan
    )),
    # The `clusterkit` variable's schema checks values with the features' own parsers; the
    # loader reads an inventory and types that variable with it.
    ("settings", ("clusterkit.settings.*",)),
    ("report", ("clusterkit.report.*",)),
    # What composes stages: the runner, the stages that are no feature's (connect, static);
    # Slurm wraps stages in job steps.
    ("stages", ("clusterkit.stages.*", "clusterkit.slurm.*")),
    # Argument definitions: commands are dispatched by name, never imported here.
    ("cli", ("clusterkit.cli.*", "clusterkit.completion")),
    ("commands", ("clusterkit.commands.*",)),
    ("entry", ("clusterkit.__main__",)),
)  # fmt: skip

# Imports that still point up, each with why it is allowed for now: (importer, imported).
EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """The clusterkit modules `name` imports anywhere in its file (a name imported from a
    package is its submodule where one exists, else the package)."""
    known = modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    found = set()
    for target in targets:
        while target not in known and "." in target:
            target = target.rpartition(".")[0]
        if target in known and target != name:
            found.add(target)
    return found


@cache
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imported(name, path)) for name, path in modules().items()}


def layer_of(name: str) -> int | None:
    """The index of the most specific entry matching `name` (an exact module beats a
    package, a deeper package beats a shallower one); None when no entry matches."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if entry == name:
                rank = 1000
            elif entry.endswith(".*") and (name + ".").startswith(entry[:-1]):
                rank = entry.count(".")
            else:
                continue
            if best is None or rank > best[0]:
                best = (rank, index)
    return None if best is None else best[1]


def test_every_module_has_a_layer() -> None:
    missing = [name for name in modules() if layer_of(name) is None]
    assert not missing, f"add these to LAYERS in {Path(__file__).name}: {missing}"


def upward_imports() -> dict[tuple[str, str], str]:
    found = {}
    for name, targets in graph().items():
        own = layer_of(name)
        for target in targets:
            theirs = layer_of(target)
            if own is not None and theirs is not None and theirs > own:
                found[(name, target)] = f"{LAYERS[own][0]} -> {LAYERS[theirs][0]}"
    return found


def test_no_module_imports_from_a_layer_above_it() -> None:
    upward = {pair: why for pair, why in upward_imports().items() if pair not in EXCEPTIONS}
    lines = [f"{a} imports {b} ({why})" for (a, b), why in sorted(upward.items())]
    assert not lines, "\n".join(lines)


def test_every_exception_still_happens() -> None:
    stale = set(EXCEPTIONS) - set(upward_imports())
    assert not stale, f"remove from EXCEPTIONS, they no longer import upward: {sorted(stale)}"


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports: the strongly connected
    components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_modules_import_each_other() -> None:
    loops = cycles(graph())
    assert not loops, "modules that import each other: " + "; ".join(map(" <-> ".join, loops))


def test_the_cycle_finder_finds_pairs_and_loops() -> None:
    edges = {
        "a": frozenset({"b"}), "b": frozenset({"a"}),  # a pair
        "c": frozenset({"d"}), "d": frozenset({"e"}), "e": frozenset({"c"}),  # a loop of three
        "f": frozenset({"a", "c"}),  # reaches both, is in neither
    }  # fmt: skip
    assert sorted(cycles(edges)) == [["a", "b"], ["c", "d", "e"]]


def test_imports_anywhere_in_a_file_count(tmp_path: Path) -> None:
    """The graph sees what every import statement says: in a function, under TYPE_CHECKING,
    a module imported from its package, and relative imports."""
    path = tmp_path / "probe.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "from clusterkit import framing\n"
        "import clusterkit.escape\n"
        "from . import words\n"
        "from .bench import gate\n"
        "if TYPE_CHECKING:\n"
        "    from clusterkit.contract.session import Session\n"
        "def later():\n"
        "    from clusterkit.checks.model import Finding\n"
    )
    assert imported("clusterkit.probe_here", path) == {
        "clusterkit.framing",
        "clusterkit.escape",
        "clusterkit.words",
        "clusterkit.bench.gate",
        "clusterkit.contract.session",
        "clusterkit.checks.model",
    }


def layer_name(module: str) -> str | None:
    index = layer_of(module)
    return None if index is None else LAYERS[index][0]


def test_layer_matching_prefers_the_most_specific_entry() -> None:
    assert layer_name("clusterkit.inventory.model") == "wire"
    assert layer_name("clusterkit.inventory") == "wire"
    assert layer_name("clusterkit.escape") == "base"
    assert layer_name("clusterkit.report.text") == "report"
    assert layer_name("clusterkit.contract.stage") == "stage contract"
    assert layer_name("clusterkit.cli") == "cli"  # a package's __init__ is in the package
    assert layer_name("clusterkit.cli.check") == "cli"
    assert layer_name("clusterkit.reporting") is None  # a prefix of a name is not its package


def test_the_architecture_page_lists_the_same_layers_top_first() -> None:
    section = ARCHITECTURE.read_text().split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| \*\*([\w ]+)\*\* \|", section, re.M)
    assert listed == [name for name, _ in reversed(LAYERS)]


def unit_of(name: str) -> str:
    """The unit a module counts in: its package below clusterkit (`clusterkit.net` for
    `clusterkit.net.firewall.iptables`), or itself for a top-level module."""
    parts = name.split(".")
    if len(parts) < 2 or not (PACKAGE / parts[1]).is_dir():
        return name
    return ".".join(parts[:2])


def packages(edges: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """The import graph of modules, as one between their units (see unit_of)."""
    units: dict[str, set[str]] = {}
    for name, targets in edges.items():
        units.setdefault(unit_of(name), set()).update(unit_of(target) for target in targets)
    return {unit: frozenset(targets - {unit}) for unit, targets in units.items()}


def test_every_package_sits_in_one_layer() -> None:
    """The tree shows the layers: a package's modules all sit in its layer, so no module
    counts apart from its package (a stage contract inside stages/ once made features and
    stages/ import each other)."""
    layers_of: dict[str, set[str]] = {}
    for name in modules():
        layers_of.setdefault(unit_of(name), set()).add(str(layer_name(name)))
    split = {unit: sorted(found) for unit, found in layers_of.items() if len(found) > 1}
    assert not split, f"packages across layers, move the odd modules out: {split}"


_WHERE = re.compile(r"^Layer: (?P<layer>[\w ]+)\. Start at: (?P<start>[\w.]+)\.$", re.M)


def test_every_package_says_what_it_is_and_where_it_starts() -> None:
    """A newcomer opening a package reads what it is, its layer and the file to read first:
    its __init__'s docstring ends `Layer: NAME. Start at: FILE.`, held true here."""
    wrong = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        name = module_name(init)
        found = _WHERE.search(ast.get_docstring(ast.parse(init.read_text())) or "")
        if found is None:
            wrong.append(f"{name}: no `Layer: NAME. Start at: FILE.` line")
        elif found["layer"] != layer_name(name) or not (init.parent / found["start"]).exists():
            wrong.append(f"{name}: says {found[0]!r}, is in {layer_name(name)!r}")
    assert not wrong, "\n".join(wrong)


def test_no_packages_import_each_other() -> None:
    """Packages point one way too: no package imports one that imports it back (the srun
    transport once took its node-name grammar from slurm/, which is built on transports)."""
    loops = cycles(packages(graph()))
    assert not loops, "packages that import each other: " + "; ".join(map(" <-> ".join, loops))


def test_no_package_imports_one_above_it() -> None:
    lines = [
        f"{unit} imports {target}"
        for unit, targets in sorted(packages(graph()).items())
        for target in sorted(targets)
        if (layer_of(target) or 0) > (layer_of(unit) or 0)
    ]
    assert not lines, "\n".join(lines)


def test_a_loop_of_packages_through_their_submodules_is_found() -> None:
    edges = {
        "clusterkit.transport.srun": frozenset({"clusterkit.slurm.hostlist"}),
        "clusterkit.slurm.check": frozenset({"clusterkit.transport.srun"}),
        "clusterkit.slurm.hostlist": frozenset({"clusterkit.errors"}),
        "clusterkit.errors": frozenset(),
    }
    assert cycles(packages(edges)) == [["clusterkit.slurm", "clusterkit.transport"]]


# The command line's own modules: they define, parse and hand over the arguments.
SEES_ARGUMENTS = ("clusterkit.cli.*", "clusterkit.__main__", "clusterkit.commands.*")
# Modules that parse an argv of their own, not the command line's, each with why.
OWN_PARSERS: dict[str, str] = {
    "clusterkit.completion": "writes shell completion from the parser's definitions",
    "clusterkit.bench.__main__": "`torchrun -m clusterkit.bench` on one machine: its own argv",
    "clusterkit.node.bench_worker": "a program on the nodes, started by torchrun with its argv",
    "clusterkit.node.image": "a program on the nodes, with an argv of its own",
}
# argparse's names, and reading flags off an untyped `args` (which once hid the Namespace).
_ARGUMENTS = re.compile(r"\b(argparse|Namespace)\b|\bgetattr\(args\b")


def test_only_the_commands_see_the_parsed_command_line() -> None:
    """Below commands/, code takes typed requests (SlurmRequest, TargetRequest), never the
    argparse Namespace: a renamed flag is then a type error, not a silent getattr default."""
    mentions = [
        name
        for name, path in modules().items()
        if not _sees(name) and name not in OWN_PARSERS and _ARGUMENTS.search(path.read_text())
    ]
    assert not mentions, f"parsed arguments outside the commands: {sorted(mentions)}"
    stale = [name for name in OWN_PARSERS if not _ARGUMENTS.search(modules()[name].read_text())]
    assert not stale, f"remove from OWN_PARSERS, they parse no argv: {stale}"


def _sees(name: str) -> bool:
    return any(
        name == entry or (entry.endswith(".*") and name.startswith(entry[:-1]))
        for entry in SEES_ARGUMENTS
    )
