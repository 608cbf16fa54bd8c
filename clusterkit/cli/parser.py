"""The parser every command is built on: one-line usage errors with a "did you mean", the
value types of the flags, and the examples block that ends a `--help`."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from clusterkit.contract.names import SKIPPABLE, StageName
from clusterkit.errors import UsageError
from clusterkit.launch.spares import NodeCount

if TYPE_CHECKING:
    from _typeshed import SupportsWrite


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2, one line) instead of printing usage and exiting,
    and prints --help, --version and warnings to the run's streams (set by `parse` on every
    parser of the tree; None: the process's)."""

    stdout: TextIO | None = None
    stderr: TextIO | None = None
    # Steps taken only as the first word, beside an optional positional that would otherwise
    # swallow the word (`cost prices` vs `cost INVENTORY`): see `add_leading_steps`.
    leading_steps: argparse._SubParsersAction[Parser] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No prefix matching: `--nnode 3` is a mistake to name, not `--nnodes 3` (nor, once a
        # new flag shares the prefix, a different one).
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            stream = self.stderr if file is sys.stderr else self.stdout
            (stream or file or sys.stdout).write(message)

    def _parse_known_args(
        self, arg_strings: list[str], namespace: argparse.Namespace, *rest: Any
    ) -> tuple[argparse.Namespace, list[str]]:
        steps = self.leading_steps
        if steps is None or not arg_strings or arg_strings[0] not in steps.choices:
            return super()._parse_known_args(arg_strings, namespace, *rest)
        steps(self, namespace, arg_strings, None)  # words it leaves: argparse collects them
        return namespace, []

    def _get_positional_actions(self) -> list[argparse.Action]:
        return [a for a in super()._get_positional_actions() if a is not self.leading_steps]

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("clusterkit").strip()  # main prints "clusterkit: "
        hint = self._suggestion(message) or f"see `{self.prog} --help`"
        raise UsageError(f"{command}: {message}" if command else message, hint=hint)

    def _suggestion(self, message: str) -> str | None:
        """A "did you mean" for a mistyped command or step (`chek`) or flag (`--nnode`), from
        this parser's own."""
        unknown = re.match(r"unrecognized arguments: (-[^ =]*)", message)
        if unknown:
            flags = [
                flag
                for flag, action in self._option_string_actions.items()
                if flag.startswith("--") and action.help is not argparse.SUPPRESS
            ]
            close = difflib.get_close_matches(unknown.group(1), flags, n=1, cutoff=0.6)
            return f"did you mean `{close[0]}`?" if close else None
        stray = re.match(r"unrecognized arguments: ([^-]\S*)", message)
        if stray and self.prog.endswith(" launch"):
            return f"the job goes after --: {self.prog} [INVENTORY] -- {stray.group(1)} [ARGS]"
        for action in self._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            typed = re.search(rf"argument {action.metavar}: invalid choice: '?([^' ]*)", message)
            close = difflib.get_close_matches(typed.group(1), action.choices, n=1) if typed else []
            if close:
                return f"did you mean `{self.prog} {close[0]}`?"
        return None


def add_leading_steps(parser: Parser, dest: str) -> argparse._SubParsersAction[Parser]:
    """Steps of `parser` named by its first word only (`cost prices`), so that its optional
    positional still takes any other word; hidden from its help, whose description names them."""
    steps = parser.add_subparsers(
        dest=dest, metavar="STEP", parser_class=Parser, prog=parser.prog, help=argparse.SUPPRESS
    )
    parser.leading_steps = steps
    return steps


def stage_list(text: str) -> frozenset[StageName]:
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(SKIPPABLE))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown stage {', '.join(unknown)} (stages: {', '.join(SKIPPABLE)})"
        )
    return frozenset(stage for stage in SKIPPABLE if stage in names)


class AddStages(argparse.Action):
    """`--skip network --skip bench` skips both: each use adds to the set, like a list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, frozenset)  # stage_list made it
        setattr(namespace, self.dest, frozenset(getattr(namespace, self.dest) or ()) | values)


class Deprecated(argparse.Action):
    """An old spelling kept for one release: it still works, hidden from help and completion,
    and says on stderr what replaces it."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        replacement: str,
        value: object = None,
        *,
        type: Callable[[str], object] | None = None,
        choices: Iterable[object] | None = None,
        default: object = None,
    ) -> None:
        self.replacement, self.value = replacement, value
        nargs = 0 if value is not None else None
        super().__init__(
            option_strings,
            dest,
            nargs=nargs,
            help=argparse.SUPPRESS,
            type=type,
            choices=choices,
            default=default,
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(
            f"clusterkit: warning: {option_string} is deprecated; use {self.replacement}",
            file=getattr(parser, "stderr", None) or sys.stderr,
        )
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def count_or_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1000: {text}")
    return value


def node_count(text: str) -> NodeCount:
    try:
        return NodeCount.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def python_path(value: str) -> str:
    """A Python to run: a path or a name on PATH, never an option or a control character."""
    if not value or value.startswith("-") or not value.isprintable():
        raise argparse.ArgumentTypeError(f"{value!r} is not a Python interpreter path")
    return value


EXAMPLES_HEADING = "examples:\n"


def examples_epilog(lines: list[str]) -> str:
    return EXAMPLES_HEADING + "\n".join(f"  {line}" for line in lines)


class ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual but prints the examples block line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_verbosity(parser: argparse.ArgumentParser) -> None:
    """-v / -vv on this parser and every command below it (where -v is not taken already:
    `provision -v` also raises ansible-playbook's verbosity)."""
    if "-v" not in parser._option_string_actions:
        parser.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=argparse.SUPPRESS,  # a command's absent -v must not undo `clusterkit -v`
            help="more: -v clusterkit's progress on stderr and every check and host of the "
            "report on a terminal, -vv debug logs of every library",
        )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                add_verbosity(child)
