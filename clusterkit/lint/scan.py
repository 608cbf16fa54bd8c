"""One walk over a parsed file: what the rules ask about it, with where each thing is.

The walk is iterative (a deeply nested file cannot exhaust the stack) and keeps, for each
call, the context the rules need: the function it is in, whether it sits in an `except`
block, and whether in the body of an `if` that only rank 0 enters. Imported names are
resolved to their full dotted names (`dist.barrier` -> `torch.distributed.barrier`), so a
rule never depends on how the script spells its imports.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field, replace

LAUNCHER_VARIABLES = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"})
RANK_NAMES = frozenset({"rank", "global_rank", "world_rank", "local_rank", "RANK", "LOCAL_RANK"})
MAIN_PROCESS = frozenset({"is_main_process", "is_global_zero", "is_local_main_process"})


@dataclass(frozen=True)
class Call:
    name: str  # the resolved dotted name, or the method's name after "." (".set_epoch")
    node: ast.Call
    scope: int  # id of the enclosing function (0: the module)
    in_except: bool
    rank_branch: ast.If | None  # the `if rank == 0:` whose body holds the call
    in_branch: bool  # inside an `if` or `else` of its function: it may not run


@dataclass
class Source:
    """What the rules read of one file."""

    shown: str
    calls: list[Call] = field(default_factory=list)
    bindings: dict[tuple[int, str], list[ast.expr]] = field(default_factory=dict)
    env_writes: list[tuple[str, ast.expr, int]] = field(default_factory=list)
    strings: set[str] = field(default_factory=set)
    imports: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)
    import_nodes: list[ast.Import | ast.ImportFrom] = field(default_factory=list)
    by_name: dict[str, list[ast.expr]] = field(default_factory=dict)

    def dotted(self, node: ast.expr) -> str | None:
        """`dist.init_process_group` as `torch.distributed.init_process_group` (a loop: a
        chain of thousands of attributes parses, and must not exhaust the stack)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute) and len(parts) < 32:
            parts.append(node.attr)
            node = node.value
        if not parts and not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id, node.id) if isinstance(node, ast.Name) else ""
        return ".".join([base, *reversed(parts)])

    def values(self, scope: int, name: str) -> list[ast.expr]:
        """What `name` is bound to in `scope`, else at module level."""
        return self.bindings.get((scope, name)) or self.bindings.get((0, name)) or []

    def bound_anywhere(self, name: str) -> list[ast.expr]:
        """What `name` is bound to in any scope (an index built once per file)."""
        if not self.by_name:
            for (_, bound), values in self.bindings.items():
                self.by_name.setdefault(bound, []).extend(values)
        return self.by_name.get(name, [])


@dataclass(frozen=True)
class _At:
    scope: int
    in_except: bool
    rank_branch: ast.If | None
    in_branch: bool = False
    guarded: bool = False  # under `if "MASTER_ADDR" not in os.environ:` and the like


# Nodes no rule reads, and that hold nothing a rule reads: a third of a file's nodes.
_SKIP = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_CONTEXTS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ExceptHandler, ast.If)


def scan_source(tree: ast.Module, shown: str) -> Source:
    """One pass in source order; calls are named once the whole file's imports are known."""
    source = Source(shown)
    calls: list[tuple[ast.Call, _At]] = []
    stack: list[tuple[ast.AST, _At]] = [(tree, _At(0, False, None))]
    while stack:
        node, at = stack.pop()
        if isinstance(node, ast.Call):
            calls.append((node, at))
        else:
            _record(node, at, source)
        children = _children(node)
        if isinstance(node, _CONTEXTS):
            contexts = _inside(node, at, source)
            stack.extend((child, contexts(child)) for child in reversed(children))
        else:
            stack.extend((child, at) for child in reversed(children))
    for node, at in calls:
        if name := source.dotted(node.func):
            source.calls.append(
                Call(name, node, at.scope, at.in_except, at.rank_branch, at.in_branch)
            )
            if not at.guarded:
                _env_call(name, node, source)
    return source


def _children(node: ast.AST) -> list[ast.AST]:
    """ast.iter_child_nodes without the nodes in _SKIP, as a list (a third faster)."""
    found: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            found.extend(v for v in value if isinstance(v, ast.AST) and not isinstance(v, _SKIP))
        elif isinstance(value, ast.AST) and not isinstance(value, _SKIP):
            found.append(value)
    return found


