"""Policy hooks written as programs (``[[hooks.pre_tool_use]]``, ``[[hooks.post_tool_use]]``): the
``toolcrib_pre_tool_use`` and ``toolcrib_post_tool_use`` implementations driven by the config, for operators who
write no Python. The programs speak toolcrib's shape and the shape Claude Code and the Qoder SDK give their
``PreToolUse`` / ``PostToolUse`` command hooks, so an existing hook script works unchanged.

Each matching hook's program gets the call as JSON on stdin, with both shapes' fields::

    {"agent": "reviewer", "tool": "shell__exec", "arguments": {...}, "annotations": {...},
     "hook_event_name": "PreToolUse", "tool_name": "shell__exec", "tool_input": {...}, "tool_use_id": "...",
     "session_id": "...", "cwd": "/work/repo", "permission_mode": "default"}

(a post hook also gets ``result`` and ``tool_response``: the result in MCP's wire shape). A pre hook answers with
its exit status and stdout:

- exit 0 and nothing on stdout (or a JSON object deciding nothing): no objection;
- exit 0 and ``{"decision": "deny", "message": "..."}``, or ``{"hookSpecificOutput": {"permissionDecision":
  "deny", "permissionDecisionReason": "..."}}``, or ``{"decision": "block", "reason": "..."}``: the call is
  refused, and the model sees the message; ``{"continue": false, "stopReason": "..."}``, or toolcrib's deny with
  ``"interrupt": true``, also ends the agent's turn (``Deny(..., interrupt=True)``);
- exit 0 and ``{"decision": "allow", "updated_input": {...}}`` or ``{"hookSpecificOutput": {"permissionDecision":
  "allow", "updatedInput": {...}}}``: the call runs with these arguments (validated again), and later hooks see
  them;
- exit 0 and ``{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "..."}}``: the call
  is held for approval, as an ``ask`` rule would hold it;
- exit 2: the call is refused, with what the program wrote on stderr as the message.

A post hook may leave the result (exit 0, nothing), add to it (``hookSpecificOutput.additionalContext``: a text
block the model reads), replace it (``hookSpecificOutput.updatedMCPToolOutput``: MCP content blocks, or a result
with ``content``), or block it (exit 2, or ``{"decision": "block", "reason": "..."}``: the result becomes an error
that ends with the reason).

Anything else (another exit status, stdout that is not such an answer, no answer within ``timeout``) refuses
the call, or withholds its result: a policy that cannot answer never lets a call through. (Claude Code lets a call
through when a hook fails with another status; toolcrib does not.) The hooks run in the order they are written.

With ``process = "long-lived"`` one process answers every call of its hook, one at a time: the call as one JSON
line on its stdin, the answer as one line on its stdout (a JSON object, as a per-call program writes; an empty line
or ``{}`` decides nothing; the refusal a per-call program gives with exit 2 is ``{"decision": "block", "reason":
...}``). What it writes on stderr goes to the host's. A process that dies, writes a line that is not an answer, or
gives none within ``timeout`` fails that call as above, and is ended; the next call starts it again (one that ended
between calls is found by its closed input and started again for the call). Calls made at once, from any task, loop
or thread, take turns (``pipes.Turns``). A process is started at a hook's first call, and ended with the host that
started it (a reload makes new ones).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import anyio

from toolcrib import patterns
from toolcrib.answers import Allow, Ask, Deny
from toolcrib.config import CommandHook, LoadedConfig
from toolcrib.content import ToolResult
from toolcrib.governing import unlocated
from toolcrib.hookspecs import hookimpl
from toolcrib.pipes import Turns, read_answer, write_all

log = logging.getLogger("toolcrib.hooks")

FAILED = "The call was refused: a policy check failed (the host's log says why)."
MAX_ANSWER_BYTES = 1024 * 1024
GRACE_SECONDS = 0.5  # after the program exits, how long its output may still come in


async def run_hook(command: list[str], payload: bytes, *, cwd: Path, env: Mapping[str, str],
                   timeout: float) -> tuple[int, bytes, bytes]:
    """Run a hook's program with ``payload`` on its stdin: (exit status, stdout, stderr), each capped at
    ``MAX_ANSWER_BYTES``; an output past the cap is cut to one byte more than it (so ``len(out) >
    MAX_ANSWER_BYTES`` says it was too long). The program may answer without reading its input (its exit status
    and output count all the same). It runs in a process group of its own, which is ended when it is done or out of
    time, so nothing it started lingers. ``TimeoutError`` after ``timeout`` seconds, ``OSError`` when it cannot
    start."""
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
                if len(into) <= MAX_ANSWER_BYTES:
                    into.extend(chunk[: MAX_ANSWER_BYTES + 1 - len(into)])
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


class _LongLived:
    """The one process of a ``process = "long-lived"`` hook: a JSON line in, a JSON line out, one call at a time. Its
    pipes are plain descriptors waited on by whichever event loop asks (so it serves every loop and thread of a
    process, in turns), and ``close`` ends it at once, from anywhere."""

    def __init__(self, hook: _Hook) -> None:
        self.hook = hook
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._turns = Turns()
        self._busy = False  # a call is reading or writing its pipes: close() then only kills it

    async def ask(self, call: bytes) -> tuple[int, bytes, bytes]:
        """(0, its answer line, b"") to the call's JSON (``call``, without the line's end) as ``run_hook`` answers;
        ``TimeoutError`` or ``OSError`` (it could not start, or died) as ``run_hook`` raises them: the process is
        ended then, and the next call starts another."""
        await self._turns.take()
        self._busy = True
        try:
            deadline = time.monotonic() + self.hook.timeout  # (a number: a cancel scope costs, see pipes)
            if self._process is None:
                self._start()
            await self._send(call + b"\n", deadline)
            line = await self._line(deadline)
            self._busy = False
            if line is None:  # longer than an answer may be: refused as too long, and the process ended
                self.close()
                return 0, b"x" * (MAX_ANSWER_BYTES + 1), b""
            return 0, line, b""
        except BaseException:
            self._busy = False
            self.close()  # died, out of time or cancelled: a late answer must not be read as the next call's
            raise
        finally:
            self._turns.give()

    def _start(self) -> None:
        self.close()
        hook = self.hook
        self._process = subprocess.Popen(hook.command, cwd=hook.cwd, env=dict(hook.env), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, start_new_session=True)
        assert self._process.stdin is not None and self._process.stdout is not None
        os.set_blocking(self._process.stdin.fileno(), False)
        os.set_blocking(self._process.stdout.fileno(), False)
        log.info("%s: started its long-lived process %s (%s)", hook.where, self._process.pid, hook.command[0])

    async def _send(self, data: bytes, deadline: float) -> None:
        """Write a call. A process that ended since the last call (found by its input being closed, before any of
        this call was written) is started again, and the call written to the new one; one that is alive but closed
        its input fails the call, as one that ends while a call is written does."""
        assert self._process is not None and self._process.stdin is not None
        fd = self._process.stdin.fileno()
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            written = 0
        except BrokenPipeError:
            if self._process.poll() is None:
                raise OSError("its process ended (its input is closed)") from None
            self._start()
            assert self._process is not None and self._process.stdin is not None
            fd, written = self._process.stdin.fileno(), 0
        try:
            await write_all(fd, memoryview(data)[written:], deadline)
        except BrokenPipeError:
            raise OSError("its process ended (its input is closed)") from None

    async def _line(self, deadline: float) -> bytes | None:
        """Its next line; None for one longer than an answer may be."""
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0 and end <= MAX_ANSWER_BYTES:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
                return line
            if len(self._buffer) > MAX_ANSWER_BYTES:
                return None
            chunk = await read_answer(fd, 65536, deadline)
            if not chunk:
                raise OSError("its process ended (its output closed)")
            self._buffer += chunk

    def close(self) -> None:
        """End the process and everything it started (its process group); its pipes are closed and it is reaped,
        unless a call is reading them (that call's end does it)."""
        process = self._process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if self._busy:
            return
        self._process, self._buffer = None, b""
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)  # (killed: it goes at once)


