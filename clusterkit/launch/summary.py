"""How an attempt ended, in clusterkit's own lines: the result, the first failure's last
lines, the remedy, a hang's odd ones out and where the evidence is, the exit status. The
lines quote node text: the caller makes each inert before printing it."""

from __future__ import annotations

from clusterkit.launch.job import JobOutcome


def outcome_lines(outcome: JobOutcome) -> list[str]:
    lines = [f"clusterkit: job {outcome.result} after {outcome.seconds:.1f} s: {outcome.message}"]
    first = outcome.first_failure
    if first is not None and first.last_lines:
        lines.append(f"clusterkit: last lines of {first.who}:")
        lines += [f"  {line}" for line in first.last_lines[-10:]]
    if (remedy := outcome.remedy) is not None:
        lines.append(f"clusterkit: remedy: {remedy.line()}")
    if outcome.hang is not None:
        hang = outcome.hang
        for odd in hang.odd_ones_out:
            lines.append(f"clusterkit: odd one out: {odd}")
        if hang.missing:
            lines.append(f"clusterkit: no stacks from {', '.join(hang.missing)}")
        if outcome.evidence is not None:
            lines.append(f"clusterkit: stack dumps in {outcome.evidence}/stacks-HOST-RANK.txt")
        for dropped in hang.malformed:
            lines.append(f"clusterkit: malformed stack dump from {dropped}")
    if outcome.evidence is not None and first is not None:
        lines.append(f"clusterkit: this attempt's rank logs in {outcome.evidence}")
    lines.append(f"clusterkit: exit status {outcome.status}")
    return lines
