"""Redaction in every form a secret is written in: shell, config, YAML, JSON, Python literals,
flags, headers and URLs, at any case and with any characters in the value (fuzzed), and on
clusterkit's own stderr lines. Each of these forms once reached a report or stderr verbatim."""

from __future__ import annotations

import ast
import io
import json
import logging
import shlex
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clusterkit import logs
from clusterkit.redact import REDACTED, is_secret_name, redact
from clusterkit.report.progress import PhaseLog
from tests.support.cli import run_cli

SECRET = "hf_Zq3xT0pS3cr3tV4lu3"
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same inputs every run: a failure is reproducible
)

SECRET_NAMES = st.sampled_from(
    ["HF_TOKEN", "hf_token", "Hf_Token", "AWS_SECRET_ACCESS_KEY", "api_key", "apiKey",
     "password", "DB_PASS", "ansible_become_pass", "X-Api-Key", "client_secret", "PGPASSWORD",
     "GOOGLE_APPLICATION_CREDENTIALS", "auth", "Authorization"]
)  # fmt: skip
# Any text a value could hold: quotes, backslashes, spaces, `#`, `:`, `=`, non-ASCII.
ANY_VALUE = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
ONE_LINE_VALUE = ANY_VALUE.filter(lambda value: value.strip() and not {"\n", "\r"} & set(value))
BARE_VALUE = st.text(
    st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_./+=@:%!?*~^"),
    min_size=1,
    max_size=40,
)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f'HF_TOKEN="{SECRET}" NCCL_DEBUG=INFO', "NCCL_DEBUG=INFO"),
        (f"AWS_SECRET_ACCESS_KEY='{SECRET} x' next", "next"),
        (f'export hf_token="{SECRET}"; echo done', "echo done"),
        (f'{{"token": "{SECRET}", "n": 1}}', '"n": 1'),
        (f"{{'api_key': '{SECRET}', 'n': 1}}", "'n': 1"),
        (f"Authorization: Bearer {SECRET}\nnext line", "next line"),
        (f"Authorization: Basic {SECRET}==", "Authorization:"),
        (f'curl -H "Authorization: Bearer {SECRET}" https://api', "https://api"),
        (f"got a Bearer {SECRET} from the server", "from the server"),
        (f"password: {SECRET} with spaces\nuser: bob", "user: bob"),
        (f"db_password = {SECRET} more\n[section]", "[section]"),
        (f"--password={SECRET} --verbose", "--verbose"),
        (f"--token {SECRET} --verbose", "--verbose"),
        (f'"--token", "{SECRET}", "--verbose"', '"--verbose"'),
        (f"git clone https://user:{SECRET}@github.com/x.git", "@github.com/x.git"),
        (f"docker run -e 'HF_TOKEN={SECRET}' image", "' image"),
        (f'"Env": ["HF_TOKEN={SECRET} x", "PATH=/bin"]', '"PATH=/bin"'),
        (f'environ["HF_TOKEN"] = "{SECRET}"', "environ"),
        (f"b'token': b'{SECRET}'", "b'token'"),
        (f"password: |-\n  {SECRET}\n  {SECRET}\nuser: bob", "user: bob"),
        ('{\\"token\\": \\"' + SECRET + '\\", \\"n\\": 1}', '\\"n\\": 1'),
    ],
)
def test_each_form_loses_its_value_and_keeps_the_rest(text: str, kept: str) -> None:
    clean = redact(text)
    assert SECRET not in clean and SECRET[:8] not in clean
    assert REDACTED in clean and kept in clean


@pytest.mark.parametrize(
    "text",
    [
        "NCCL_SOCKET_IFNAME=eth0 KEYBOARD=us MONKEY=1 TOKENIZERS_PARALLELISM=false",
        "verdict: PASS",
        "host.key: a host whose key was accepted unverified",
        "key: value",
        "inv.ini:3: ansible_ssh_private_key_file: not a regular file",
        "HF_TOKEN_PATH=/root/.cache/token token_count=3",
        "ssh://root@node1:22/ https://node1:8080/x@y",
        "clusterkit: probe: 3 of 4 hosts ok in 1.2 s (node4: timeout)",
        "--azure-url file:///etc/passwd: only http and https URLs are fetched",
    ],
)
def test_harmless_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_names_of_any_case_and_shape() -> None:
    for name in ("hf_token", "apiKey", "X-Api-Key", "PGPASSWORD", "db.password", "auth"):
        assert is_secret_name(name), name
    for name in ("KEYBOARD", "MONKEY", "TOKENIZERS_PARALLELISM", "host.key", "pass", "passed",
                 "ansible_ssh_private_key_file", "host_key_checking", "PASSWORD_FILE"):  # fmt: skip
        assert not is_secret_name(name), name


def test_argv_lists_lose_the_argument_after_a_secret_flag() -> None:
    clean = redact({"argv": ["train.py", "--hf-token", SECRET, "--lr", "1"]})
    assert clean["argv"] == ["train.py", "--hf-token", REDACTED, "--lr", "1"]


def test_lower_case_dict_keys_are_secret_too() -> None:
    clean = redact({"Labels": {"api_key": SECRET, "key": "k"}, "auths": {"r": {"auth": SECRET}}})
    assert SECRET not in json.dumps(clean)
    assert clean["Labels"]["key"] == "k"