def _record_import(node: ast.Import | ast.ImportFrom, source: Source) -> None:
    source.import_nodes.append(node)
    if isinstance(node, ast.Import):
        for alias in node.names:
            source.imports.add(alias.name.split(".")[0])
            if alias.asname:
                source.aliases[alias.asname] = alias.name
    elif node.module and not node.level:
        source.imports.add(node.module.split(".")[0])
        for alias in node.names:
            source.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def _inside(parent: ast.AST, at: _At, source: Source) -> Callable[[ast.AST], _At]:
    """The context of each child of `parent`, worked out once per parent (an `if` with a
    large test and a long body costs one look at the test, not one per statement)."""
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        scope = _At(id(parent), False, None)
        return lambda child: scope
    if isinstance(parent, ast.ExceptHandler):
        handled = replace(at, in_except=True)
        return lambda child: at if child is parent.type else handled
    if not isinstance(parent, ast.If) or _is_main_guard(parent.test):
        return lambda child: at
    guarded = at.guarded or _names_launcher_variable(parent.test)
    orelse = replace(at, in_branch=True, guarded=guarded)
    body = orelse
    if rank_zero_test(parent.test, at.scope, source):
        body = replace(orelse, rank_branch=parent)
    first = {id(child) for child in parent.body}
    return lambda child: at if child is parent.test else body if id(child) in first else orelse


def _is_main_guard(test: ast.expr) -> bool:
    """`if __name__ == "__main__":` is how a script runs, not a branch of it."""
    return isinstance(test, ast.Compare) and getattr(test.left, "id", None) == "__name__"


def _names_launcher_variable(test: ast.expr) -> bool:
    """`if "MASTER_ADDR" not in os.environ:`: what follows runs only without a launcher."""
    return any(
        isinstance(node, ast.Constant) and node.value in LAUNCHER_VARIABLES
        for node in ast.walk(test)
    )


def _record(node: ast.AST, at: _At, source: Source) -> None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        _record_import(node, source)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 64:
        source.strings.add(node.value)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            _bind(target, node.value, at, source)
    elif isinstance(node, ast.arg):
        source.bindings.setdefault((at.scope, node.arg), []).append(ast.Constant(None))


def _bind(target: ast.expr, value: ast.expr, at: _At, source: Source) -> None:
    if isinstance(target, ast.Name):
        source.bindings.setdefault((at.scope, target.id), []).append(value)
    elif (
        isinstance(target, ast.Subscript)
        and not at.guarded
        and source.dotted(target.value) == "os.environ"
    ):
        key = target.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            source.env_writes.append((key.value, value, target.lineno))


def _env_call(name: str, node: ast.Call, source: Source) -> None:
    """`os.environ.update(MASTER_ADDR=...)`, `os.environ.update({...})`, `os.putenv(K, V)`."""
    if name == "os.environ.update":
        for keyword in node.keywords:
            if keyword.arg:
                source.env_writes.append((keyword.arg, keyword.value, node.lineno))
        for arg in node.args:
            if isinstance(arg, ast.Dict):
                for key, value in zip(arg.keys, arg.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        source.env_writes.append((key.value, value, node.lineno))
    elif name == "os.putenv" and len(node.args) == 2:
        key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            source.env_writes.append((key.value, node.args[1], node.lineno))


def is_global_rank(node: ast.expr, scope: int, source: Source, depth: int = 0) -> bool:
    """`dist.get_rank()`, `int(os.environ["RANK"])`, or a name bound only to those."""
    if depth > 4:
        return False
    if isinstance(node, ast.Call):
        name = source.dotted(node.func) or ""
        if name == "int" and len(node.args) == 1:
            return is_global_rank(node.args[0], scope, source, depth + 1)
        if name.startswith("torch.distributed.") and name.endswith(".get_rank"):
            return True
        if name in ("os.environ.get", "os.getenv") and node.args:
            return _is_string(node.args[0], "RANK")
        return False
    if isinstance(node, ast.Subscript) and source.dotted(node.value) == "os.environ":
        return _is_string(node.slice, "RANK")
    if isinstance(node, ast.Name):
        values = source.values(scope, node.id)
        return bool(values) and all(is_global_rank(v, scope, source, depth + 1) for v in values)
    return False


def _is_string(node: ast.expr, text: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == text


def _rankish(node: ast.expr, scope: int, source: Source) -> bool:
    if isinstance(node, ast.Name) and node.id in RANK_NAMES:
        return True
    if isinstance(node, ast.Attribute) and node.attr in RANK_NAMES:
        return True
    if isinstance(node, ast.Call) and (source.dotted(node.func) or "").endswith("get_rank"):
        return True
    return is_global_rank(node, scope, source)


def rank_zero_test(test: ast.expr, scope: int, source: Source) -> bool:
    """`rank == 0`, `0 == dist.get_rank()`, `not local_rank`, `accelerator.is_main_process`."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        zero = [
            side for side in (left, right) if isinstance(side, ast.Constant) and side.value == 0
        ]
        other = right if zero and zero[0] is left else left
        return bool(zero) and _rankish(other, scope, source)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _rankish(test.operand, scope, source)
    if isinstance(test, ast.Call):
        test = test.func
    return isinstance(test, (ast.Attribute, ast.Name)) and (
        (test.attr if isinstance(test, ast.Attribute) else test.id) in MAIN_PROCESS
    )
