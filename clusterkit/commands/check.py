"""`clusterkit check`: connect -> probe -> static -> network -> image -> bench -> report."""

from __future__ import annotations

import time
from typing import TextIO

from clusterkit.checks.model import NEEDS_FIX, Fix
from clusterkit.cli.check import CheckRequest
from clusterkit.commands.common import check_plan, load_targets, report_view
from clusterkit.environment import Environment
from clusterkit.provision.remedy import TAGS
from clusterkit.report import Report, emit
from clusterkit.report.baseline import baseline_drift, load_baseline, save_baseline
from clusterkit.report.progress import progress
from clusterkit.slurm.check import write_exclude_file
from clusterkit.stages import build_report
from clusterkit.stages.lists import checked_session
from clusterkit.status import ExitStatus


def run(request: CheckRequest, env: Environment) -> ExitStatus:
    started = time.monotonic()
    hosts, checking, shown = request.target, request.run, request.report
    inventory, slurm = load_targets(hosts, env)
    baseline = load_baseline(request.baseline) if request.baseline else None  # before work
    with progress(env) as bar:
        session = checked_session(
            check_plan(checking, env), env, inventory, bar, slurm, machine=hosts.machine_only
        )
        session.close()
    report = build_report(
        session, "check", seconds=time.monotonic() - started, strict=checking.strict
    )
    if baseline is not None:
        report.findings += baseline_drift(report, baseline, inventory.settings.expect)
    plan = fix_plan(report) if request.fix_plan else None
    report.fix_plan = plan
    plan_alone = plan is not None and shown.format == "text" and not shown.output
    if plan_alone:  # the plan and nothing else: the commands, paste-ready
        print_plan_alone(report, env)
    else:
        emit(report, shown.format, shown.output, env, **report_view(shown))
    if plan is not None and shown.format != "json" and not plan_alone:
        # Text: after the report. JUnit on stdout is a document: the plan goes to stderr.
        to_stderr = shown.format in ("junit", "prometheus", "html") and not shown.output
        print_fix_plan(plan, env.stderr if to_stderr else env.stdout)
    if request.exclude_file:
        write_exclude_file(request.exclude_file, report, [host.name for host in inventory.hosts])
    if request.save_baseline:
        save_known_good(request.save_baseline, report, env)
    return report.exit_status


def save_known_good(path: str, report: Report, env: Environment) -> None:
    """A baseline is the state that is known good: a run that did not pass is not saved."""
    if report.verdict == "pass":
        save_baseline(path, report)
        print(f"clusterkit: baseline saved to {path}", file=env.stderr)
    else:
        print(
            f"clusterkit: --save-baseline {path}: not saved: the verdict is {report.verdict}, "
            "and a baseline records a state known to be good",
            file=env.stderr,
        )


def fix_plan(report: Report) -> list[str]:
    """The fewest provisioning commands that fix the current findings, each once, in the
    playbook's order: a tag runs once on every host any finding names for it, and tags with
    the same hosts share one command. The --limit stays even when it names every checked
    host: the check may have been limited, and the plan must not reach beyond it."""
    if report.inventory is None:
        return []
    every = frozenset(report.hosts)
    tags_of: dict[frozenset[str], list[str]] = {}
    for tag, hosts in sorted(_hosts_by_tag(report).items(), key=lambda i: _playbook_order(i[0])):
        tags_of.setdefault(hosts, []).append(tag)
    plan = []
    for hosts, tags in tags_of.items():
        limit = tuple(h for h in report.hosts if h in hosts) + tuple(sorted(hosts - every))
        command = Fix(tuple(tags), limit).command(report.inventory)
        if command is not None:
            plan.append(command)
    return plan


def _hosts_by_tag(report: Report) -> dict[str, frozenset[str]]:
    """Each playbook tag a finding needs, with every host it must run on (a fix naming no
    host: all of them)."""
    every = frozenset(report.hosts)
    hosts_of: dict[str, frozenset[str]] = {}
    for finding in report.findings:
        if finding.fix is None or finding.status not in NEEDS_FIX:
            continue
        for tag in finding.fix.tags:
            hosts_of[tag] = hosts_of.get(tag, frozenset()) | (frozenset(finding.fix.hosts) or every)
    return hosts_of


def _playbook_order(tag: str) -> int:
    """Where a tag's role runs in playbooks/site.yml (base first: later roles need it)."""
    return TAGS.index(tag) if tag in TAGS else len(TAGS)


def print_plan_alone(report: Report, env: Environment) -> None:
    """`check --fix-plan` on text: the commands on stdout, one line each and nothing else;
    what they answer (the verdict) on stderr."""
    for command in report.fix_plan or ():
        print(command, file=env.stdout)
    count = len(report.fix_plan or ())
    what = f"{count} command{'s' if count != 1 else ''}, in order" if count else "nothing"
    print(
        f"clusterkit: fix plan: {what} (a playbook fixes it; verdict {report.verdict.upper()}, "
        f"exit {int(report.exit_status)}; without --fix-plan: the report)",
        file=env.stderr,
    )


def print_fix_plan(commands: list[str], stream: TextIO) -> None:
    print("\nfix plan:" if commands else "\nfix plan: nothing a playbook can fix", file=stream)
    for command in commands:
        print(f"  {command}", file=stream)