class _Hook:
    def __init__(self, where: str, config: CommandHook, base_dir: Path, workspace: Path) -> None:
        self.where = where
        program = config.command[0]
        self.command = [str(base_dir / program) if os.sep in program else program, *config.command[1:]]
        self.cwd = base_dir
        self.timeout = config.timeout
        self.tools = tuple(patterns.parse("tools", p) for p in config.tools)
        self.agents = tuple(patterns.parse("subagents", p) for p in config.agents)
        self.env = config.environment(os.environ)
        self.refusal = unlocated(where, config.command, base_dir, self.env, workspace, config.out_of_reach)
        self.long_lived = _LongLived(self) if config.process == "long-lived" else None

    def matches(self, agent: str, tool: str) -> bool:
        return any(p.matches(tool) for p in self.tools) and any(p.matches(agent) for p in self.agents)

    async def run(self, call: bytes) -> tuple[str, Any]:
        """To the call's JSON: ("refuse", why it is logged) when the program failed; ("exit2", its stderr); ("none",
        None) for no answer (nothing, or an empty object); ("answer", the JSON object it wrote)."""
        if self.refusal is not None:
            log.error("%s; %s", self.refusal, self._failing)
            return "refuse", None
        try:
            if self.long_lived is not None:
                returncode, out, err = await self.long_lived.ask(call)
            else:
                returncode, out, err = await run_hook(self.command, call, cwd=self.cwd, env=self.env,
                                                      timeout=self.timeout)
        except TimeoutError:
            log.error("%s (%s) gave no answer within %g seconds; %s", self.where, self.command[0], self.timeout,
                      self._failing)
            return "refuse", None
        except OSError as exc:
            log.error("%s cannot run %r: %s; %s", self.where, self.command[0], exc, self._failing)
            return "refuse", None
        stderr = err[:MAX_ANSWER_BYTES].decode(errors="replace").strip() if err else ""
        if len(out) > MAX_ANSWER_BYTES:  # an answer cut short could read as no objection: it is no answer
            log.error("%s wrote more than %d bytes to stdout, which is no answer; %s", self.where, MAX_ANSWER_BYTES,
                      self._failing)
            return "refuse", None
        if returncode == 2:
            return "exit2", stderr[:2000]
        if returncode != 0:
            log.error("%s exited with status %d; %s. stderr: %s", self.where, returncode, self._failing,
                      stderr[:2000])
            return "refuse", None
        out = out.strip()
        if not out or out == b"{}":  # (the usual answer of a hook that lets a call through: decides nothing)
            return "none", None
        try:
            answer = json.loads(out)
        except (ValueError, RecursionError):  # (nested past what Python parses: no answer either)
            answer = None
        if not isinstance(answer, dict):
            log.error("%s answered %r, which is not a JSON object; %s", self.where,
                      out[:500].decode(errors="replace"), self._failing)
            return "refuse", None
        return "answer", answer

    @property
    def _failing(self) -> str:
        return "the call is refused" if self.where.startswith("hooks.pre") else "the result is withheld"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def pre_answer(answer: dict[str, Any]) -> Allow | Ask | Deny | str | None:
    """What a pre hook's JSON answer decides, in either shape; a string says what is wrong with it."""
    specific = answer.get("hookSpecificOutput")
    malformed = _malformed(answer)
    if malformed is not None:
        return malformed
    if answer.get("continue") is False:  # Claude Code: stop the agent, not only this call
        return Deny(_text(answer.get("stopReason")) or _text(answer.get("reason")) or "The call was stopped by a "
                    "policy check.", interrupt=True)
    if isinstance(specific, dict) and "permissionDecision" in specific:
        decision = specific["permissionDecision"]
        reason = _text(specific.get("permissionDecisionReason"))
        updated = specific.get("updatedInput")
        if updated is not None and not isinstance(updated, dict):
            return "hookSpecificOutput.updatedInput is not an object"
        if decision == "deny":
            return Deny(reason or "The call was refused by a policy check.")
        if decision == "ask":
            return Ask(reason or "a policy check asks for approval", updated_input=updated)
        if decision == "allow":
            return Allow(updated_input=updated)
        return f"permissionDecision {decision!r} is not allow, deny or ask"
    if isinstance(specific, dict) and isinstance(specific.get("updatedInput"), dict):
        return Allow(updated_input=specific["updatedInput"])
    decision = answer.get("decision")
    if decision == "deny":
        message = _text(answer.get("message"))
        return Deny(message, interrupt=answer.get("interrupt") is True) if message else \
            "a deny needs a message for the model"
    if decision == "block":
        return Deny(_text(answer.get("reason")) or "The call was refused by a policy check.")
    if decision == "allow":
        updated = answer.get("updated_input")
        if updated is None:
            return Allow()
        return Allow(updated_input=updated) if isinstance(updated, dict) else "updated_input is not an object"
    if decision == "approve":
        return Allow()
    if decision is not None:
        return f"decision {decision!r} is not deny, allow, block or approve"
    return None  # an object that decides nothing (suppressOutput, systemMessage, ...)


