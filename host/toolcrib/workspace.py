"""Files inside the workspace, and nowhere else: the confinement every pack that touches files should use.

Every path is opened one component at a time, relative to the workspace's directory descriptor, with
``O_NOFOLLOW``. What is checked is exactly what is used: there is no resolve-then-open window in which a
directory could be swapped for a symbolic link. Refused before any I/O: absolute paths, ``~``, ``..``, NUL,
backslashes. Refused at open: a symbolic link in any component (the error says so); nothing here follows one.

No ``Root`` changes what governs the host (its config, hook programs, audit log, skills, lock): the host
registers those paths with ``protect`` and every change (write, create, rename, remove) of such a path, of a
folder holding one or of anything inside a protected folder is refused, whichever pack asks.

    root = toolcrib.workspace.Root(ctx.workspace)
    data, size = root.read_bytes(parts_of("docs/a.md"), limit=65536)
    root.write_bytes(parts_of("out/report.txt"), b"...", create_parents=True)

POSIX only (it relies on ``dir_fd`` and ``O_NOFOLLOW``).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from toolcrib.errors import ToolError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DRIVE = re.compile(r"[A-Za-z]:")


# -- what governs the host -----------------------------------------------------------------------------------------

_PROTECTED: dict[str, str] = {}  # every absolute name of a protected path -> what it is ("the config file")
_CODE: dict[str, str] = {}  # folders Python imports modules from -> whose: no Python code below them may change
_PROTECTED_LOCK = threading.RLock()  # (re-entered: root_of makes a Root, which reads them, under it)
_ROOTS: dict[str, Root] = {}  # workspace -> its Root while what is protected stays the same (root_of)
MAX_ROOTS = 64
_MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
# What Python would import or run from a folder on its module path: sources, bytecode (in __pycache__ too),
# extension modules and path configuration files.
CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".pyd", ".so", ".pth")


def names_of(path: str | os.PathLike[str]) -> set[str]:
    """Every absolute name under which ``path`` can be reached: as written (``.`` and ``..`` folded), each symbolic
    link met on the way to it (a folder link along it, or the path itself being one), and where it really is. A
    name that does not exist yet is kept by name. Replacing, removing or renaming any of these would change what
    the path leads to, so protection holds for all of them."""
    names = {os.path.realpath(path)}
    pending = [os.path.abspath(path)]
    hops = 0
    while pending and hops <= _MAX_LINKS:
        parts = [part for part in pending.pop().split("/") if part]
        reached = "/"  # always a real path: no component of it is a link
        for i, part in enumerate(parts):
            here = os.path.join(reached, part)
            if os.path.islink(here):
                names.add(here)
                hops += 1
                try:
                    target = os.readlink(here)
                except OSError:
                    break
                pending.append(os.path.normpath(os.path.join(reached, target, *parts[i + 1:])))
                break
            reached = here
        else:
            names.add(reached)
    return names


def protect(paths: Mapping[Path, str] | Mapping[str, str]) -> None:
    """Protect these paths (path -> what it is) from every ``Root`` in this process, for the life of the process.

    The host calls this with the files that govern it. Each is protected under every name that reaches it
    (``names_of``): as written, through each symbolic link on the way, and where it really is. A path need not
    exist yet (a lock file not yet written): it is protected by name. Protection only grows; a path protected once
    stays protected.
    """
    found = [(name, what) for path, what in paths.items() for name in sorted(names_of(path))]
    with _PROTECTED_LOCK:
        for name, what in found:
            _PROTECTED.setdefault(name, what)
        _ROOTS.clear()  # each Root holds the protected paths it may meet: made again


def protect_code(folders: Mapping[Path, str] | Mapping[str, str]) -> None:
    """Protect the Python code below these folders (folder -> whose module path it is on): no ``Root`` may create,
    change, rename or remove a file whose name ends in one of ``CODE_SUFFIXES`` (bytecode in ``__pycache__``
    included), or bring a folder in. A hook whose Python imports from a folder would otherwise run a module an agent
    wrote there (``json.py`` beside a policy script shadows the standard library's)."""
    found = [(name, what) for path, what in folders.items() for name in sorted(names_of(path))]
    with _PROTECTED_LOCK:
        for name, what in found:
            _CODE.setdefault(name, what)
        _ROOTS.clear()


def protected() -> Mapping[str, str]:
    """The protected paths (every absolute name of each -> what it is)."""
    with _PROTECTED_LOCK:
        return dict(_PROTECTED)


def protected_code() -> Mapping[str, str]:
    """The folders whose Python code is protected (every absolute name of each -> whose module path it is on)."""
    with _PROTECTED_LOCK:
        return dict(_CODE)


def protected_within(directory: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The protected paths a writer confined to ``directory`` could reach: those inside it (or equal to it), those
    holding it, and the folders of protected code that it or they hold. Sorted by path."""
    real = os.path.realpath(directory)
    with _PROTECTED_LOCK:
        found = [*_PROTECTED.items(), *((path, f"Python code on the module path of {what}") for path, what
                                        in _CODE.items())]
    return sorted((path, what) for path, what in found if _related(real, path))


def _related(a: str, b: str) -> bool:
    """Whether one of two absolute paths is the other or lies inside it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


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


def root_of(workspace: Path) -> Root:
    """``Root(workspace)``, made once a workspace while what is protected stays the same (a file tool's every call
    would otherwise resolve the workspace and sift the protected paths again: about 8 us). The workspace is resolved
    when first met: a link swapped under its name later keeps serving where it led then."""
    key = os.fspath(workspace)
    found = _ROOTS.get(key)
    if found is None:
        with _PROTECTED_LOCK:  # (protect() clears the roots under the same lock: none made before it is kept)
            found = _ROOTS.get(key)
            if found is None:
                if len(_ROOTS) >= MAX_ROOTS:
                    _ROOTS.clear()
                found = _ROOTS[key] = Root(workspace)
    return found


class Root:
    """The workspace root, and descriptor-relative access below it."""

    def __init__(self, workspace: Path) -> None:
        self.path = workspace
        self._real = os.path.realpath(workspace)
        # Only the protected paths related to this workspace can ever be met below it.
        self._protected = [(path, what) for path, what in protected().items() if _related(self._real, path)]
        self._code = [(path, what) for path, what in protected_code().items() if _related(self._real, path)]

    def guard(self, parts: tuple[str, ...], *, holding: bool = True, tree: bool = False) -> None:
        """Refuse (``PathError``) to change ``parts`` when it is a protected path, lies inside one, or (with
        ``holding``: moving or removing it would take one along) holds one; or when it is Python code below a folder
        on a hook's module path (``protect_code``), or (with ``tree``: a folder is brought there) lies below one.

        Every changing method of ``Root`` calls this; a pack that changes files by other means calls it first.
        Components below the root are never symbolic links (nothing here follows one), so the joined path is the
        real one.
        """
        if not self._protected and not self._code:
            return
        target = os.path.join(self._real, *parts)
        for path, what in self._protected:
            inside = target == path or _inside(target, path)
            if inside or (holding and _inside(path, target)):
                raise PathError(f"{display(parts)}: is protected: changing it would change how the host governs "
                                f"its agents ({what} is {'there' if target == path else 'in the way'}); no tool "
                                "may change it")
        for folder, what in self._code:
            # Python code (or bytecode: __pycache__/*.pyc) an import could load, at any depth below the folder
            if _inside(target, folder) and (tree or target.endswith(CODE_SUFFIXES)):
                raise PathError(f"{display(parts)}: is protected: {what} imports Python modules from {folder}, so "
                                "no tool may change Python code there")

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
                    self.guard(parts[: i + 1], holding=False)  # a new folder takes nothing protected along
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
        with self._opened(parts) as (fd, _size):
            yield fd

    @contextmanager
    def _opened(self, parts: tuple[str, ...]) -> Iterator[tuple[int, int]]:
        """``open_file``'s descriptor and the file's size, from the one ``fstat`` that checks what it is."""
        with self.parent(parts) as (dirfd, name):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
            except OSError as exc:
                raise _error(exc, parts) from None
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    raise PathError(f"{display(parts)}: is a directory")
                if not stat.S_ISREG(st.st_mode):
                    raise PathError(f"{display(parts)}: not a regular file (a FIFO, socket or device)")
                os.set_blocking(fd, True)
                yield fd, st.st_size
            finally:
                os.close(fd)

    def read_bytes(self, parts: tuple[str, ...], limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the file, and its size when it was opened (what is read stops there)."""
        with self._opened(parts) as (fd, size):
            return _read_fd(fd, limit, size), size

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
        self.guard(parts)
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

    def remove(self, parts: tuple[str, ...], *, recursive: bool = False) -> str:
        """Remove a file, a symbolic link (never its target) or, with ``recursive``, a directory and everything in
        it; returns what it was ("file", "directory"). The workspace root itself is never removed."""
        if not parts:
            raise PathError("the workspace root itself cannot be removed")
        self.guard(parts)
        with self.parent(parts) as (dirfd, name):
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError as exc:
                raise _error(exc, parts) from None
            if not stat.S_ISDIR(st.st_mode):
                try:
                    os.unlink(name, dir_fd=dirfd)
                except OSError as exc:
                    raise _error(exc, parts) from None
                return "file"
            if not recursive:
                raise PathError(f"{display(parts)}: is a directory")
            if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - not on Linux or macOS
                raise PathError("this platform cannot remove directory trees safely")
            try:
                shutil.rmtree(name, dir_fd=dirfd)
            except OSError as exc:
                raise _error(exc, parts) from None
            return "directory"

    def rename(self, source: tuple[str, ...], destination: tuple[str, ...], *, overwrite: bool = False) -> None:
        """Rename or move ``source`` to ``destination`` (both below the root). An existing destination file is
        replaced only with ``overwrite``; an existing destination directory never is."""
        if not source or not destination:
            raise PathError("the workspace root itself cannot be moved or replaced")
        if destination[: len(source)] == source:
            raise PathError(f"{display(destination)}: cannot move {display(source)} into itself")
        self.guard(source)
        self.guard(destination)
        with self.parent(source) as (sfd, sname), self.parent(destination) as (dfd, dname):
            try:
                moving = os.stat(sname, dir_fd=sfd, follow_symlinks=False)
            except OSError as exc:
                raise _error(exc, source) from None
            if stat.S_ISDIR(moving.st_mode):
                self.guard(destination, tree=True)  # a folder brought below a module path brings its code along
            try:
                existing = os.stat(dname, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            except OSError as exc:
                raise _error(exc, destination) from None
            if existing is not None and (not overwrite or stat.S_ISDIR(existing.st_mode)):
                raise PathError(f"{display(destination)}: already exists")
            if existing is not None and stat.S_ISDIR(moving.st_mode):
                raise PathError(f"{display(destination)}: is a file, which a directory cannot replace")
            try:
                os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            except OSError as exc:
                raise _error(exc, destination) from None


def open_dir_at(dirfd: int, name: str) -> int:
    """A descriptor of the directory ``name`` in ``dirfd``, never following a symbolic link (``OSError`` else):
    for walking a tree below a ``Root`` directory."""
    return os.open(name, DIR_FLAGS, dir_fd=dirfd)


def read_at(dirfd: int, name: str, limit: int) -> tuple[bytes, int] | None:
    """Up to ``limit`` bytes of the regular file ``name`` in ``dirfd`` and its size; nothing is read from a file
    larger than ``limit`` (``b""`` and its size). None when it is not a regular file or cannot be opened. Never
    follows a symbolic link, never blocks on a FIFO."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > limit:
            return b"", st.st_size
        os.set_blocking(fd, True)
        return _read_fd(fd, limit, st.st_size), st.st_size
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int, size: int) -> bytes:
    """Up to ``limit`` bytes from ``fd`` to its end. ``size``, the file's size when it was opened, ends the reading
    once that many bytes came (sparing the read that would only find the end; a file that grew since is read as
    it was); 0 reads to the end, as a file in /proc, whose size says 0, needs."""
    if 0 < size < limit:
        limit = size
    chunks = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
