"""`clusterkit lint SCRIPT`: the training script's distributed mistakes, before the cluster
time is spent; and the same lint as `launch` runs it before the job (warn, strict or off)."""

from __future__ import annotations

import os
from collections.abc import Callable

from clusterkit.cli.launch import LaunchLint
from clusterkit.cli.lint import LintRequest
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.escape import printable
from clusterkit.lint import Context, LintInputError, lint_script, render_json, render_text
from clusterkit.lint.render import describe_context, failing, finding_lines
from clusterkit.settings.loader import load_inventory
from clusterkit.status import ExitStatus
from clusterkit.words import counted


def run(request: LintRequest, env: Environment) -> ExitStatus:
    context = lint_context(request, env)
    try:
        result = lint_script(request.script, env.cwd, context)
    except LintInputError as error:
        raise UsageError(printable(f"lint: {error}"), hint="give the job's entry script") from None
    status = (
        ExitStatus.FAILED if failing(result.findings, strict=request.strict) else ExitStatus.PASSED
    )
    if request.format == "json":
        env.stdout.write(render_json(result, context, int(status)))
    else:
        env.stdout.write(render_text(result, context))
    return status


def lint_context(request: LintRequest, env: Environment) -> Context:
    """--nodes and --nproc-per-node, else the inventory's hosts and expect.gpus_per_node."""
    nodes, nproc = request.nodes, request.nproc_per_node
    if request.inventory_sources:
        inventory = load_inventory(list(request.inventory_sources), environ=env.environ)
        nodes = nodes or len(inventory.hosts)
        nproc = nproc or inventory.settings.expect.gpus_per_node
    return Context(nodes=nodes, nproc_per_node=nproc)


def lint_before_launch(
    lint: LaunchLint,
    env: Environment,
    context: Context,
    note: Callable[[str], None],
) -> bool:
    """Whether the launch goes ahead: `--lint off` skips, a script that is not a file here
    is named and not linted, findings are printed; `--lint strict` refuses a failing lint
    (warnings too with --strict)."""
    script = lint.job[0] if lint.job else ""
    if lint.mode == "off" or not script:
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
    refused = lint.mode == "strict" and failing(result.findings, strict=lint.strict)
    if result.findings:
        verdict = "nothing was started (--lint strict)" if refused else "going ahead"
        count = counted(len(result.findings), "finding")
        note(printable(f"clusterkit: lint: {count} in {script} ({describe_context(context)}): ")
             + verdict)  # fmt: skip
    return not refused
