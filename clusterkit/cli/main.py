"""The command line's top: build the parser from every command's module, parse, and
dispatch by name; every command's logic lives in clusterkit.commands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from clusterkit import __version__
from clusterkit.cli import bench, check, completion, cost, image, launch, lint, nodecheck, provision
from clusterkit.cli.parser import ExamplesFormatter, Parser, add_verbosity, examples_epilog
from clusterkit.errors import UsageError
from clusterkit.status import ExitStatus

if TYPE_CHECKING:
    from clusterkit.environment import Environment

# Every command's arguments, in the order `--help` lists them: each module's `add` defines them.
COMMANDS = (check, nodecheck, bench, launch, image, cost, provision, lint, completion)
# Each command's typed request, made once from the parsed Namespace (`cost`'s: its own, or
# its step's).
REQUESTS: dict[str, Callable[[argparse.Namespace], object]] = {
    "check": check.request,
    "bench": bench.request,
    "node-check": nodecheck.request,
    "launch": launch.request,
    "cost": cost.request,
    "image": image.request,
    "provision": provision.request,
    "lint": lint.request,
    "completion": completion.request,
}

# What `--help` of each command ends with: the commands people type most.
EXAMPLES = {
    "check": [
        "clusterkit check                                   # this machine",
        "clusterkit check inventory.yaml --skip bench       # parity, health and network",
        "clusterkit check -i hosts.ini -i extra.yml --limit 'gpu[01:04]'",
        "clusterkit check inventory.yaml --format junit -o report.xml   # for CI",
        "clusterkit check inventory.yaml --fix-plan         # the provision commands",
    ],
    "node-check": [
        "clusterkit node-check                              # this node, in well under a second",
        "clusterkit node-check --slurm-drain                # Slurm HealthCheckProgram",
    ],
    "bench": [
        "clusterkit bench inventory.yaml --min-busbw 40",
        "clusterkit bench inventory.yaml -J result.json     # nccl-tests compatible JSON",
    ],
    "launch": [
        "clusterkit launch inventory.yaml -- train.py --epochs 3",
        "clusterkit launch inventory.yaml --print -- train.py   # commands and env files",
    ],
    "image": [
        "clusterkit image lock images/cpu-torch && clusterkit image render images/cpu-torch",
        "clusterkit image build images/cpu-torch && clusterkit image push images/cpu-torch",
    ],
    "cost": [
        "clusterkit cost --nodes 4 --hours 72 --instance p5.48xlarge --region us-east-1",
        "clusterkit cost --nodes 16 --hours 200 --instance p5.48xlarge --preempt-rate '5-10%' "
        "--plot cost.png",
    ],
    "provision": [
        "clusterkit provision inventory.yaml --dry-run      # what would change",
        "clusterkit provision inventory.yaml --tags firewall --limit node4",
    ],
    "lint": [
        "clusterkit lint train.py                           # the script's distributed mistakes",
        "clusterkit lint -i inventory.yaml train.py --epochs 3   # judged for this cluster",
        "clusterkit lint --nodes 2 --nproc-per-node 8 --format json train.py",
    ],
    "completion": [
        'eval "$(clusterkit completion bash)"              # in ~/.bashrc',
        'eval "$(clusterkit completion zsh)"               # in ~/.zshrc',
        "clusterkit completion fish | source               # in ~/.config/fish/config.fish",
    ],
}


def _add_examples(sub: argparse._SubParsersAction[Parser]) -> None:
    for name, child in sub.choices.items():
        lines = EXAMPLES.get(name)
        if lines:
            child.epilog = examples_epilog(lines)
            child.formatter_class = ExamplesFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="clusterkit",
        description="Decide whether a multi-node PyTorch job can go ahead, and make it so. "
        "Exit status: 0 pass, 1 a check failed, 2 bad input, 3 incomplete, 130 interrupted "
        "(129 SIGHUP, 143 SIGTERM).",
    )
    parser.add_argument("--version", action="version", version=f"clusterkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        module.add(sub)
    _add_examples(sub)
    add_verbosity(parser)
    return parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def _speaking_to(
    parser: argparse.ArgumentParser, env: Environment | None
) -> argparse.ArgumentParser:
    """`parser` with help, version and warnings going to `env`'s streams."""
    if env is not None:
        for each in _parsers(parser):
            if isinstance(each, Parser):
                each.stdout, each.stderr = env.stdout, env.stderr
    return parser


def _parse_words(
    parser: argparse.ArgumentParser, words: list[str], env: Environment | None
) -> argparse.Namespace:
    """parse_args, but words no parser took are refused by the command they were given to,
    which knows its own flags for a "did you mean"."""
    args, extra = _speaking_to(parser, env).parse_known_args(words)
    if extra:
        _chosen(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)command parser the parsed `args` went through."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(vars(args).get(action.dest) or "")
            if child is not None:
                return _chosen(child, args)
    return parser


def parse(argv: Sequence[str] | None = None, env: Environment | None = None) -> argparse.Namespace:
    """The command line as a Namespace; --help and --version print to `env`'s stdout (None:
    the process's) and exit with SystemExit, as argparse does."""
    words = list(sys.argv[1:] if argv is None else argv)
    job: list[str] = []
    if "--" in words:  # `launch INV -- train.py ARGS`: the job's words are not ours
        cut = words.index("--")
        words, job = words[:cut], words[cut + 1 :]
    args = _parse_words(build_parser(), words, env)
    args.verbose = vars(args).get("verbose", 0)
    if args.command is None:
        raise UsageError("no command given", hint="try `clusterkit check`")
    if vars(args).get("cost_command") == "prices" and args.prices_command is None:
        raise UsageError("cost prices: give a step", hint="try `clusterkit cost prices update`")
    if job and args.command not in ("launch", "lint"):
        raise UsageError(f"{args.command}: unexpected arguments after --")
    args.job = job
    if args.command == "lint":  # `lint train.py -- --epochs 3`: the script's words too
        args.script_args = [*args.script_args, *job]
    return args


# Files a command writes when it ends: refused at the start (exit 2), not after the run.
OUTPUT_FLAGS = {
    "output": "-o",
    "result_json": "-J",
    "plot": "--plot",
    "digest_file": "--digest-file",
    "check_output": "--check-output",
    "exclude_file": "--exclude-file",
    "save_baseline": "--save-baseline",
}


# Written by one command only: `cost --trace` is a file read, `launch --trace` one written.
COMMAND_OUTPUT_FLAGS = {"launch": {"trace": "--trace"}}


def dispatch(args: argparse.Namespace, env: Environment) -> ExitStatus | int:
    """The command's exit status: an ExitStatus, or (launch) the job's own status. Every
    command runs as `run(request, env)`, with its typed request and the run's streams,
    variables and folder."""
    from clusterkit.report import ensure_writable

    given = vars(args)
    outputs = {**OUTPUT_FLAGS, **COMMAND_OUTPUT_FLAGS.get(args.command, {})}
    for dest, flag in outputs.items():
        if given.get(dest):
            ensure_writable(given[dest], flag)
    module_name, _, function_name = args.handler.partition(":")
    handler: Callable[[Any, Environment], ExitStatus | int] = getattr(
        importlib.import_module(module_name), function_name
    )
    request = REQUESTS[args.command](args) if args.command in REQUESTS else args
    status = handler(request, env)
    return ExitStatus(status) if status in set(ExitStatus) else int(status)
