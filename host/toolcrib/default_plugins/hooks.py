"""Policy hooks written as programs (``[[hooks.pre_tool_use]]``): a ``toolcrib_pre_tool_use`` implementation
driven by the config, for operators who write no Python.

Each matching hook's program gets the call as JSON on stdin::

    {"agent": "reviewer", "tool": "shell__exec", "arguments": {...}, "annotations": {...}}

and answers with its exit status and stdout:

- exit 0 and nothing on stdout: no objection;
- exit 0 and ``{"decision": "deny", "message": "..."}``: the call is refused, and the model sees the message;
- exit 0 and ``{"decision": "allow", "updated_input": {...}}``: the call runs with these arguments (validated
  again), and later hooks see them;
- exit 2: the call is refused, with what the program wrote on stderr as the message.

Anything else (another exit status, stdout that is not such an answer, no answer within ``timeout``) refuses
the call too: a policy that cannot answer never lets a call through. The hooks run in the order they are written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from toolcrib import patterns
from toolcrib.config import CommandHook
from toolcrib.hookspecs import hookimpl
from toolcrib.policy import Allow, Deny

log = logging.getLogger("toolcrib.hooks")

FAILED = "The call was refused: a policy check failed (the host's log says why)."
MAX_ANSWER_BYTES = 1024 * 1024
GRACE_SECONDS = 0.5  # after the program exits, how long its output may still come in
# What a hook program gets of the host's environment, besides what its [[hooks.pre_tool_use]] table names: never the
# host's secrets (tokens, TOOLCRIB_STATE_SECRET, cloud keys).
BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


async def run_hook(command: list[str], payload: bytes, *, cwd: Path, env: Mapping[str, str],
                   timeout: float) -> tuple[int, bytes, bytes]:
    """Run a hook's program with ``payload`` on its stdin: (exit status, stdout, stderr), each capped at
    ``MAX_ANSWER_BYTES``. The program may answer without reading its input (its exit status and output count all
    the same). It runs in a process group of its own, which is ended when it is done or out of time, so nothing it
    started lingers. ``TimeoutError`` after ``timeout`` seconds, ``OSError`` when it cannot start."""
    process = await anyio.open_process(command, cwd=cwd, env=dict(env), start_new_session=True)
    out, err = bytearray(), bytearray()
    ends = [anyio.Event(), anyio.Event()]

    async def feed() -> None:
        assert process.stdin is not None
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.send(payload)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.aclose()

    async def drain(stream: Any, into: bytearray, end: anyio.Event) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for chunk in stream:
                if len(into) < MAX_ANSWER_BYTES:
                    into.extend(chunk[: MAX_ANSWER_BYTES - len(into)])
        end.set()

    try:
        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                tg.start_soon(drain, process.stdout, out, ends[0])
                tg.start_soon(drain, process.stderr, err, ends[1])
                returncode = await process.wait()
                with anyio.move_on_after(GRACE_SECONDS):  # its output, unless a child it left holds the pipes
                    for end in ends:
                        await end.wait()
                tg.cancel_scope.cancel()
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    return returncode, bytes(out), bytes(err)


def program_path(program: str, base_dir: Path) -> str | None:
    """Where a hook's program is: a path with a separator is relative to the config's folder, a bare name is
    looked up on PATH; None when it is not there or cannot be run."""
    found = str(base_dir / program) if os.sep in program else shutil.which(program)
    if found is None or os.path.isdir(found) or not os.access(found, os.X_OK):
        return None
    return found


class _Hook:
    def __init__(self, index: int, config: CommandHook, base_dir: Path) -> None:
        self.where = f"hooks.pre_tool_use[{index}]"
        program = config.command[0]
        self.command = [str(base_dir / program) if os.sep in program else program, *config.command[1:]]
        self.cwd = base_dir
        self.timeout = config.timeout
        self.tools = tuple(patterns.parse("tools", p) for p in config.tools)
        self.agents = tuple(patterns.parse("subagents", p) for p in config.agents)
        self.env = {**{k: os.environ[k] for k in (*BASE_ENV, *config.pass_env) if k in os.environ}, **config.env}

    def matches(self, agent: str, tool: str) -> bool:
        return any(p.matches(tool) for p in self.tools) and any(p.matches(agent) for p in self.agents)

    async def ask(self, call: Mapping[str, Any]) -> Allow | Deny | None:
        try:
            done = await run_hook(self.command, json.dumps(call).encode(), cwd=self.cwd, env=self.env,
                                  timeout=self.timeout)
        except TimeoutError:
            log.error("%s (%s) gave no answer within %g seconds; the call is refused", self.where, self.command[0],
                      self.timeout)
            return Deny(FAILED)
        except OSError as exc:
            log.error("%s cannot run %r: %s; the call is refused", self.where, self.command[0], exc)
            return Deny(FAILED)
        returncode, out, err = done
        stderr = err.decode(errors="replace").strip()
        if returncode == 2:
            return Deny(stderr[:2000] or "The call was refused by a policy check.")
        if returncode != 0:
            log.error("%s exited with status %d; the call is refused. stderr: %s", self.where, returncode,
                      stderr[:2000])
            return Deny(FAILED)
        out = out.strip()
        if not out:
            return None
        return self._answer(out)

    def _answer(self, out: bytes) -> Allow | Deny | None:
        try:
            answer = json.loads(out[:MAX_ANSWER_BYTES])
        except ValueError:
            answer = None
        decision = answer.get("decision") if isinstance(answer, dict) else None
        if decision == "deny" and isinstance(answer.get("message"), str) and answer["message"].strip():
            return Deny(answer["message"])
        if decision == "allow":
            updated = answer.get("updated_input")
            if updated is None:
                return Allow()
            if isinstance(updated, dict):
                return Allow(updated_input=updated)
        log.error('%s answered %r; expected nothing, {"decision": "deny", "message": "..."} or {"decision": '
                  '"allow", "updated_input": {...}}; the call is refused', self.where, out[:500])
        return Deny(FAILED)


class CommandHooks:
    """The config's ``[[hooks.pre_tool_use]]`` programs, as one plugin."""

    def __init__(self, hooks: list[CommandHook], base_dir: Path) -> None:
        self.hooks = [_Hook(i, hook, base_dir) for i, hook in enumerate(hooks)]

    def wants(self, agent: str, tool: str) -> bool:
        """Whether any of the programs sees this agent's calls of this tool (else the pipeline does not ask)."""
        return any(hook.matches(agent, tool) for hook in self.hooks)

    @hookimpl
    async def toolcrib_pre_tool_use(self, agent: str, tool: str, arguments: Mapping[str, Any],
                                    annotations: Mapping[str, Any]) -> Allow | Deny | None:
        current = dict(arguments)
        updated = False
        for hook in self.hooks:
            if not hook.matches(agent, tool):
                continue
            answer = await hook.ask({"agent": agent, "tool": tool, "arguments": current,
                                     "annotations": dict(annotations)})
            if isinstance(answer, Deny):
                return answer
            if isinstance(answer, Allow) and answer.updated_input is not None:
                current, updated = dict(answer.updated_input), True
        return Allow(updated_input=current) if updated else None
