"""Programs whose writes are confined: for packs that run programs (the ``shell`` pack does).

A file tool is kept inside the workspace by ``toolcrib.workspace.Root``; a program writes wherever its operating
system user may. So a program an agent starts is confined with Linux Landlock: it may write only beneath the
folders it is given (the workspace, a private temporary folder, what the operator adds) and to a few devices
(``/dev/null``, ...); everything else it may read and run, never change. The restriction is the kernel's, applies to
every process the program starts, holds for root too, and cannot be lifted from inside.

Confinement is what keeps programs away from what governs the host, so ``problem`` tells a pack when its
programs could reach a protected path (``toolcrib.workspace.protect``): one lies beneath a writable folder, or the
kernel cannot confine and this process could write one. The pack then hides its tools with that reason (an
``Unconfinable``) rather than run anything.

    problem = sandbox.problem([ctx.workspace])          # None: programs can be kept away from what governs the host
    with sandbox.confined([ctx.workspace, tmp]) as preexec:
        subprocess.Popen(argv, preexec_fn=preexec, ...)

The Landlock calls are made through ``ctypes``: there are three system calls and two structures, and no stable,
maintained Python binding of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from toolcrib.workspace import protected, protected_within

# Writable devices: programs write to these all the time, and none is a file of the host's.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")

# Landlock's ABI: system call numbers (the same on every architecture Linux gives them to) and access rights.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_WRITE_FILE = 1 << 1
_DIRECTORY_WRITES = (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
_REFER = 1 << 13  # ABI 2: moving or linking a file into another folder
_TRUNCATE = 1 << 14  # ABI 3


class Unconfinable(str):
    """An availability reason saying that a pack's programs could reach what governs the host (``toolcrib check``
    reports tools hidden for it). It is a ``str``: ``is_available`` may return it like any reason."""


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when programs cannot be confined here (not Linux, too old a kernel,
    Landlock switched off, or a seccomp filter that forbids it)."""
    if platform.system() != "Linux":
        return 0
    try:
        version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _handled(abi: int) -> tuple[int, int]:
    """(the rights a ruleset handles, the subset that applies to a file rather than a folder)."""
    files = _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
    return files | _DIRECTORY_WRITES | (_REFER if abi >= 2 else 0), files


def _fail(what: str) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


@contextmanager
def confined(writable: Iterable[str | os.PathLike[str]], devices: Sequence[str] = DEVICES
             ) -> Iterator[Callable[[], None]]:
    """A ``preexec_fn`` for ``subprocess.Popen`` that confines the program's writes to beneath ``writable`` and to
    ``devices``. The rules are built here, in this process (``OSError`` if they cannot be); the child only
    applies them before it runs the program, and a child that cannot apply them is not run (``Popen`` raises).
    Use the function only inside the block. ``OSError`` when the kernel cannot confine (``landlock_abi() == 0``)."""
    abi = landlock_abi()
    if abi == 0:
        raise OSError("programs cannot be confined here: the kernel does not offer Landlock")
    libc = _libc()
    handled, file_rights = _handled(abi)
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr, its first field only (ABI 1 size)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        for path, rights in [*((p, handled) for p in writable), *((d, file_rights) for d in devices)]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                if rights == file_rights:
                    continue  # a device this system does not have
                raise
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = _PathBeneath(rights if is_dir else rights & file_rights, fd)
                if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise _fail(f"landlock_add_rule({os.fspath(path)})")
            finally:
                os.close(fd)
        prctl, syscall = libc.prctl, libc.syscall

        def preexec() -> None:  # runs in the child, between fork and exec: system calls only
            if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
            if syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
                raise _fail("landlock_restrict_self")

        yield preexec
    finally:
        os.close(ruleset)


