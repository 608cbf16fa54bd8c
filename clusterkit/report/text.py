"""Human output: rich tables on a terminal, plain aligned text when piped."""

from __future__ import annotations

from typing import IO

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import nccl_version, section, torch_cuda
from clusterkit.report.escape import printable
from clusterkit.report.model import STAGE_ORDER, Report

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
        facts = host.get("facts") or {}
        state = "ok" if host.get("reachable") and facts else (host.get("error") or "no facts")
        if not facts:  # never reached or probed: nothing is known, nothing is "missing"
            rows.append((name, str(host.get("address") or ""), state, *["?"] * 5))
            continue
        gpus = section(facts, "gpus")
        torch = section(facts, "torch")
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


def _by_stage(report: Report) -> list[tuple[str, list[Finding]]]:
    stages = sorted(
        {f.stage for f in report.findings},
        key=lambda s: STAGE_ORDER.index(s) if s in STAGE_ORDER else 99,
    )
    return [(s, [f for f in report.findings if f.stage == s]) for s in stages]


def skipped_without_findings(report: Report) -> list[tuple[str, str]]:
    """Skipped stages with their reasons, except those whose section of findings is printed
    already (the bench's SKIP finding carries the same reason): each said once."""
    shown = {f.stage for f in report.findings}
    return [(s, why) for s, why in report.stages.items() if why != "ran" and s not in shown]


def _summary(report: Report) -> str:
    counts = report.counts()
    parts = [
        f"{counts['fail']} failed",
        f"{counts['warn']} warnings",
        f"{counts['error']} errors",
        f"{counts['ok']} ok",
        f"{counts['skip']} skipped",
    ]
    return (
        f"verdict: {report.verdict.upper()} (exit {int(report.exit_status)}): "
        f"{', '.join(parts)} on {len(report.hosts)} hosts in {report.seconds:.1f} s"
    )


def render_plain(report: Report, stream: IO[str]) -> None:
    total = len(report.hosts)
    widths = [
        max(len(c), *(len(r[i]) for r in host_rows(report))) if report.hosts else len(c)
        for i, c in enumerate(HOST_COLUMNS)
    ]
    print("hosts:", file=stream)
    for row in [HOST_COLUMNS, *host_rows(report)]:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=stream)
    for stage, findings in _by_stage(report):
        print(f"\n{stage}:", file=stream)
        for f in findings:
            print(
                f"  {f.status.value.upper():5}  {printable(f.id):26}  {_hosts_cell(f, total):18}"
                f"  {printable(f.message)}",
                file=stream,
            )
            if f.remedy and f.status not in (Status.OK, Status.SKIP):
                print(f"  {'':5}  {'':26}  remedy: {printable(f.remedy)}", file=stream)
        for line in report.text_blocks.get(stage, []):
            print(f"  {printable(line)}", file=stream)
    for stage, why in skipped_without_findings(report):
        print(f"\n{stage}: skipped: {printable(why)}", file=stream)
    print("\n" + _summary(report), file=stream)


def render_rich(report: Report, stream: IO[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=stream, highlight=False)
    total = len(report.hosts)
    hosts = Table(title="hosts", title_justify="left", show_edge=False, pad_edge=False)
    for column in HOST_COLUMNS:
        hosts.add_column(column)
    for row in host_rows(report):
        hosts.add_row(*map(escape, row), style=None if row[2] == "ok" else "bold magenta")
    console.print(hosts)
    for stage, findings in _by_stage(report):
        table = Table(
            title=stage, title_justify="left", show_edge=False, pad_edge=False, expand=False
        )
        table.add_column("status", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("hosts")
        table.add_column("detail", overflow="fold")
        for f in findings:
            detail = escape(printable(f.message))
            if f.remedy and f.status not in (Status.OK, Status.SKIP):
                detail += f"\n[cyan]remedy:[/cyan] {escape(printable(f.remedy))}"
            table.add_row(
                f"[{_STYLE[f.status]}]{f.status.value}[/]",
                escape(printable(f.id)),
                escape(_hosts_cell(f, total)),
                detail,
            )
        console.print()
        console.print(table)
        for line in report.text_blocks.get(stage, []):
            console.print("  " + printable(line), markup=False, highlight=False)
    for stage, why in skipped_without_findings(report):
        console.print(f"\n[dim]{stage}: skipped: {escape(printable(why))}[/dim]")
    console.print(f"\n[{_VERDICT_STYLE[report.verdict]}]{_summary(report)}[/]")
