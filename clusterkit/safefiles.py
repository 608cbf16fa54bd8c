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
complete.

`write_file` is how every other file clusterkit writes on the control side is written (`-o`,
`--check-output`, `--trace`, `-J`, `--exclude-file`, locks, catalogs, plots): its folder is
checked as above (never made), the name's entry is looked at with lstat before anything is
opened, and the file is then written by `PrivateFolder.write`. A symlink there is followed only
when it is ours or root's (`/dev/stdout`), and its target is checked the same way; another
user's link, file, FIFO or device is refused. A FIFO or character device of ours (a pipe, a
terminal, /dev/null) is written as a stream, opened with O_NONBLOCK: a FIFO no one reads is an
error at once, never a hang.
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

from clusterkit.keyfiles import FILE_KINDS

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_TRIES = 5
_STREAM = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MAX_LINKS = 8  # links followed from one path (the kernel allows 40)


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

    def write(self, name: str, data: str | bytes, mode: int | None = 0o600) -> Path:
        """Write `name` whole, with `mode`: a new file renamed over any old one, so a reader
        sees the old file or the new one, never a part, and a planted link is replaced.
        `mode` None: the old file's mode, else 0666 less the umask, as `open` gives."""
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

    def lstat(self, name: str) -> os.stat_result | None:
        """What `name` is in this folder (a link itself, not its target), or None."""
        self.child(name)
        try:
            return os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _new_temp(self, name: str, mode: int | None) -> tuple[str, int]:
        """A new file under a random name (never an existing entry, never through a link)."""
        self.child(name)
        self._check_existing(name)
        if mode is None:
            old = self.lstat(name)
            mode = stat.S_IMODE(old.st_mode) if old and stat.S_ISREG(old.st_mode) else None
        for _ in range(_TEMP_TRIES):
            temp = f".clusterkit-{secrets.token_hex(8)}.tmp"
            try:
                fd = os.open(
                    temp, _NEW_FILE, 0o666 if mode is None else mode & 0o700, dir_fd=self._fd
                )
            except FileExistsError:
                continue
            if mode is not None:
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


def write_file(path: str | os.PathLike[str], data: str | bytes, mode: int | None = None) -> None:
    """Write the file at `path` whole (see the module's docstring): never through another
    user's link, never over another user's file, never blocked by a FIFO. `mode` None: the old
    file's mode, or 0666 less the umask for a new one. UnsafePathError or OSError naming the
    path when it cannot be written."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder, name, found = _place(path)
    with folder:
        if found is not None and _is_stream(found):
            _write_stream(folder, name, payload)
        else:
            folder.write(name, payload, mode)


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise what `write_file(path, ...)` would, before any work is done, changing nothing:
    the folder and the entry are checked, and a file is made and removed beside it (a FIFO or
    device is not opened: a reader may come later)."""
    folder, name, found = _place(path)
    with folder:
        if found is None or not _is_stream(found):
            temp, fd = folder._new_temp(name, 0o600)
            os.close(fd)
            os.unlink(temp, dir_fd=folder._fd)


def why(error: OSError, path: str | os.PathLike[str]) -> str:
    """An OSError about `path` in a few words, naming the other path it is about, if any."""
    reason = error.strerror or str(error)
    other = error.filename
    if other is not None and os.fspath(other) not in (os.fspath(path), os.path.abspath(path)):
        return f"{os.fspath(other)}: {reason}"
    return reason


def _place(
    path: str | os.PathLike[str], links: int = 0
) -> tuple[PrivateFolder, str, os.stat_result | None]:
    """The checked folder (held open) and name a write to `path` goes to, and what is there
    now: a link of ours or root's is followed (its target checked again), one to a FIFO or
    device kept as the stream to write to; anything else that is no file of ours is refused."""
    given = Path(os.path.abspath(path))
    if os.fspath(path).endswith("/") or given == given.parent:
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", os.fspath(path))
    folder = PrivateFolder.open(given.parent, create=False)
    try:
        found = folder.lstat(given.name)
        if found is None or not stat.S_ISLNK(found.st_mode):
            _check_entry(folder, given, found)
            return folder, given.name, found
        if not _trusted(found.st_uid):
            raise UnsafePathError(given, f"is a symlink of {_user(found.st_uid)}")
        target = _followed(given)
        if target is not None and _is_stream(target):
            return folder, given.name, target
        if links >= _MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path))
        link = os.readlink(given.name, dir_fd=folder._fd)
    except BaseException:
        folder.close()
        raise
    folder.close()
    return _place(folder.path / link, links + 1)


def _check_entry(folder: PrivateFolder, path: Path, found: os.stat_result | None) -> None:
    """A regular file (another user's only where none but us can add entries), or a FIFO or
    character device of ours or root's; nothing else."""
    if found is None or stat.S_ISREG(found.st_mode):
        folder._check_existing(path.name)
        return
    kind = FILE_KINDS.get(stat.S_IFMT(found.st_mode), "not a regular file")
    if not _is_stream(found):
        raise UnsafePathError(path, f"is {kind}, not a file")
    if not _trusted(found.st_uid):
        raise UnsafePathError(path, f"is {kind} of {_user(found.st_uid)}")


def _followed(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _is_stream(info: os.stat_result) -> bool:
    return stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)


def _write_stream(folder: PrivateFolder, name: str, data: bytes) -> None:
    """Write to the FIFO or device `name` (or our link to one), opened without blocking: a
    FIFO no process reads is an error now, not a wait for a reader that never comes."""
    try:
        fd = os.open(name, _STREAM, dir_fd=folder._fd)
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise UnsafePathError(
                folder.child(name), "is a FIFO that no process is reading: nothing was written"
            ) from None
        raise
    with open(fd, "wb", closefd=True) as handle:
        if not _is_stream(os.fstat(fd)):
            raise UnsafePathError(folder.child(name), "changed while it was being opened")
        os.set_blocking(fd, True)
        handle.write(data)


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
