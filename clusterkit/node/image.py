"""Runs ON a node (run_node_script: IMAGE [options], stdlib only, Python 3.8+): what the node's
Docker engine holds under an image reference and what a short container run of it reports.

Uses the docker CLI, so DOCKER_HOST and the node's docker config apply as for any user of the
node. Every sub-step has its own timeout (the prelude's bounded tool runner); the result is
printed in the prelude's frame, so shell noise around it cannot corrupt it.
"""

import argparse
import json
import os
import sys
import uuid

from clusterkit.node.prelude import ToolError, emit, run_bounded

RUN_ARGS_LABEL = "io.clusterkit.run-args"

# Printed by `python3 -c` inside the image: works without a GPU and without torch.
CONTAINER_PROBE = r"""
import json, os, platform, resource
out = {"python": platform.python_version()}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    try:
        out["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:
        out["nccl"] = None
except Exception as error:
    out["torch_error"] = "%s: %s" % (type(error).__name__, error)
try:
    st = os.statvfs("/dev/shm")
    out["shm_bytes"] = st.f_blocks * st.f_frsize
except OSError:
    out["shm_bytes"] = None
soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
out["memlock_soft"] = None if soft == resource.RLIM_INFINITY else soft
out["memlock_hard"] = None if hard == resource.RLIM_INFINITY else hard
out["nvidia_disable_require"] = os.environ.get("NVIDIA_DISABLE_REQUIRE")
print("CLUSTERKIT-PROBE " + json.dumps(out))
"""


def _docker(args, timeout):
    """(exit code or None on timeout, stdout text, stderr text)."""
    try:
        code, out, err = run_bounded(["docker", *args], timeout)
    except ToolError as error:
        return 127, "", f"docker CLI not usable: {error}"
    if code is None:
        return None, "", f"timed out after {timeout}s"
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace").strip()


def inspect_image(image, timeout):
    code, out, err = _docker(["image", "inspect", "--format", "{{json .}}", image], timeout)
    if code is None:
        return {"present": None, "error": "docker image inspect: " + err}
    if code != 0:
        if "no such image" in err.lower() or "no such object" in err.lower():
            return {"present": False}
        return {"present": None, "error": "docker image inspect: " + err[-400:]}
    data = json.loads(out)
    config = data.get("Config") or {}
    env = {}
    for item in config.get("Env") or []:
        key, _, value = item.partition("=")
        env[key] = value
    return {
        "present": True,
        "id": data.get("Id"),
        "repo_digests": sorted(data.get("RepoDigests") or []),
        "repo_tags": sorted(data.get("RepoTags") or []),
        "labels": config.get("Labels") or {},
        "env": {k: v for k, v in env.items() if k.startswith("NVIDIA_")},
    }


def storage_driver(timeout):
    code, out, _err = _docker(["info", "--format", "{{json .DriverStatus}}|{{.Driver}}"], timeout)
    if code != 0:
        return None
    status, _, driver = out.strip().rpartition("|")
    containerd = "io.containerd.snapshotter" in status
    return {"driver": driver, "containerd_store": containerd}


def run_probe(image, run_args, timeout):
    name = "clusterkit-image-probe-" + uuid.uuid4().hex[:12]
    argv = ["run", "--rm", "--name", name, "--entrypoint", "python3", *run_args]
    argv += [image, "-c", CONTAINER_PROBE]
    code, out, err = _docker(argv, timeout)
    if code is None:
        _docker(["rm", "-f", name], 15)  # the CLI was killed; the container may live on
        return {"ok": False, "error": f"docker run timed out after {timeout}s"}
    for line in out.splitlines():
        if line.startswith("CLUSTERKIT-PROBE "):
            facts = json.loads(line[len("CLUSTERKIT-PROBE ") :])
            return {"ok": True, "facts": facts}
    return {"ok": False, "error": f"docker run exited {code}: {err[-400:]}"}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="clusterkit-image-node")
    parser.add_argument("image")
    parser.add_argument("--timeout", type=float, default=60.0, help="per sub-step")
    parser.add_argument("--run-args", default=None, help="JSON list overriding the image label")
    parser.add_argument("--gpus", default=None, help="value for docker run --gpus")
    parser.add_argument("--no-run", action="store_true")
    args = parser.parse_args(argv)
    result = {
        "image": args.image,
        "docker_host": os.environ.get("DOCKER_HOST"),
        "host_nvidia_disable_require": os.environ.get("NVIDIA_DISABLE_REQUIRE"),
    }
    try:
        result.update(inspect_image(args.image, args.timeout))
        result["store"] = storage_driver(args.timeout)
        if result.get("present") and not args.no_run:
            if args.run_args is not None:
                run_args = json.loads(args.run_args)
            else:
                run_args = json.loads(result["labels"].get(RUN_ARGS_LABEL) or "[]")
            if args.gpus:
                run_args = [*run_args, "--gpus", args.gpus]
            result["run_args"] = run_args
            result["run"] = run_probe(args.image, run_args, args.timeout)
    except Exception as error:  # reported, never a crash without a frame
        result["error"] = f"{type(error).__name__}: {error}"
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
