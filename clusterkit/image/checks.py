"""The `image` stage's verdicts: pure functions over what each node reported (node/image.py).

Every rank must run the same image with a driver that can run it and with runtime flags NCCL
can live with. Identity accepts both image stores: with the classic store `Id` is the config
digest and RepoDigests name pushed manifests; with the containerd store `Id` is the manifest
(or index) digest. Two nodes hold the same image when any of those digests agree.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Literal

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.registry import CheckId
from clusterkit.checks.stack import driver_verdict
from clusterkit.facts import FactsByHost, collected
from clusterkit.image.presence import ContainerFacts, ContainerRun, ImagePresence
from clusterkit.image.render import LABEL_PREFIX, SPEC_HASH_LABEL
from clusterkit.inventory.model import ClusterSettings
from clusterkit.versions import DriverRequirement

MIN_SHM_BYTES = 1 << 30  # NCCL's shared-memory transport fails on docker's 64 MiB default
_SIZE = re.compile(r"^(\d+)([kmg]?)$", re.IGNORECASE)
# What the image's labels pin and the container must report the same
VERSION_LABELS: tuple[Literal["torch", "cuda", "nccl"], ...] = ("torch", "cuda", "nccl")


def _finding(id_: CheckId, status: Status, message: str, **extra: Any) -> Finding:
    return Finding(id=id_, status=status, message=message, **extra)


def _short(digest: str | None) -> str:
    if not digest:
        return "?"
    return digest.split("@")[-1].removeprefix("sha256:")[:12]


def identities(facts: ImagePresence) -> set[str]:
    """Every digest that names this node's image: the store Id and each RepoDigest."""
    found = {facts["id"]} if facts.get("id") else set()
    found.update(ref.split("@", 1)[1] for ref in facts.get("repo_digests", []) if "@" in ref)
    return found


def _same_image_groups(present: Mapping[str, ImagePresence]) -> list[list[str]]:
    """Hosts grouped by shared identity (union of overlapping digest sets), largest first."""
    parent = {host: host for host in present}

    def root(host: str) -> str:
        while parent[host] != host:
            host = parent[host]
        return host

    owner: dict[str, str] = {}
    for host, facts in sorted(present.items()):
        for digest in identities(facts):
            if digest in owner:
                parent[root(host)] = root(owner[digest])
            else:
                owner[digest] = host
    groups: dict[str, list[str]] = defaultdict(list)
    for host in sorted(present):
        groups[root(host)].append(host)
    return sorted(groups.values(), key=lambda g: (-len(g), g))


def _describe(group: list[str], present: Mapping[str, ImagePresence]) -> str:
    facts = present[group[0]]
    names = ", ".join(_short(d) for d in sorted(identities(facts)))
    return f"{', '.join(group)}: {names}"


def _presence(facts_by_host: Mapping[str, ImagePresence], image: str) -> list[Finding]:
    errors = {h: f.get("error") for h, f in facts_by_host.items() if f.get("present") is None}
    missing = sorted(h for h, f in facts_by_host.items() if f.get("present") is False)
    out = []
    for host, error in sorted(errors.items()):
        out.append(
            _finding(
                "image.inspect",
                Status.ERROR,
                f"{host}: could not inspect {image}: {error or 'no answer'}",
                hosts=[host],
            )
        )
    if missing:
        out.append(
            _finding(
                "image.present",
                Status.FAIL,
                f"{image} is not on {', '.join(missing)}",
                hosts=missing,
                expected=image,
                found="missing",
                remedy=f"docker pull {image} on those nodes (playbook tag: image)",
            )
        )
    elif not errors:
        out.append(_finding("image.present", Status.OK, f"{image} is on every node"))
    return out


