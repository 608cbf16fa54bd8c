"""The rules: pure functions over the scanned files and the cluster's plan.

A rule speaks only where the mistake is certain from the text: names it cannot follow
(a value passed in from elsewhere, `**kwargs`) keep it silent, and what a framework owns
(Lightning, Accelerate, the Hugging Face Trainer, torchtitan and the like build the sampler,
call set_epoch and tear the process group down) is not asked of the script.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from clusterkit.lint.model import Context, LintFinding, Severity
from clusterkit.lint.scan import Call, Source, is_global_rank

FRAMEWORKS = frozenset({
    "lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "torchtitan",
    "composer", "ignite", "deepspeed", "ray", "mosaicml",
})  # fmt: skip
# Hugging Face owns the loop only through its trainers: a model from `transformers` alone
# leaves the sampler to the script.
TRAINERS = frozenset({"Trainer", "Seq2SeqTrainer", "SFTTrainer", "DPOTrainer", "GRPOTrainer"})
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "127.0.1.1"})
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
    "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
    "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier",
})  # fmt: skip
SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
DATA_LOADERS = frozenset({"DataLoader", "StatefulDataLoader"})


class Project:
    """Every scanned file, and what the rules ask of the whole of it."""

    def __init__(self, sources: list[Source], context: Context) -> None:
        self.sources, self.context = sources, context
        self.strings = {text for s in sources for text in s.strings}
        self.called = {call.name.rpartition(".")[2] for s in sources for call in s.calls}
        imported = {module for s in sources for module in s.imports}
        self.framework = bool(FRAMEWORKS & imported or TRAINERS & self.called)
        self.distributed = self.framework or bool(
            {
                "init_process_group",
                "DistributedDataParallel",
                "fully_shard",
                "FullyShardedDataParallel",
            }
            & self.called
        )

    def calls(self, test: Callable[[str], bool]) -> Iterator[tuple[Source, Call]]:
        for source in self.sources:
            for call in source.calls:
                if test(call.name):
                    yield source, call

    def mentions(self, name: str) -> bool:
        """Called or named anywhere: a helper function, a getattr, a framework's hook."""
        return name in self.called or name in self.strings


def _torch(last: str | frozenset[str], prefix: str = "torch.") -> Callable[[str], bool]:
    names = frozenset({last}) if isinstance(last, str) else last
    return lambda name: name.startswith(prefix) and name.rpartition(".")[2] in names


