"""How a node program travels, the one way every program in clusterkit/node/ goes: its text
composed with the prelude, started behind one bootstrap, and its result read back (or the one
reason there is none).

A node program imports its runtime like any module (`from clusterkit.node.prelude import
emit, run_tool`), so it is importable and tested where clusterkit is installed. Nodes may lack
clusterkit, so the text they are sent has that line replaced by the prelude itself: one
stdlib-only file with the same helpers as every other node program (`node_script`). A program
may also import node libraries (LIBRARIES: code two programs share, such as the kernel-log
parser the probe and the launch runner both read with, or one concern of a program, such as
one fact of the probe), and a library other libraries; each follows the prelude's text once,
its dependencies before it (a cycle is refused), its own imports of the prelude and of other
libraries dropped, so two programs judge the same lines with one parser. Composed, they share
one namespace: a top-level name two of them define is refused. That text
goes over stdin behind BOOTSTRAP (`shipment`, `run_node_script`), or as `-c` for the srun
relay, whose stdin is the step's conversation. Composed once per process; a regex, not
`ast`, keeps it cheap.

Running it, this is the one place that knows how a node program fails: killed at its
deadline, exited without a result (its interpreter missing, a crash), a frame cut short or
not a JSON object, or the program's own error report (`{"error": ...}`). Stages word their
findings from the message. Part of the transport layer, as what travels: the srun transport
ships its relay composed here.
"""

from __future__ import annotations

import functools
import importlib.util
import marshal
import re
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, NamedTuple

from clusterkit import framing
from clusterkit.errors import TransportError
from clusterkit.transport.base import CommandResult, Deadline, Transport

NODE_PACKAGE = "clusterkit.node"
PRELUDE = f"{NODE_PACKAGE}.prelude"
# Node modules a program may import beside the prelude (a library may import others): each
# inserted once after the prelude, its dependencies before it.
LIBRARIES = (
    "kernellog",
    "nvlink",
    "probe_common",
    "probe_gpu",
    "probe_host",
    "probe_python",
    "probe_net",
    "probe_devices",
    "bench_common",
    "bench_rendezvous",
    "bench_measure",
    "bench_result",
    "bench_table",
    "launch_watch",
    "launch_sitecustomize",
    "launch_records",
    "launch_processes",
)
# Programs that frame a result of their own, with no prelude: their libraries are inserted
# where the first import of one stood (the bench worker, which torchrun starts).
STANDALONE = ("bench_worker",)
# The import at the top level of a program (column 0), on one line or parenthesised.
_IMPORT = re.compile(r"^from clusterkit\.node\.prelude import (?:\([^)]*\)|[^\n(]*)\n", re.M)
_LIBRARY_IMPORT = re.compile(
    r"^from clusterkit\.node\.(?P<module>[a-z][a-z0-9_]*) import (?:\([^)]*\)|[^\n(]*)\n", re.M
)
_DOCSTRING = re.compile(r'\A"""(?:.|\n)*?"""\n')
_FUTURE = re.compile(r"^from __future__ import annotations\n", re.M)
_PROGRAM = re.compile(r"[a-z][a-z0-9_]*")
# A name bound at column 0: a def, a class or an assignment (a regex, not `ast`: cheap; its
# leading newline, not `^`, lets the engine skip to each line).
_TOP_NAME = re.compile(r"\n(?:(?:def|class) ([A-Za-z_]\w*)|([A-Za-z_]\w*) *(?::[^=\n]*)?=(?!=))")


@functools.cache
def _node_file(name: str) -> str:
    """The text of clusterkit/node/NAME, read once."""
    return resources.files(NODE_PACKAGE).joinpath(name).read_text()


def _marked(module: str, body: str) -> str:
    return f"# --- {module} (inserted for the node) ---\n{body}\n# --- end of {module} ---\n"


@functools.cache
def prelude_source() -> str:
    """The prelude as it is inserted: its module docstring dropped, its ends marked."""
    text = _node_file("prelude.py")
    return _marked(PRELUDE, _DOCSTRING.sub("", text, count=1).strip())


