"""`clusterkit image STEP`: the steps and their arguments, and the typed request they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    add_seconds,
    fail_if_stale,
)
from clusterkit.cli.parser import (
    ExamplesFormatter,
    Parser,
    examples_epilog,
)

# `image STEP --help` and `cost prices --help` end with theirs too.
IMAGE_EXAMPLES = {
    "lock": [
        "clusterkit image lock images/cpu-torch             # write image.lock.json",
        "clusterkit image lock --fail-if-stale              # CI: every spec's lock is current",
    ],
    "render": [
        "clusterkit image render images/cpu-torch           # write the Dockerfile",
        "clusterkit image render --fail-if-stale            # CI: the committed files are current",
    ],
    "build": [
        "clusterkit image build images/cpu-torch",
        "clusterkit image build images/cpu-torch --no-cache --tag latest",
    ],
    "push": [
        "clusterkit image push images/cpu-torch --digest-file digest.json",
        "clusterkit image push images/cpu-torch --repository registry.example.com/ml/torch",
    ],
    "verify": [
        "clusterkit image verify images/cpu-torch           # the spec-hash tag",
        "clusterkit image verify images/cpu-torch --reference registry.example.com/ml/torch:2.5.1",
    ],
}


@dataclass(frozen=True)
class ImageRequest:
    """`clusterkit image STEP`, as its flags ask for it (a flag the step lacks: its default)."""

    step: str | None  # None: no step given
    specs: tuple[str, ...] = ()  # none: every images/*/image.yaml (lock, render)
    fail_if_stale: bool = False
    offline: bool = False
    repository: str | None = None
    quiet: bool = False
    tags: tuple[str, ...] = ()
    no_cache: bool = False
    revision: str | None = None
    network: str = "host"
    digest_file: str | None = None
    reference: str | None = None
    timeout: float = 120.0


# Every step's flags, for the steps that lack them: each request reads them all.
_UNSET = ImageRequest(step=None)


def request(args: argparse.Namespace) -> ImageRequest:
    return ImageRequest(
        step=args.image_command,
        specs=tuple(args.specs),
        fail_if_stale=args.fail_if_stale,
        offline=args.offline,
        repository=args.repository,
        quiet=args.quiet,
        tags=tuple(args.tag),
        no_cache=args.no_cache,
        revision=args.revision,
        network=args.network,
        digest_file=args.digest_file,
        reference=args.reference,
        timeout=args.timeout,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser("image", help="lock, render, build, push and verify pinned images")
    parser.set_defaults(
        handler="clusterkit.commands.image:run",
        specs=[],
        fail_if_stale=_UNSET.fail_if_stale,
        offline=_UNSET.offline,
        repository=_UNSET.repository,
        quiet=_UNSET.quiet,
        tag=[],
        no_cache=_UNSET.no_cache,
        revision=_UNSET.revision,
        network=_UNSET.network,
        digest_file=_UNSET.digest_file,
        reference=_UNSET.reference,
        timeout=_UNSET.timeout,
    )
    steps = parser.add_subparsers(dest="image_command", metavar="STEP", parser_class=Parser)
    _add_image_file_steps(steps)
    _add_image_engine_steps(steps)
    for name, step in steps.choices.items():
        step.epilog = examples_epilog(IMAGE_EXAMPLES[name])
        step.formatter_class = ExamplesFormatter


def _add_image_file_steps(steps: argparse._SubParsersAction[Parser]) -> None:
    """lock and render: the files beside the spec, for every spec when none is named."""
    spec_help = "spec folder or image.yaml (default: every images/*/image.yaml)"
    lock = steps.add_parser(
        "lock",
        help="resolve the base digest and hashed requirements",
        description="Resolve the spec's base image to a digest and its Python requirements to "
        "exact, hashed versions for the image's platform; write image.lock.json beside it.",
    )
    lock.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
    fail_if_stale(lock, "write nothing; exit 1 when a lock is stale")
    lock.add_argument(
        "--offline", action="store_true", help="take the base digest from the spec's pin"
    )
    render = steps.add_parser(
        "render",
        help="generate the Dockerfile and pip files",
        description="Generate the Dockerfile and the hashed requirements file from the spec "
        "and its lock; --fail-if-stale fails when the committed files differ from what it would "
        "write.",
    )
    render.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
    fail_if_stale(render, "write nothing; exit 1 on drift")


def _add_image_engine_steps(steps: argparse._SubParsersAction[Parser]) -> None:
    """build, push and verify: one spec's image, through the Docker Engine API."""
    for name, text, description in (
        (
            "build",
            "build through the Docker Engine API",
            "Build the rendered Dockerfile through the Docker Engine API with OCI labels and "
            "the spec-hash tag; an unchanged spec reuses the cached image.",
        ),
        (
            "push",
            "push every tag; print and record the digest",
            "Push every tag of the built image to its registry and print the digest, the "
            "reference that nodes should run (repository@sha256:...).",
        ),
        (
            "verify",
            "run the image and compare it with the lock",
            "Run the image once and compare its torch, CUDA, NCCL and Python with the lock.",
        ),
    ):
        step = steps.add_parser(name, help=text, description=description)
        step.add_argument("specs", nargs=1, metavar="SPEC", help="spec folder or image.yaml")
        step.add_argument("--repository", help="override the spec's repository")
        step.add_argument("--quiet", "-q", action="store_true", help="no progress output")
        if name != "verify":
            step.add_argument("--tag", action="append", default=[], help="extra tag (repeatable)")
    build, push, verify = (steps.choices[name] for name in ("build", "push", "verify"))
    build.add_argument("--no-cache", action="store_true", help="ignore the layer cache")
    build.add_argument("--revision", help="org.opencontainers.image.revision (default: git)")
    build.add_argument(
        "--network",
        default="host",
        help="network for RUN steps (default: host, reaching registries as the host does)",
    )
    push.add_argument("--digest-file", metavar="FILE", help="write the pushed digest as JSON")
    verify.add_argument("--reference", help="image to run (default: the spec-hash tag)")
    add_seconds(verify, "--timeout", "run deadline", default=120.0)
