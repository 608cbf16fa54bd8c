"""Human output: rich tables on a terminal, plain aligned text when piped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import nccl_version, torch_cuda
from clusterkit.contract.names import stage_rank
from clusterkit.escape import printable
from clusterkit.facts import HostFacts, collected
from clusterkit.report.fold import Line, fold_host_rows, fold_lines, stage_counts
from clusterkit.report.model import Report
from clusterkit.words import counted

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {
    Status.OK: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.ERROR: "bold magenta",
    Status.SKIP: "dim",
}
_VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "incomplete": "bold magenta"}


def _hosts_cell(finding: Finding, total: int) -> str:
    if finding.status is Status.OK and len(finding.hosts) == total and total > 1:
        return f"all {total}"
    if len(finding.hosts) > 4:
        return printable(", ".join(finding.hosts[:3])) + f" +{len(finding.hosts) - 3}"
    return printable(", ".join(finding.hosts)) or "-"


def host_rows(report: Report) -> list[tuple[str, ...]]:
    """One row per host, every cell printable (names and facts come from outside)."""
    return [tuple(printable(cell) for cell in row) for row in _host_rows(report)]


def _host_rows(report: Report) -> list[tuple[str, ...]]:
    rows = []
    for name, host in report.hosts.items():
        facts = host.get("facts") or HostFacts()
        state = "ok" if host.get("reachable") and facts else (host.get("error") or "no facts")
        if not facts:  # never reached or probed: nothing is known, nothing is "missing"
            rows.append((name, str(host.get("address") or ""), state, *["?"] * 5))
            continue
        gpus = collected(facts.get("gpus"))
        torch = collected(facts.get("torch"))
        rows.append(
            (
                name,
                str(host.get("address") or ""),
                state,
                f"{gpus.get('count', 0)}" if gpus else "?",
                gpus.get("driver") or "-",
                (torch.get("version") or "-") if torch.get("present") else "missing",
                torch_cuda(facts) or "-",
                nccl_version(facts) or "-",
            )
        )
    return rows


HOST_COLUMNS = ("host", "address", "state", "GPUs", "driver", "torch", "torch CUDA", "NCCL")


PROBLEMS = (Status.FAIL, Status.ERROR, Status.WARN)
_ANSI = {
    "green": "32",
    "yellow": "33",
    "bold red": "1;31",
    "bold magenta": "1;35",
    "dim": "2",
    "bold green": "1;32",
}


def _paint(text: str, style: str, color: bool) -> str:
    return f"\x1b[{_ANSI[style]}m{text}\x1b[0m" if color else text


def _by_stage(report: Report) -> list[tuple[str, list[Finding]]]:
    """Every stage in run order with its findings (none for a stage skipped without any)."""
    stages = sorted(
        {f.stage for f in report.findings} | set(report.stages),
        key=lambda s: (stage_rank(s), s),
    )
    return [(s, [f for f in report.findings if f.stage == s]) for s in stages]


def _shown(findings: list[Finding], only_problems: bool) -> list[Finding]:
    return [f for f in findings if f.status in PROBLEMS] if only_problems else findings


def hidden_line(report: Report) -> str:
    """What --only-problems left out, in one line ("38 OK, 2 SKIP not shown")."""
    counts = report.counts()
    parts = [f"{counts[s.value]} {s.value.upper()}" for s in (Status.OK, Status.SKIP)]
    skipped = len(skipped_without_findings(report))
    if skipped:
        parts.append(f"{counted(skipped, 'skipped stage')}")
    return ", ".join(parts) + " not shown"


def skipped_without_findings(report: Report) -> list[tuple[str, str]]:
    """Skipped stages with their reasons, except those whose section of findings is printed
    already (the bench's SKIP finding carries the same reason): each said once."""
    shown = {f.stage for f in report.findings}
    return [(s, why) for s, why in report.stages.items() if why != "ran" and s not in shown]


def _skip_reason(report: Report, stage: str) -> str | None:
    """Why a stage without findings did not run; None when it ran or has findings."""
    return dict(skipped_without_findings(report)).get(stage)


def _summary(report: Report) -> str:
    counts = report.counts()
    parts = [
        f"{counts['fail']} failed",
        counted(counts["warn"], "warning"),
        counted(counts["error"], "error"),
        f"{counts['ok']} ok",
        f"{counts['skip']} skipped",
    ]
    return (
        f"verdict: {report.verdict.upper()} (exit {int(report.exit_status)}): "
        f"{', '.join(parts)} on {counted(len(report.hosts), 'host')} in {report.seconds:.1f} s"
    )


def render_plain(
    report: Report, stream: IO[str], *, color: bool = False, only_problems: bool = False
) -> None:
    """Aligned text; `color` adds ANSI colour to the same characters and nothing else."""
    total = len(report.hosts)
    rows = [r for r in host_rows(report) if not only_problems or r[2] != "ok"]
    widths = [
        max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
        for i, c in enumerate(HOST_COLUMNS)
    ]
    if rows or not only_problems:
        print("hosts:", file=stream)
        for row in [HOST_COLUMNS, *rows]:
            print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=stream)
    for stage, findings in _by_stage(report):
        why = _skip_reason(report, stage)
        if why is not None:
            if not only_problems:
                print(f"\n{stage}: skipped: {printable(why)}", file=stream)
            continue
        shown = _shown(findings, only_problems)
        blocks = [] if only_problems else report.text_blocks.get(stage, [])
        if not shown and not blocks:
            continue
        print(f"\n{stage}:", file=stream)
        for f in shown:
            status = _paint(f"{f.status.value.upper():5}", _STYLE[f.status], color)
            print(
                f"  {status}  {printable(f.id):26}  {_hosts_cell(f, total):18}"
                f"  {printable(f.message)}",
                file=stream,
            )
            if f.remedy and f.status not in (Status.OK, Status.SKIP):
                print(f"  {'':5}  {'':26}  remedy: {printable(f.remedy)}", file=stream)
        for line in blocks:
            print(f"  {printable(line)}", file=stream)
    if only_problems:
        print("\n" + hidden_line(report), file=stream)
    print("\n" + _paint(_summary(report), _VERDICT_STYLE[report.verdict], color), file=stream)


