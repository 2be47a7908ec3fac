"""Start a program confined (``[mcps.<name>] confine = true``): run as a script of the host's Python, before the
program, by the upstream client (``toolcrib.supply.mcp``), which launches

    python -I -S .../toolcrib/confined.py '<spec as JSON>' -- program arguments...

It applies the spec to itself and then becomes the program (``execvp``), so every restriction is the kernel's,
holds for every process the program starts, and cannot be lifted from inside:

- **files** (Landlock): reading and running only beneath ``read``, writing only beneath ``write`` (and a few
  devices); everything else, the host's config, lock, audit log and state among it, cannot even be opened;
- **processes** (Landlock's scopes, ABI 6): no signals to processes outside, no abstract Unix sockets outside; and
  Landlock keeps a confined process from reading another's memory or environment (``/proc/<pid>/environ``);
- **network**, unless ``network`` (Landlock ABI 4 refuses TCP connect and bind, and a seccomp filter refuses to
  make any socket, UDP and Unix ones included, and io_uring, which could get around it; anonymous socket pairs
  stay; only the machine's own system-call gate is open, so a 32-bit ``int 0x80`` makes nothing either);
- **resources** (``setrlimit``): address space, CPU seconds, open files, processes; processes in a pids cgroup of
  the program's own where the host can make one (``group``), so that they are counted for root too;
- **its host** (``parent``): the program is killed when the host ends, however it ends (``PR_SET_PDEATHSIG``).

Only the standard library: it runs before the program, with nothing of the host's imported. A spec that cannot be
applied is fatal (exit 126, saying why on stderr): a program is never run less confined than asked.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import sys
from collections.abc import Sequence
from typing import Any

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_PR_SET_PDEATHSIG = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_DIRECTORY_WRITES = sum(1 << n for n in range(4, 13))  # remove and make: dirs, files, sockets, fifos, devices, links
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
_BIND_TCP, _CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/urandom", "/dev/random")
LIMITS = {"memory": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "files": resource.RLIMIT_NOFILE,
          "processes": resource.RLIMIT_NPROC}
# (audit architecture, socket, io_uring_setup) by machine, for the seccomp filter
_SYSCALLS = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_ENOSYS = 38


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _Filter(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))


class _Program(ctypes.Structure):
    _fields_ = (("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Filter)))


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


def abi(libc: Any) -> int:
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def landlock(libc: Any, read: Sequence[str], write: Sequence[str], network: bool) -> int:
    """Restrict this process (and what it runs) to ``read`` and ``write``; without ``network``, no TCP. Returns
    the ABI used."""
    version = abi(libc)
    if version == 0:
        raise OSError("this kernel does not offer Landlock")
    files = EXECUTE | WRITE_FILE | READ_FILE | (_TRUNCATE if version >= 3 else 0) | (_IOCTL_DEV if version >= 5 else 0)
    handled = files | READ_DIR | _DIRECTORY_WRITES | (_REFER if version >= 2 else 0)
    net = 0 if network or version < 4 else _BIND_TCP | _CONNECT_TCP
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if version >= 6 else 0
    attr = (ctypes.c_uint64 * 3)(handled, net, scoped)
    size = 24 if version >= 6 else 16 if version >= 4 else 8
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    reading = EXECUTE | READ_FILE | READ_DIR
    rules = [*((p, reading) for p in read), *((p, handled) for p in write),
             *((d, READ_FILE | WRITE_FILE | (_TRUNCATE if version >= 3 else 0)) for d in DEVICES)]
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # a folder or device this system does not have
        try:
            is_dir = os.path.isdir(f"/proc/self/fd/{fd}") or os.path.isdir(path)
            rule = _PathBeneath(rights if is_dir else rights & files, fd)
            if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                            ctypes.c_uint32(0)) < 0:
                raise _fail(f"landlock_add_rule({path})")
        finally:
            os.close(fd)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        raise _fail("landlock_restrict_self")
    os.close(ruleset)
    return version


def no_sockets(libc: Any) -> None:
    """A seccomp filter: ``socket()`` fails with EACCES, whatever the family (a Unix socket too: one could connect to
    any listening socket's path, a container runtime's among them, which Landlock does not govern), and
    ``io_uring_setup`` with EPERM. ``socketpair()`` stays: an anonymous pair reaches nothing (event loops wake
    themselves with one).

    Only the machine's own system-call gate is open. A call made through another one (the i386 gate, ``int 0x80``,
    where the kernel emulates 32-bit programs; arm32's on aarch64) or with x86-64's x32 bit set has numbers of its
    own, ``socketcall`` among them, that this filter does not name: every such call fails with ENOSYS, as on a
    kernel without that emulation (libseccomp and systemd's ``SystemCallArchitectures=native`` close them too)."""
    known = _SYSCALLS.get(platform.machine())
    if known is None:
        raise OSError(f"no seccomp filter is written for {platform.machine()}")
    arch, socket_nr, uring_nr = known
    load, jump_eq, jump_ge, ret = 0x20, 0x15, 0x35, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    x32 = 0x40000000  # x86-64's x32 calls: the native architecture's, with this bit in the number
    program = [
        (load, 0, 0, 4), (jump_eq, 1, 0, arch), (ret, 0, 0, errno | _ENOSYS),  # another architecture's gate
        (load, 0, 0, 0),
        (jump_ge, 0, 1, x32), (ret, 0, 0, errno | _ENOSYS),
        (jump_eq, 0, 1, uring_nr), (ret, 0, 0, errno | 1),
        (jump_eq, 0, 1, socket_nr), (ret, 0, 0, errno | 13),
        (ret, 0, 0, allow),
    ]
    filters = (_Filter * len(program))(*(_Filter(c, t, f, k) for c, t, f, k in program))
    prog = _Program(len(program), filters)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise _fail("prctl(PR_SET_SECCOMP)")


def die_with(libc: Any, parent: int) -> None:
    """Be killed (SIGKILL) when the host, process ``parent``, ends. A host killed outright (SIGKILL, the kernel's
    out-of-memory killer) never reaches its shutdown, and a program that never reads its stdin's end (a pack stuck
    at its import) would run on without it. The kernel sends the signal when the host's thread that started the
    program ends: its event loop's, which outlives the pool of servers it started. A host already gone: not run."""
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise OSError(f"the host that started it (process {parent}) has ended")


def join_group(group: str, processes: int) -> None:
    """Make ``group`` (a pids cgroup), let it hold ``processes`` tasks (threads count), and move into it: every
    process the program starts is counted there, whoever its user is (``RLIMIT_NPROC`` counts per user, and not
    for root)."""
    os.mkdir(group, 0o755)
    with open(os.path.join(group, "pids.max"), "w") as f:
        f.write(str(processes))
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def apply(spec: dict[str, Any]) -> None:
    libc = _libc()
    if spec.get("parent") is not None:
        die_with(libc, int(spec["parent"]))
    limits = dict(spec.get("limits", {}))
    if spec.get("group") and limits.get("processes") is not None:
        join_group(spec["group"], int(limits.pop("processes")))
    for name, which in LIMITS.items():
        value = limits.get(name)
        if value is not None:
            resource.setrlimit(which, (int(value), int(value)))
    landlock(libc, spec["read"], spec["write"], bool(spec.get("network")))
    if not spec.get("network"):
        no_sockets(libc)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: confined.py SPEC -- PROGRAM [ARGUMENTS...]", file=sys.stderr)
        return 2
    try:
        apply(json.loads(argv[1]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"toolcrib: the program was not started, as it could not be confined: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(argv[3], list(argv[3:]))
    except OSError as exc:
        print(f"toolcrib: cannot run {argv[3]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
