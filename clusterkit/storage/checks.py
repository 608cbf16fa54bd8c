"""The storage stage's verdicts: pure functions over what the nodes answered
(clusterkit/node/storage.py, checked on arrival by storage/results.py)."""

from __future__ import annotations

from collections.abc import Mapping

from clusterkit.checks.model import Finding, Status, over_hosts
from clusterkit.storage.results import Answer

LOW_FREE_BYTES = 10 * 1024**3  # a checkpoint of a large model needs far more than this


def shared_findings(
    paths: list[str],
    master: str,
    token: str,
    written: Answer,
    reads: Mapping[str, Answer | str],
) -> list[Finding]:
    """storage.shared: every node read the master's token in every path; storage.free: free
    space per node and path. `reads`: each node's answer, or why its read failed."""
    not_written = {p: e.get("error", "?") for p, e in written.items() if not e.get("written")}
    if not_written:
        return [_not_written(master, not_written)]
    unshared, low, failed = _read_problems(paths, token, reads)
    return [
        over_hosts(
            "storage.shared",
            {**unshared, **failed},
            list(reads),
            ok=f"every node reads what {master} wrote in {', '.join(paths)}",
            failed=f"not the same storage as on {master}: "
            + "; ".join(f"{h}: {why}" for h, why in {**unshared, **failed}.items()),
            remedy="mount the shared filesystem at the same path on every node (NFS, Lustre, "
            "...): rank 0's checkpoint must be readable by every rank",
        ),
        over_hosts(
            "storage.free",
            low,
            list(reads),
            status=Status.WARN,
            ok=f"at least {LOW_FREE_BYTES // 1024**3} GiB free in the shared paths on every node",
            failed="little free space in the shared paths: "
            + "; ".join(f"{h}: {why}" for h, why in low.items()),
            remedy="free space or grow the filesystem before the job writes checkpoints",
        ),
    ]


def _not_written(master: str, not_written: dict[str, str]) -> Finding:
    """storage.shared: the token could not even be written on the master."""
    message = f"{master} could not write in " + "; ".join(
        f"{path} ({why})" for path, why in not_written.items()
    )
    return Finding(
        "storage.shared",
        Status.FAIL,
        message,
        hosts=[master],
        found=not_written,
        remedy="create the folders and make them writable by the job's user on the "
        "master (they must be the same shared filesystem on every node)",
    )


def _read_problems(
    paths: list[str], token: str, reads: Mapping[str, Answer | str]
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Per node: the paths where it did not read the token, a path low on space, a read that
    failed outright."""
    unshared: dict[str, str] = {}
    low: dict[str, str] = {}
    failed: dict[str, str] = {}
    for host, answer in reads.items():
        if isinstance(answer, str):  # the read itself failed
            failed[host] = answer
            continue
        missing = []
        for path in paths:
            entry = answer[path]
            if entry.get("token") != token:
                missing.append(f"{path} ({entry.get('error') or 'another file'})")
            free = entry.get("free_bytes")
            total = entry.get("total_bytes") or 0
            if free is not None and (free < LOW_FREE_BYTES or (total and free < total * 0.05)):
                low[host] = f"{path}: {free / 1024**3:.1f} GiB free"
        if missing:
            unshared[host] = "token not found in " + ", ".join(missing)
    return unshared, low, failed
