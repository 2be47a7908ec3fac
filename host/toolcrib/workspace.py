"""Files inside the workspace, and nowhere else: the confinement every pack that touches files should use.

Every path is opened one component at a time, relative to the workspace's directory descriptor, with
``O_NOFOLLOW``. What is checked is exactly what is used: there is no resolve-then-open window in which a
directory could be swapped for a symbolic link. Refused before any I/O: absolute paths, ``~``, ``..``, NUL,
backslashes. Refused at open: a symbolic link in any component (the error says so); nothing here follows one.

    root = toolcrib.workspace.Root(ctx.workspace)
    data, size = root.read_bytes(parts_of("docs/a.md"), limit=65536)
    root.write_bytes(parts_of("out/report.txt"), b"...", create_parents=True)

POSIX only (it relies on ``dir_fd`` and ``O_NOFOLLOW``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolcrib.errors import ToolError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DRIVE = re.compile(r"[A-Za-z]:")


class PathError(ToolError):
    """A path that a file tool refuses, with the reason; ``missing`` when it is simply not there."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def parts_of(path: str, *, allow_root: bool = True) -> tuple[str, ...]:
    """The components of a workspace-relative path, or ``PathError``. ``""`` and ``"."`` are the root."""
    if "\x00" in path:
        raise PathError(f"{path!r}: a path cannot contain a NUL character")
    if path.startswith("~"):
        raise PathError(f"{path!r}: '~' is not expanded; give a path relative to the workspace")
    if path.startswith(("/", "\\")) or _DRIVE.match(path):
        raise PathError(f"{path!r}: absolute paths are not allowed; give a path relative to the workspace")
    if "\\" in path:
        raise PathError(f"{path!r}: use '/' to separate path components")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise PathError(f"{path!r}: '..' is not allowed; paths stay inside the workspace")
    if not parts and not allow_root:
        raise PathError(f"{path!r} is the workspace root itself, which this tool does not take")
    return parts


def display(parts: tuple[str, ...]) -> str:
    return "/".join(parts) or "."


def _error(exc: OSError, parts: tuple[str, ...]) -> PathError:
    where = display(parts)
    if exc.errno == errno.ELOOP:
        return PathError(f"{where}: goes through a symbolic link, which file tools do not follow")
    if exc.errno == errno.ENOTDIR:
        return PathError(f"{where}: a component of the path is not a directory (or is a symbolic link)")
    if exc.errno == errno.ENOENT:
        return PathError(f"{where}: not found", missing=True)
    if exc.errno == errno.EEXIST:
        return PathError(f"{where}: already exists")
    if exc.errno == errno.EACCES or exc.errno == errno.EPERM:
        return PathError(f"{where}: permission denied")
    if exc.errno == errno.ENAMETOOLONG:
        return PathError(f"{where[:80]}...: the path is too long")
    if exc.errno == errno.EISDIR:
        return PathError(f"{where}: is a directory")
    if exc.errno == errno.ENOTEMPTY:
        return PathError(f"{where}: the directory is not empty")
    return PathError(f"{where}: {os.strerror(exc.errno or 0)}")


def _why(exc: OSError, name: str, dirfd: int) -> OSError:
    """Linux answers ENOTDIR for a symlink opened with O_DIRECTORY|O_NOFOLLOW: say which it really was."""
    if exc.errno == errno.ENOTDIR:
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                return OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        except OSError:
            pass
    return exc


class Root:
    """The workspace root, and descriptor-relative access below it."""

    def __init__(self, workspace: Path) -> None:
        self.path = workspace

    def _open_root(self) -> int:
        try:
            return os.open(self.path, DIR_FLAGS)
        except OSError as exc:
            raise PathError(f"the workspace root is not usable ({os.strerror(exc.errno or 0)})") from None

    @contextmanager
    def directory(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory at ``parts`` (created, with parents, when ``create``)."""
        fd = self._open_root()
        try:
            for i, part in enumerate(parts):
                try:
                    next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise _error(FileNotFoundError(errno.ENOENT, "", part), parts[: i + 1]) from None
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        raise _error(exc, parts[: i + 1]) from None
                    try:
                        next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise _error(exc, parts[: i + 1]) from None
                except OSError as exc:
                    raise _error(_why(exc, part, fd), parts[: i + 1]) from None
                os.close(fd)
                fd = next_fd
            yield fd
        finally:
            os.close(fd)

    @contextmanager
    def parent(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[tuple[int, str]]:
        """A descriptor of the parent directory of ``parts`` and the last component's name."""
        if not parts:
            raise PathError("the workspace root itself cannot be used here")
        with self.directory(parts[:-1], create=create) as fd:
            yield fd, parts[-1]

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result | None:
        """``lstat`` of the entry (never following it), or None when it does not exist."""
        if not parts:
            with self.directory(()) as fd:
                return os.fstat(fd)
        try:
            with self.parent(parts) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except PathError as exc:
            if exc.missing:
                return None
            raise
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _error(exc, parts) from None

    @contextmanager
    def open_file(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the regular file at ``parts``, opened for reading, never following a link and never
        blocking on a FIFO or device."""
        with self.parent(parts) as (dirfd, name):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
            except OSError as exc:
                raise _error(exc, parts) from None
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    raise PathError(f"{display(parts)}: is a directory")
                if not stat.S_ISREG(mode):
                    raise PathError(f"{display(parts)}: not a regular file (a FIFO, socket or device)")
                os.set_blocking(fd, True)
                yield fd
            finally:
                os.close(fd)

    def read_bytes(self, parts: tuple[str, ...], limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the file, and its size."""
        with self.open_file(parts) as fd:
            size = os.fstat(fd).st_size
            chunks = []
            left = limit
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks), size

    def write_bytes(self, parts: tuple[str, ...], data: bytes, *, create_parents: bool = False,
                    overwrite: bool = True) -> bool:
        """Write ``data`` atomically; returns whether the file existed before. See ``atomic_writer``."""
        with self.atomic_writer(parts, create_parents=create_parents, overwrite=overwrite) as (fd, existed):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        return existed

    @contextmanager
    def atomic_writer(self, parts: tuple[str, ...], *, create_parents: bool = False,
                      overwrite: bool = True) -> Iterator[tuple[int, bool]]:
        """Yield (descriptor of a new temporary file beside the target, whether the target exists). When the
        block ends normally the file is synced and renamed over the target (a rename replaces a symlink there
        rather than following it); when it raises, the temporary file is removed: no partial file is left."""
        with self.parent(parts, create=create_parents) as (dirfd, name):
            try:
                before = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                before = None
            except OSError as exc:
                raise _error(exc, parts) from None
            if before is not None:
                if stat.S_ISDIR(before.st_mode):
                    raise PathError(f"{display(parts)}: is a directory")
                if not overwrite:
                    raise PathError(f"{display(parts)}: already exists")
            mode = stat.S_IMODE(before.st_mode) if before is not None and stat.S_ISREG(before.st_mode) else 0o644
            temp = f".{name}.toolcrib-{os.getpid()}-{os.urandom(4).hex()}"
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                             dir_fd=dirfd)
            except OSError as exc:
                raise _error(exc, parts) from None
            try:
                yield fd, before is not None
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                os.unlink(temp, dir_fd=dirfd)
                raise
            os.close(fd)
            try:
                os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
            except OSError as exc:
                os.unlink(temp, dir_fd=dirfd)
                raise _error(exc, parts) from None