def _finding(
    rule: str, severity: Severity, source: Source, node: ast.AST, message: str, fix: str
) -> LintFinding:
    return LintFinding(rule, severity, source.shown, getattr(node, "lineno", 1), message, fix)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _has_kwargs(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _local_host(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.strip().lower()
        host = text.removeprefix("tcp://").rsplit(":", 1)[0] if text.startswith("tcp://") else text
        return node.value if host.strip("[]") in LOCAL_HOSTS else None
    return None


def master_localhost(project: Project) -> Iterator[LintFinding]:
    severity = project.context.by_nodes()
    if severity is None:
        return
    for source in project.sources:
        for key, value, line in source.env_writes:
            if key == "MASTER_ADDR" and (host := _local_host(value)):
                yield LintFinding(
                    "lint.master-localhost", severity, source.shown, line,
                    f"MASTER_ADDR is set to {host!r}, over the address torchrun gives each rank",
                    "delete the line: torchrun sets MASTER_ADDR (or use "
                    "os.environ.setdefault(\"MASTER_ADDR\", \"localhost\") for runs without it)",
                )  # fmt: skip
    for source, call in project.calls(_torch(frozenset({"init_process_group", "TCPStore"}))):
        method = _keyword(call.node, "init_method") or _keyword(call.node, "host_name")
        if call.name.endswith("TCPStore") and call.node.args:
            method = call.node.args[0]
        if method is not None and (host := _local_host(method)):
            yield _finding(
                "lint.master-localhost", severity, source, call.node,
                f"the rendezvous address is {host!r}",
                'dist.init_process_group(backend, init_method="env://")',
            )  # fmt: skip


def spawn_under_torchrun(project: Project) -> Iterator[LintFinding]:
    if not project.mentions("init_process_group"):
        return
    for source, call in project.calls(lambda name: name in SPAWN):
        maybe = " (in a branch: when it runs)" if call.in_branch else ""
        yield _finding(
            "lint.spawn-under-torchrun", Severity.WARN if call.in_branch else Severity.FAIL,
            source, call.node,
            f"{call.name}() starts ranks that torchrun already started{maybe}",
            'main(int(os.environ["LOCAL_RANK"]))  # torchrun runs this once per rank',
        )  # fmt: skip


def _device_count(node: ast.expr, source: Source, depth: int = 0) -> bool:
    """torch.cuda.device_count(), or a name bound to it (a few names deep: `a = b` loops)."""
    if isinstance(node, ast.Call):
        return (source.dotted(node.func) or "").endswith("cuda.device_count")
    if isinstance(node, ast.Name) and depth < 4:
        values = source.bound_anywhere(node.id)
        return any(_device_count(value, source, depth + 1) for value in values)
    return False


def _literal_int(node: ast.expr, scope: int, source: Source) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isdigit():
        return int(node.value)
    if isinstance(node, ast.Call) and source.dotted(node.func) == "int" and len(node.args) == 1:
        return _literal_int(node.args[0], scope, source)
    if isinstance(node, ast.Name):
        found = {_literal_int(v, scope, source) for v in source.values(scope, node.id)
                 if not isinstance(v, ast.Name)}  # fmt: skip
        return found.pop() if len(found) == 1 else None
    return None


def world_size(project: Project) -> Iterator[LintFinding]:
    context = project.context
    for source, call in project.calls(_torch("init_process_group")):
        value = _keyword(call.node, "world_size")
        if value is None:
            continue
        if _device_count(value, source) and (severity := context.by_nodes()) is not None:
            yield _finding(
                "lint.world-size-device-count", severity, source, call.node,
                "world_size is torch.cuda.device_count(), one node's GPUs",
                'dist.init_process_group(backend)  # world size from torchrun (WORLD_SIZE)',
            )  # fmt: skip
        elif (number := _literal_int(value, call.scope, source)) is not None:
            yield from _hardcoded(project, source, call.node, number)
    for source in project.sources:
        for key, value, line in source.env_writes:
            if key == "WORLD_SIZE" and (number := _literal_int(value, 0, source)) is not None:
                yield from _hardcoded(project, source, ast.Pass(lineno=line), number)


def _hardcoded(
    project: Project, source: Source, node: ast.AST, number: int
) -> Iterator[LintFinding]:
    planned = project.context.world_size
    if planned == number:
        return
    said = f"the plan has {planned} ranks" if planned else "the planned world size is not known"
    yield _finding(
        "lint.world-size-hardcoded", Severity.FAIL if planned else Severity.WARN, source, node,
        f"world size {number} written in the script; {said}",
        'world_size = int(os.environ["WORLD_SIZE"])  # set by torchrun',
    )  # fmt: skip


def _device_args(source: Source, call: Call) -> Iterator[ast.expr]:
    """The expressions that pick a GPU in this call."""
    node, last = call.node, call.name.rpartition(".")[2]
    if last == "DistributedDataParallel":
        ids = _keyword(node, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)):
            yield from ids.elts
        if (output := _keyword(node, "output_device")) is not None:
            yield output
    elif last in ("set_device", "cuda", "to", "device") and node.args:
        for arg in node.args[:2]:
            if isinstance(arg, ast.JoinedStr):
                yield from (
                    part.value for part in arg.values if isinstance(part, ast.FormattedValue)
                )
            else:
                yield arg


def device_global_rank(project: Project) -> Iterator[LintFinding]:
    severity = project.context.by_nodes()
    if severity is None:
        return
    wanted = {"DistributedDataParallel", "set_device", "cuda", "to", "device"}
    for source, call in project.calls(lambda name: name.rpartition(".")[2] in wanted):
        if any(is_global_rank(arg, call.scope, source) for arg in _device_args(source, call)):
            yield _finding(
                "lint.device-global-rank", severity, source, call.node,
                "the GPU index is the global rank (RANK, dist.get_rank())",
                'local_rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local_rank)',
            )  # fmt: skip


def local_rank_argument(project: Project) -> Iterator[LintFinding]:
    if "LOCAL_RANK" in project.strings:
        return
    for source, call in project.calls(lambda name: name.endswith(".add_argument")):
        first = call.node.args[0] if call.node.args else None
        if isinstance(first, ast.Constant) and first.value in ("--local_rank", "--local-rank"):
            yield _finding(
                "lint.local-rank-argument", Severity.FAIL, source, call.node,
                f"{first.value} is read from the command line, LOCAL_RANK never",
                'local_rank = int(os.environ["LOCAL_RANK"])',
            )  # fmt: skip


def samplers(project: Project) -> Iterator[LintFinding]:
    loaders = list(project.calls(lambda name: name.startswith("torch") and
                                 name.rpartition(".")[2] in DATA_LOADERS))  # fmt: skip
    for source, call in loaders:
        shuffle, sampler = _keyword(call.node, "shuffle"), _keyword(call.node, "sampler")
        if _is_true(shuffle) and sampler is not None and not _is_none(sampler):
            yield _finding(
                "lint.sampler-and-shuffle", Severity.FAIL, source, call.node,
                "DataLoader(shuffle=True, sampler=...): torch raises ValueError",
                "DataLoader(dataset, sampler=sampler)  # the sampler shuffles",
            )  # fmt: skip
    if project.framework or not project.distributed:
        return
    for source, call in loaders:
        node = call.node
        given = {k.arg for k in node.keywords}
        sampled = given & {"sampler", "batch_sampler"} or _has_kwargs(node)
        if _is_true(_keyword(node, "shuffle")) and not sampled:
            yield _finding(
                "lint.shuffle-no-sampler", Severity.WARN, source, node,
                "DataLoader(shuffle=True) with no sampler: every rank reads every sample",
                "DataLoader(dataset, sampler=DistributedSampler(dataset))",
            )  # fmt: skip


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def set_epoch(project: Project) -> Iterator[LintFinding]:
    if project.framework or project.mentions("set_epoch"):
        return
    for source, call in project.calls(_torch("DistributedSampler")):
        shuffle = _keyword(call.node, "shuffle")
        if isinstance(shuffle, ast.Constant) and shuffle.value is False:
            continue
        yield _finding(
            "lint.sampler-no-set-epoch", Severity.WARN, source, call.node,
            "DistributedSampler shuffles, and set_epoch is never called",
            "sampler.set_epoch(epoch)  # first thing in every epoch",
        )  # fmt: skip


def _collective(name: str) -> bool:
    return name.startswith("torch.distributed.") and name.rpartition(".")[2] in COLLECTIVES


def collectives(project: Project) -> Iterator[LintFinding]:
    answered: dict[tuple[int, str], bool] = {}  # (branch, collective): its `else` calls it
    for source, call in project.calls(_collective):
        last = call.name.rpartition(".")[2]
        if call.in_except:
            yield _finding(
                "lint.collective-in-except", Severity.WARN, source, call.node,
                f"dist.{last}() in an except block: a dead peer makes it wait forever",
                "raise  # let the rank fail; torchrun stops the others",
            )  # fmt: skip
        branch = call.rank_branch
        if branch is None or "barrier" in last:
            continue
        key = (id(branch), last)
        if key not in answered:
            answered[key] = _calls_in(branch.orelse, last)
        if not answered[key]:
            yield _finding(
                "lint.collective-on-one-rank", Severity.FAIL, source, call.node,
                f"dist.{last}() only on rank 0: the other ranks never enter it",
                f"dist.{last}(...)  # outside the `if`, on every rank",
            )  # fmt: skip


def _called_name(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _calls_in(body: list[ast.stmt], last: str) -> bool:
    return any(_called_name(node) == last for stmt in body for node in ast.walk(stmt))


def destroy(project: Project) -> Iterator[LintFinding]:
    if project.framework or project.mentions("destroy_process_group"):
        return
    for source, call in project.calls(_torch("init_process_group")):
        yield _finding(
            "lint.no-destroy-process-group", Severity.WARN, source, call.node,
            "init_process_group() with no destroy_process_group() anywhere",
            "dist.destroy_process_group()  # at the end of main, on every rank",
        )  # fmt: skip
        return


def data_parallel(project: Project) -> Iterator[LintFinding]:
    nodes = project.context.nodes
    severity = Severity.FAIL if nodes is not None and nodes > 1 else Severity.WARN
    fallback = bool({"DistributedDataParallel", "FullyShardedDataParallel"} & project.called)
    for source, call in project.calls(_torch("DataParallel")):
        if fallback and call.in_branch:  # `if distributed: DDP(...) else: DataParallel(...)`
            continue
        yield _finding(
            "lint.data-parallel", severity, source, call.node,
            "torch.nn.DataParallel under torchrun",
            "model = DistributedDataParallel(model, device_ids=[local_rank])",
        )  # fmt: skip


RULE_FUNCTIONS = (
    master_localhost, spawn_under_torchrun, world_size, device_global_rank, local_rank_argument,
    samplers, set_epoch, collectives, destroy, data_parallel,
)  # fmt: skip


def judge(sources: list[Source], context: Context) -> list[LintFinding]:
    project = Project(sources, context)
    return [finding for rule in RULE_FUNCTIONS for finding in rule(project)]
