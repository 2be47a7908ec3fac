"""One call's state (``Call``) and how a tool's handler is run (``Runner``).

The pipeline (``toolcrib.calls``) knows no calling convention: it validates the arguments, then asks the tool's
runner to ``start`` the call with the validated model and the ``Call``. A runner answers with a coroutine, which
the pipeline awaits on the event loop under the call's timeout, or a function of no arguments, which it runs in one
of its worker threads (``is_async`` says which the handler is; a sync handler declared ``inline`` answers a
coroutine that runs it on the loop, ``InlineGuard``). How a Python function takes its arguments
(``PythonRunner``), how an upstream server's tool is called (``toolcrib.supply.mcp``) or an HTTP operation
(``toolcrib.supply.openapi``), lives with the source that made the tool. A new kind of source brings its own
runner::

    class EchoRunner:
        is_async = True

        def start(self, model, call):
            return self.echo(model.__pydantic_extra__ or {}, call.agent)

        async def echo(self, arguments, agent):
            return f"{agent} said {arguments}"
"""

from __future__ import annotations

import functools
import logging
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel

from toolcrib.context import Approver, ClientChannel, Context, held_messages

if TYPE_CHECKING:
    from toolcrib.entries import Entry
    from toolcrib.limits import Lease
    from toolcrib.view import AgentView, ViewTool


class Runner(Protocol):
    """How a tool's handler is run, and a resource's or a prompt's (``model`` is then its validated parameters or
    arguments, and ``call.name`` the resource's URI). ``start`` returns a coroutine (``is_async``: an async
    handler's), else a function of no arguments for a worker thread; it must not block (a sync handler's work
    belongs in the function it returns)."""

    @property
    def is_async(self) -> bool: ...

    def start(self, model: BaseModel, call: Call) -> Any: ...


class Call:
    """One call by one agent, from the moment its name is resolved to its audit record: what every step of the
    pipeline, the hooks, the limits and the audit need to know about it. A resource read or a prompt (``kind``)
    is a call too, for the audit; only a tool's call has ``tool``.

    A plain class: one is made for every call; what a call acquires later (its lease, its context) starts as the
    class's default, so making one costs only what it is given."""

    channel: ClientChannel | None = None
    approver: Approver | None = None
    started: float = 0.0  # time.perf_counter() when something times the call
    id: str = ""  # "call_<host><n>" where a hook or the audit reads it
    kind: str = "tool"  # "tool" | "resource" | "prompt"
    tool: ViewTool | None = None
    entry: Entry | None = None  # a resource's or prompt's entry (a tool's is its ViewTool's)
    workspace: Path | None = None
    lease: Lease | None = None  # its places in the agent's limits, while it holds them
    notes: dict[str, Any] | None = None  # what the tool added to its audit record (``Context.note``)
    feed_key: int = 0  # its key in a watching feed (the console's "Running now"), where one watches
    _context: Context | None = None

    def __init__(self, view: AgentView, name: str, arguments: Any, channel: ClientChannel | None = None,
                 approver: Approver | None = None, started: float = 0.0, id: str = "", kind: str = "tool",
                 tool: ViewTool | None = None, workspace: Path | None = None, entry: Entry | None = None) -> None:
        self.view = view
        self.name = name  # the tool's full name (a resource's URI, a prompt's name)
        self.arguments = arguments  # as sent, then as curation left them, then as validated (JSON), for the audit
        self.channel = channel
        self.approver = approver
        self.started = started
        self.id = id
        self.kind = kind
        self.tool = tool
        self.workspace = workspace
        if entry is not None:
            self.entry = entry

    def __repr__(self) -> str:
        return f"<Call {self.kind} {self.name!r} by {self.view.agent!r}{' ' + self.id if self.id else ''}>"

    @property
    def agent(self) -> str:
        return self.view.agent

    @property
    def identity(self) -> Any:
        """Who is calling, as the audit log records it (``toolcrib.mcp.oauth.Identity.record``), or None."""
        return getattr(self.channel, "identity", None) if self.channel is not None else None

    @property
    def principal(self) -> Any:
        """Who is calling, as the front end authenticated them (``toolcrib.mcp.oauth.Identity``), or None."""
        return getattr(self.channel, "principal", None) if self.channel is not None else None

    def context(self) -> Context:
        """The ``toolcrib.Context`` of this call (one per call, made when a handler first asks for it)."""
        if self._context is None:
            entry = self.tool.entry if self.tool is not None else self.entry
            assert entry is not None and self.workspace is not None
            agent = getattr(self.channel, "calling_agent", None) or self.view.agent  # (an isolated pack's caller)
            self._context = Context(agent=agent, tool=entry.name, settings=entry.settings,
                                    workspace=self.workspace,
                                    logger=pack_logger(entry.namespace),
                                    _channel=self.channel, _view=self.view, _approver=self.approver,
                                    _rules=self.tool.call_rules if self.tool is not None else None, _call=self)
        return self._context

    def cancel(self) -> None:
        """The call ended without its handler (a timeout, the client gave up): a handler still running in its
        worker thread sees ``ctx.cancelled``."""
        if self._context is not None:
            self._context._cancelled = True


