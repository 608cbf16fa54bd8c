"""The launch's pre-flight of the job's entry script: before any rank starts, every node opens
the script where torchrun will (clusterkit/node/entry.py) and says whether it is there and
its sha256. A node without it, or with another file under that name, is named in one line:
otherwise the job fails one rank at a time, after the rendezvous, or trains different code.

The script is found in the job's words as torchrun finds it: the first word that is not an
option. `-m MODULE` is a module, found on the node's Python path when the job starts (not
checked); `--no-python CMD` checks CMD only when it is a path (a bare name is looked up on
PATH). Each answer is node text: checked on arrival, and escaped where it is shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, cast

from clusterkit.checks.parity import sole_majority
from clusterkit.errors import TransportError
from clusterkit.escape import printable
from clusterkit.shape import shape_problem
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.nodescript import node_script, run_node_script
from clusterkit.transport.pool import parallel
from clusterkit.words import counted

# The sha256 covers the first 64 MiB (with the size, compared too): a training script is far
# smaller, and a node never reads more than this for the pre-flight.
HASH_LIMIT = 64 << 20
SECONDS = 30.0  # one round trip and a bounded read per node
PATH_LIMIT = 4096  # PATH_MAX: a longer path cannot be opened anywhere
SHOWN = 200  # characters of node text shown per answer
MODULE_FLAGS = ("-m", "--module")
NO_PYTHON_FLAGS = ("--no-python", "--no_python")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Answer:
    """One node's view of the script: `sha256` and `size` for a file it read, `missing`
    when there is none, `error` when it could not read it (or did not answer)."""

    path: str
    sha256: str = ""
    size: int = -1
    missing: bool = False
    error: str = ""


def entry_script(job: Sequence[str]) -> tuple[str | None, str]:
    """(the path to check, "") or (None, why it is not checked), from the words after `--`."""
    module = no_python = False
    index = 0
    while index < len(job) and job[index].startswith("-"):
        word = job[index]
        if word in MODULE_FLAGS:
            module = True
        elif word in NO_PYTHON_FLAGS:
            no_python = True
        else:
            return None, f"{word} comes before the script"
        index += 1
    if index >= len(job):
        return None, "no script in the job"
    script = job[index]
    if module:
        return None, f"{script} is a module (-m), found on the node's Python path"
    if no_python and "/" not in script:
        return None, f"{script} is a command looked up on the node's PATH (--no-python)"
    if len(script) > PATH_LIMIT or "\0" in script:
        return None, "the path is not one a node can open"
    return script, ""


class _EntryPath(TypedDict):
    path: str


class EntryAnswer(_EntryPath, total=False):
    """What clusterkit/node/entry.py sends: the path, then the digest, `missing` or `error`."""

    sha256: str
    size: int
    missing: bool
    error: str


def parse_answer(raw: Mapping[str, object]) -> Answer:
    """A node's answer, checked with the checker of every node message, then for what a type
    cannot say: ValueError for any other answer."""
    problem = shape_problem(raw, EntryAnswer, "answer")
    if problem is not None:
        raise ValueError(problem)
    answer = cast(EntryAnswer, raw)
    path = answer["path"][:PATH_LIMIT]
    if answer.get("missing") is True:
        return Answer(path, missing=True)
    if "error" in answer:
        return Answer(path, error=answer["error"][:SHOWN])
    sha256, size = answer.get("sha256", ""), answer.get("size", -1)
    if not _SHA256.fullmatch(sha256):
        raise ValueError("the answer's sha256 is not 64 hex digits")
    if size < 0:
        raise ValueError("the answer's size is not a count of bytes")
    return Answer(path, sha256, size)


def ask_nodes(
    transports: Mapping[str, Transport],
    interpreters: Mapping[str, str],
    script: str,
    workdir: str | None,
    workers: int | None = None,
) -> dict[str, Answer]:
    """Every node's answer, in parallel, bounded by SECONDS; a node that gave none has an
    Answer with the reason in `error` and no path."""
    request = json.dumps({"path": script, "workdir": workdir or "", "limit": HASH_LIMIT})
    deadline = Deadline.after(SECONDS)

    def ask(host: str) -> Answer:
        raw = run_node_script(
            transports[host],
            node_script("entry"),
            [request],
            interpreter=interpreters.get(host) or "python3",
            deadline=deadline,
            what="the entry-script pre-flight",
        )
        try:
            return parse_answer(raw)
        except ValueError as error:
            return Answer("", error=f"a malformed answer: {error}")

    hosts = list(transports)
    answers: dict[str, Answer] = {}
    for host, outcome in zip(hosts, parallel(ask, hosts, workers=workers)):
        if isinstance(outcome, TransportError):
            answers[host] = Answer("", error=f"no answer: {outcome.detail}")
        elif isinstance(outcome, BaseException):
            answers[host] = Answer("", error=f"no answer: {outcome}")
        else:
            answers[host] = outcome
    return answers


def _shown(answer: Answer) -> str:
    return f"sha256 {answer.sha256[:12]}, {counted(answer.size, 'byte')}"


def entry_problems(script: str, answers: Mapping[str, Answer]) -> tuple[list[str], list[str]]:
    """(lines naming each node where the script is missing, unreadable or another file;
    lines naming each node that did not answer). The file most nodes hold is the one
    expected; with no such file (a tie) one line shows every copy and blames no node:
    inventory order must not decide which is wrong (checks/parity.py:sole_majority)."""
    name = printable(script[:SHOWN])
    problems, unanswered = [], []
    read = {host: (a.sha256, a.size) for host, a in answers.items() if a.sha256}
    decided, expected = sole_majority(read) if read else (True, None)
    holders = [host for host, copy in read.items() if copy == expected]
    for host, answer in answers.items():
        where = printable(answer.path[:SHOWN])
        if answer.missing:
            problems.append(f"{name} not found on {host} ({where})")
        elif answer.error and not answer.path:
            unanswered.append(f"{host} did not check {name}: {printable(answer.error)}")
        elif answer.error:
            problems.append(f"{name} on {host} cannot be read ({where}: {printable(answer.error)})")
        elif decided and read[host] != expected:
            problems.append(
                f"{name} on {host} is another file ({where}: {_shown(answer)}) than on "
                f"{', '.join(holders)} ({_shown(answers[holders[0]])})"
            )
    if not decided:
        copies = "; ".join(f"{host}: {_shown(answers[host])}" for host in sorted(read))
        problems.append(f"{name} differs between nodes, and no one file is on most ({copies})")
    return problems, unanswered