class _Library(NamedTuple):
    """A node library as read: its body (docstring, imports of the prelude and of other
    libraries, `from __future__ import annotations` dropped), the libraries it imports,
    whether it wanted annotations (then the program must start with that line, which cannot
    land mid-file) and whether it uses the prelude."""

    body: str
    needs: tuple[str, ...]
    future: bool
    prelude: bool


@functools.cache
def _library(module: str) -> _Library:
    if module not in LIBRARIES:
        raise ValueError(f"not a node library: {module!r}")
    text = _DOCSTRING.sub("", _node_file(f"{module}.py"), count=1)
    body = _IMPORT.sub("", text, count=1)
    needs = tuple(m.group("module") for m in _LIBRARY_IMPORT.finditer(body))
    bare = _LIBRARY_IMPORT.sub("", _FUTURE.sub("", body)).strip()
    return _Library(bare, needs, bool(_FUTURE.search(body)), body != text)


@functools.cache
def library_source(module: str) -> str:
    """A node library as it is inserted: its docstring and its imports of the prelude and
    of other libraries dropped (those are inserted before it), its ends marked."""
    return _marked(f"{NODE_PACKAGE}.{module}", _library(module).body)


def library_order(
    modules: Sequence[str], imports: Callable[[str], Sequence[str]] | None = None
) -> list[str]:
    """`modules` and every library they import (`imports`: a library's own imports, read
    from its file unless given), each once, dependencies first (a depth-first topological
    order); ValueError naming a cycle, or a module that is no library."""
    needs = imports or (lambda module: _library(module).needs)
    order: list[str] = []
    path: list[str] = []

    def visit(module: str) -> None:
        if module in order:
            return
        if module in path:
            cycle = " -> ".join([*path[path.index(module) :], module])
            raise ValueError(f"node libraries import each other in a cycle: {cycle}")
        path.append(module)
        for needed in needs(module):
            visit(needed)
        path.pop()
        order.append(module)

    for module in modules:
        visit(module)
    return order


def top_level_names(text: str) -> set[str]:
    """Names a module binds at column 0 (defs, classes, assignments)."""
    return {m.group(1) or m.group(2) for m in _TOP_NAME.finditer("\n" + text)}


def refuse_clashes(parts: dict[str, str]) -> None:
    """Composed, every module shares one namespace: a name two of them bind would silently
    override the first, so it is refused."""
    owner: dict[str, str] = {}
    for module, text in parts.items():
        for name in sorted(top_level_names(text)):
            if name in owner:
                raise ValueError(f"{name!r} is defined by both {owner[name]} and {module}")
            owner[name] = module


def _insertion(source: str, *, prelude: bool) -> tuple[str, str]:
    """The source with its imports of node libraries removed, and what goes in their
    place: the prelude (if wanted) then each library, dependencies first."""
    wanted: list[str] = []

    def take(match: re.Match[str]) -> str:
        module = match.group("module")
        if module == "prelude":
            return match.group(0)
        if module in wanted:
            raise ValueError(f"a node script imports {NODE_PACKAGE}.{module} twice")
        wanted.append(module)
        return ""

    source = _LIBRARY_IMPORT.sub(take, source)
    order = library_order(wanted)
    if not prelude and any(_library(m).prelude for m in order):
        raise ValueError("a node library uses the prelude; a standalone program has none")
    if any(_library(m).future for m in order) and not _FUTURE.search(source):
        raise ValueError(
            "a node library wants `from __future__ import annotations`; the program lacks it"
        )
    parts = {NODE_PACKAGE + "." + m: _library(m).body for m in order}
    if prelude:
        parts = {PRELUDE: prelude_source(), **parts}
    refuse_clashes({**parts, "the program": source})
    head = prelude_source() if prelude else ""
    return source, head + "".join(library_source(m) for m in order)