@functools.lru_cache(maxsize=1024)
def pack_logger(namespace: str) -> logging.Logger:
    """The logger of a pack's (or a source's) handlers, ``toolcrib.pack.<namespace>``: what ``logging.getLogger``
    answers, remembered (it takes logging's lock on every call: half a microsecond of each call's Context)."""
    return logging.getLogger(f"toolcrib.pack.{namespace}")


Convention = Literal["keywords", "model", "dict"]


# The guard of a sync handler declared ``inline`` (``InlineGuard``): a run that holds the event loop longer than
# INLINE_SECONDS, by its own CPU time or by waiting (sleep, I/O, a lock), sends the handler's next INLINE_COOLDOWN
# calls to worker threads, then it is tried on the loop again. The bound is the interpreter's switch interval
# (sys.getswitchinterval()): as long as a handler in a worker thread may hold the GIL, and so the loop, anyway. Wall
# time alone would also count the time a busy machine gives other processes, so a run over the bound is only a
# suspect: the handler's next run on the loop is measured by the thread's own clock (getrusage), and the guard trips
# when that run was over the bound too and spent it computing or waiting, not preempted. A run past
# INLINE_WAIT_SECONDS trips it at once, whatever held it.
INLINE_SECONDS = 0.005
INLINE_WAIT_SECONDS = 0.1
INLINE_COOLDOWN = 100

log = logging.getLogger("toolcrib.runner")


class InlineGuard:
    """Where a sync handler declared ``inline`` runs, call by call: on the event loop (``start`` answers a coroutine
    that runs it there at once), or in a worker thread while the guard holds it off the loop (``start`` answers the
    function). What it asks of its client on the loop is sent once it returns, in order."""

    __slots__ = ("_left", "_suspect", "_warned")

    def __init__(self) -> None:
        self._left = 0  # calls left in worker threads
        self._suspect = False  # the last run was over the bound by wall time: the next one is measured
        self._warned = False  # (a warning the first time it trips; debug after)

    def start(self, work: Callable[[], Any], call: Call) -> Any:
        if self._left:
            self._left -= 1
            return work
        return self._on_loop(work, call)

    async def _on_loop(self, work: Callable[[], Any], call: Call) -> Any:
        held: list[Awaitable[None]] = []
        release = held_messages(call._context, held)
        measured = resource.getrusage(resource.RUSAGE_THREAD) if self._suspect else None
        started = perf_counter()
        try:
            return work()
        finally:
            took = perf_counter() - started
            release()
            if took > INLINE_SECONDS or measured is not None:
                self._judge(call.name, took, measured)
            for message in held:
                await message

    def _judge(self, name: str, took: float, measured: resource.struct_rusage | None) -> None:
        """A run held the loop ``took`` seconds (``measured``: the thread's usage before it, for a suspect's run):
        trip, suspect the next run, or clear the suspicion."""
        if took <= INLINE_SECONDS:
            self._suspect = False
            return
        if took <= INLINE_WAIT_SECONDS:
            if measured is None:
                self._suspect = True
                return
            now = resource.getrusage(resource.RUSAGE_THREAD)
            cpu = now.ru_utime + now.ru_stime - measured.ru_utime - measured.ru_stime
            if cpu <= INLINE_SECONDS and now.ru_nvcsw == measured.ru_nvcsw:
                self._suspect = False  # it was preempted (a busy machine), not slow
                return
        self._suspect = False
        self._left = INLINE_COOLDOWN
        log.log(logging.DEBUG if self._warned else logging.WARNING,
                "%s runs inline and held the event loop for %.1f ms (more than %g ms): its next %d calls run in "
                "worker threads", name, took * 1000, INLINE_SECONDS * 1000, INLINE_COOLDOWN)
        self._warned = True


@dataclass(frozen=True, slots=True)
class PythonRunner:
    """A Python function as a tool's handler. ``convention`` says how it takes the arguments: as keyword arguments
    (a decorated function), as the validated model (the explicit form), or as a dict (a JSON Schema tool);
    ``context_param`` names the parameter that gets the ``toolcrib.Context``, if any. A sync handler its author
    declared quick (``inline``) runs on the event loop rather than in a worker thread, under its guard."""

    handler: Callable[..., Any]
    is_async: bool = False
    convention: Convention = "keywords"
    context_param: str | None = None
    inline: bool = False
    guard: InlineGuard | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.inline and self.guard is None:
            object.__setattr__(self, "guard", InlineGuard())

    def start(self, model: BaseModel, call: Call) -> Any:
        if self.context_param is None and self.convention == "keywords":  # the common case, first
            if self.is_async:
                return self.handler(**model.__dict__)
            work = functools.partial(self.handler, **model.__dict__)
        else:
            args: tuple[Any, ...] = ()
            if self.convention == "keywords":  # with a Context parameter (the case without came first)
                kwargs: dict[str, Any] = dict(model.__dict__)
            else:
                args = (model,) if self.convention == "model" else (dict(model.__pydantic_extra__ or {}),)
                kwargs = {}
            if self.context_param is not None:
                kwargs[self.context_param] = call.context()
            if self.is_async:
                return self.handler(*args, **kwargs)
            work = functools.partial(self.handler, *args, **kwargs)
        return work if self.guard is None else self.guard.start(work, call)


__all__ = ["INLINE_COOLDOWN", "INLINE_SECONDS", "INLINE_WAIT_SECONDS", "Call", "Convention", "InlineGuard",
           "PythonRunner", "Runner"]
