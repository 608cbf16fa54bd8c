"""`clusterkit lint SCRIPT`: the training script's distributed mistakes, before the cluster
time is spent; and the same lint as `launch` runs it before the job (warn, strict or off)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.inventory import load_inventory
from clusterkit.lint import Context, LintInputError, lint_script, render_json, render_text
from clusterkit.lint.render import describe_context, failing, finding_lines
from clusterkit.report.escape import printable
from clusterkit.status import ExitStatus
from clusterkit.words import counted


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    context = lint_context(args, env)
    try:
        result = lint_script(args.script, env.cwd, context)
    except LintInputError as error:
        raise UsageError(printable(f"lint: {error}"), hint="give the job's entry script") from None
    status = (
        ExitStatus.FAILED if failing(result.findings, strict=args.strict) else ExitStatus.PASSED
    )
    if args.format == "json":
        env.stdout.write(render_json(result, context, int(status)))
    else:
        env.stdout.write(render_text(result, context))
    return status


def lint_context(args: argparse.Namespace, env: Environment) -> Context:
    """--nodes and --nproc-per-node, else the inventory's hosts and expect.gpus_per_node."""
    nodes, nproc = args.nodes, args.nproc_per_node
    if args.inventory_sources:
        inventory = load_inventory(args.inventory_sources, environ=env.environ)
        nodes = nodes or len(inventory.hosts)
        nproc = nproc or inventory.settings.expect.gpus_per_node
    return Context(nodes=nodes, nproc_per_node=nproc)


def lint_before_launch(
    args: argparse.Namespace,
    env: Environment,
    context: Context,
    note: Callable[[str], None],
) -> bool:
    """Whether the launch goes ahead: `--lint off` skips, a script that is not a file here
    is named and not linted, findings are printed; `--lint strict` refuses a failing lint
    (warnings too with --strict)."""
    script = args.job[0] if args.job else ""
    if args.lint == "off" or not script:
        return True
    if script.startswith("-") or not os.path.isfile(env.cwd / script):
        note(printable(f"clusterkit: lint: {script} is not a file here: not linted"))
        return True
    try:
        result = lint_script(script, env.cwd, context)
    except LintInputError as error:
        note(printable(f"clusterkit: lint: {error}: not linted"))
        return True
    for finding in result.findings:
        note("\n".join(f"clusterkit: lint: {line}" for line in finding_lines(finding)))
    refused = args.lint == "strict" and failing(result.findings, strict=args.strict)
    if result.findings:
        verdict = "nothing was started (--lint strict)" if refused else "going ahead"
        count = counted(len(result.findings), "finding")
        note(printable(f"clusterkit: lint: {count} in {script} ({describe_context(context)}): ")
             + verdict)  # fmt: skip
    return not refused
