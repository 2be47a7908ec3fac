"""The checks line of an isolated pack: its availability checks and ``describe`` run for the calling agent.

An isolated pack's process serves one agent of its own (``toolcrib.supply.mcp.isolated``), so a check evaluated there
would see that agent, not the one whose view the host builds. Instead the child lists every tool, resource and prompt of
its pack unchecked (``defer_checks``), and the host asks the child, for each agent's view, what the pack's own
``is_available`` and ``describe`` answer for that agent. The host asks from the thread that builds a view (the
availability checks' worker thread, or a view's own for ``describe``), so this line is synchronous: a pair of named
pipes beside the calls lane, one question at a time, each within ``[host] availability_timeout``.

Lines, host to child: ``{"ask": n, "what": "inventory"}``; ``{"ask": n, "what": "is_available" | "describe",
"kind": "tool" | "resource" | "prompt", "key": name or URI, "context": {...}}``; ``{"permitted": m, "value": bool}``.
Child to host: ``{"answer": n, "value": ...}`` (``"unconfinable": true`` with a reason that is one), ``{"answer":
n, "raised": type name, "message": text}``; ``{"permits": m, "ask": n, "dimension": d, "name": x}`` (a check's
``ctx.permits``, which the host answers from the agent's rules while it waits).

The child is not trusted: what it answers is checked for type, a line is at most ``MAX_LINE_BYTES``, an answer to a
question no longer asked is dropped, and one that does not come in time fails the check closed (the tool hidden).
A check that hangs in the child holds its thread there; later questions wait behind it and time out the same way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolcrib.context import AvailabilityContext

log = logging.getLogger("toolcrib.checks")

CHECKS_ENV = "TOOLCRIB_CHECKS"  # set for an isolated pack's process: "<questions pipe>:<answers pipe>", its end
MAX_LINE_BYTES = 1024 * 1024
OVERTIME = 0.5  # seconds a question waits past the availability budget
KINDS = ("tool", "resource", "prompt")


class CheckFailed(Exception):
    """What the child's check raised, or why it gave no answer: an instance of a subclass named as the exception
    was there (``ValueError``), so that the host reports it as it reports a check of its own."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_RAISED: dict[str, type[CheckFailed]] = {}


def _raised(kind: str, message: str) -> CheckFailed:
    kind = kind if kind.isidentifier() and len(kind) <= 100 else "CheckFailed"
    if kind not in _RAISED and len(_RAISED) < 1000:
        _RAISED[kind] = type(kind, (CheckFailed,), {"__module__": "toolcrib.isolated"})
    return _RAISED.get(kind, CheckFailed)(kind, message)


@dataclasses.dataclass(frozen=True)
class _Returned:
    """What a check returned that is neither a bool nor a str, as the child wrote it (hidden, as in process)."""

    text: str

    def __repr__(self) -> str:
        return self.text


class Lines:
    """JSON lines from one pipe end, read with a deadline (``None``: wait as long as it takes), from any thread;
    ``write_line`` is their other half."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def read(self, deadline: float | None) -> dict[str, Any] | None:
        """The next line as a JSON object; None at the deadline. A line that is not one, or too long, is
        ``ValueError``; the other end gone is ``EOFError``."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
                try:
                    message = json.loads(line)
                except RecursionError:
                    raise ValueError("a line nested too deeply to be read") from None
                if not isinstance(message, dict):
                    raise ValueError("a line that is not a JSON object")
                return message
            if len(self._buffer) > MAX_LINE_BYTES:
                self._buffer = b""
                raise ValueError(f"a line longer than {MAX_LINE_BYTES} bytes")
            if not _ready(self.fd, select.POLLIN, deadline):
                return None
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError("the other end closed")
            self._buffer += chunk


