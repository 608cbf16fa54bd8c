"""Files clusterkit writes where other local users may reach (--log-dir, --print-dir, -o).

Where another user can add entries to a folder, a symlink or hard link planted under the name
clusterkit is about to write would make it (often root) overwrite and chmod a file of their
choosing. So here:

- a file name is one plain path component (`safe_child`): names from hosts or nodes never
  lead into another folder;
- a folder is used only when no other user can change what its path leads to: every directory
  on its real path belongs to us or root and is not writable by others unless sticky, and every
  symlink on the path as given belongs to us or root; it is then held open by a descriptor;
- every file is created new (O_CREAT|O_EXCL|O_NOFOLLOW) under a temporary name, with its mode
  set on the descriptor, and renamed over its final name: a rename replaces a planted link
  itself, it never writes through it;
- in a folder others can write to (sticky), an existing file of the same name must be ours.

`PrivateFolder.write` is an atomic write: the old file stays whole until the new one is
complete. (`-o` reports, which may go to a FIFO or a shared artifacts folder, are written by
clusterkit.report.write_whole instead.)
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import secrets
import stat
from pathlib import Path
from types import TracebackType
from typing import TextIO

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_TRIES = 5


class UnsafePathError(OSError):
    """A name or folder clusterkit refuses to write to; `strerror` says why."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(errno.EPERM, reason, os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def name_problem(name: str) -> str | None:
    """Why `name` is not one plain file name inside a folder, or None."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"{name!r} is a folder, not a file name"
    if "/" in name:
        return f"{name!r} contains '/' and would lead into another folder"
    if "\0" in name:
        return f"{name!r} contains a NUL character"
    if len(os.fsencode(name)) > 255:
        return "is longer than a file name may be (255 bytes)"
    return None


def safe_child(folder: str | os.PathLike[str], name: str) -> Path:
    """`folder/name`, after checking that `name` cannot lead out of `folder`."""
    problem = name_problem(name)
    if problem is not None:
        raise UnsafePathError(folder, f"file name {problem}")
    return Path(folder) / name


class PrivateFolder:
    """A checked folder, held open, where each file is written new and owner-only by default.
    Use as a context manager, or `close()` it."""

    def __init__(self, path: Path, fd: int, shared: bool) -> None:
        self.path = path  # the real path, symlinks resolved
        self._fd = fd
        self.shared = shared  # others can add entries (a sticky folder)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = True) -> PrivateFolder:
        """Check and hold `path` (made, 0700, when missing and `create`); UnsafePathError when
        another user could change what it leads to, OSError when it cannot be used."""
        if create:
            _make_folders(Path(path))
        real = Path(os.path.realpath(path))
        _check_links(Path(os.path.abspath(path)))
        checked = _check_chain(real)
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino) != (checked.st_dev, checked.st_ino):
            os.close(fd)
            raise UnsafePathError(real, "the folder changed while it was being checked")
        return cls(real, fd, _others_can_write(held))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> PrivateFolder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def child(self, name: str) -> Path:
        """The path `name` has in this folder (checked to stay in it)."""
        return safe_child(self.path, name)

    def write(self, name: str, data: str | bytes, mode: int = 0o600) -> Path:
        """Write `name` whole, with `mode`: a new file renamed over any old one, so a reader
        sees the old file or the new one, never a part, and a planted link is replaced."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        temp, fd = self._new_temp(name, mode)
        try:
            write_synced(fd, payload)
            self._put_in_place(temp, name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._fd)
            raise
        return self.child(name)

    def open_new(self, name: str, mode: int = 0o600, encoding: str = "utf-8") -> TextIO:
        """A fresh, empty `name` with `mode`, open for writing text (a log written as it
        comes); any old file of that name is replaced first."""
        temp, fd = self._new_temp(name, mode)
        try:
            self._put_in_place(temp, name)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._fd)
            raise
        return open(fd, "w", encoding=encoding, closefd=True)

    def _new_temp(self, name: str, mode: int) -> tuple[str, int]:
        """A new file under a random name (never an existing entry, never through a link)."""
        self.child(name)
        self._check_existing(name)
        for _ in range(_TEMP_TRIES):
            temp = f".clusterkit-{secrets.token_hex(8)}.tmp"
            try:
                fd = os.open(temp, _NEW_FILE, mode & 0o700, dir_fd=self._fd)
            except FileExistsError:
                continue
            os.fchmod(fd, mode)
            return temp, fd
        raise UnsafePathError(self.path, "no temporary name was free (is someone racing us?)")

    def _put_in_place(self, temp: str, name: str) -> None:
        self._check_existing(name)
        os.replace(temp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)

    def _check_existing(self, name: str) -> None:
        """In a folder others can write to, refuse to replace a file that is not ours."""
        if not self.shared:
            return
        try:
            found = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if found.st_uid != os.geteuid():
            raise UnsafePathError(
                self.child(name),
                f"exists and belongs to {_user(found.st_uid)}, in a folder others can write to",
            )


def write_synced(fd: int, data: bytes, mode: int | None = None) -> None:
    """`data` into the new file open at `fd` (closed after), with `mode` where given, and
    on disk before the caller renames the file over the old one: a crash or a full disk
    then leaves the old file or the whole new one, never a part."""
    with open(fd, "wb", closefd=True) as handle:
        if mode is not None:
            os.fchmod(handle.fileno(), mode)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _make_folders(path: Path) -> None:
    """`mkdir -p`, the folders it makes writable by none but us whatever the umask: the
    folder itself private (0700), those above it 0755."""
    missing = []
    for current in [path, *path.parents]:
        if os.path.lexists(current):
            break
        missing.append(current)
    for current in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked like any other
            os.mkdir(current, 0o700 if current == path else 0o755)


def _check_links(path: Path) -> None:
    """Every symlink on the path as given belongs to us or root: another user's link in a
    shared folder (/tmp/logs -> /etc/profile.d) would choose where we write."""
    for current in [*reversed(path.parents), path]:
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode) and not _trusted(info.st_uid):
            raise UnsafePathError(current, f"is a symlink of {_user(info.st_uid)}")


def _check_chain(real: Path) -> os.stat_result:
    """Every folder from / down to `real` belongs to us or root, and those others can write
    to are sticky (others can add entries, not swap ours). Returns `real`'s own stat."""
    for current in [*reversed(real.parents), real]:
        info = os.stat(current)
        if not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(current))
        if not _trusted(info.st_uid):
            raise UnsafePathError(
                current, f"belongs to {_user(info.st_uid)}, who could swap what it holds"
            )
        if _others_can_write(info) and not info.st_mode & stat.S_ISVTX:
            raise UnsafePathError(
                current, "others can write to this folder and it is not sticky (chmod o-w,g-w)"
            )
    return info


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _others_can_write(info: os.stat_result) -> bool:
    """World-writable, or group-writable for a group that is more than our own private one."""
    if info.st_mode & stat.S_IWOTH:
        return True
    return bool(info.st_mode & stat.S_IWGRP) and not _own_private_group(info.st_gid)


def _own_private_group(gid: int) -> bool:
    """A user-private group (same name as the user, no other member): umask 002 setups."""
    if gid != os.getegid():
        return False
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == user and set(group.gr_mem) <= {user}


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name!r}"
    except KeyError:
        return f"uid {uid}"