# -- fuzz: whatever the value holds, none of it survives, and the text around it does -------


@SETTINGS
@given(SECRET_NAMES, ANY_VALUE)
def test_json_and_json_in_json(name: str, value: str) -> None:
    once = json.dumps({name: value, "n": 1})
    assert json.loads(redact(once)) == {name: REDACTED, "n": 1}
    twice = json.dumps(once)
    assert json.loads(json.loads(redact(twice))) == {name: REDACTED, "n": 1}


@SETTINGS
@given(SECRET_NAMES, ANY_VALUE)
def test_python_literals(name: str, value: str) -> None:
    text = repr({name: value, "n": 1})
    assert ast.literal_eval(redact(text)) == {name: REDACTED, "n": 1}


@SETTINGS
@given(SECRET_NAMES, ANY_VALUE, st.sampled_from(["export {n}={v}", "{n}={v}", "--{n} {v}",
                                                 "--{n}={v}"]))  # fmt: skip
def test_shell_words(name: str, value: str, form: str) -> None:
    # `NAME=abc, NEXT=1` reads as a list of two settings: a trailing comma is not the value's
    assume(not shlex.quote(value).endswith(","))
    words = shlex.split(form.format(n=name, v="@value@"))
    text = form.format(n=name, v=shlex.quote(value)) + " NCCL_DEBUG=INFO"
    expected = [word.replace("@value@", REDACTED) for word in words] + ["NCCL_DEBUG=INFO"]
    assert shlex.split(redact(text)) == expected


@SETTINGS
@given(SECRET_NAMES, ANY_VALUE)
def test_shell_double_quotes(name: str, value: str) -> None:
    escaped = "".join("\\" + char if char in '\\"$`' else char for char in value)
    text = f'{name}="{escaped}" NCCL_DEBUG=INFO'
    assert shlex.split(redact(text)) == [f"{name}={REDACTED}", "NCCL_DEBUG=INFO"]


@SETTINGS
@given(SECRET_NAMES, ANY_VALUE)
def test_yaml_in_any_style(name: str, value: str) -> None:
    text = yaml.safe_dump({"a": 1, name: value, "n": 1}, sort_keys=False)
    loaded = yaml.safe_load(redact(text))
    assert loaded["a"] == 1 and loaded["n"] == 1
    assert loaded[name] in (REDACTED, ["redacted"])  # `[redacted]` unquoted is a YAML list


@SETTINGS
@given(SECRET_NAMES, ONE_LINE_VALUE, st.sampled_from(["{n}: {v}", "{n} = {v}", "{n}:{v}"]))
def test_config_lines(name: str, value: str, form: str) -> None:
    before, after = "first: 1\n" + form.format(n=name, v=""), "\nlast: 2"
    clean = redact(before + value + after)
    assert clean.startswith(before)
    left = clean[len(before) :].removesuffix(after).replace(REDACTED, "")
    assert not left.strip(" \t\"'")  # at most the value's own quotes and spaces are kept
    if value[0] not in " \t\"'":  # unquoted: exactly the value goes, and nothing after it
        assert clean == before + REDACTED + after


@SETTINGS
@given(BARE_VALUE)
def test_headers_and_urls(value: str) -> None:
    assume(len(value) >= 3)
    text = f"GET / Bearer {value}\nhttps://u:{quote(value, safe='')}@host/p"
    clean = redact(text)
    assert clean == f"GET / Bearer {REDACTED}\nhttps://u:{REDACTED}@host/p"


# -- clusterkit's own stderr lines ------------------------------------------------------------


def test_an_error_quoting_a_file_line_is_redacted_on_stderr(tmp_path: Path) -> None:
    """An inventory line `HF_TOKEN: value` is quoted by the error that refuses it."""
    inventory = tmp_path / "inv.ini"
    inventory.write_text(f"[all:vars]\nHF_TOKEN: {SECRET}\n[gpu]\nn1\n")
    done = run_cli(["check", "-i", inventory], timeout=60)
    assert done.status == 2
    assert SECRET not in done.stderr + done.stdout
    assert "inv.ini:2: expected key=value in [all:vars]" in done.stderr


def test_an_error_about_a_secret_variable_keeps_its_explanation(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  hosts:\n    n1:\n      ansible_password: [1]\n")
    done = run_cli(["check", "-i", inventory], timeout=60)
    assert done.status == 2
    assert "ansible_password: must be a non-empty string" in done.stderr


@pytest.mark.parametrize("verbosity", [0, 2])
def test_log_lines_are_redacted(verbosity: int) -> None:
    stream = io.StringIO()
    logs.configure(verbosity, stream)
    try:
        logging.getLogger("clusterkit.test").warning("n1: said %s", f"HF_TOKEN='{SECRET}'")
    finally:
        logs.configure(0, sys.stderr)
    assert "n1: said HF_TOKEN=" in stream.getvalue() and SECRET not in stream.getvalue()


def test_progress_lines_are_redacted() -> None:
    stream = io.StringIO()
    phases = PhaseLog(stream)
    phases.start("probe", 2)
    phases.done("n1", None)
    phases.done("n2", f"failed: --token {SECRET}")
    phases.finish()
    assert "n2: failed: --token" in stream.getvalue() and SECRET not in stream.getvalue()
