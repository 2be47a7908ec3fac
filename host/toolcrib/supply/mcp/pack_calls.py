"""The calls lane of an isolated pack: its tool calls, on a pipe pair of their own, beside its MCP session.

An isolated pack's process (``toolcrib.supply.mcp.isolated``) speaks MCP on stdin/stdout, and the host's pool lists its
tools, resources and prompts and hears its changes over that session as it does any upstream server's. Its tool calls
take this lane instead: one JSON object per line, with no SDK session on either side, so that a call costs the host a
write, a read and the child's own pipeline (an MCP round trip through two SDK sessions cost more than the call it
carries). What a running handler asks of its ``Context`` crosses it too: progress, log messages, a question for the user
(elicitation) and a turn of the client's model (sampling) reach the calling agent's client through the host's own
channel for the call, so a question the agent's client must answer between rounds (MCP 2026-07-28) ends the child's run
of the call, and the host makes it again once the answer is in, as it does a pack's in its own process.

Lines, host to child: ``{"call": n, "tool": name, "arguments": {...}, "agent": the calling agent}``; ``{"cancel":
n}``; ``{"answer": k, "value": ...}`` or ``{"answer": k, "error": text}`` (to the child's ask ``k``). Child to host:
``{"result": n, "content": [...], "structuredContent": ..., "isError": bool}`` or ``{"result": n, "error": text}``;
``{"ask": k, "call": n, "what": "progress" | "log" | "elicit" | "sample" | "remember" | "remembered", "args":
[...]}`` (progress, log and remembered need no answer). ``Context.remember(kind, compute)`` asks ``remember``: the
answer is ``{"stored": value}`` (what an earlier round of the call recorded) or ``{"compute": true}``, and then the
child computes and says ``remembered`` with the value, which the host's front end records.

``Context.permits`` is synchronous, so its question takes a pipe pair of its own, read by the host as it comes:
``{"permits": m, "call": n, "dimension": d, "name": x}``, answered ``{"permitted": m, "value": bool}`` for the
call's agent (in the chain of runs it was called in).

The child is not trusted to be well formed: a line that is not an object of these shapes, or longer than
``MAX_LINE_BYTES``, ends the lane (its calls then fail, and later calls take the MCP session), and a result is
validated as MCP's ``CallToolResult`` before the host uses it.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import itertools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectSendStream

from toolcrib.content import ToolResult
from toolcrib.errors import Suspend, ToolError, UnknownToolError
from toolcrib.pipes import write_all
from toolcrib.supply.mcp.pack_checks import CHECKS_ENV, CheckLine, Lines, write_line

if TYPE_CHECKING:
    from toolcrib.runner import Call
    from toolcrib.view import AgentView

log = logging.getLogger("toolcrib.lane")

LANE_ENV = "TOOLCRIB_LANE"  # set for an isolated pack's process: "<calls pipe>:<answers pipe>", its end of the lane
MAX_LINE_BYTES = 64 * 1024 * 1024  # one message (a result with images can be large; a line past this ends the lane)
_CHUNK = 256 * 1024


class LaneClosed(Exception):
    """The lane ended (the child died, or wrote something that is not the lane's)."""


class _Ended(Exception):
    """A call's lines ended while the host waited for one of them."""


class _Pipes:
    """Two non-blocking pipe ends, read as lines and written whole, on the event loop (no thread)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buffer = bytearray()
        self._scanned = 0  # how much of the buffer holds no line's end: each byte is looked at once
        self._busy: anyio.Event | None = None  # set while a message is half written

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message whole; at once when the pipe takes it (the usual case: no await, no lock), else
        waiting for room, while other messages wait for this one to be written."""
        data = memoryview(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        while self._busy is not None:  # another message is half written
            await self._busy.wait()
        data = self._write(data)
        if not data:
            return
        self._busy = busy = anyio.Event()
        try:
            await write_all(self.write_fd, data)
        except OSError as exc:  # the other end is gone
            raise LaneClosed(os.strerror(exc.errno or errno.EPIPE)) from None
        finally:
            self._busy = None
            busy.set()

    def _write(self, data: memoryview) -> memoryview:
        try:
            return data[os.write(self.write_fd, data):]
        except BlockingIOError:
            return data
        except OSError as exc:  # the other end is gone
            raise LaneClosed(os.strerror(exc.errno or errno.EPIPE)) from None

    async def lines(self) -> AsyncIterator[bytes]:
        """Each line the other end writes, as it comes. A long line costs time linear in its length (the buffer is
        grown in place and each byte looked at once) and gives the loop a turn at every chunk, so a flood from one
        pack delays no other source."""
        buffer = self._buffer
        while True:
            end = buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[:end + 1]
                self._scanned = 0
                yield line
                continue
            self._scanned = len(buffer)
            if len(buffer) > MAX_LINE_BYTES:
                raise LaneClosed(f"a line longer than {MAX_LINE_BYTES} bytes")
            if self.read_fd < 0:
                return  # closed at this end (the host ended the lane, a pack never started too): no more lines
            try:
                chunk = os.read(self.read_fd, _CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.read_fd)
                continue
            except OSError as exc:
                raise LaneClosed(os.strerror(exc.errno or errno.EPIPE)) from None
            if not chunk:
                return
            buffer += chunk
            if len(chunk) == _CHUNK:
                await anyio.lowlevel.checkpoint()  # more may be waiting: the loop's other tasks first

    def close(self) -> None:
        """Close both ends, once (a number closed twice could be another file's by then)."""
        fds, self.read_fd, self.write_fd = (self.read_fd, self.write_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _message(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # (nested past what Python parses: not JSON to it either)
        raise LaneClosed("a line that is not JSON") from None
    if not isinstance(message, dict):
        raise LaneClosed("a line that is not a JSON object")
    return message


# -- the host's end -----------------------------------------------------------------------------------------------


class Lane:
    """The host's end of one isolated pack's lane: ``await lane.call(tool, arguments, call)``."""

    def __init__(self, read_fd: int, write_fd: int, namespace: str) -> None:
        self._pipes = _Pipes(read_fd, write_fd)
        self.namespace = namespace
        self._numbers = itertools.count(1)
        # call number -> what the child asks during it (progress beyond the buffer is dropped), and its answer
        self._calls: dict[int, tuple[MemoryObjectSendStream[dict[str, Any]], list[dict[str, Any]]]] = {}
        # call number -> its call and the context it was made in (the chain of runs), for its ``permits`` questions
        self._callers: dict[int, tuple[Call | None, contextvars.Context]] = {}
        self.closed: str | None = None  # why it ended, once it has
        self._scope = anyio.CancelScope()
        # called with the tool's name when a call outlives its time (the pool then ends the process: a handler
        # that overran may hold a thread nothing can stop, and its process starts again)
        self.on_timeout: Callable[[str], None] | None = None
        self.checks: CheckLine | None = None  # its availability checks' line (supply.mcp.pack_checks), beside it
        self.permits_line: _Pipes | None = None  # where its handlers' ``permits`` questions come, if they may

    def stop(self) -> None:
        """End the lane (its process's session ended): calls on it fail, and its pipes close."""
        self.closed = self.closed or "its process ended"
        if self.checks is not None:
            self.checks.closed = True  # later questions fail at once (its ends close with the lane's folder)
        self._scope.cancel()
        for stream, _ in list(self._calls.values()):
            stream.close()
        self._pipes.close()
        if self.permits_line is not None:
            self.permits_line.close()

    async def run(self) -> None:
        """Read the child's lines until the lane ends; each goes to the call it names."""
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    if self.permits_line is not None:
                        tg.start_soon(self.answer_permits, self.permits_line)
                    await self._read()
                    tg.cancel_scope.cancel()
        finally:
            self.stop()

    async def _read(self) -> None:
        try:
            async for line in self._pipes.lines():
                # a large line is read on a worker thread, so the loop keeps serving meanwhile
                message = _message(line) if len(line) < _CHUNK else await anyio.to_thread.run_sync(_message, line)
                number = message.get("result", message.get("call"))
                waiting = self._calls.get(number) if isinstance(number, int) else None
                if waiting is None:
                    if "result" in message or "ask" in message:
                        continue  # a call that was cancelled meanwhile
                    raise LaneClosed("a line that is not the lane's")
                stream, answer = waiting
                if "result" in message:  # never dropped: kept aside, and the call's stream ends after its asks
                    answer.append(message)
                    stream.close()
                    continue
                with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    stream.send_nowait(message)
            self.closed = "its process ended"
        except LaneClosed as exc:
            self.closed = str(exc)
            log.warning("isolated pack %r: its calls lane ended: %s", self.namespace, exc)

    async def call(self, tool: str, arguments: dict[str, Any], call: Call | None,
                   timeout: float | None = None) -> ToolResult:
        """Call ``tool`` in the child; ``timeout``: the seconds the pipeline gives it (a call cancelled after
        them overran, and ``on_timeout`` hears of it)."""
        if self.closed is not None:
            raise LaneClosed(self.closed)
        begun = time.monotonic()
        number = next(self._numbers)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](64)
        answer: list[dict[str, Any]] = []
        self._calls[number] = (send, answer)
        self._callers[number] = (call, contextvars.copy_context())
        done = False
        try:
            await self._pipes.send({"call": number, "tool": tool, "arguments": arguments,
                                    "agent": call.agent if call is not None else None})
            async with receive:
                async for message in receive:
                    await self._asked(message, call, receive)
            done = True
            if answer:
                return self._result(answer[0])
            raise ToolError(f"isolated pack {self.namespace!r} failed during the call: {self.closed}")
        finally:
            del self._calls[number]
            del self._callers[number]
            if not done and self.closed is None:  # cancelled, timed out, or suspended: the child stops too
                with anyio.CancelScope(shield=True), contextlib.suppress(LaneClosed):
                    await self._pipes.send({"cancel": number})
                overran = timeout is not None and time.monotonic() - begun >= timeout
                if overran and self.on_timeout is not None:
                    self.on_timeout(tool)

    def _result(self, message: dict[str, Any]) -> ToolResult:
        import mcp_types as types
        from pydantic import ValidationError

        if "error" in message:
            raise ToolError(f"isolated pack {self.namespace!r} refused the call: {message['error']}")
        try:
            result = types.CallToolResult.model_validate(
                {k: message[k] for k in ("content", "structuredContent", "isError") if k in message}, by_name=False)
        except ValidationError as exc:
            raise ToolError(f"isolated pack {self.namespace!r} answered with a malformed result: "
                            f"{exc.errors()[0]['msg']}") from None
        return ToolResult(
            content=tuple(block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content),
            structured_content=result.structured_content, is_error=bool(result.is_error))

    def permits(self, number: Any, dimension: Any, name: Any) -> bool:
        """The answer to a ``permits`` question of call ``number``'s handler: its agent's rules decide, in the
        chain of runs the call was made in (False for a call that is not running, or a malformed question)."""
        call, made_in = self._callers.get(number, (None, None)) if isinstance(number, int) else (None, None)
        if call is None or made_in is None or not isinstance(dimension, str) or not isinstance(name, str):
            return False
        return bool(made_in.copy().run(call.context().permits, dimension, name))

    async def answer_permits(self, pipes: _Pipes) -> None:
        """Answer the child's ``permits`` questions as they come (its asking thread waits for each)."""
        try:
            async for line in pipes.lines():
                message = _message(line)
                value = self.permits(message.get("call"), message.get("dimension"), message.get("name"))
                await pipes.send({"permitted": message.get("permits"), "value": value})
        except LaneClosed as exc:
            log.warning("isolated pack %r: its permits line ended: %s", self.namespace, exc)

    async def _asked(self, message: dict[str, Any], call: Call | None,
                     receive: Any = None) -> None:
        what, args, ask = message.get("what"), message.get("args"), message.get("ask")
        channel = call.channel if call is not None else None
        if not isinstance(args, list):
            args = []
        if what == "remember":
            await self._remember(ask, args, call, receive)
            return
        if what == "remembered":
            return  # (one that no computing waits for: nothing to record)
        if what == "progress":
            if channel is not None and len(args) == 3 and all(isinstance(a, int | float) for a in args[:1]):
                await channel.progress(float(args[0]), _number(args[1]), _text(args[2]))
            return
        if what == "log":
            if channel is not None and len(args) == 3 and isinstance(args[0], str) and isinstance(args[1], str):
                await channel.log(args[0], args[1], _text(args[2]))
            return
        try:
            value = await self._answer(what, args, call)
        except ToolError as exc:
            await self._pipes.send({"answer": ask, "error": str(exc)})
        except Suspend:
            raise  # the agent's client answers first; the finally of ``call`` stops the child's run
        else:
            await self._pipes.send({"answer": ask, "value": value})

    async def _remember(self, ask: Any, args: list[Any], call: Call | None, receive: Any) -> None:
        """``Context.remember`` in the child: what the call's front end recorded of that kind, or the child
        computes it (its ``remembered`` value is recorded). The call's other asks go on while it computes."""
        remember = getattr(call.channel, "remember", None) if call is not None else None
        if remember is None or receive is None or len(args) != 1 or not isinstance(args[0], str):
            await self._pipes.send({"answer": ask, "value": {"compute": True}})
            return
        computed = False

        async def compute() -> Any:
            nonlocal computed
            computed = True
            await self._pipes.send({"answer": ask, "value": {"compute": True}})
            async for message in receive:
                if message.get("what") == "remembered":
                    said = message.get("args")
                    return said[0] if isinstance(said, list) and said else None
                await self._asked(message, call, receive)
            raise _Ended  # the call ended (its result came) before it computed

        try:
            value = await remember(args[0], compute)
        except _Ended:
            return
        if not computed:
            await self._pipes.send({"answer": ask, "value": {"stored": value}})

    async def _answer(self, what: Any, args: list[Any], call: Call | None) -> Any:
        if call is None:
            raise ToolError("nobody can be asked here (the call has no client)")
        if what == "elicit" and len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], dict):
            answer = await call.context().elicit(args[0], args[1])
            return {"action": answer.action, "content": answer.content}
        sample = getattr(call.channel, "sample", None)
        if what == "sample" and len(args) == 1 and isinstance(args[0], dict):
            if sample is None:
                raise ToolError("This needs the client's model, and the client offers none (it does not support MCP "
                                "sampling).")
            return await sample(args[0])
        raise ToolError(f"the lane does not carry {what!r}")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@asynccontextmanager
async def opened(namespace: str, tg: anyio.abc.TaskGroup) -> AsyncIterator[tuple[Lane, dict[str, str], str]]:
    """A new lane, read in ``tg`` while the context lasts: the host's end, the child's environment entry that names
    it, and the folder of its two named pipes (which the child must be let read and write; gone afterwards).

    Named pipes rather than inherited descriptors: the SDK's stdio client starts the child with only stdin, stdout
    and stderr. The host holds each pipe open for reading and writing, so neither end ever waits for the other to
    open it; the child's end closes with the child, and the pool ends the lane with the child's session."""
    folder = tempfile.mkdtemp(prefix=f"toolcrib-lane-{namespace}-")
    names = ("calls", "answers", "permits", "permitted", "questions", "checked")
    pipes = {name: os.path.join(folder, name) for name in names}
    for path in pipes.values():
        os.mkfifo(path, 0o600)
    ends = {name: os.open(path, os.O_RDWR | os.O_NONBLOCK) for name, path in pipes.items()}
    lane = Lane(ends["answers"], ends["calls"], namespace)
    lane.checks = CheckLine(ends["checked"], ends["questions"], namespace)  # its checks, asked synchronously
    lane.permits_line = _Pipes(ends["permits"], ends["permitted"])
    tg.start_soon(lane.run)
    try:
        yield lane, {LANE_ENV: os.pathsep.join(pipes[name] for name in names[:4]),
                     CHECKS_ENV: f"{pipes['questions']}{os.pathsep}{pipes['checked']}"}, folder
    finally:
        lane.stop()
        with anyio.CancelScope(shield=True):  # (after a question still in flight, which ends within its time)
            await anyio.to_thread.run_sync(lane.checks.close)
        shutil.rmtree(folder, ignore_errors=True)


# -- the child's end ----------------------------------------------------------------------------------------------


class _ChildChannel:
    """What a call's ``Context`` reaches in the child: the host, over the lane. ``calling_agent`` is the agent the
    host calls for (the ``ctx.agent`` of the pack's handler), whose rules ``permits`` asks."""

    def __init__(self, serving: _Serving, number: int, agent: str | None) -> None:
        self._serving, self._number = serving, number
        self.calling_agent = agent

    def permits(self, dimension: str, name: str) -> bool:
        return self._serving.permits(self._number, dimension, name)

    async def remember(self, kind: str, compute: Callable[[], Any]) -> Any:
        answer = await self._serving.ask(self._number, "remember", [kind])
        if isinstance(answer, dict) and "stored" in answer:
            return answer["stored"]
        value = await compute()
        await self._serving.pipes.send({"ask": 0, "call": self._number, "what": "remembered", "args": [value]})
        return value

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        await self._serving.pipes.send({"ask": 0, "call": self._number, "what": "progress",
                                        "args": [progress, total, message]})

    async def log(self, level: str, message: str, logger: str | None) -> None:
        await self._serving.pipes.send({"ask": 0, "call": self._number, "what": "log",
                                        "args": [level, message, logger]})

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = await self._serving.ask(self._number, "elicit", [message, schema])
        return answer

    async def sample(self, request: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = await self._serving.ask(self._number, "sample", [request])
        return answer


class _Serving:
    def __init__(self, pipes: _Pipes, permits: tuple[int, int] | None = None) -> None:
        self.pipes = pipes
        self._asks = itertools.count(1)
        self._waiting: dict[int, MemoryObjectSendStream[dict[str, Any]]] = {}
        self.running: dict[int, anyio.CancelScope] = {}
        # (write end, read lines) of the permits pipes, blocking: asked from any thread, one question at a time
        self._permits = (permits[0], Lines(permits[1])) if permits is not None else None
        self._permits_asked = itertools.count(1)
        self._permits_lock = threading.Lock()

    def permits(self, number: int, dimension: str, name: str) -> bool:
        """The host's answer for call ``number``'s agent (False when the host cannot be asked)."""
        if self._permits is None:
            return False
        out, lines = self._permits
        with self._permits_lock:
            m = next(self._permits_asked)
            try:
                write_line(out, {"permits": m, "call": number, "dimension": str(dimension), "name": str(name)}, None)
                while True:
                    answer = lines.read(None)
                    if answer is not None and answer.get("permitted") == m:
                        return answer.get("value") is True
            except (OSError, ValueError, EOFError):
                return False

    async def ask(self, number: int, what: str, args: list[Any]) -> Any:
        ask = next(self._asks)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](1)
        self._waiting[ask] = send
        try:
            await self.pipes.send({"ask": ask, "call": number, "what": what, "args": args})
            async with receive:
                answer = await receive.receive()
        except anyio.EndOfStream:
            raise ToolError("the host went away") from None
        finally:
            del self._waiting[ask]
        if "error" in answer:
            raise ToolError(str(answer["error"]))
        return answer.get("value")

    def answered(self, message: dict[str, Any]) -> None:
        stream = self._waiting.get(message.get("answer"))  # type: ignore[arg-type]
        if stream is not None:
            with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
                stream.send_nowait(message)


async def serve_lane(view_of: Any, named: str) -> None:
    """The child's end (``named``: ``LANE_ENV``'s value): run each call the host sends through ``view_of()``'s
    pipeline, until the host closes the lane."""
    calls, answers, *asks = named.split(os.pathsep)
    pipes = _Pipes(os.open(calls, os.O_RDONLY | os.O_NONBLOCK), os.open(answers, os.O_WRONLY | os.O_NONBLOCK))
    permits = (os.open(asks[0], os.O_WRONLY), os.open(asks[1], os.O_RDONLY)) if len(asks) == 2 else None
    serving = _Serving(pipes, permits)

    async def run(number: int, tool: str, arguments: dict[str, Any], scope: anyio.CancelScope,
                  agent: str | None) -> None:
        with scope:  # cancelled by the host: no answer
            try:
                view: AgentView = view_of()
                result = await view.call(tool, arguments, channel=_ChildChannel(serving, number, agent))
                answer: dict[str, Any] = {"result": number, **result.to_wire()}
            except (ToolError, UnknownToolError) as exc:  # the host's view said it was there
                answer = {"result": number, "error": str(exc)}
            except Exception as exc:  # the pipeline turns a handler's failure into a result; this is the lane's
                log.exception("the call of %s failed", tool)
                answer = {"result": number, "error": f"{type(exc).__name__}: {exc}"}
            finally:
                serving.running.pop(number, None)
            with contextlib.suppress(LaneClosed):
                await pipes.send(answer)

    try:
        async with anyio.create_task_group() as tg:
            async for line in pipes.lines():
                message = _message(line)
                if "answer" in message:
                    serving.answered(message)
                elif "cancel" in message:
                    scope = serving.running.pop(message["cancel"], None)
                    if scope is not None:
                        scope.cancel()
                elif isinstance(message.get("call"), int) and isinstance(message.get("tool"), str):
                    scope = anyio.CancelScope()
                    serving.running[message["call"]] = scope
                    arguments, agent = message.get("arguments"), message.get("agent")
                    tg.start_soon(run, message["call"], message["tool"],
                                  arguments if isinstance(arguments, dict) else {}, scope,
                                  agent if isinstance(agent, str) else None)
            tg.cancel_scope.cancel()  # the host closed the lane: nothing is left to answer to
    except LaneClosed as exc:
        log.warning("the calls lane ended: %s", exc)
    finally:
        pipes.close()
        for fd in permits or ():
            with contextlib.suppress(OSError):
                os.close(fd)


__all__ = ["LANE_ENV", "Lane", "LaneClosed", "opened", "serve_lane"]
