"""How a node program travels, the one way every program in clusterkit/node/ goes: its text
composed with the prelude, started behind one bootstrap, and its result read back (or the one
reason there is none).

A node program imports its runtime like any module (`from clusterkit.node.prelude import
emit, run_tool`), so it is importable and tested where clusterkit is installed. Nodes may lack
clusterkit, so the text they are sent has that line replaced by the prelude itself: one
stdlib-only file with the same helpers as every other node program (`node_script`). A program
may also import a node library (LIBRARIES: code two programs share, such as the kernel-log
parser the probe and the launch runner both read with); its text follows the prelude's, its
own import of the prelude dropped, so two programs judge the same lines with one parser. That text
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
from collections.abc import Sequence
from importlib import resources
from typing import Any

from clusterkit import framing
from clusterkit.errors import TransportError
from clusterkit.transport.base import CommandResult, Deadline, Transport

NODE_PACKAGE = "clusterkit.node"
PRELUDE = f"{NODE_PACKAGE}.prelude"
# Node modules a program may import beside the prelude: inserted after it, once each.
LIBRARIES = ("kernellog", "nvlink")
# The import at the top level of a program (column 0), on one line or parenthesised.
_IMPORT = re.compile(r"^from clusterkit\.node\.prelude import (?:\([^)]*\)|[^\n(]*)\n", re.M)
_LIBRARY_IMPORT = re.compile(
    r"^from clusterkit\.node\.(?P<module>[a-z][a-z0-9_]*) import (?:\([^)]*\)|[^\n(]*)\n", re.M
)
_DOCSTRING = re.compile(r'\A"""(?:.|\n)*?"""\n')
_PROGRAM = re.compile(r"[a-z][a-z0-9_]*")


@functools.cache
def prelude_source() -> str:
    """The prelude as it is inserted: its module docstring dropped, its ends marked."""
    text = resources.files(NODE_PACKAGE).joinpath("prelude.py").read_text()
    body = _DOCSTRING.sub("", text, count=1).strip()
    return f"# --- {PRELUDE} (inserted for the node) ---\n{body}\n# --- end of {PRELUDE} ---\n"


@functools.cache
def library_source(module: str) -> str:
    """A node library as it is inserted: its docstring and its import of the prelude dropped
    (the prelude is already there), its ends marked."""
    if module not in LIBRARIES:
        raise ValueError(f"not a node library: {module!r}")
    text = resources.files(NODE_PACKAGE).joinpath(f"{module}.py").read_text()
    body = _IMPORT.sub("", _DOCSTRING.sub("", text, count=1), count=1).strip()
    if _LIBRARY_IMPORT.search(body):
        raise ValueError(f"the node library {module} imports another node module")
    name = f"{NODE_PACKAGE}.{module}"
    return f"# --- {name} (inserted for the node) ---\n{body}\n# --- end of {name} ---\n"


@functools.cache
def compose(source: str) -> str:
    """`source` with its one top-level prelude import replaced by the prelude, followed by
    the node libraries it imports (each import line removed)."""
    found = list(_IMPORT.finditer(source))
    if len(found) != 1:
        raise ValueError(f"a node script imports {PRELUDE} once at its top level, not {len(found)}")
    libraries: dict[str, str] = {}

    def take(match: re.Match[str]) -> str:
        module = match.group("module")
        if module == "prelude":
            return match.group(0)
        if module in libraries:
            raise ValueError(f"a node script imports {NODE_PACKAGE}.{module} twice")
        libraries[module] = library_source(module)  # ValueError for a module that is none
        return ""

    source = _LIBRARY_IMPORT.sub(take, source)
    found = list(_IMPORT.finditer(source))
    inserted = prelude_source() + "".join(libraries.values())
    return source[: found[0].start()] + inserted + source[found[0].end() :]


@functools.cache
def node_script(program: str) -> str:
    """The composed text of the node program clusterkit/node/PROGRAM.py, e.g. "collector"."""
    if not _PROGRAM.fullmatch(program) or program == "prelude" or program in LIBRARIES:
        raise ValueError(f"not a node program: {program!r}")
    return compose(resources.files(NODE_PACKAGE).joinpath(f"{program}.py").read_text())


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
