"""No module in clusterkit/ is longer than MAX_LINES: a longer one mixes concerns and is split
along them (issue 39). The modules still over are named here, each removed from the list once
split, so the list only shrinks."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "clusterkit"
MAX_LINES = 600
# file (relative to the repository) -> why it is still over, until it is split
TEMPORARY: dict[str, str] = {
    "clusterkit/cli.py": "one module per command (issue 39 item 3)",
    "clusterkit/node/launch.py": "the node's launch program, to split by concern",
    "clusterkit/node/collector.py": "one module per fact (issue 39 item 5)",
    "clusterkit/node/bench_worker.py": "one module per concern (issue 39 item 5)",
    "clusterkit/launch/supervise.py": "the recovery policy apart (issue 39 item 3)",
}


def module_lengths(package: Path = PACKAGE) -> dict[str, int]:
    """file -> lines, for every module of `package` (subpackages too) over MAX_LINES."""
    lengths = {
        path.relative_to(package.parent).as_posix(): len(path.read_text().splitlines())
        for path in sorted(package.rglob("*.py"))
    }
    return {name: lines for name, lines in lengths.items() if lines > MAX_LINES}


def test_no_module_is_over_the_limit_but_those_named() -> None:
    over = module_lengths()
    new = {name: lines for name, lines in over.items() if name not in TEMPORARY}
    assert not new, f"modules over {MAX_LINES} lines, split them along their concerns: {new}"


def test_a_module_split_below_the_limit_leaves_the_list() -> None:
    stale = sorted(set(TEMPORARY) - set(module_lengths()))
    assert not stale, f"no longer over {MAX_LINES} lines, remove from TEMPORARY: {stale}"


def test_the_count_names_a_module_one_line_over(tmp_path: Path) -> None:
    package = tmp_path / "clusterkit"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "over.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (package / "at.py").write_text("x = 1\n" * MAX_LINES)
    assert module_lengths(package) == {"clusterkit/sub/over.py": MAX_LINES + 1}
