"""`clusterkit cost prices update`: fetch, merge, validate, write (clusterkit/cost/refresh.py);
one line per outcome."""

from __future__ import annotations

from clusterkit.cost.refresh import RefreshRequest, refresh
from clusterkit.environment import Environment
from clusterkit.escape import printable
from clusterkit.status import ExitStatus


def run(request: RefreshRequest, env: Environment) -> ExitStatus:
    done = refresh(request, env.environ)
    for warning in done.warnings:
        print(f"warning: {printable(warning)}", file=env.stderr)
    merged = done.merged
    for what, names in (("added", merged.added), ("changed", merged.changed)):
        for name in names:
            print(f"{what}: {name}", file=env.stdout)
    print(
        f"{len(merged.added)} added, {len(merged.changed)} changed, "
        f"{len(merged.unchanged)} unchanged, {len(done.warnings)} warnings; wrote {done.output}",
        file=env.stdout,
    )
    return ExitStatus.PASSED
