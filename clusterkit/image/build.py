"""`image build` and `image push`: the checked-in Dockerfile through the Docker Engine API.

A failed step or a refused push ends in ExternalToolError with the builder's or registry's
own message: never a green result with nothing built or pushed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn

from clusterkit.errors import ConfigError, ExternalToolError
from clusterkit.image.engine import chunk_error, console, env_auth
from clusterkit.image.lock import read_lock, stale_reason
from clusterkit.image.render import drifted, spec_tag
from clusterkit.image.spec import DOCKERFILE, ImageSpec

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")


@dataclass(frozen=True)
class Built:
    image_id: str
    references: list[str]  # repository:tag, the spec-hash tag first
    cached_steps: int
    steps: int


def image_references(spec: ImageSpec, repository: str | None, extra: list[str]) -> list[str]:
    lock = read_lock(spec)
    repo = repository or spec.repository
    tags = [spec_tag(spec, lock), *spec.tags, *extra]
    return [f"{repo}:{tag}" for tag in dict.fromkeys(tags)]


def ensure_current(spec: ImageSpec) -> dict[str, Any]:
    """Build only what is checked in: a stale lock or drifted Dockerfile stops here."""
    reason = stale_reason(spec)
    if reason:
        raise ConfigError(f"{spec.lock_path}: {reason}", hint="run `clusterkit image lock`")
    lock = read_lock(spec)
    files = drifted(spec, lock)
    if files:
        raise ConfigError(
            f"{spec.directory}: {', '.join(files)} differ from a fresh render",
            hint=f"run `clusterkit image render {spec.directory}`",
        )
    return lock


def build_image(
    api: docker.APIClient,
    spec: ImageSpec,
    references: list[str],
    *,
    revision: str = "unknown",
    no_cache: bool = False,
    quiet: bool = False,
    network: str = "host",
    out: Console | None = None,
) -> Built:
    """Build the spec's image; progress on `out` (None: this process's stderr)."""
    ensure_current(spec)
    out = console() if out is None else out
    progress = Progress(TextColumn("{task.description}"), BarColumn(), console=out)
    live = out.is_terminal and not quiet
    log = _BuildLog(references[0], progress, progress.add_task("build", total=None))
    try:
        if live:
            progress.start()
        stream = api.build(
            path=str(spec.directory),
            dockerfile=DOCKERFILE,
            tag=references[0],
            buildargs={"CLUSTERKIT_REVISION": revision},
            nocache=no_cache,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            use_config_proxy=False,
            network_mode=network,
        )
        for chunk in stream:
            for line in log.read(chunk):
                if not live and not quiet:
                    out.print(line, markup=False)
    except docker.errors.APIError as error:
        raise ExternalToolError(f"build of {references[0]} failed: {error.explanation}") from None
    finally:
        if live:
            progress.stop()
    if log.image_id is None:
        raise ExternalToolError(f"build of {references[0]} ended without an image id")
    for reference in references[1:]:
        repository, _, tag = reference.rpartition(":")
        api.tag(log.image_id, repository, tag)
    return Built(log.image_id, references, log.cached, log.steps)


class _BuildLog:
    """The builder's stream as it comes: the image id, the step count on the progress bar,
    how many steps came from the cache, and the last lines for an error message."""

    def __init__(self, reference: str, progress: Progress, task: TaskID) -> None:
        self.reference, self.progress, self.task = reference, progress, task
        self.image_id: str | None = None
        self.steps = self.cached = 0
        self.tail: list[str] = []

    def read(self, chunk: dict[str, Any]) -> list[str]:
        """The chunk's output lines; ExternalToolError when it reports a failed step."""
        error = chunk_error(chunk)
        if error:
            detail = " | ".join(self.tail[-3:])
            raise ExternalToolError(
                f"build of {self.reference} failed: {error}"
                + (f" (last output: {detail})" if detail else "")
            )
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            self.image_id = aux["ID"]
        lines = [line.rstrip() for line in chunk.get("stream", "").splitlines()]
        lines = [line for line in lines if line]
        for line in lines:
            self._note(line)
        return lines

    def _note(self, line: str) -> None:
        self.tail = [*self.tail[-19:], line]
        step = _STEP.match(line)
        if step:
            self.steps = int(step.group(2))
            label = f"step {step.group(1)}/{self.steps} {step.group(3)[:60]}"
            self.progress.update(
                self.task, total=self.steps, completed=int(step.group(1)) - 1, description=label
            )
        if "Using cache" in line:
            self.cached += 1


def push_image(
    api: docker.APIClient,
    reference: str,
    *,
    quiet: bool = False,
    out: Console | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Push one repository:tag; return the manifest digest from the final aux chunk.
    Progress on `out` (None: this process's stderr); credentials from `environ` (None: this
    process's)."""
    repository, _, tag = reference.rpartition(":")
    out = console() if out is None else out
    live = out.is_terminal and not quiet
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                        console=out)  # fmt: skip
    tasks: dict[str, Any] = {}
    digest: str | None = None
    try:
        if live:
            progress.start()
        auth = env_auth(environ)
        stream = api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth)
        for chunk in stream:
            error = chunk_error(chunk)
            if error:
                raise ExternalToolError(f"push of {reference} failed: {error}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = aux["Digest"]
            layer, detail = chunk.get("id"), chunk.get("progressDetail") or {}
            if live and layer and detail.get("total"):
                if layer not in tasks:
                    tasks[layer] = progress.add_task(f"layer {layer}", total=detail["total"])
                progress.update(tasks[layer], completed=detail.get("current", 0))
            elif not live and not quiet and chunk.get("status") and not detail:
                prefix = f"{layer}: " if layer else ""
                out.print(f"{prefix}{chunk['status']}", markup=False)
    except docker.errors.APIError as error:
        raise ExternalToolError(f"push of {reference} failed: {error.explanation}") from None
    finally:
        if live:
            progress.stop()
    if not digest:
        raise ExternalToolError(f"push of {reference} ended without a digest from the registry")
    return digest
