"""The composer inlines node libraries that import other libraries: each once, its
dependencies before it, the prelude first; a cycle, an unknown module or a name two inlined
modules define is refused. And every composed program still runs where clusterkit is not
installed: nothing it reads is left undefined once its imports are gone."""

from __future__ import annotations

import builtins
import subprocess
import symtable
import sys
from collections.abc import Iterator

import pytest

from clusterkit.transport.nodescript import (
    LIBRARIES,
    STANDALONE,
    compose,
    compose_standalone,
    library_order,
    node_script,
    refuse_clashes,
)
from tests.unit.node.test_node_scripts import COMPOSED, NODE_PYTHON

PRELUDE_LINE = "from clusterkit.node.prelude import emit\n"
PROGRAMS = tuple(name.removesuffix(".py") for name in COMPOSED) + STANDALONE


def marker(module: str) -> str:
    return f"# --- clusterkit.node.{module} (inserted for the node) ---"


def test_a_library_importing_libraries_comes_after_them_each_once() -> None:
    """A diamond: the probe imports probe_gpu and probe_host, both import probe_common;
    probe_gpu imports nvlink, probe_host kernellog. Each is inserted once, after the
    prelude, its dependencies before it."""
    text = node_script("collector")
    for module in ("probe_common", "probe_gpu", "probe_host", "nvlink", "kernellog"):
        assert text.count(marker(module)) == 1, module
    where = {m: text.index(marker(m)) for m in ("probe_common", "probe_gpu", "probe_host")}
    assert text.index("# --- end of clusterkit.node.prelude") < where["probe_common"]
    assert (
        where["probe_common"] < where["probe_gpu"] and where["probe_common"] < where["probe_host"]
    )
    assert text.index(marker("nvlink")) < where["probe_gpu"]
    assert text.index(marker("kernellog")) < where["probe_host"]
    assert "from clusterkit.node" not in text


def test_library_order_is_topological() -> None:
    chain = {"a": ["b"], "b": ["c"], "c": []}
    assert library_order(["a"], chain.__getitem__) == ["c", "b", "a"]
    diamond = {"top": ["left", "right"], "left": ["base"], "right": ["base"], "base": []}
    assert library_order(["top"], diamond.__getitem__) == ["base", "left", "right", "top"]
    assert library_order(["right", "top"], diamond.__getitem__) == ["base", "right", "left", "top"]


@pytest.mark.parametrize(
    ("imports", "cycle"),
    [
        ({"a": ["b"], "b": ["a"]}, "a -> b -> a"),
        ({"a": ["b"], "b": ["c"], "c": ["b"]}, "b -> c -> b"),
        ({"a": ["a"]}, "a -> a"),
    ],
)
def test_a_cycle_of_libraries_is_refused_by_name(imports: dict[str, list[str]], cycle: str) -> None:
    with pytest.raises(ValueError, match=f"in a cycle: {cycle}$"):
        library_order(["a"], imports.__getitem__)


def test_an_unknown_module_is_refused() -> None:
    with pytest.raises(ValueError, match="not a node library: 'nosuch'"):
        compose(PRELUDE_LINE + "from clusterkit.node.nosuch import x\n")
    with pytest.raises(ValueError, match="not a node library: 'collector'"):
        library_order(["collector"])


def test_a_name_two_inlined_modules_define_is_refused() -> None:
    """Composed, they share one namespace: the second would silently replace the first."""
    prelude = r"'run_tool' is defined by both clusterkit\.node\.prelude"
    with pytest.raises(ValueError, match=prelude):
        compose(PRELUDE_LINE + "def run_tool(argv, timeout):\n    return ''\n")
    with pytest.raises(
        ValueError, match=r"'GPU_FIELDS' is defined by both clusterkit\.node\.probe_gpu"
    ):
        compose(
            PRELUDE_LINE + "from clusterkit.node.probe_gpu import parse_gpu_csv\nGPU_FIELDS = ()\n"
        )
    with pytest.raises(ValueError, match="'LIMIT' is defined by both one and two"):
        refuse_clashes({"one": "LIMIT: int = 3\n", "two": "class LIMIT:\n    pass\n"})
    refuse_clashes({"one": "x = 1\nif x == 2:\n    pass\n", "two": "def f(y=1):\n    x = y\n"})


def test_a_library_wanting_annotations_needs_a_program_that_starts_with_them() -> None:
    """Its own `from __future__` line cannot land mid-file: it is dropped, so the program
    must carry it."""
    line = "from clusterkit.node.bench_common import parse_size\n"
    with pytest.raises(ValueError, match="annotations"):
        compose(PRELUDE_LINE + line)
    text = compose("from __future__ import annotations\n" + PRELUDE_LINE + line)
    assert text.count("from __future__") == 1 and text.startswith("from __future__")


def test_a_standalone_program_gets_its_libraries_without_the_prelude() -> None:
    text = node_script("bench_worker")
    assert "# --- clusterkit.node.prelude" not in text and "from clusterkit.node" not in text
    for module in ("bench_common", "bench_rendezvous", "bench_measure", "bench_result"):
        assert text.count(marker(module)) == 1, module
    assert text.count("from __future__ import annotations") == 1
    compile(text, "bench_worker", "exec", flags=0, dont_inherit=True)
    with pytest.raises(ValueError, match="standalone"):
        compose_standalone(PRELUDE_LINE)
    with pytest.raises(ValueError, match="uses the prelude"):  # probe_common: run_tool's error
        compose_standalone("from clusterkit.node.probe_common import run_parallel\n")
    assert compose_standalone("import os\n") == "import os\n"


def test_every_library_is_a_file_and_composed_into_a_program() -> None:
    composed = "".join(node_script(program) for program in PROGRAMS)
    assert [m for m in LIBRARIES if marker(m) not in composed] == []


def _tables(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    yield table
    for child in table.get_children():
        yield from _tables(child)


def unresolved(text: str) -> set[str]:
    """Names the text reads as globals that it never binds and builtins lack."""
    top = symtable.symtable(text, "composed", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    known = bound | set(dir(builtins)) | {"__file__"}
    return {
        symbol.get_name()
        for table in _tables(top)
        for symbol in table.get_symbols()
        if symbol.is_referenced() and (table is top or symbol.is_global())
        if symbol.get_name() not in known
    }


def test_the_check_for_unresolved_names_has_teeth() -> None:
    text = (
        "import os\ndef f(a):\n    return os.sep + a + missing + [b for b in LATER]\nLATER = ()\n"
    )
    assert unresolved(text) == {"missing"}


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_composed_program_reads_no_name_it_lacks(program: str) -> None:
    """Once its imports of node modules are gone, every global it reads is its own."""
    assert unresolved(node_script(program)) == set()


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_composed_program_loads_with_no_clusterkit_on_the_path(program: str) -> None:
    """Its top level runs under an interpreter that cannot import clusterkit (-I -S: no
    site-packages, no current directory), for the oldest Python syntax promised."""
    text = node_script(program)
    compile(text, program, "exec", flags=0, dont_inherit=True, _feature_version=NODE_PYTHON[1])
    code = (
        "import sys\n"
        "assert 'clusterkit' not in sys.modules\n"
        "exec(compile(sys.stdin.read(), 'composed', 'exec'), {'__name__': 'composed'})\n"
        "import importlib.util\n"
        "print(importlib.util.find_spec('clusterkit') is None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        input=text, capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "True"