def folded_host_rows(report: Report, *, only_problems: bool) -> list[tuple[str, ...]]:
    """Host rows alike as one (fold_host_rows): a passing cluster of any size is a line."""
    rows = [r for r in _host_rows(report) if not only_problems or r[2] != "ok"]
    return [tuple(printable(c) for c in row) for row in fold_host_rows(rows)]


def render_rich(
    report: Report,
    stream: IO[str],
    *,
    color: bool = True,
    only_problems: bool = False,
    verbose: bool = False,
    environ: Mapping[str, str] | None = None,
) -> None:
    """One screen for a terminal: hosts alike folded into a row, each stage one line of
    counts with its failures, errors and warnings in full below it; `verbose` lists every
    check and host. `color` (NO_COLOR, FORCE_COLOR) changes the colour only; `environ`
    (TERM, COLUMNS, LINES: None, this process's) is the terminal's description."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(
        file=stream,
        highlight=False,
        force_terminal=True,
        color_system="auto" if color else None,
        _environ=environ,
    )
    _rich_hosts(console, report, only_problems=only_problems, verbose=verbose)
    addresses = {name: str(host.get("address") or "") for name, host in report.hosts.items()}
    lines = fold_lines(report.findings, list(report.hosts), addresses)
    console.print()
    for stage, findings in _by_stage(report):
        _rich_stage(console, report, stage, findings, lines, only_problems, verbose)
    if only_problems:
        console.print("\n" + escape(hidden_line(report)))
    elif not verbose and any(f.status is not Status.FAIL for f in report.findings):
        console.print("[dim](-q shows each warning whole, -v every check and host)[/dim]")
    console.print(f"\n[{_VERDICT_STYLE[report.verdict]}]{_summary(report)}[/]")


def _rich_hosts(console: Console, report: Report, *, only_problems: bool, verbose: bool) -> None:
    """Every host a row of a table (`verbose`), else each kind of host one line."""
    from rich.markup import escape
    from rich.table import Table

    if not verbose:
        rows = folded_host_rows(report, only_problems=only_problems)
        grid = Table.grid(padding=(0, 1), pad_edge=False)
        grid.add_column(no_wrap=True, width=8)
        grid.add_column(overflow="fold")
        for row in rows:
            grid.add_row("[bold]hosts[/bold]", escape(host_line(row)))
        if rows:
            console.print(grid)
        return
    hosts = Table(title="hosts", title_justify="left", show_edge=False, pad_edge=False)
    for column in HOST_COLUMNS:
        hosts.add_column(column, overflow="fold")
    rows = [r for r in host_rows(report) if not only_problems or r[2] != "ok"]
    for row in rows:
        hosts.add_row(*map(escape, row), style=None if row[2] == "ok" else "bold magenta")
    if rows or not only_problems:
        console.print(hosts)


def host_line(row: tuple[str, ...]) -> str:
    """A folded host row as a line: `node[1-4] ok: GPUs 8, driver 550.54.15, ...` (what
    is not known of a host is left out)."""
    known = [f"{name} {value}" for name, value in zip(HOST_COLUMNS[3:], row[3:]) if value != "?"]
    return f"{row[0]} {row[2]}" + (": " + ", ".join(known) if known else "")


def _hosts_part(line: Line) -> str:
    """` node[2-3]` after the check id, unless the message names the same hosts itself."""
    cell = printable(line.hosts)
    message = printable(line.message)
    if cell == "-" or cell in message:
        return ""
    return " " + cell


GLANCE_SLACK = 12  # characters kept free for where a word wraps: two lines stay two


def _line_body(line: Line, *, whole: bool, width: int) -> str:
    """A problem under its stage: whole (the message and its remedy wrapped under the check),
    or a warning at a glance: its message cut to about two lines, `-q` shows it whole."""
    from rich.markup import escape

    name = printable(line.id)
    rest = f"{_hosts_part(line)}: {printable(line.message)}"
    if not whole:
        room = max(2 * width - len(name) - GLANCE_SLACK, 1)
        rest = rest if len(rest) <= room else rest[: room - 1] + "\u2026"
        return f"[bold]{escape(name)}[/bold]{escape(rest)}"
    body = f"[bold]{escape(name)}[/bold]{escape(rest)}"
    if line.remedy:
        body += f"\n[cyan]remedy:[/cyan] {escape(printable(line.remedy))}"
    return body


def _rich_stage(
    console: Console,
    report: Report,
    stage: str,
    findings: list[Finding],
    lines: list[Line],
    only_problems: bool,
    verbose: bool,
) -> None:
    """A stage's line of counts (or why it was skipped), then the lines it shows in full."""
    from rich.markup import escape
    from rich.table import Table

    why = _skip_reason(report, stage)
    shown = [line for line in lines if line.stage == stage]
    shown = [line for line in shown if verbose or line.status in PROBLEMS]
    if why is not None or (only_problems and not shown):
        if why is not None and not only_problems:
            console.print(f"[dim]{stage:8} skipped: {escape(printable(why))}[/dim]")
        return
    counts = stage_counts(findings) or "ran, nothing to report"
    console.print(f"[bold]{stage:8}[/bold] {counts}")
    grid = Table.grid(padding=(0, 1), pad_edge=False)
    grid.add_column(no_wrap=True, width=7)
    grid.add_column(overflow="fold")
    for line in shown:
        whole = verbose or only_problems or line.status is not Status.WARN
        body = _line_body(line, whole=whole, width=console.width - 8)
        grid.add_row(f"  [{_STYLE[line.status]}]{line.status.value}[/]", body)
    if shown:
        console.print(grid)
    if not only_problems and (verbose or report.command == "bench"):
        for block in report.text_blocks.get(stage, []):
            console.print("  " + printable(block), markup=False, highlight=False)
