"""What clusterkit/node/image.py reports about an image on a node, typed.

A node is not trusted: its report is checked against these types where it arrives
(`parse_presence`, called by image/stage.py), so a report of the wrong shape, an unknown
key included, fails that node's image check with the path of the first bad value, and the
checks read typed facts: a renamed key is a mypy error. The node program ships with the
control side, so there is no version to skew; change its output and these types change
with it (tests/unit/image/test_image_presence.py runs the real program's report through them).

Most keys are optional: the program stops at the first step that fails and says why in
`error`, beside what it found until then.
"""

from __future__ import annotations

from typing import TypedDict, cast

from clusterkit.shape import shape_problem


class MalformedPresence(ValueError):
    """A node's image report does not have this shape; the message names where."""


class _ContainerBase(TypedDict):
    python: str
    shm_bytes: int | None
    memlock_soft: int | None  # None: unlimited
    memlock_hard: int | None
    nvidia_disable_require: str | None


class ContainerFacts(_ContainerBase, total=False):
    """What the short run of the image saw inside the container (node/image.py's probe)."""

    torch: str
    cuda: str | None
    cuda_available: bool
    nccl: str | None
    torch_error: str  # torch would not import


class _RunBase(TypedDict):
    ok: bool


class ContainerRun(_RunBase, total=False):
    facts: ContainerFacts  # when ok
    error: str  # when not


class ImageStore(TypedDict):
    driver: str
    containerd_store: bool


class ImagePresence(TypedDict, total=False):
    image: str
    docker_host: str | None
    host_nvidia_disable_require: str | None
    present: bool | None  # None: could not tell (`error` says why)
    id: str
    repo_digests: list[str]
    repo_tags: list[str]
    labels: dict[str, str]
    env: dict[str, str]  # the image's NVIDIA_* variables
    store: ImageStore | None
    run_args: list[str]
    run: ContainerRun
    error: str


def parse_presence(raw: object) -> ImagePresence:
    """The node's report, checked: MalformedPresence naming the first bad value."""
    problem = shape_problem(raw, ImagePresence, "image")
    if problem is not None:
        raise MalformedPresence(problem)
    return cast(ImagePresence, raw)


def unchecked(error: str) -> ImagePresence:
    """A node whose image could not be checked at all, and why."""
    return ImagePresence(present=None, error=error)
