"""Key files for paramiko: read with clusterkit.keyfiles' bounds before connecting, and handed
to paramiko as text, so it never opens a key path itself."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import paramiko

from clusterkit.errors import TransportError
from clusterkit.keyfiles import KeyFileProblem, read_key_file

CERT_SUFFIX = "-cert.pub"


@dataclass(frozen=True)
class KeyText:
    key: str
    certificate: str | None  # the `-cert.pub` beside it, when there is one


def read_keys(host: str, paths: tuple[str, ...]) -> dict[str, KeyText]:
    """Every key file of a connection (and its certificate), read before connecting; a bad
    one is a TransportError naming the host and the file."""
    keys: dict[str, KeyText] = {}
    for path in paths:
        try:
            keys[path] = _read_pair(path)
        except KeyFileProblem as problem:
            raise TransportError(
                host,
                "auth",
                f"key file {problem}",
                hint="ansible_ssh_private_key_file (or IdentityFile) must name a private key",
            ) from None
    return keys


def _read_pair(path: str) -> KeyText:
    """A key and its certificate; paramiko may name either (`id_x` or `id_x-cert.pub`)."""
    key_path = path.removesuffix(CERT_SUFFIX)
    try:
        text = read_key_file(key_path)
    except KeyFileProblem as problem:
        raise KeyFileProblem(f"{key_path}: {problem}") from None
    certificate_path = key_path + CERT_SUFFIX
    if not os.path.lexists(certificate_path):
        return KeyText(text, None)
    try:
        return KeyText(text, read_key_file(certificate_path))
    except KeyFileProblem as problem:
        raise KeyFileProblem(f"{key_path}: its certificate {certificate_path}: {problem}") from None


class ReadKeysClient(paramiko.SSHClient):
    """paramiko's client, trying its key files in its own order with its own passphrase
    rules, but from text read here: it never opens a key path itself."""

    def __init__(self, keys: dict[str, KeyText]) -> None:
        super().__init__()
        self._keys = dict(keys)

    def _key_from_filepath(
        self, filename: str, klass: type[paramiko.PKey], password: str | None
    ) -> paramiko.PKey:
        found = self._keys.get(filename)
        if found is None:  # one paramiko found in ~/.ssh itself (no key file was given)
            try:
                found = self._keys[filename] = _read_pair(filename)
            except KeyFileProblem as problem:
                raise paramiko.SSHException(str(problem)) from None  # skipped, as paramiko does
        key = klass.from_private_key(io.StringIO(found.key), password)
        if found.certificate is not None:
            key.load_certificate(found.certificate)
        return key
