"""Python facts: the interpreter, torch and NCCL as the job will import them (site-packages
added under -S, the NCCL wheel read off dist-info), and the environment variables asked for.
"""

import json
import os
import re
import sys

from clusterkit.node.prelude import ToolError, read_text, run_tool

TORCH_SNIPPET = r"""
import json, torch
info = {"version": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "device_count": 0, "nccl": None,
        "arch_list": []}
if info["cuda_available"]:
    info["device_count"] = torch.cuda.device_count()
    info["arch_list"] = torch.cuda.get_arch_list()
    info["capabilities"] = sorted({"%d.%d" % torch.cuda.get_device_capability(i)
                                   for i in range(info["device_count"])})
try:
    info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as error:
    info["nccl_error"] = str(error)[:200]
print(json.dumps(info))
"""


def add_site_packages():
    """The probe starts with `python -S` (processing every .pth file costs ~0.2 s of CPU per
    start on a well-stocked interpreter); the site-packages folders are all we need. Under -S
    a virtualenv's interpreter still has the base install's prefix, so its pyvenv.cfg is read
    here as site.py would: the facts must be what the job's interpreter imports."""
    import site

    prefixes, user_site = _venv_prefixes()
    folders = list(site.getsitepackages(prefixes) if prefixes else site.getsitepackages())
    if user_site and getattr(site, "ENABLE_USER_SITE", True) is not False:
        folders.append(site.getusersitepackages())
    for folder in folders:
        if folder not in sys.path and os.path.isdir(folder):
            sys.path.append(folder)


def _venv_prefixes():
    """(site prefixes, whether the user site applies) of the virtualenv this interpreter runs
    in, found as site.venv() finds it; (None, True) outside a virtualenv."""
    executable = os.path.dirname(os.path.abspath(sys.executable))
    for folder in (executable, os.path.dirname(executable)):
        config = read_text(os.path.join(folder, "pyvenv.cfg"))
        if config is None:
            continue
        system_site = re.search(
            r"^\s*include-system-site-packages\s*=\s*(\S+)", config, re.M | re.I
        )
        prefixes = [folder]
        if system_site and system_site.group(1).lower() == "true":
            prefixes += [sys.base_prefix, sys.base_exec_prefix]
        return prefixes, False
    return None, True


def _torch_files():
    """torch's version facts read from its files, without paying for `import torch`."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None and not sys.flags.no_site:
        return None
    if spec is None:  # maybe installed through a .pth file (editable builds): full site now
        import site

        site.main()
        spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    text = read_text(os.path.join(os.path.dirname(spec.origin), "version.py")) or ""
    facts = {"path": os.path.dirname(spec.origin)}  # type: dict[str, str | None]
    for key, name in (("version", "__version__"), ("cuda", "cuda"), ("hip", "hip")):
        match = re.search(r"^%s\s*(?::\s*[^=]+)?=\s*(.+)$" % re.escape(name), text, re.M)
        value = match.group(1).strip() if match else None
        facts[key] = None if value in (None, "None") else value.strip("'\"")
    return facts


NCCL_WHEEL = re.compile(r"^nvidia[-_]nccl(?:[-_](cu\d+))?-([^-]+)\.dist-info$", re.I)


def _nccl_wheel(folders):
    """The nvidia-nccl-cuXX wheel's version, from its dist-info folder name (importlib.metadata
    would cost more to import than the whole rest of the probe)."""
    found = {}  # type: dict[str, str]
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            match = NCCL_WHEEL.match(name)
            if match:
                found.setdefault((match.group(1) or "").lower(), match.group(2))
    for flavour in ("cu13", "cu12", "cu11", ""):
        if flavour in found:
            return found[flavour]
    return None


def collect_torch(options):
    facts = _torch_files()
    if facts is None:
        return {"present": False, "interpreter": sys.executable, "reason": "torch not importable"}
    # torch's own folder first (it is usually on sys.path too: each folder is read once).
    folders = dict.fromkeys([os.path.dirname(facts["path"]), *filter(None, sys.path)])
    facts.update(
        {"present": True, "interpreter": sys.executable, "nccl_wheel": _nccl_wheel(folders)}
    )
    # torch.distributed's *_object collectives decode through numpy: jobs using them die
    # on a node without it ("Numpy is not available"), although torch itself loads.
    import importlib.util

    facts["numpy"] = importlib.util.find_spec("numpy") is not None
    # Importing torch costs seconds; do it only where it can tell us more than its files:
    # a CUDA build on a node with GPUs (the NCCL actually loaded, devices, arch list), or
    # when the inventory asks for it (clusterkit.probe.import_torch).
    cuda_build = bool(facts.get("cuda") or facts.get("hip"))
    # (never for node-check: a health check must answer in well under a second).
    wanted = cuda_build and options.get("gpus_present") and not options.get("no_torch_import")
    if options.get("import_torch") or wanted:
        try:
            facts.update(json.loads(run_tool([sys.executable, "-c", TORCH_SNIPPET], 60)))
            facts["imported"] = True
        except (ToolError, ValueError) as error:
            facts["import_error"] = str(error)
    return facts


def collect_python(options):
    return {
        "version": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(
            sys.implementation.name, sys.implementation.name
        ),
    }


def collect_env(options):
    """Only the variables the control side names (`env_names`: the checks read them, see
    EnvFacts in clusterkit/facts.py): anything else may hold a secret, so collecting by
    prefix would copy tokens such as NVIDIA_API_KEY into reports."""
    names = options.get("env_names") or ()
    return {key: os.environ[key] for key in names if key in os.environ and key != "error"}