def problem(writable: Sequence[str | os.PathLike[str]], *, confine: bool = True) -> Unconfinable | None:
    """Why programs that may write beneath ``writable`` could reach what governs the host, or None when they
    cannot. With ``confine`` (and a kernel that can), the question is whether a protected path lies beneath a
    writable folder, or holds one; without, whether this process could change a protected path at all."""
    if confine and landlock_abi():
        for folder in writable:
            for path, what in protected_within(folder):
                return Unconfinable(
                    f"programs may write in {os.fspath(folder)}, and {path} ({what}) is there: toolcrib keeps tools "
                    "from changing what governs the host, so programs are not run while it is; keep it outside the "
                    "folders programs may write in")
        return None
    why = "this system cannot confine them (no Landlock)" if confine else "the pack's settings do not confine them"
    for path, what in sorted(protected().items()):
        if _could_change(Path(path)):
            return Unconfinable(
                f"programs would run unconfined ({why}), and this process can change {path} ({what}): toolcrib keeps "
                "tools from changing what governs the host, so programs are not run; run the host as a user that "
                "cannot write it (or from a read-only mount)")
    return None


def _could_change(path: Path) -> bool:
    """Whether this process could write ``path``, or create or replace it in its folder."""
    for candidate in (path, path.parent):
        if candidate.exists():
            return os.access(candidate, os.W_OK)
    return False


# -- what this process's own user may read of it ---------------------------------------------------------------------

_PR_SET_DUMPABLE = 4


@functools.cache
def keep_private() -> bool:
    """Make this process's memory and its environment unreadable by other processes of its user (Linux: not
    dumpable, so ``/proc/<pid>/environ``, ``mem`` and ``fd`` belong to root): a program a tool or hook runs, or an
    upstream server, cannot read the agents' tokens, ``TOOLCRIB_STATE_SECRET`` or a Redis password from there.
    Root still can (run toolcrib as an ordinary user); a debugger of the same user cannot attach. Returns whether
    it could."""
    if platform.system() != "Linux":
        return False
    return bool(_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


# -- processes that outlive their program ------------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36


@functools.cache
def adopt_orphans() -> bool:
    """Make this process the one that adopts its descendants' orphans (Linux's child subreaper): a program's child
    that leaves its process group (``setsid``) and outlives its parent is then still this process's descendant, so
    ``descendants`` finds it and ``kill_tree`` ends it. Returns whether it could."""
    if platform.system() != "Linux":
        return False
    return bool(_libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone since the listing
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...), as /proc shows them now."""
    children = _children()
    found: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


def kill_tree(pid: int, *, group: bool = True) -> None:
    """SIGKILL the process group led by ``pid`` (with ``group``) and every descendant of ``pid``, including those
    that left the group; a few rounds, for children forked while it runs. Descendants that this process adopted
    (``adopt_orphans``) are reaped; ``pid`` itself is left to whoever started it."""
    import signal

    killed: set[int] = set()
    for _ in range(3):
        victims = [v for v in descendants(pid) if v not in killed]
        if group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.add(victim)
        if not victims:
            break
    _reap(killed)


def _reap(pids: set[int], patience: float = 2.0) -> None:
    """Wait for killed processes that were (or became) this process's children, so none is left a zombie. One
    whose parent is another process is that parent's to reap."""
    import time

    deadline = time.monotonic() + patience
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours (yet: its parent may be dying too), or already reaped
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    pending.discard(pid)
                continue
            if done == pid:
                pending.discard(pid)
        if pending:
            time.sleep(0.01)


MARKER = "TOOLCRIB_JOB"  # the environment variable that marks a program, and what it starts, as one job's


def marked(token: str) -> list[int]:
    """The processes whose environment carries ``MARKER=token``: what a program started, wherever it went (a child
    that cleared its environment is not found this way; ``adopt_orphans`` and ``descendants`` still find it)."""
    needle = f"{MARKER}={token}".encode() + b"\0"
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle in environ.read() + b"\0":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def end_job(pid: int, token: str | None = None) -> None:
    """End a program and everything it started: its process group, its descendants, and (with ``token``) every
    process marked as the job's, such as a child that left the group and outlived the program."""
    import signal

    kill_tree(pid)
    if token is None:
        return
    victims = set(marked(token))
    for victim in victims:
        kill_tree(victim, group=False)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    _reap(victims)