def _ready(fd: int, event: int, deadline: float | None) -> bool:
    """Whether ``fd`` is ready for ``event`` (``select.POLLIN`` or ``POLLOUT``) by the deadline (poll, not select:
    a serving host's descriptors run past select's 1024)."""
    poller = select.poll()
    poller.register(fd, event)
    wait = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
    return bool(poller.poll(wait))


def write_line(fd: int, message: dict[str, Any], deadline: float | None) -> bool:
    """Write one line whole; False if the pipe had no room for it by the deadline."""
    data = memoryview(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    while data:
        if not _ready(fd, select.POLLOUT, deadline):
            return False
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            continue
    return True


def context_of(ctx: AvailabilityContext) -> dict[str, Any]:
    """What crosses of an availability context (the pack's settings are the child's own; ``permits`` is asked)."""
    return {"agent": ctx.agent, "model": ctx.model, "capabilities": sorted(ctx.capabilities), "mode": ctx.mode,
            "workspace": str(ctx.workspace) if ctx.workspace is not None else None}


# -- the host's end -----------------------------------------------------------------------------------------------


class CheckLine:
    """The host's end: ``line.ask(...)`` from any thread, one question at a time."""

    def __init__(self, read_fd: int, write_fd: int, namespace: str) -> None:
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._lines, self._write_fd = Lines(read_fd), write_fd
        self._fds: tuple[int, ...] = (read_fd, write_fd)
        self.namespace = namespace
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """Close both ends, once no question is in flight (a number closed under a waiting thread could be
        another file's by the time it reads)."""
        with self._lock:
            self.closed = True
            fds, self._fds = self._fds, ()
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def ask(self, question: dict[str, Any], seconds: float,
            permits: Callable[[str, str], bool] | None = None) -> Any:
        """The child's answer to ``question`` (``CheckFailed`` for what it raised, or no answer in ``seconds``)."""
        deadline = time.monotonic() + seconds
        if not self._lock.acquire(timeout=seconds):
            raise _raised("TimeoutError", f"isolated pack {self.namespace!r} is still answering an earlier "
                                          f"question after {seconds:g} seconds")
        try:
            if self.closed:
                raise _raised("ProcessEnded", f"isolated pack {self.namespace!r}: its process ended")
            number = next(self._numbers)
            if not write_line(self._write_fd, {"ask": number, **question}, deadline):
                raise _raised("TimeoutError", f"isolated pack {self.namespace!r} takes no question")
            while True:
                try:
                    message = self._lines.read(deadline)
                except (ValueError, EOFError) as exc:
                    raise _raised("BrokenLine", f"isolated pack {self.namespace!r} answered out of turn: "
                                                f"{exc}") from None
                if message is None:
                    raise _raised("TimeoutError", f"isolated pack {self.namespace!r} gave no answer within "
                                                  f"{seconds:g} seconds")
                if message.get("answer") == number:
                    if "raised" in message:
                        raise _raised(str(message["raised"]), str(message.get("message", ""))[:1000])
                    return message
                if "permits" in message and message.get("ask") == number:
                    dimension, name = message.get("dimension"), message.get("name")
                    value = (permits is not None and isinstance(dimension, str) and isinstance(name, str)
                             and permits(dimension, name))
                    write_line(self._write_fd, {"permitted": message["permits"], "value": bool(value)}, deadline)
                # else: an answer to a question that timed out, or noise: dropped
        finally:
            self._lock.release()

    def inventory(self, seconds: float) -> dict[str, dict[str, list[str]]]:
        """Which of the child's tools, resources and prompts have an ``is_available`` or a ``describe``, by kind and
        by the name (a resource: the URI) it lists them under. Nothing when it cannot say."""
        try:
            value = self.ask({"what": "inventory"}, seconds).get("value")
        except CheckFailed as exc:
            log.warning("isolated pack %r: its checks could not be listed: %s", self.namespace, exc)
            return {}
        found: dict[str, dict[str, list[str]]] = {}
        for kind in KINDS:
            items = value.get(kind) if isinstance(value, dict) else None
            if isinstance(items, dict):
                found[kind] = {k: [w for w in v if w in ("is_available", "describe")] for k, v in items.items()
                               if isinstance(k, str) and isinstance(v, list)}
        return found


def remote_check(line_of: Callable[[], CheckLine | None], kind: str, key: str,
                 seconds: Callable[[], float]) -> Callable[[AvailabilityContext], Any]:
    """An ``is_available`` that asks the isolated pack's own check (through whichever line its process has now)."""
    from toolcrib.sandbox import Unconfinable

    def is_available(ctx: AvailabilityContext) -> Any:
        line = line_of()
        if line is None:
            raise _raised("ProcessEnded", "the isolated pack's process is not running")
        # a little past the host's own budget for the check, which then speaks for a check that hangs, in the
        # same words as for one in process
        answer = line.ask({"what": "is_available", "kind": kind, "key": key, "context": context_of(ctx)},
                          seconds() + OVERTIME, ctx.permits)
        value = answer.get("value")
        if answer.get("unexpected") is True or not isinstance(value, bool | str):
            return _Returned(str(value)[:200])  # (hidden, as in process: "is_available returned ...")
        return Unconfinable(value) if isinstance(value, str) and answer.get("unconfinable") is True else value

    is_available.__qualname__ = f"isolated {kind} {key}: is_available"
    return is_available


def remote_describe(line_of: Callable[[], CheckLine | None], key: str, listed: str,
                    seconds: Callable[[], float]) -> Callable[[AvailabilityContext], str]:
    """A ``describe`` that asks the isolated pack's own; what it listed when it cannot answer."""

    def describe(ctx: AvailabilityContext) -> str:
        line = line_of()
        try:
            if line is None:
                raise _raised("ProcessEnded", "the isolated pack's process is not running")
            value = line.ask({"what": "describe", "kind": "tool", "key": key, "context": context_of(ctx)},
                             seconds(), ctx.permits).get("value")
        except CheckFailed as exc:
            log.warning("describe of isolated tool %s for agent %r failed (%s: %s); its listed description is "
                        "served", key, ctx.agent, exc.kind, exc)
            return listed
        return value if isinstance(value, str) and value.strip() else listed

    return describe


# -- the child's end ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Deferred:
    """What the child's pack declared and its own view does not run: by kind and listed name, the definition (its
    ``is_available`` and ``describe``) and the pack's settings."""

    items: dict[tuple[str, str], tuple[Any, Any]] = dataclasses.field(default_factory=dict)

    def inventory(self) -> dict[str, dict[str, list[str]]]:
        found: dict[str, dict[str, list[str]]] = {kind: {} for kind in KINDS}
        for (kind, key), (definition, _) in self.items.items():
            found[kind][key] = [w for w in ("is_available", "describe") if getattr(definition, w, None) is not None]
        return found


def defer_checks(host: Any, agent: str) -> Deferred:
    """In an isolated pack's process: take the checks off the entries of ``host``'s catalog (so its one agent lists
    everything) and keep them, by the names ``agent``'s view lists them under, for the host to ask."""
    deferred = Deferred()
    originals: dict[int, tuple[Any, Any]] = {}
    catalog = host.catalog
    for table in (catalog.entries, catalog.resources, catalog.prompts):
        for name, entry in list(table.items()):
            definition = entry.definition
            if definition.is_available is None and getattr(definition, "describe", None) is None:
                continue
            stripped = {"is_available": None, **({"describe": None} if hasattr(definition, "describe") else {})}
            table[name] = dataclasses.replace(entry, definition=dataclasses.replace(definition, **stripped))
            originals[id(table[name].definition)] = (definition, entry.settings)
    host.forget_views()
    view = host.view(agent)
    listed: list[tuple[str, str, Any]] = [("tool", vt.served or vt.entry.name, vt.entry) for vt in view.tools]
    listed += [("resource", entry.uri, entry) for entry in (*view.resources, *view.templates)]
    listed += [("prompt", view.served_prompts[entry.name], entry) for entry in view.prompts]
    for kind, key, entry in listed:
        original = originals.get(id(entry.definition))
        if original is not None:
            deferred.items[(kind, key)] = original
    return deferred


def follow_checks(state: Any, agent: str) -> Deferred:
    """``defer_checks`` on ``state``'s host now, and again on each host a reload makes."""
    deferred = defer_checks(state.host, agent)

    async def again() -> None:
        deferred.items = defer_checks(state.host, agent).items

    state.on_reload.insert(0, again)
    return deferred


def serve_checks(deferred: Deferred, named: str) -> threading.Thread:
    """The child's end (``named``: "<questions pipe>:<answers pipe>"): a thread that answers the host's questions
    with the pack's own checks, until the host closes the line."""
    questions, answers = named.split(os.pathsep)
    lines = Lines(os.open(questions, os.O_RDONLY))
    out = os.open(answers, os.O_WRONLY)
    waiting: collections.deque[dict[str, Any]] = collections.deque()  # questions read while a check asked

    def permits_for(number: int) -> Callable[[str, str], bool]:
        asked = itertools.count(1)

        def permits(dimension: str, name: str) -> bool:
            m = next(asked)
            write_line(out, {"permits": m, "ask": number, "dimension": str(dimension), "name": str(name)}, None)
            while True:
                message = lines.read(None)
                if message is None:
                    continue
                if message.get("permitted") == m:
                    return message.get("value") is True
                if "ask" in message:
                    waiting.append(message)  # the host gave up on this one and asks anew: after it

        return permits

    def answer(message: dict[str, Any]) -> dict[str, Any]:
        number, what = message.get("ask"), message.get("what")
        if what == "inventory":
            return {"answer": number, "value": deferred.inventory()}
        found = deferred.items.get((str(message.get("kind")), str(message.get("key"))))
        check = getattr(found[0], str(what), None) if found is not None and what in ("is_available", "describe") \
            else None
        given = message.get("context")
        if check is None or not isinstance(given, dict) or not isinstance(number, int):
            return {"answer": number, "raised": "LookupError", "message": f"no {what} for {message.get('key')!r}"}
        ctx = AvailabilityContext(
            agent=str(given.get("agent")), model=given.get("model") if isinstance(given.get("model"), str) else None,
            capabilities=frozenset(c for c in given.get("capabilities") or () if isinstance(c, str))
            if isinstance(given.get("capabilities"), list) else frozenset(),
            settings=found[1], mode=str(given.get("mode") or "default"),  # type: ignore[index]
            workspace=Path(given["workspace"]) if isinstance(given.get("workspace"), str) else None,
            _permits=permits_for(number))
        try:
            value = check(ctx)
        except BaseException as exc:  # SystemExit included: the thread answers, and goes on
            return {"answer": number, "raised": type(exc).__name__, "message": str(exc)}
        from toolcrib.sandbox import Unconfinable

        if not isinstance(value, bool | str):
            return {"answer": number, "value": repr(value)[:200], "unexpected": True}
        return {"answer": number, "value": value, **({"unconfinable": True} if isinstance(value, Unconfinable)
                                                     else {})}

    def run() -> None:
        try:
            while True:
                message = waiting.popleft() if waiting else lines.read(None)
                if message is not None and "ask" in message:
                    write_line(out, answer(message), None)
        except (EOFError, ValueError, OSError) as exc:
            log.warning("the checks line ended: %s", exc)

    thread = threading.Thread(target=run, name="toolcrib-checks", daemon=True)
    thread.start()
    return thread


__all__ = ["CHECKS_ENV", "CheckFailed", "CheckLine", "Deferred", "Lines", "defer_checks", "follow_checks",
           "remote_check", "remote_describe", "serve_checks", "write_line"]