_EVENT_NAMES = {"pre_tool_use": "PreToolUse", "post_tool_use": "PostToolUse"}  # (hook_event_name, as Claude's)


class _Programs:
    def __init__(self, loaded: LoadedConfig, event: str, hooks: list[CommandHook]) -> None:
        self.hooks = [_Hook(f"hooks.{event}[{i}]", hook, loaded.base_dir, loaded.workspace)
                      for i, hook in enumerate(hooks)]
        self.event_name = _EVENT_NAMES[event]
        self.cwd = str(loaded.workspace)
        self.modes = {name: agent.mode for name, agent in loaded.config.agents.items()}
        self._matching: dict[tuple[str, str], tuple[list[_Hook], _Line]] = {}

    def wants(self, agent: str, tool: str) -> bool:
        return any(hook.matches(agent, tool) for hook in self.hooks)

    def matching(self, agent: str, tool: str) -> tuple[list[_Hook], _Line]:
        """The hooks that see this agent's calls of this tool, in order, and the writer of those calls' JSON
        (remembered: the hooks and a view's tools never change within a host)."""
        found = self._matching.get((agent, tool))
        if found is None:
            found = self._matching[(agent, tool)] = (
                [hook for hook in self.hooks if hook.matches(agent, tool)],
                _Line(self.event_name, agent, tool, self.cwd, self.modes.get(agent, "default")))
        return found


