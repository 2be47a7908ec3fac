"""toolcrib pack ``shell``: run allowlisted programs in the workspace. See README.md."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.to_thread
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

import toolcrib
from toolcrib import AvailabilityContext, Context, ToolError, sandbox
from toolcrib.workspace import Root, parts_of

__all__ = ["Settings", "toolcrib_settings_model", "toolcrib_tools"]

GRACE_SECONDS = 0.5  # after the program exits, how long its output pipes may stay open (a grandchild holding them)


class Settings(BaseModel):
    """``[packs.shell]``."""

    model_config = ConfigDict(extra="forbid")

    allowed_programs: list[str] = Field(default_factory=list, description="programs that may run (names or paths)")
    allow_shell: bool = Field(False, description="run commands through /bin/sh -c (then 'sh' must be allowed)")
    env_allowlist: list[str] = Field(default_factory=lambda: ["PATH", "LANG", "LC_ALL", "TZ"])
    extra_env: dict[str, str] = Field(default_factory=dict)
    default_timeout: float = Field(30.0, gt=0)
    max_timeout: float = Field(600.0, gt=0)
    max_output_chars: int = Field(30_000, gt=0, description="per stream; head and tail are kept")
    max_processes: int = Field(8, gt=0, description="exec_async processes running at once, per agent")
    max_async_seconds: float = Field(3600.0, gt=0, description="an exec_async process running longer is killed")
    max_sleep_ms: int = Field(60_000, gt=0)
    sandbox: bool = Field(True, description="confine programs' writes to the workspace, a private temporary folder "
                                            "and writable_paths (Linux Landlock)")
    writable_paths: list[str] = Field(default_factory=list, description="more folders programs may write in")


def _settings(ctx: Context | AvailabilityContext) -> Settings:
    return ctx.settings if isinstance(ctx.settings, Settings) else Settings()


# -- where programs may write -----------------------------------------------------------------------------------


@functools.cache
def _private_tmp() -> str:
    """This process's temporary folder for programs (their $TMPDIR), removed when the process ends."""
    path = tempfile.mkdtemp(prefix="toolcrib-shell-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _writable(workspace: Path, settings: Settings) -> list[str]:
    return [str(workspace), _private_tmp(), *(os.path.expanduser(p) for p in settings.writable_paths)]


def _problem(workspace: Path, settings: Settings) -> sandbox.Unconfinable | None:
    return sandbox.problem(_writable(workspace, settings), confine=settings.sandbox)


def confinable(ctx: AvailabilityContext) -> bool | str:
    """Programs run only where they can be kept away from what governs the host (the reason says why not)."""
    if ctx.workspace is None:
        return "no workspace"
    problem = _problem(ctx.workspace, _settings(ctx))
    return True if problem is None else problem


# -- building a command ----------------------------------------------------------------------------------------


def _environment(settings: Settings) -> dict[str, str]:
    env = {k: os.environ[k] for k in settings.env_allowlist if k in os.environ}
    env.update(settings.extra_env)
    return {k: v for k, v in env.items() if not k.startswith("TOOLCRIB_")}


def _argv(command: str | list[str], settings: Settings, env: dict[str, str]) -> list[str]:
    if isinstance(command, str):
        if settings.allow_shell:
            argv = ["sh", "-c", command]
        else:
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise ToolError(f"cannot split the command: {exc}") from None
    else:
        argv = list(command)
    if not argv or not argv[0]:
        raise ToolError("the command is empty")
    program = argv[0]
    allowed = settings.allowed_programs
    if program not in allowed:
        shown = ", ".join(allowed) if allowed else "none: an operator must list programs in [packs.shell] " \
                                                  "allowed_programs"
        raise ToolError(f"program {program!r} is not allowed (allowed programs: {shown})")
    if "/" not in program:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is None:
            raise ToolError(f"program {program!r} was not found on the PATH")
        argv[0] = found
    return argv


# -- a running process ------------------------------------------------------------------------------------------


class _Capture:
    """One output stream, capped: the first half of the budget and the last half are kept."""

    def __init__(self, limit: int) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.half = max(1, limit // 2)
        self.lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail.append(chunk)
                self.tail_size += len(chunk)
                while self.tail_size - len(self.tail[0]) >= self.half:
                    self.tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        with self.lock:
            tail = b"".join(self.tail)[-self.half:] if self.tail else b""
            kept = len(self.head) + len(tail)
            head = self.head.decode("utf-8", errors="replace")
            if kept >= self.total:
                return head + tail.decode("utf-8", errors="replace")
            cut = self.total - kept
            return (head + f"\n[... {cut} bytes cut by toolcrib-shell ...]\n"
                    + tail.decode("utf-8", errors="replace"))


class Running:
    """A started process (its own session and process group), with its output read by two threads."""

    def __init__(self, argv: list[str], env: dict[str, str], limit: int, preexec: Callable[[], None]) -> None:
        self.argv = argv
        self.started = time.monotonic()
        self.token = secrets.token_hex(8)
        env = {**env, sandbox.MARKER: self.token}  # to find what it starts, wherever that goes
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                     preexec_fn=preexec)
        self.stdout = _Capture(limit)
        self.stderr = _Capture(limit)
        self.killed = False
        self.expired = False
        self.deadline: threading.Timer | None = None
        self._readers = [threading.Thread(target=self._read, args=(pipe, cap), daemon=True)
                         for pipe, cap in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(pipe: Any, capture: _Capture) -> None:
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            capture.add(chunk)
        pipe.close()

    def kill(self) -> None:
        """Kill the whole process group and every descendant (those that left the group too), then reap."""
        self.killed = True
        sandbox.end_job(self.proc.pid, self.token)
        self.proc.wait()

    def settle(self) -> None:
        """After the program exited: give its pipes a moment to close; kill stragglers still holding them."""
        deadline = time.monotonic() + GRACE_SECONDS
        for reader in self._readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        if any(reader.is_alive() for reader in self._readers):
            sandbox.end_job(self.proc.pid, self.token)
            for reader in self._readers:
                reader.join(5)

    def report(self) -> dict[str, Any]:
        code = self.proc.poll()
        report: dict[str, Any] = {"running": code is None, "exit_code": code}
        if self.killed:
            report["killed"] = True
        if self.expired:
            report["expired"] = "ran longer than max_async_seconds"
        report["stdout"] = self.stdout.text()
        report["stderr"] = self.stderr.text()
        return report


def _start(ctx: Context, command: str | list[str], cwd: str) -> Running:
    settings = _settings(ctx)
    problem = _problem(ctx.workspace, settings)  # as when the agent's view was built, and now again
    if problem is not None:
        raise ToolError(f"not run: {problem}")
    env = _environment(settings)
    env["TMPDIR"] = env["TMP"] = env["TEMP"] = _private_tmp()
    argv = _argv(command, settings, env)
    sandbox.adopt_orphans()  # a child that leaves its process group stays ours to find and end
    with Root(ctx.workspace).directory(parts_of(cwd)) as cwd_fd:  # no symlink in any component, ever

        def enter(confine: Callable[[], None] | None) -> None:  # in the child: its folder, then its confinement
            os.fchdir(cwd_fd)
            if confine is not None:
                confine()

        try:
            if settings.sandbox and sandbox.landlock_abi():  # else _problem found nothing of the host writable
                with sandbox.confined(_writable(ctx.workspace, settings)) as confine:
                    return Running(argv, env, settings.max_output_chars, functools.partial(enter, confine))
            return Running(argv, env, settings.max_output_chars, functools.partial(enter, None))
        except (OSError, subprocess.SubprocessError) as exc:
            reason = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc)
            raise ToolError(f"cannot start {argv[0]!r}: {reason}") from None


# -- tools -----------------------------------------------------------------------------------------------------

Command = Annotated[
    str | list[str],
    Field(description="The command line ('git status --short') or its arguments as a list (['git', 'status'])"),
    AfterValidator(lambda c: c.strip() if isinstance(c, str) else c),  # argument rules see what runs
]
Cwd = Annotated[str, Field(description="Working directory, relative to the workspace root")]
RUNS = {"destructiveHint": True, "openWorldHint": True}


def _command_text(command: str | list[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


@toolcrib.tool(annotations=RUNS, rule_subject="command", timeout=24 * 3600, is_available=confinable,
                task="optional")
async def exec(
    command: Command,
    ctx: Context,
    cwd: Cwd = ".",
    timeout: Annotated[float | None, Field(gt=0, description="Seconds before the command is killed")] = None,
) -> dict[str, Any]:
    """Run a program in the workspace and wait for it. Returns its exit code, stdout and stderr (long output is
    cut in the middle). Only programs the operator allowed can run; there is no shell unless the operator
    turned one on, so pipes and redirections are passed as plain arguments. Programs may write only in the
    workspace and $TMPDIR; nothing a program starts outlives the call."""
    settings = _settings(ctx)
    limit = min(timeout or settings.default_timeout, settings.max_timeout)
    running = _start(ctx, command, cwd)
    try:
        with anyio.move_on_after(limit) as scope:
            await anyio.to_thread.run_sync(running.proc.wait, abandon_on_cancel=True)
        if scope.cancelled_caught:
            await anyio.to_thread.run_sync(running.kill)
        await anyio.to_thread.run_sync(running.settle)
    finally:
        if running.proc.poll() is None:  # the call itself was cancelled: never leave the process behind
            running.kill()
        else:  # nothing the program started outlives the call, in its group or out of it
            sandbox.end_job(running.proc.pid, running.token)
    report = running.report()
    del report["running"]
    if scope.cancelled_caught:
        raise ToolError(f"{_command_text(command)!r} timed out after {limit:g} seconds and was killed.\n"
                        f"stdout:\n{report['stdout']}\nstderr:\n{report['stderr']}")
    return report


_PROCESSES: dict[tuple[str, str], Running] = {}
_LOCK = threading.Lock()


@toolcrib.tool(annotations=RUNS, rule_subject="command", is_available=confinable)
def exec_async(command: Command, ctx: Context, cwd: Cwd = ".") -> dict[str, Any]:
    """Start a program in the workspace and return at once with a handle; read its state and output with
    shell__exec_status and stop it with shell__exec_stop."""
    settings = _settings(ctx)
    with _LOCK:
        mine = [p for (agent, _), p in _PROCESSES.items() if agent == ctx.agent and p.proc.poll() is None]
        if len(mine) >= settings.max_processes:
            raise ToolError(f"already {len(mine)} processes running (the limit is {settings.max_processes}); stop "
                            "one with shell__exec_stop first")
        running = _start(ctx, command, cwd)
        handle = "p-" + secrets.token_hex(6)
        _PROCESSES[(ctx.agent, handle)] = running
    _end_at_exit()
    running.deadline = threading.Timer(settings.max_async_seconds, _expire, (running,))
    running.deadline.daemon = True
    running.deadline.start()
    return {"handle": handle, "pid": running.proc.pid}


def _expire(running: Running) -> None:
    """A process past ``max_async_seconds``: killed with what it started, its output kept for exec_status."""
    if running.proc.poll() is None:
        running.expired = True
    running.kill()


@functools.cache
def _end_at_exit() -> None:
    """When the host's process ends, so do the processes it started and what they started."""
    atexit.register(_end_all)


def _end_all() -> None:
    with _LOCK:
        running = list(_PROCESSES.values())
    for job in running:
        job.kill()


def _get(ctx: Context, handle: str) -> Running:
    running = _PROCESSES.get((ctx.agent, handle))
    if running is None:
        raise ToolError(f"no process with handle {handle!r} (handles come from shell__exec_async)")
    return running


@toolcrib.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
def exec_status(
    handle: Annotated[str, Field(max_length=64, description="The handle shell__exec_async returned")],
    ctx: Context,
    wait_seconds: Annotated[float, Field(ge=0, le=60, description="Wait up to this long for it to finish")] = 0,
) -> dict[str, Any]:
    """A started program's state: running or not, its exit code, and its output so far."""
    running = _get(ctx, handle)
    if wait_seconds:
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.proc.wait(wait_seconds)
    if running.proc.poll() is not None:
        running.settle()
    return {"handle": handle, **running.report()}


@toolcrib.tool(annotations={"destructiveHint": True, "idempotentHint": True, "openWorldHint": False})
def exec_stop(
    handle: Annotated[str, Field(max_length=64, description="The handle shell__exec_async returned")],
    ctx: Context,
) -> dict[str, Any]:
    """Stop a started program and everything it started (its whole process group); returns its final output."""
    running = _get(ctx, handle)
    if running.deadline is not None:
        running.deadline.cancel()
    running.kill()  # also what it started, should the program itself have ended
    running.settle()
    with _LOCK:
        _PROCESSES.pop((ctx.agent, handle), None)
    return {"handle": handle, **running.report()}


@toolcrib.tool(annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False})
async def sleep(
    milliseconds: Annotated[int, Field(ge=0, description="How long to wait")],
    ctx: Context,
) -> str:
    """Wait the given number of milliseconds (to let something else make progress)."""
    limit = _settings(ctx).max_sleep_ms
    if milliseconds > limit:
        raise ToolError(f"at most {limit} milliseconds at a time")
    await anyio.sleep(milliseconds / 1000)
    return f"slept {milliseconds} ms"


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return [exec, exec_async, exec_status, exec_stop, sleep]


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings
