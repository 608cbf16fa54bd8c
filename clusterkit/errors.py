"""One exception hierarchy. Every message names the file or host and what to try next,
so `__main__` can print it on one line and map it to an exit status without a traceback."""

from __future__ import annotations

from clusterkit.redact import redact_text
from clusterkit.status import ExitStatus


class ClusterkitError(Exception):
    """Base: a user-facing error with an exit status."""

    exit_status: ExitStatus = ExitStatus.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def shown(self) -> str:
        """The message as printed: a node's or a file's words in it may quote a secret."""
        return redact_text(str(self))


class UsageError(ClusterkitError):
    """A wrong flag or argument value."""


class LocatedError(ClusterkitError):
    """A problem at a place in a file: `file:line: key: message`, the line and key when
    known. Subclasses say which kind of file."""

    def __init__(
        self,
        path: str,
        message: str,
        *,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(_located(path, message, line, key), hint=hint)
        self.path, self.line, self.key = str(path), line, key
        self.detail = message

    def shown(self) -> str:
        """Only what is said about the key is redacted: `inv.yml:3: ansible_password: must be
        a string` names a secret's variable, not its value."""
        text = _located(self.path, redact_text(self.detail), self.line, self.key)
        return f"{text} ({redact_text(self.hint)})" if self.hint else text


class InventoryError(LocatedError):
    """A malformed or missing inventory. Names the file, the line when known, and the key."""


class ConfigError(ClusterkitError):
    """A malformed spec, catalog or settings file (not an inventory)."""


class SpecError(LocatedError, ConfigError):
    """A malformed image spec value. Names the file, the line when known, and the key."""


def _located(path: str, message: str, line: int | None, key: str | None) -> str:
    """`file:line: key: message`, each part on one line whatever the input held."""
    where = f"{_printable(path)}:{line}" if line is not None else _printable(path)
    what = f"{_printable(key)}: {_printable(message)}" if key else _printable(message)
    return f"{where}: {what}"


def _printable(text: str) -> str:
    """Control characters escaped, so that a hostile name stays on one line of output."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class TransportError(ClusterkitError):
    """A host could not be reached or a remote command could not run.

    `kind` is one of: unreachable, refused, timeout, auth, hostkey-unknown, hostkey-changed,
    hostkey-revoked, hostkey-unsupported (a @cert-authority line), proxy, protocol,
    interrupted.
    """

    exit_status = ExitStatus.INCOMPLETE

    def __init__(self, host: str, kind: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{host}: {message}", hint=hint)
        self.host, self.kind, self.detail = host, kind, message


class StageError(ClusterkitError):
    """A stage could not run to completion (not a failed check: we could not decide)."""

    exit_status = ExitStatus.INCOMPLETE


class ExternalToolError(ClusterkitError):
    """A tool clusterkit drives (docker, ansible-playbook, a registry) failed."""

    exit_status = ExitStatus.FAILED