@functools.cache
def compose(source: str) -> str:
    """`source` with its one top-level prelude import replaced by the prelude, followed by
    the node libraries it imports and theirs (each import line removed)."""
    found = list(_IMPORT.finditer(source))
    if len(found) != 1:
        raise ValueError(f"a node script imports {PRELUDE} once at its top level, not {len(found)}")
    source, inserted = _insertion(source, prelude=True)
    found = list(_IMPORT.finditer(source))
    return source[: found[0].start()] + inserted + source[found[0].end() :]


@functools.cache
def compose_standalone(source: str) -> str:
    """`source`, which imports no prelude, with the node libraries it imports (and theirs)
    inserted where its first import of one stood."""
    if _IMPORT.search(source):
        raise ValueError(f"a standalone node program imports no {PRELUDE}")
    first = _LIBRARY_IMPORT.search(source)
    if first is None:
        return source
    source, inserted = _insertion(source, prelude=False)
    return source[: first.start()] + inserted + source[first.start() :]


@functools.cache
def node_script(program: str) -> str:
    """The composed text of the node program clusterkit/node/PROGRAM.py, e.g. "collector"."""
    if not _PROGRAM.fullmatch(program) or program == "prelude" or program in LIBRARIES:
        raise ValueError(f"not a node program: {program!r}")
    text = _node_file(f"{program}.py")
    return compose_standalone(text) if program in STANDALONE else compose(text)


# How every node script starts: `python -S -c BOOTSTRAP LENGTH CODE_LENGTH ARGS_LENGTH MAGIC`,
# on stdin the script's text, then CODE_LENGTH bytes of the same script compiled here and
# marshalled, then ARGS_LENGTH bytes of its arguments (each ended by a NUL). The arguments
# travel on stdin, never in the argv: every user of a node can read a command line in /proc,
# and a script's arguments may name a run's secrets (the launch token) or its folders.
# A node whose interpreter has this one's bytecode MAGIC loads the code (compiling the
# probe's 30 kB costs a node 12 ms of CPU, a third of its Python work); any other compiles
# the text, as one string, which costs less than `python -` (which tokenizes from the
# stream). It reads exactly the bytes announced, so stdin stays open for a conversation that
# follows (the network and launch stages talk to their script). -S: node scripts are stdlib
# only (the probe adds site-packages itself), and skipping site saves each node every .pth
# file's cost.
BOOTSTRAP = (
    "import os,sys\n"
    "n=int(sys.argv[1]);c=n+int(sys.argv[2]);m=c+int(sys.argv[3]);s=b''\n"
    "while len(s)<m:\n"
    " r=os.read(0,m-len(s))\n"
    " if not r:sys.exit('clusterkit: the node script was cut short on stdin')\n"
    " s+=r\n"
    "a=[x.decode('utf-8','surrogateescape') for x in s[c:m].split(b'\\0')[:-1]]\n"
    "if c>n and getattr(sys.modules.get('_frozen_importlib_external'),'MAGIC_NUMBER',b'')"
    ".hex()==sys.argv[4]:\n"
    " import marshal;s=marshal.loads(s[n:c])\n"
    "else:s=compile(s[:n],'clusterkit-node-script','exec')\n"
    "sys.argv[1:]=a\n"
    "del a,c,m,n\n"
    "exec(s)\n"
)
_MAGIC = importlib.util.MAGIC_NUMBER.hex()


@functools.lru_cache(maxsize=16)
def _bytecode(script: bytes) -> bytes:
    """The script compiled as a node without -O would compile it; empty when it does not
    compile (the node then compiles the text and reports the error as its own)."""
    try:
        code = compile(script, "clusterkit-node-script", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError):
        return b""
    return marshal.dumps(code)


def shipment(interpreter: str, script: bytes, args: Sequence[str]) -> tuple[list[str], bytes]:
    """The argv that runs `script` with `args` on a node, and what its stdin must start
    with: the text, the bytecode, the arguments (none of them in the argv). One call gives
    both: marshal's bytes can differ from one dump to the next, and the lengths in the argv
    must be those of the bytes sent."""
    code = _bytecode(script)
    packed = b"".join(arg.encode("utf-8", "surrogateescape") + b"\0" for arg in args)
    lengths = [str(len(script)), str(len(code)), str(len(packed))]
    return [interpreter, "-S", "-c", BOOTSTRAP, *lengths, _MAGIC], script + code + packed