class _Line:
    """The call's JSON a hook program reads: the fields both shapes of hook read, as ``json.dumps`` writes them (key
    for key and byte for byte), from the parts that never change for one agent's calls of one tool, written once.

    There is no conversation session in toolcrib: ``session_id`` is the call's id, as ``tool_use_id`` is (the same in
    the call's pre and post hooks and its audit record)."""

    __slots__ = ("_annotations", "_head", "_middle", "_tail")

    def __init__(self, name: str, agent: str, tool: str, cwd: str, mode: str) -> None:
        self._head = f'{{"agent": {json.dumps(agent)}, "tool": {json.dumps(tool)}, "arguments": '
        self._middle = f', "hook_event_name": {json.dumps(name)}, "tool_name": {json.dumps(tool)}, "tool_input": '
        self._tail = f', "cwd": {json.dumps(cwd)}, "permission_mode": {json.dumps(mode)}'
        self._annotations: tuple[Any, str] = (None, "")

    def __call__(self, arguments: Mapping[str, Any], call_id: str, extra: str) -> bytes:
        """The line, without its end; ``extra`` is the JSON of the fields that follow (``"key": value`` pairs, each
        after ", "), as :meth:`annotations` and :meth:`result` write them."""
        given = json.dumps(arguments)
        named = encode_basestring_ascii(call_id)  # (what json.dumps writes for a string, without its dispatch)
        return (f"{self._head}{given}{self._middle}{given}, \"tool_use_id\": {named}, \"session_id\": {named}"
                f"{self._tail}{extra}}}").encode()

    def annotations(self, annotations: Mapping[str, Any]) -> str:
        """A pre hook's last field (remembered for the tool's own annotations, which are the same every call)."""
        kept, text = self._annotations
        if kept is not annotations:
            text = f', "annotations": {json.dumps(dict(annotations))}'
            self._annotations = (annotations, text)
        return text

    @staticmethod
    def result(wire: Mapping[str, Any]) -> str:
        """A post hook's last fields: the result in MCP's wire shape, in both shapes' keys."""
        result = json.dumps(wire)
        return f', "result": {result}, "tool_response": {result}'