def _parity(present: Mapping[str, ImagePresence], image: str) -> list[Finding]:
    if len(present) < 2:
        return []
    out = []
    groups = _same_image_groups(present)
    if len(groups) > 1:
        odd = sorted(h for g in groups[1:] for h in g)
        out.append(
            _finding(
                "image.digest",
                Status.FAIL,
                f"{image} is a different image across nodes: "
                + "; ".join(_describe(g, present) for g in groups),
                hosts=odd,
                expected=sorted(identities(present[groups[0][0]])),
                found={h: sorted(identities(present[h])) for h in odd},
                remedy=f"pin the image by digest and `docker pull {image.split(':')[0]}@<digest>`",
            )
        )
    else:
        out.append(_finding("image.digest", Status.OK, f"every node holds the same {image}"))
    hashes: dict[str, list[str]] = defaultdict(list)
    for host, facts in sorted(present.items()):
        hashes[facts.get("labels", {}).get(SPEC_HASH_LABEL) or "(none)"].append(host)
    if len(hashes) > 1:
        ranked = sorted(hashes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        odd = sorted(h for _, hosts in ranked[1:] for h in hosts)
        out.append(
            _finding(
                "image.spec-hash",
                Status.FAIL,
                "spec hash differs: "
                + "; ".join(f"{', '.join(hosts)}: {value[:12]}" for value, hosts in ranked),
                hosts=odd,
                expected=ranked[0][0],
                found={h: present[h].get("labels", {}).get(SPEC_HASH_LABEL) for h in odd},
            )
        )
    return out


def _label(facts: ImagePresence, key: str) -> str | None:
    return facts.get("labels", {}).get(LABEL_PREFIX + key)


def _inside(facts: ImagePresence) -> ContainerFacts | None:
    """What the container saw, when it ran."""
    run = facts.get("run")
    return run.get("facts") if run and run["ok"] else None


def _why_not_run(run: ContainerRun | None) -> str:
    return run.get("error", "not run") if run is not None else "not run"


def _versions(present: Mapping[str, ImagePresence]) -> list[Finding]:
    out = []
    for host, facts in sorted(present.items()):
        run = facts.get("run")
        inside = _inside(facts)
        if run is None or inside is None:
            out.append(
                _finding(
                    "image.run",
                    Status.ERROR,
                    f"{host}: the image did not run: {_why_not_run(run)}",
                    hosts=[host],
                )
            )
            continue
        differences = []
        for key in VERSION_LABELS:
            label = _label(facts, key)
            if label is not None and inside.get(key) != label:
                differences.append(f"{key} {inside.get(key)} (label {label})")
        python = _label(facts, "python")
        found_python = inside["python"]
        if python and not (found_python == python or found_python.startswith(python + ".")):
            differences.append(f"python {found_python} (label {python})")
        if differences:
            out.append(
                _finding(
                    "image.versions",
                    Status.FAIL,
                    f"{host}: inside the container {', '.join(differences)}",
                    hosts=[host],
                    remedy="rebuild the image; something moved the pinned packages",
                )
            )
    return out


def _requirement(facts: ImagePresence) -> DriverRequirement | None:
    cuda, needed, floor = (
        _label(facts, "cuda"),
        _label(facts, "min-driver"),
        _label(facts, "driver-floor"),
    )
    if not (cuda and needed and floor):
        return None
    return DriverRequirement(cuda=cuda, full=needed, floor=floor)


def _drivers(
    present: Mapping[str, ImagePresence], driver_by_host: Mapping[str, str | None]
) -> list[Finding]:
    """The image's CUDA against each node's driver, by the rules compat.driver-cuda uses:
    below the floor fails unless torch inside the container saw CUDA (forward
    compatibility through the image's cuda-compat package), which warns."""
    out = []
    for host, facts in sorted(present.items()):
        requirement = _requirement(facts)
        driver = driver_by_host.get(host)
        if requirement is None or driver is None:
            continue
        inside = _inside(facts)
        saw_cuda = inside.get("cuda_available") if inside is not None else None
        status, why = driver_verdict(driver, requirement, saw_cuda)
        if status is Status.OK:
            continue
        out.append(
            _finding(
                "image.driver",
                status,
                f"{host}: {why}",
                hosts=[host],
                expected=f">={requirement.full}",
                found=driver,
                remedy="upgrade the NVIDIA driver (playbook tag: nvidia)",
            )
        )
    return out


def size_bytes(text: str) -> int | None:
    match = _SIZE.match(text.strip())
    if not match:
        return None
    return (
        int(match.group(1))
        * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]
    )