class ScriptFailure(Exception):
    """A node script gave no usable result. `failure`: timeout; exit (a status other than 0
    and no result); no-result (exit 0, no frame); broken (a frame cut short, not JSON, not an
    object, or lost past the output cap); error (the script's own error report)."""

    def __init__(self, failure: str, message: str) -> None:
        super().__init__(message)
        self.failure, self.message = failure, message


class NodeScriptError(TransportError):
    """A ScriptFailure on a host, for callers that handle a host's TransportError."""

    def __init__(self, host: str, failure: ScriptFailure) -> None:
        kind = "timeout" if failure.failure == "timeout" else "protocol"
        super().__init__(host, kind, failure.message)
        self.failure = failure.failure


def decode_result(output: bytes, what: str, *, error_report: bool = True) -> dict[str, Any]:
    """The object in the last frame of `output`. ScriptFailure when there is no frame, it is
    broken, or (with `error_report`) it is the script's own `{"error": ...}`."""
    try:
        payload = framing.decode(output)
    except framing.NoFrame:
        raise ScriptFailure("no-result", f"{what} ended without a result") from None
    except framing.FrameError as error:
        raise ScriptFailure("broken", f"{what} sent a broken result: {error}") from None
    return _accepted(payload, what, error_report)


def _accepted(payload: Any, what: str, error_report: bool) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise ScriptFailure("broken", f"{what} sent a result that is not an object")
    if error_report and payload.get("error"):
        raise ScriptFailure("error", str(payload["error"]))
    return payload


def failure_of(
    result: CommandResult,
    what: str,
    *,
    interpreter: str | None = None,
    frame: framing.FrameError | None = None,
) -> ScriptFailure:
    """Why a script that ended (or was killed) left no result: `frame` is what decoding
    its output said, if that was tried."""
    code = result.exit_code
    if result.timed_out or code is None:
        return ScriptFailure("timeout", f"{what} did not finish in time (killed at the deadline)")
    tail = result.stderr_tail()
    if code == 127 and interpreter:
        detail = f"{interpreter} not found on the node (set ansible_python_interpreter)"
        return ScriptFailure("exit", f"{what} failed (exit 127): {detail}")
    if code != 0:
        detail = tail or (f"killed by signal {-code}" if code < 0 else "nothing on stderr")
        return ScriptFailure("exit", f"{what} failed (exit {code}): {detail}")
    if result.truncated:
        return ScriptFailure("broken", f"{what} printed more than the output cap; result lost")
    if frame is not None and not isinstance(frame, framing.NoFrame):
        return ScriptFailure("broken", f"{what} sent a broken result: {frame}")
    ended = f"{what} ended without a result"
    return ScriptFailure("no-result", f"{ended}: {tail}" if tail else ended)


def read_result(
    result: CommandResult, what: str, *, interpreter: str | None = None, error_report: bool = True
) -> dict[str, Any]:
    """The result object of a finished run, or ScriptFailure with the reason."""
    if result.timed_out:
        raise failure_of(result, what)
    try:
        payload = framing.decode(result.stdout)
    except framing.FrameError as error:
        raise failure_of(result, what, interpreter=interpreter, frame=error) from None
    return _accepted(payload, what, error_report)


def run_node_script(
    transport: Transport,
    script: str,
    args: Sequence[str],
    *,
    interpreter: str,
    deadline: Deadline,
    what: str,
    error_report: bool = True,
) -> dict[str, Any]:
    """Run a composed node script (`node_script`) behind BOOTSTRAP, bounded by `deadline`;
    its result object, or NodeScriptError naming the host and why."""
    data = script.encode()
    argv, stdin = shipment(interpreter, data, args)
    result = transport.run(argv, stdin=stdin, deadline=deadline)
    try:
        return read_result(result, what, interpreter=interpreter, error_report=error_report)
    except ScriptFailure as failure:
        raise NodeScriptError(transport.host, failure) from None
