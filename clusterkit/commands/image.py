"""`clusterkit image lock|render|build|push|verify`: spec -> pushed, verified, labelled image."""

from __future__ import annotations

import json
import subprocess
from functools import partial
from pathlib import Path

from rich.console import Console

from clusterkit.cli.image import ImageRequest
from clusterkit.environment import Environment
from clusterkit.errors import ConfigError, UsageError
from clusterkit.image import lock as lockmod
from clusterkit.image.render import drifted, write_rendered
from clusterkit.image.spec import ImageSpec, find_specs, load_spec
from clusterkit.safefiles import why, write_file
from clusterkit.status import ExitStatus


def _out(env: Environment) -> Console:
    """The step's lines on `env`'s stdout."""
    return Console(file=env.stdout, highlight=False, soft_wrap=True, _environ=env.environ)


def _specs(request: ImageRequest, env: Environment) -> list[ImageSpec]:
    paths = request.specs or find_specs(env.path("images"))
    if not paths:
        raise ConfigError("no image specs given and none under images/")
    return [load_spec(path) for path in paths]


def _print_staleness(out: Console, where: Path, problem: str | None, *, current: str) -> bool:
    """--fail-if-stale's line for one spec's files: `problem` when they are stale (True),
    else that they are `current`."""
    out.print(f"{where}: {problem or current}", markup=False)
    return bool(problem)


def _lock(request: ImageRequest, env: Environment) -> ExitStatus:
    out = _out(env)
    status = ExitStatus.PASSED
    for spec in _specs(request, env):
        if request.fail_if_stale:
            reason = lockmod.stale_reason(spec)
            stale = f"stale: {reason}" if reason else None
            if _print_staleness(out, spec.lock_path, stale, current="current"):
                status = ExitStatus.FAILED
            continue
        from clusterkit.image.registry import manifest_digest

        registry_digest = partial(manifest_digest, environ=env.environ)
        digest, source = lockmod.resolve_base(spec, registry_digest, offline=request.offline)
        lock = lockmod.build_lock(spec, digest, source, lockmod.resolve_packages(spec))
        lockmod.fill_wheelhouse(spec, lock)
        write_file(spec.lock_path, lockmod.dumps(lock))
        torch = lock["torch"]
        out.print(
            f"{spec.lock_path}: {len(lock['packages'])} packages, torch {torch['version']}, "
            f"CUDA {torch['cuda'] or '-'}, NCCL {torch['nccl'] or '-'}, "
            f"min driver {torch['min_driver'] or '-'}",
            markup=False,
        )
    return status


def _render(request: ImageRequest, env: Environment) -> ExitStatus:
    out = _out(env)
    status = ExitStatus.PASSED
    for spec in _specs(request, env):
        reason = lockmod.stale_reason(spec)
        if reason:
            raise ConfigError(f"{spec.lock_path}: {reason}", hint="run `clusterkit image lock`")
        lock = lockmod.read_lock(spec)
        if request.fail_if_stale:
            files = drifted(spec, lock)
            drift = f"drifted: {', '.join(files)}" if files else None
            if _print_staleness(out, spec.directory, drift, current="rendered files current"):
                status = ExitStatus.FAILED
            continue
        written = write_rendered(spec, lock)
        for path in written:
            out.print(f"wrote {path}", markup=False)
        if not written:  # say so: silence reads like nothing happened
            out.print(f"{spec.directory}: rendered files already current", markup=False)
    return status


def _revision(spec: ImageSpec) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(spec.directory), "rev-parse", "HEAD"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.decode().strip() if done.returncode == 0 else "unknown"


def _one_spec(request: ImageRequest, env: Environment) -> ImageSpec:
    specs = _specs(request, env)
    if len(specs) != 1:
        raise ConfigError(f"`image {request.step}` takes exactly one spec")
    return specs[0]


def _build(request: ImageRequest, env: Environment) -> ExitStatus:
    out = _out(env)
    from clusterkit.image.build import build_image, image_references
    from clusterkit.image.engine import api_client, console

    spec = _one_spec(request, env)
    references = image_references(spec, request.repository, list(request.tags))
    built = build_image(
        api_client(environ=env.environ),
        spec,
        references,
        revision=request.revision or _revision(spec),
        no_cache=request.no_cache,
        quiet=request.quiet,
        network=request.network,
        out=console(env.stderr, env.environ),
    )
    out.print(
        f"built {built.image_id} ({built.cached_steps} cached step(s) of {built.steps}): "
        + ", ".join(built.references),
        markup=False,
    )
    return ExitStatus.PASSED


def _push(request: ImageRequest, env: Environment) -> ExitStatus:
    out = _out(env)
    from clusterkit.image.build import image_references, push_image
    from clusterkit.image.engine import api_client, console

    spec = _one_spec(request, env)
    api = api_client(environ=env.environ)
    references = image_references(spec, request.repository, list(request.tags))
    digest = ""
    for reference in references:
        digest = push_image(
            api,
            reference,
            quiet=request.quiet,
            out=console(env.stderr, env.environ),
            environ=env.environ,
        )
        out.print(f"pushed {reference} {digest}", markup=False)
    repository = references[0].rpartition(":")[0]
    out.print(f"{repository}@{digest}", markup=False)
    if request.digest_file:
        record = {"image": f"{repository}@{digest}", "digest": digest, "tags": references}
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        try:
            write_file(request.digest_file, text)
        except OSError as error:
            flag = f"--digest-file {request.digest_file}"
            raise UsageError(f"{flag}: cannot write: {why(error, request.digest_file)}") from None
    return ExitStatus.PASSED


def _verify(request: ImageRequest, env: Environment) -> ExitStatus:
    out = _out(env)
    from clusterkit.image.build import image_references
    from clusterkit.image.engine import api_client
    from clusterkit.image.verify import differences, probe_image

    spec = _one_spec(request, env)
    lock = lockmod.read_lock(spec)
    reference = request.reference or image_references(spec, request.repository, [])[0]
    found = probe_image(api_client(environ=env.environ), reference, timeout=request.timeout)
    problems = differences(lock, found)
    summary = ", ".join(f"{key} {found.get(key)}" for key in ("torch", "cuda", "nccl", "python"))
    if problems:
        for problem in problems:
            out.print(f"{reference}: {problem}", markup=False)
        return ExitStatus.FAILED
    out.print(f"{reference}: matches the lock ({summary})", markup=False)
    return ExitStatus.PASSED


HANDLERS = {"lock": _lock, "render": _render, "build": _build, "push": _push, "verify": _verify}


def run(request: ImageRequest, env: Environment) -> ExitStatus:
    if not request.step:
        raise ConfigError("image: name a step: lock, render, build, push or verify")
    return HANDLERS[request.step](request, env)
