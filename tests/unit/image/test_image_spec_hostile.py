"""Hostile and careless image specs: every value checked against its grammar on load, with
file, key and line; nothing reaches the rendered Dockerfile that could add an instruction;
any input ends in a spec or one SpecError, never a traceback (fuzzed)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterkit.errors import ClusterkitError, SpecError
from clusterkit.image import grammar
from clusterkit.image import lock as lockmod
from clusterkit.image.render import dockerfile_text
from clusterkit.image.spec import load_spec
from tests.support.cli import run_cli

IMAGES = Path(__file__).resolve().parents[3] / "images"
REPO = IMAGES.parent


def _spec_dir(tmp_path: Path, name: str = "train-cu124") -> Path:
    for file in ("image.yaml", "image.lock.json"):
        shutil.copy(IMAGES / name / file, tmp_path / file)
    return tmp_path


def _edit(folder: Path, change) -> None:
    data = yaml.safe_load((folder / "image.yaml").read_text())
    change(data)
    (folder / "image.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def _line_of(folder: Path, words: str) -> int:
    rows = (folder / "image.yaml").read_text().splitlines()
    return next(n for n, row in enumerate(rows, 1) if words in row)


@pytest.mark.parametrize(
    ("key", "change", "marker"),
    [
        ("apt[1]", lambda d: d.update(apt=["curl", "vim\nRUN touch /pwned"]), "vim"),
        ("wheelhouse", lambda d: d.update(wheelhouse="wh\nRUN touch /pwned"), "wheelhouse:"),
        ("torch.index", lambda d: d["torch"].update(index="https://x.org/s\nRUN id"), "index:"),
        ("base.image", lambda d: d["base"].update(image="ubuntu:22.04\nRUN id"), "image:"),
        ("description", lambda d: d.update(description="fine\nRUN id"), "description:"),
        ("tags[0]", lambda d: d.update(tags=["v1\nRUN id"]), "v1"),
        ("requirements[0]", lambda d: d.update(requirements=["numpy\n--index-url=x"]), "numpy"),
    ],
)
def test_a_newline_in_any_field_is_refused_with_file_key_and_line(
    tmp_path: Path, key, change, marker
) -> None:
    folder = _spec_dir(tmp_path)
    _edit(folder, change)
    with pytest.raises(SpecError) as error:
        load_spec(folder)
    message = str(error.value)
    assert message.startswith(f"{folder / 'image.yaml'}:{_line_of(folder, marker)}: {key}: ")
    assert "\n" not in message and "\\n" in message  # shown escaped, on one line


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("apt", ["curl;rm -rf /"], "Debian package name"),
        ("apt", ["$(id)"], "Debian package name"),
        ("apt", ["-o=APT::Get::AllowUnauthenticated=1"], "Debian package name"),
        ("requirements", ["--index-url=http://evil/simple"], "pip option"),
        ("requirements", ["-r /etc/passwd"], "pip option"),
        ("requirements", ["numpy @ https://evil/x.whl"], "requirement such as"),
        ("wheelhouse", "../outside", "relative folder"),
        ("wheelhouse", "/etc", "relative folder"),
        ("wheelhouse", "wheels dir", "relative folder"),
        ("repository", "GHCR.io/Org/Name", "image repository"),
        ("source", "javascript:alert(1)", "URL"),
        ("description", "costs $HOME", "may not hold"),
        ("tags", [".hidden"], "must be a tag"),
    ],
)
def test_values_outside_their_grammar_are_refused(tmp_path: Path, key, value, words) -> None:
    folder = _spec_dir(tmp_path)
    _edit(folder, lambda d: d.update({key: value}))
    with pytest.raises(SpecError, match=words):
        load_spec(folder)


@pytest.mark.parametrize(
    ("section", "key", "value", "words"),
    [
        ("torch", "index", "https://user:secret@pypi.example/simple", "credentials"),
        ("torch", "index", "https://pypi.example/simple?x=1&y=$(id)", "no query"),
        ("torch", "index", "ftp://pypi.example/simple", "URL"),
        ("torch", "index", "https://pypi.example:99999/simple", "URL"),
        ("torch", "version", "2.5.1; rm -rf /", "PEP 440"),
        ("torch", "nccl", "2.21.5\r", "control character"),
        ("base", "image", "nvidia/cuda:bad tag", "malformed tag"),
        ("base", "digest", "sha256:" + "a" * 64 + "\n", "control character"),
        ("base", "digest", "sha256:" + "A" * 64, "64 lowercase hex"),
        ("runtime", "gpus", "all --privileged", "all, a count"),
        ("runtime", "ipc", "shareable", "must be one of private, host"),
    ],
)
def test_nested_values_outside_their_grammar_are_refused(
    tmp_path: Path, section, key, value, words
) -> None:
    folder = _spec_dir(tmp_path)
    _edit(folder, lambda d: d.setdefault(section, {}).update({key: value}))
    with pytest.raises(SpecError, match=words) as error:
        load_spec(folder)
    assert f": {section}.{key}: " in str(error.value)


def test_every_shipped_value_passes_its_grammar() -> None:
    accepted = {
        grammar.apt_package: ["curl", "libc6:amd64", "python3=3.11.2-1+b1", "vim/bookworm"],
        grammar.requirement: ["numpy==1.26.4", "a[b,c]>=1,<2", 'x; python_version < "3.12"'],
        grammar.tagged_image: ["nvidia/cuda:12.4.1-base-ubuntu22.04", "127.0.0.1:5000/a/b:t"],
        grammar.url: ["https://download.pytorch.org/whl/cu124", "http://127.0.0.1:8080/simple"],
        grammar.version: ["2.5.1", "2.13.0+cpu", "2.6.0rc1", "1!2.0.post1.dev3"],
        grammar.wheelhouse: ["wheelhouse", "wheels/cpu/"],
    }
    for check, values in accepted.items():
        for value in values:
            assert check(value) is None, (check.__name__, value)


def test_duplicate_keys_are_refused_with_both_lines(tmp_path: Path) -> None:
    folder = _spec_dir(tmp_path)
    text = (folder / "image.yaml").read_text()
    (folder / "image.yaml").write_text(text + "network: socket\n")
    with pytest.raises(SpecError, match=r"network: given twice \(lines \d+ and \d+\)"):
        load_spec(folder)


def test_a_lock_edited_by_hand_cannot_put_a_line_into_the_dockerfile(tmp_path: Path) -> None:
    folder = _spec_dir(tmp_path)
    spec = load_spec(folder)
    lock = lockmod.read_lock(spec)
    assert "RUN id" not in dockerfile_text(spec, lock)
    for path, value in (
        (("base", "image"), "ubuntu:22.04\nRUN id"),
        (("torch", "index"), "https://pypi.org/simple\nRUN id"),
        (("torch", "nccl"), "2.21.5\nRUN id"),
    ):
        edited = json.loads(json.dumps(lock))
        edited[path[0]][path[1]] = value
        with pytest.raises(SpecError, match=r"image\.lock\.json"):
            dockerfile_text(spec, edited)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("created_epoch: abc\n", "created_epoch: 'abc' must be whole seconds"),
        ("created_epoch: 99999999999999\n", "created_epoch: 99999999999999 must lie between"),
        ('glibc: "abc"\n', "glibc: 'abc' must be the base's glibc"),
        ("glibc: 2.35\n", "glibc: must be a quoted string"),
        (
            "python: 3.10\n",
            "python: must be a quoted string, got the number 3.1 (write it in quotes as you "
            'meant it, e.g. "3.10"',
        ),
        ("created_epoch: 2001-13-01\n", "not valid YAML"),
        ("runtime: [1, 2]\n", "runtime: must be a mapping"),
        ("base: {image: [a]}\n", "base.image: must be a string"),
    ],
)
def test_cli_bad_spec_is_one_line_exit_2(tmp_path: Path, text: str, words: str) -> None:
    folder = _spec_dir(tmp_path)
    original = yaml.safe_load((folder / "image.yaml").read_text())
    key = text.split(":")[0]
    original.pop(key, None)
    (folder / "image.yaml").write_text(yaml.safe_dump(original, sort_keys=False) + text)
    done = run_cli(["image", "render", "--fail-if-stale", str(folder)], cwd=REPO)
    assert done.status == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"clusterkit: error: {folder / 'image.yaml'}")
    assert words in lines[0]


def test_unreadable_and_oversized_files_are_one_error(tmp_path: Path) -> None:
    (tmp_path / "image.yaml").write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(tmp_path)
    (tmp_path / "image.yaml").write_text("a: " + "x" * 300_000)
    with pytest.raises(SpecError, match="larger than"):
        load_spec(tmp_path)
    (tmp_path / "image.yaml").unlink()
    (tmp_path / "image.yaml").mkdir()
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path)
    (tmp_path / "image.yaml").rmdir()
    (tmp_path / "image.yaml").write_text("[" * 5000)
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(tmp_path)


# --- fuzz: the grammar's values, their neighbours, and arbitrary YAML around them ----------

BASE = yaml.safe_load((IMAGES / "train-cu124" / "image.yaml").read_text())
NASTY = st.sampled_from(
    ["\n", "\r", "\x1b[2J", "\x00", "\u2028", "$", "`", '"', "'", "\\", " ", ";", "&", "|",
     "@", ":", "/", "..", "-", "=", "#", "{", "[", "*", "!", "%", "\t", "é"]
)  # fmt: skip
GRAMMAR_SAMPLES = [
    "2.5.1", "2.28", "abc", "sha256:" + "0" * 64, "curl", "https://pypi.org/simple",
    "ubuntu:22.04", "numpy==1.26.4", "wheelhouse", "cu124", "cpu", "host", "16g", "",
]  # fmt: skip
NEIGHBOUR_TEXT = st.one_of(
    st.text(max_size=40),
    st.builds(lambda a, b, c: a + b + c, st.text(max_size=10), NASTY, st.text(max_size=10)),
    st.sampled_from(GRAMMAR_SAMPLES),
)
SCALARS = st.one_of(
    NEIGHBOUR_TEXT,
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(NEIGHBOUR_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        ("name",), ("description",), ("repository",), ("source",), ("python",), ("glibc",),
        ("wheelhouse",), ("network",), ("created_epoch",), ("apt",), ("requirements",),
        ("tags",), ("base",), ("base", "image"), ("base", "digest"), ("torch",),
        ("torch", "version"), ("torch", "variant"), ("torch", "index"), ("torch", "nccl"),
        ("runtime",), ("runtime", "shm_size"), ("runtime", "gpus"), ("runtime", "ipc"),
        ("url",), ("licenses",), ("vendor",), ("unknown",),
    ]
)  # fmt: skip


def _mutated(edits: list[tuple[tuple[str, ...], object]]) -> dict:
    data = json.loads(json.dumps(BASE))
    for path, value in edits:
        holder = data
        for part in path[:-1]:
            if not isinstance(holder.get(part), dict):
                holder[part] = {}
            holder = holder[part]
        holder[path[-1]] = value
    return data


def _outcome(folder: Path, text: str | bytes) -> None:
    path = folder / "image.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    started = time.monotonic()
    try:
        spec = load_spec(folder)
    except ClusterkitError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path))
        assert int(error.exit_status) == 2
    else:
        # Accepted: whatever it holds renders without an extra line, and lock options hold.
        lock = json.loads((IMAGES / "train-cu124" / "image.lock.json").read_text())
        rendered = dockerfile_text(spec, lock)
        instructions = [row.split()[0] for row in rendered.splitlines() if row and row[0] != " "]
        allowed = {"#", "FROM", "SHELL", "ENV", "RUN", "COPY", "LABEL", "ARG", "USER", "WORKDIR"}
        assert set(instructions) <= allowed
        assert instructions.count("USER") == 1 and instructions.count("WORKDIR") == 1
        assert all(not value.startswith("-") for value in spec.requirements)
        lockmod.manylinux_platforms(spec.glibc)
    assert time.monotonic() - started < 2.0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(edits=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=4))
def test_fuzz_structured_specs(tmp_path: Path, edits) -> None:
    _outcome(tmp_path, yaml.safe_dump(_mutated(edits), allow_unicode=True))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    cut=st.integers(min_value=0, max_value=2000),
    insert=st.one_of(st.binary(max_size=20), NASTY.map(str.encode)),
)
def test_fuzz_raw_bytes_around_a_real_spec(tmp_path: Path, cut: int, insert: bytes) -> None:
    raw = (IMAGES / "train-cu124" / "image.yaml").read_bytes()
    cut %= len(raw) + 1
    _outcome(tmp_path, raw[:cut] + insert + raw[cut:])