class CommandHooks:
    """The config's ``[[hooks.pre_tool_use]]`` and ``[[hooks.post_tool_use]]`` programs, as one plugin."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.pre = _Programs(loaded, "pre_tool_use", loaded.config.hooks.pre_tool_use)
        self.post = _Programs(loaded, "post_tool_use", loaded.config.hooks.post_tool_use)

    def close(self) -> None:
        """End the long-lived hook processes (the host closes, or a reload replaced it)."""
        for hook in (*self.pre.hooks, *self.post.hooks):
            if hook.long_lived is not None:
                hook.long_lived.close()

    def sees_calls(self, hook: str, agent: str, tool: str) -> bool:
        """Whether any of the programs of ``hook`` sees this agent's calls of this tool (else the pipeline does not
        call it: ``toolcrib.plugins.PluginHook.sees``)."""
        return (self.pre if hook == "toolcrib_pre_tool_use" else self.post).wants(agent, tool)

    @hookimpl
    async def toolcrib_pre_tool_use(self, agent: str, tool: str, arguments: Mapping[str, Any],
                                    annotations: Mapping[str, Any], call_id: str) -> Allow | Ask | Deny | None:
        current = dict(arguments)
        updated = False
        ask: Ask | None = None
        hooks, line = self.pre.matching(agent, tool)
        for hook in hooks:
            kind, found = await hook.run(line(current, call_id, line.annotations(annotations)))
            if kind == "refuse":
                return Deny(FAILED)
            if kind == "exit2":
                return Deny(found or "The call was refused by a policy check.")
            if kind == "none":
                continue
            answer = pre_answer(found)
            if isinstance(answer, str):
                log.error("%s answered %r: %s; the call is refused", hook.where, found, answer)
                return Deny(FAILED)
            if isinstance(answer, Deny):
                return answer
            if isinstance(answer, Allow | Ask) and answer.updated_input is not None:
                current, updated = dict(answer.updated_input), True
            if isinstance(answer, Ask) and ask is None:
                ask = answer
        if ask is not None:
            return Ask(ask.message, updated_input=current if updated else None)
        return Allow(updated_input=current) if updated else None


class CommandHooksWithPost(CommandHooks):
    """``CommandHooks`` with ``[[hooks.post_tool_use]]`` programs too (a post hook only when there are some: a
    registered one is asked about every call)."""

    @hookimpl
    async def toolcrib_post_tool_use(self, agent: str, tool: str, arguments: Mapping[str, Any],
                                     result: ToolResult, call_id: str) -> ToolResult | None:
        withheld = ToolResult.error(f"The result of {tool} was withheld: a policy check failed (the host's log "
                                    "says why).")
        changed = False
        hooks, line = self.post.matching(agent, tool)
        for hook in hooks:
            kind, found = await hook.run(line(dict(arguments), call_id, line.result(result.to_wire())))
            if kind == "refuse":
                return withheld
            if kind == "exit2":
                result, changed = _blocked(result, found or "A policy check objected to this result."), True
                continue
            if kind == "none":
                continue
            answer = _post_answer(result, found)
            if isinstance(answer, str):
                log.error("%s answered %r: %s; the result is withheld", hook.where, found, answer)
                return withheld
            if answer is not None:
                result, changed = answer, True
        return result if changed else None


def _blocked(result: ToolResult, reason: str) -> ToolResult:
    """Claude's "block" after a call: the model is told why, and the result counts as an error."""
    return ToolResult(content=(*result.content, {"type": "text", "text": reason}), is_error=True)


def _malformed(answer: dict[str, Any]) -> str | None:
    """What is wrong with the shape of an answer (a field of the wrong type), or None: a policy answer that
    cannot be read as written decides nothing in the call's favour."""
    if answer.get("hookSpecificOutput") is not None and not isinstance(answer["hookSpecificOutput"], dict):
        return "hookSpecificOutput is not an object"
    for key in ("continue", "interrupt", "suppressOutput"):
        if answer.get(key) is not None and not isinstance(answer[key], bool):
            return f"{key} is not true or false"
    if answer.get("decision") is not None and not isinstance(answer["decision"], str):
        return "decision is not a string"
    return None


def _post_answer(result: ToolResult, answer: dict[str, Any]) -> ToolResult | str | None:
    malformed = _malformed(answer)
    if malformed is not None:
        return malformed
    specific = answer.get("hookSpecificOutput")
    if answer.get("decision") == "block":
        return _blocked(result, _text(answer.get("reason")) or "A policy check objected to this result.")
    if answer.get("decision") is not None:
        return f"decision {answer.get('decision')!r} is not block"
    if not isinstance(specific, dict):
        return None
    replaced = specific.get("updatedMCPToolOutput")
    if replaced is not None:
        if isinstance(replaced, dict) and isinstance(replaced.get("content"), list):
            result = ToolResult(content=tuple(replaced["content"]), is_error=replaced.get("isError") is True)
        elif isinstance(replaced, list):
            result = ToolResult(content=tuple(replaced), is_error=result.is_error)
        elif isinstance(replaced, str):
            result = ToolResult(content=({"type": "text", "text": replaced},), is_error=result.is_error)
        else:
            return "updatedMCPToolOutput is not content blocks, a result with content, or text"
    context = _text(specific.get("additionalContext"))
    if context is not None:
        result = ToolResult(content=(*result.content, {"type": "text", "text": context}),
                            structured_content=result.structured_content, is_error=result.is_error, meta=result.meta)
    return result if replaced is not None or context is not None else None