def _runtime(present: Mapping[str, ImagePresence], multi_node: bool) -> list[Finding]:
    small_shm, memlock, no_host_net, disabled = [], [], [], []
    for host, facts in sorted(present.items()):
        args = facts.get("run_args") or []
        inside = _inside(facts)
        shm = inside["shm_bytes"] if inside is not None else None
        if shm is not None and shm < MIN_SHM_BYTES and "host" not in _flag(args, "--ipc"):
            small_shm.append(f"{host} ({shm >> 20} MiB)")
        memlock_soft = inside["memlock_soft"] if inside is not None else None
        if memlock_soft is not None:
            memlock.append(f"{host} ({memlock_soft >> 10} KiB)")
        if multi_node and "host" not in _flag(args, "--network", "--net"):
            no_host_net.append(host)
        values = [
            facts.get("env", {}).get("NVIDIA_DISABLE_REQUIRE"),
            facts.get("host_nvidia_disable_require"),
            inside["nvidia_disable_require"] if inside is not None else None,
        ]
        if any(v and v.lower() not in ("0", "false", "") for v in values):
            disabled.append(host)
    out = []
    checks: tuple[tuple[CheckId, list[str], Status, str, str], ...] = (
        ("image.shm", small_shm, Status.FAIL, "/dev/shm below 1 GiB breaks NCCL's shared memory",
         "run with --ipc host or --shm-size 16g (image runtime.shm_size)"),
        ("image.memlock", memlock, Status.WARN, "memlock is limited (RDMA registration fails)",
         "run with --ulimit memlock=-1:-1"),
        ("image.network", no_host_net, Status.FAIL,
         "no host network: ranks on other nodes cannot reach the addresses NCCL advertises",
         "run with --network host"),
        ("image.disable-require", disabled, Status.WARN,
         "NVIDIA_DISABLE_REQUIRE is set: a too-old driver is not caught at container start",
         "unset NVIDIA_DISABLE_REQUIRE"),
    )  # fmt: skip
    for id_, hosts, status, message, remedy in checks:
        if hosts:
            names = [h.split(" ")[0] for h in hosts]
            out.append(
                _finding(id_, status, f"{message}: {', '.join(hosts)}", hosts=names, remedy=remedy)
            )
        else:
            out.append(
                _finding(id_, Status.OK, f"{id_.removeprefix('image.')}: fine on every node")
            )
    return out


def _flag(args: list[str], *names: str) -> str:
    """The value of a docker run flag (`--x v` or `--x=v`), '' when absent."""
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return ""


def image_findings(
    facts_by_host: Mapping[str, ImagePresence],
    settings: ClusterSettings,
    driver_by_host: Mapping[str, str | None] | None = None,
) -> list[Finding]:
    image = settings.image
    if not image:
        return [_finding("image.stage", Status.SKIP, "no clusterkit.image in the inventory")]
    out = _presence(facts_by_host, image)
    present = {h: f for h, f in facts_by_host.items() if f.get("present")}
    if not present:
        return out
    out += _parity(present, image)
    out += _versions(present)
    out += _drivers(present, driver_by_host or {})
    out += _runtime(present, multi_node=len(facts_by_host) > 1)
    return out


def rdma_findings(
    image_facts: Mapping[str, ImagePresence], probe_facts: FactsByHost
) -> list[Finding]:
    """image.infiniband: on nodes with RDMA devices the image must run with /dev/infiniband
    (`--device /dev/infiniband`, or `--privileged`), or NCCL inside it falls back to TCP."""
    with_rdma = [
        host
        for host, facts in sorted(image_facts.items())
        if facts.get("present") and host in probe_facts and _has_rdma(probe_facts, host)
    ]
    if not with_rdma:
        return []
    missing = []
    for host in with_rdma:
        args = image_facts[host].get("run_args") or []
        joined = " ".join(args)
        if "/dev/infiniband" not in joined and "--privileged" not in args:
            missing.append(host)
    if not missing:
        return [
            _finding(
                "image.infiniband",
                Status.OK,
                "the image runs with /dev/infiniband",
                hosts=with_rdma,
            )
        ]
    return [
        _finding(
            "image.infiniband",
            Status.WARN,
            "RDMA devices on the node but the image's run arguments lack /dev/infiniband "
            f"(NCCL in the container falls back to TCP sockets): {', '.join(missing)}",
            hosts=missing,
            remedy="add --device /dev/infiniband to the image's run arguments "
            "(runtime.run_args in the image spec, or clusterkit.image_run_args)",
        )
    ]


def _has_rdma(probe_facts: FactsByHost, host: str) -> bool:
    return bool(collected(probe_facts[host].get("infiniband")).get("devices"))
