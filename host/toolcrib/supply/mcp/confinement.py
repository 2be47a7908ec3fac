"""What a confined program may reach (``[mcps.<name>] confine = true``), worked out in the host;
``toolcrib.supply.mcp.confined`` applies it in the program's own process before the program runs.

A confined upstream server may read the system's folders (``SYSTEM``: programs, libraries, ``/etc``, its own
``/proc`` entry), its own code (the program and every path argument, each up to its package's root: the outermost
``node_modules`` it is in, its virtual environment, or its folder) and what ``read`` adds; it may write only a
temporary folder of its own (its ``TMPDIR``) and what ``write`` adds. Nothing that governs the host may lie
where it can read or write: such a config is refused with the file named (``UpstreamConfigError``), as the shell
pack refuses to run programs that could reach one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from toolcrib.config import LoadedConfig
from toolcrib.supply.mcp.settings import McpConfig

SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc/self", "/proc/cpuinfo",
          "/proc/meminfo", "/proc/stat", "/sys/fs/cgroup", "/sys/devices/system/cpu")
LAUNCHER = Path(__file__).with_name("confined.py")
log = logging.getLogger("toolcrib.supply.mcp.confinement")


class ConfinementError(ValueError):
    """A confined server cannot be started as asked (what it could reach governs the host)."""


def code_root(path: Path) -> Path:
    """The folder a program's code lives in: the outermost ``node_modules`` holding it, else its virtual
    environment (the folder with ``pyvenv.cfg``), else the folder above a ``bin`` it is in, else its own folder."""
    outermost = None
    for parent in path.parents:
        if parent.name == "node_modules":
            outermost = parent
    if outermost is not None:
        return outermost
    for parent in path.parents:
        if (parent / "pyvenv.cfg").exists():
            return parent
    folder = path if path.is_dir() else path.parent
    return folder.parent if folder.name == "bin" else folder


def spec(loaded: LoadedConfig, config: McpConfig, temporary: Path) -> dict[str, object]:
    """The confinement of ``config``'s server (``toolcrib.supply.mcp.confined``'s spec), ``ConfinementError`` when
    what it could read or write governs the host."""
    program = config.command or ""
    found = shutil.which(program) or program
    code: set[Path] = set()
    for candidate in [found, *config.args]:
        path = Path(candidate)
        if not path.is_absolute():
            path = (loaded.resolve(config.cwd) if config.cwd else Path.cwd()) / path
        if os.path.exists(path):
            code |= {code_root(path.absolute()), code_root(path.resolve())}  # as named, and where it really is
    if Path(found).name.startswith("python"):
        code |= {Path(sys.base_prefix).resolve()}  # a virtual environment's interpreter lives in its base
    read = [*SYSTEM, *sorted(str(p) for p in code), *(str(loaded.resolve(p)) for p in config.read)]
    write = [str(temporary), *(str(loaded.resolve(p)) for p in config.write)]
    governing = sorted(loaded.governing().items())
    for where, roots in (("read", read), ("write", write)):
        for root in roots:
            for path, what in governing:
                if where == "read" and what.startswith("a program of "):
                    continue  # code the config runs may be read (the server's own among it), never changed
                if _within(str(path), root):
                    raise ConfinementError(
                        f"a confined server may {where} beneath {root}, and {path} ({what}) is there: toolcrib keeps "
                        "what governs the host out of its servers' reach; move it, or narrow read and write")
    limits = {"memory": config.memory_mb * 1024 * 1024 if config.memory_mb else None,
              "cpu": config.cpu_seconds, "files": config.open_files, "processes": config.processes}
    made: dict[str, object] = {"read": read, "write": write, "network": config.network, "limits": limits,
                               "parent": os.getpid()}  # the host: the program ends with it (confined.py)
    group = group_of(temporary) if config.processes else None
    if group is not None:  # processes are counted in a group of the program's own, not per user
        made["group"] = str(group)
    return made


PIDS_V1 = Path("/sys/fs/cgroup/pids")  # cgroup v1's pids hierarchy


def pids_root() -> Path | None:
    """Where this host can make a process-count group (the pids controller) for a confined program: beneath its own
    group of cgroup v1's pids hierarchy, or of cgroup v2 where the pids controller is delegated to its children;
    None where it cannot (then ``processes`` is the per-user ``RLIMIT_NPROC``, which root is not held to)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0":
            for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                own = mount / path.lstrip("/")
                try:
                    delegated = "pids" in (own / "cgroup.subtree_control").read_text().split()
                except OSError:
                    continue
                if delegated and os.access(own, os.W_OK):
                    return own
        elif "pids" in controllers.split(","):
            own = PIDS_V1 / path.lstrip("/")
            if own.is_dir() and os.access(own, os.W_OK):
                return own
    return None


def group_of(temporary: Path) -> Path | None:
    """The process-count group of the confined program whose temporary folder is ``temporary``, if one can be made
    here (the launcher makes it, and the host ends it: ``end_group``)."""
    root = pids_root()
    return root / f"toolcrib-{temporary.name}" if root is not None else None


async def end_group(temporary: Path) -> None:
    """Kill what is left in a confined program's process-count group (a child that left its process group among
    it), and remove the group."""
    import signal

    import anyio

    group = group_of(temporary)
    if group is None or not group.is_dir():
        return
    for _ in range(100):  # while the last ones die
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            group.rmdir()
            return
        except OSError:
            await anyio.sleep(0.02)
    log.warning("the process group %s of a confined program could not be removed", group)


def _within(path: str, root: str) -> bool:
    real = os.path.realpath(root)
    return any(p == real or p.startswith(real.rstrip("/") + "/") for p in {path, os.path.realpath(path)})


LANDLOCK_NEEDED = 4  # the ABI that confines the network too (Linux 6.7)


def unconfinable() -> str | None:
    """Why programs cannot be confined on this kernel, or None when they can."""
    from toolcrib.sandbox import landlock_abi

    found = landlock_abi()
    if found >= LANDLOCK_NEEDED:
        return None
    return (f"this kernel cannot confine programs (Landlock ABI {found}, {LANDLOCK_NEEDED} needed: Linux 6.7 or "
            "later with Landlock enabled)")


def launcher(loaded: LoadedConfig, config: McpConfig, env: Mapping[str, str]) -> tuple[str, list[str], dict[str, str]]:
    """The command line that starts ``config``'s server confined, and its environment (with ``TMPDIR``, its own
    temporary folder). Where the kernel cannot confine: the server as it is, if ``[host] allow_unconfined``, else
    ``ConfinementError``."""
    why = unconfinable()
    if why is not None:
        if not loaded.config.host.allow_unconfined:
            raise ConfinementError(f"{why}; it is not started (set [host] allow_unconfined = true to run it "
                                   "unconfined)")
        return config.command or "", list(config.args), dict(env)
    temporary = Path(tempfile.mkdtemp(prefix="toolcrib-mcp-"))
    made = spec(loaded, config, temporary)
    return (sys.executable, ["-I", "-S", str(LAUNCHER), json.dumps(made), "--", config.command or "", *config.args],
            {**env, "TMPDIR": str(temporary)})


__all__ = ["SYSTEM", "ConfinementError", "code_root", "end_group", "group_of", "launcher", "pids_root", "spec"]
