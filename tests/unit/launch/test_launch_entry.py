"""The launch's entry-script pre-flight (issue 37 item 9): the script found in the job's words
as torchrun finds it, the node program that opens and hashes it (run for real, over the local
transport, on real files, a FIFO and a directory), the answers checked on arrival, and the
lines that name each node where the script is missing or another file."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from clusterkit.launch.entry import (
    Answer,
    ask_nodes,
    entry_problems,
    entry_script,
    parse_answer,
)
from clusterkit.node.entry import look
from clusterkit.transport.local import LocalTransport
from tests.support.cli import run_cli


@pytest.mark.parametrize(
    ("job", "script"),
    [
        (["train.py", "--epochs", "3"], "train.py"),
        (["scripts/train.py"], "scripts/train.py"),
        (["--no-python", "./run.sh", "-x"], "./run.sh"),
        (["python", "train.py"], "python"),  # torchrun would run a file named python
    ],
)
def test_the_script_is_the_first_word_that_is_not_an_option(job: list[str], script: str) -> None:
    assert entry_script(job) == (script, "")


@pytest.mark.parametrize(
    ("job", "why"),
    [
        (["-m", "pkg.train", "--lr", "1"], "pkg.train is a module (-m)"),
        (["--module", "pkg.train"], "pkg.train is a module (-m)"),
        (["--no-python", "run.sh"], "run.sh is a command looked up on the node's PATH"),
        (["--nnodes", "2", "train.py"], "--nnodes comes before the script"),
        (["-m"], "no script in the job"),
    ],
)
def test_what_is_not_a_file_path_is_not_checked_and_says_why(job: list[str], why: str) -> None:
    script, reason = entry_script(job)
    assert script is None and reason.startswith(why)


def test_the_node_program_hashes_a_file_where_torchrun_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative to the login folder (the cwd), or to a --workdir that is itself relative."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_bytes(b"print('hi')\n")
    monkeypatch.chdir(tmp_path)
    found = look("train.py", "job", 1 << 20)
    assert found == {
        "path": str(tmp_path / "job" / "train.py"),
        "sha256": hashlib.sha256(b"print('hi')\n").hexdigest(),
        "size": 12,
    }
    assert look("job/train.py", "", 1 << 20)["sha256"] == found["sha256"]
    assert look("train.py", "", 1 << 20) == {"path": str(tmp_path / "train.py"), "missing": True}
    assert look("job/train.py/x", "", 1 << 20)["missing"] is True  # ENOTDIR


def test_the_read_is_bounded_and_never_blocks_on_a_fifo_or_a_folder(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_bytes(b"a" * 10 + b"b" * 10)
    bounded = look(str(big), "", 10)
    assert bounded["sha256"] == hashlib.sha256(b"a" * 10).hexdigest() and bounded["size"] == 20
    os.mkfifo(tmp_path / "fifo.py")  # no writer: a blocking open would never return
    assert look(str(tmp_path / "fifo.py"), "", 10)["error"] == "not a regular file"
    assert look(str(tmp_path), "", 10)["error"] == "not a regular file"
    locked = tmp_path / "locked.py"
    locked.write_text("x")
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads any mode
        assert look(str(locked), "", 10)["error"] == "Permission denied"


def test_every_node_answers_over_the_transport_with_the_real_node_program(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    transports = {name: LocalTransport(name) for name in ("node1", "node2")}
    answers = ask_nodes(transports, {}, str(script), None)
    assert list(answers) == ["node1", "node2"]
    assert {a.sha256 for a in answers.values()} == {hashlib.sha256(b"import torch\n").hexdigest()}
    assert entry_problems(str(script), answers) == ([], [])
    gone = ask_nodes(transports, {"node2": "/nonexistent/python3"}, str(script), None)
    problems, unanswered = entry_problems(str(script), gone)
    assert problems == [] and len(unanswered) == 1
    assert unanswered[0].startswith(f"node2 did not check {script}: no answer: ")


SHA_A, SHA_B = "a" * 64, "b" * 64


def test_a_missing_script_and_another_file_name_their_nodes_and_paths() -> None:
    answers = {
        "node1": Answer("/home/u/train.py", SHA_A, 120),
        "node2": Answer("/home/u/train.py", missing=True),
        "node3": Answer("/home/u/train.py", SHA_B, 118),
        "node4": Answer("/home/u/train.py", SHA_A, 120),
        "node5": Answer("/home/u/train.py", error="Permission denied"),
    }
    problems, unanswered = entry_problems("train.py", answers)
    assert problems == [
        "train.py not found on node2 (/home/u/train.py)",
        "train.py on node3 is another file (/home/u/train.py: sha256 bbbbbbbbbbbb, 118 bytes) "
        "than on node1, node4 (sha256 aaaaaaaaaaaa, 120 bytes)",
        "train.py on node5 cannot be read (/home/u/train.py: Permission denied)",
    ]
    assert unanswered == []


def test_the_file_most_nodes_hold_is_the_expected_one_and_a_tie_blames_no_node() -> None:
    most = {"n1": Answer("/t.py", SHA_A, 1), "n2": Answer("/t.py", SHA_B, 1),
            "n3": Answer("/t.py", SHA_B, 1)}  # fmt: skip
    (line,) = entry_problems("t.py", most)[0]
    assert line.startswith("t.py on n1 is another file")
    assert line.endswith("than on n2, n3 (sha256 bbbbbbbbbbbb, 1 byte)")
    tie = {"n2": Answer("/t.py", SHA_B, 1), "n1": Answer("/t.py", SHA_A, 1)}
    (line,) = entry_problems("t.py", tie)[0]
    assert line == (
        "t.py differs between nodes, and no one file is on most (n1: sha256 aaaaaaaaaaaa, "
        "1 byte; n2: sha256 bbbbbbbbbbbb, 1 byte)"
    )
    assert entry_problems("t.py", dict(reversed(tie.items())))[0] == [line]  # order decides nothing
    same_hash = {
        "n1": Answer("/t.py", SHA_A, 1),
        "n2": Answer("/t.py", SHA_A, 2),
        "n3": Answer("/t.py", SHA_A, 2),
    }
    assert entry_problems("t.py", same_hash)[0][0].startswith("t.py on n1 is another file")


def test_a_nodes_answer_is_checked_on_arrival_and_its_text_escaped() -> None:
    for hostile in (
        {"path": "/t.py", "sha256": "z" * 64, "size": 1},
        {"path": "/t.py", "sha256": SHA_A, "size": True},
        {"path": "/t.py", "sha256": SHA_A, "size": -1},
        {"path": "/t.py", "sha256": SHA_A.upper(), "size": 1},
        {"path": 7, "missing": True},
    ):
        with pytest.raises(ValueError):
            parse_answer(hostile)
    loud = parse_answer({"path": "/t\x1b[2J.py", "error": "\x1b]0;owned\x07" + "x" * 500})
    assert len(loud.error) == 200
    (line,) = entry_problems("t.py", {"n1": loud})[0]
    assert "\x1b" not in line and "\x07" not in line and "owned" in line


def test_python_before_the_script_is_refused_with_the_words_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`launch INV -- python train.py`: torchrun would open a file named python in the login
    folder; the pre-flight names the node and path, says why, and starts nothing."""
    (tmp_path / "inventory.yaml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    done = run_cli(["launch", "inventory.yaml", "--no-check", "--", "python", "train.py"])
    assert done.status == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "pre-flight" in line]
    assert lines[0] == f"clusterkit: pre-flight: python not found on localhost ({tmp_path}/python)"
    assert "nothing was started" in lines[1] and "without `python`" in lines[2]
    assert "launching run" not in done.stderr


def test_a_module_job_is_not_checked_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "inventory.yaml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: /nonexistent/python3\n"
    )
    monkeypatch.chdir(tmp_path)
    done = run_cli(["launch", "inventory.yaml", "--no-check", "--", "-m", "pkg.train"])
    assert "clusterkit: pre-flight: the entry script is not checked: pkg.train is a module (-m)" \
        in done.stderr  # fmt: skip
