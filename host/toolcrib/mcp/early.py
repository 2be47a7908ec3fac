"""``toolcrib serve --agent``: a 2026-07-28 client's first requests answered while the MCP SDK is still imported.

Importing the SDK is most of a stdio server's start (about three quarters of the low-level server's time to its
first tools/list). toolcrib's host, its view and its lists need none of it, so when the config has nothing that
does (no upstream MCP server, no isolated pack, no ``[cluster]``), ``serve`` builds the host first, starts
importing the SDK in a worker thread, and meanwhile answers what a starting client asks first and what is the same
for every client of the agent: ``server/discover`` and ``tools/list``. Each answer is byte for byte what the SDK's
server answers (tests/test_early.py holds them to it); anything else — another method, another protocol version,
a client whose envelope the SDK would look into, a line that is not plain JSON-RPC — ends this and waits for the
SDK, which then reads it and everything after it, in order, as it reads every request today.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from pydantic_core import from_json, to_json

from toolcrib import supply
from toolcrib._version import __version__
from toolcrib.config import LoadedConfig, load_config
from toolcrib.host import Host
from toolcrib.limits import LimitBook
from toolcrib.mcp.wire import Wire
from toolcrib.observe import log_request, request_span, requests_log, tracing
from toolcrib.view import AgentView

log = logging.getLogger("toolcrib.serve")

SERVING = "toolcrib.mcp.stdio"  # what serves stdio on the SDK: imported meanwhile, by name (it imports this module)

VERSION = "2026-07-28"
PROTOCOL_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
# W3C trace context, which the SDK's client puts in every request's _meta when it traces (an OpenTelemetry SDK set
# up in its process): the SDK's server reads it only to continue the trace, as the early answers do.
TRACE_KEYS = frozenset({"traceparent", "tracestate", "baggage"})

INSTRUCTIONS = ("Tools, resources and prompts served by toolcrib. Each tool and prompt is named "
                "<namespace>__<name>: its pack or server, then its name.")
# What every toolcrib server offers, on every transport (toolcrib.mcp.adapter registers a handler for each).
CAPABILITIES: dict[str, Any] = {"completions": {}, "logging": {}, "prompts": {"listChanged": True},
                                "resources": {"listChanged": True, "subscribe": True}, "tools": {"listChanged": True}}
# What 2026-07-28 requires of lists and reads: nothing may be cached (they change on reload, and per agent). For the
# handshake era the SDK sieves these keys off.
UNCACHED = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}

_INT64 = 1 << 63


def eligible(loaded: LoadedConfig) -> bool:
    """Whether the first host of ``loaded`` is built without the SDK: no upstream MCP server and no isolated pack
    (each is an SDK client), no ``[cluster]`` (its limits and sessions are opened with the serving state)."""
    return not loaded.config.mcps and not loaded.isolated_packs() and loaded.config.cluster is None


def announce_serving(agent: str, view: AgentView) -> None:
    """Say on stderr what is served (stdout is the wire)."""
    print(f"toolcrib: serving agent {agent!r} over stdio ({len(view)} tools, "
          f"{len(view.resources) + len(view.templates)} resources, {len(view.prompts)} prompts); an MCP client "
          "talks to it on stdin and stdout; stop it with Ctrl-C or by closing stdin (Ctrl-D)",
          file=sys.stderr, flush=True)


class Answer(NamedTuple):
    """An early answer: its line, and the request's method and ``_meta`` (for its log line and span)."""

    line: bytes
    method: str
    meta: dict[str, Any]


class EarlyAnswers:
    """The answers to ``server/discover`` and ``tools/list`` of one agent's view, encoded once."""

    def __init__(self, view: AgentView, version: str) -> None:
        stamp = {SERVER_INFO_META_KEY: {"name": "toolcrib", "version": version}}
        self._discover = to_json({"cacheScope": "private", "capabilities": CAPABILITIES, "instructions": INSTRUCTIONS,
                                  "resultType": "complete", "supportedVersions": [VERSION], "ttlMs": 0,
                                  "_meta": stamp})
        self._tools = to_json({"tools": view.listed_tools, **UNCACHED, "_meta": stamp})

    def answer(self, line: bytes | None) -> bytes | None:
        """The answer to ``line`` (a whole line of the wire), or None for a line the SDK must read."""
        found = self.answer_of(line)
        return found.line if found is not None else None

    def answer_of(self, line: bytes | None) -> Answer | None:
        """``answer``, with what the request was."""
        if line is None:  # a line over the cap: the transport answers it
            return None
        try:
            message = from_json(line)  # (the JSON parser the SDK's transport reads lines with)
        except ValueError:
            return None
        if type(message) is not dict or message.keys() != {"jsonrpc", "id", "method", "params"} \
                or message["jsonrpc"] != "2.0":
            return None
        request_id, params = message["id"], message["params"]
        if not (type(request_id) is str or (type(request_id) is int and -_INT64 <= request_id < _INT64)):
            return None
        if type(params) is not dict or params.keys() != {"_meta"}:
            return None
        meta = params["_meta"]
        if type(meta) is not dict or meta.get(PROTOCOL_KEY) != VERSION or CLIENT_CAPABILITIES_KEY not in meta:
            return None
        method = message["method"]
        if method == "tools/list":
            result = self._tools
        elif method == "server/discover" and _plain_envelope(meta):
            result = self._discover
        else:
            return None
        return Answer(b'{"jsonrpc":"2.0","id":' + to_json(request_id) + b',"result":' + result + b"}\n", method, meta)


def _plain_envelope(meta: dict[str, Any]) -> bool:
    """An envelope the SDK's ``server/discover`` accepts without a doubt: its three keys only (and a trace
    context of strings), client info of strings, and capabilities that are empty objects (``roots`` may say
    ``listChanged``)."""
    if not meta.keys() <= _ENVELOPE_KEYS or not all(type(meta[key]) is str for key in TRACE_KEYS & meta.keys()):
        return False
    if CLIENT_INFO_KEY in meta:
        info = meta[CLIENT_INFO_KEY]
        if type(info) is not dict or not {"name", "version"} <= info.keys() <= {"name", "version", "title"} \
                or not all(type(value) is str for value in info.values()):
            return False
    capabilities = meta[CLIENT_CAPABILITIES_KEY]
    return type(capabilities) is dict and all(
        value == {} or (key == "roots" and type(value) is dict and value.keys() == {"listChanged"}
                        and type(value["listChanged"]) is bool)
        for key, value in capabilities.items())


_ENVELOPE_KEYS = frozenset({PROTOCOL_KEY, CLIENT_INFO_KEY, CLIENT_CAPABILITIES_KEY, *TRACE_KEYS})


async def answer_early(wire: Wire, answers: EarlyAnswers, ready: anyio.Event,
                       observe: Observer | None = None) -> int:
    """Answer the wire's lines with ``answers`` until one needs the SDK (kept in ``wire.pending``, for the
    transport to read first), the input ends, or ``ready`` is set; return how many were answered. ``observe`` is
    told of each answer once it is written (``observer``)."""
    answered = 0
    with anyio.CancelScope() as scope:
        async def stop() -> None:
            await ready.wait()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop)
            try:
                while True:
                    line = await wire.lines.receive()  # (cancelled here, a line is never lost)
                    started, started_ns = time.perf_counter(), time.time_ns()
                    answer = answers.answer_of(line)
                    if answer is None:
                        wire.pending.append(line)
                        break
                    with anyio.CancelScope(shield=True):
                        await wire.write(answer.line)
                    answered += 1
                    if observe is not None:
                        observe(answer, started, started_ns)
            except anyio.EndOfStream:
                pass  # (the transport reads the end of input too: the stream stays ended)
            tg.cancel_scope.cancel()
    return answered


Observer = Callable[[Answer, float, int], None]  # an answer, when its line was read (perf_counter, time_ns)


def observer(agent: str) -> Observer | None:
    """What leaves an early answer's request line and span, as the SDK's path leaves them
    (``toolcrib.mcp.adapter``'s observer); None when neither is on. Asked before the SDK's import starts on
    another thread: asking imports OpenTelemetry's API, which that import imports too, and two threads importing
    the same modules at once wait on each other's module locks (or fail, on an import cycle)."""
    traced = tracing()
    if not traced:
        if not requests_log.isEnabledFor(logging.INFO):
            return None
        return lambda answer, started, _started_ns: log_request(agent, answer.method, None, "ok", started, None)
    from opentelemetry import trace
    from opentelemetry.propagate import extract  # noqa: F401  (what reads a trace context: on this thread too)
    from opentelemetry.trace import SpanKind

    tracer = trace.get_tracer("toolcrib")

    def observe(answer: Answer, started: float, started_ns: int) -> None:
        log_request(agent, answer.method, None, "ok", started, None)
        name, parent, attributes = request_span(agent, answer.method, None, answer.meta)
        span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes,
                                 start_time=started_ns)
        span.set_attribute("toolcrib.outcome", "ok")
        span.end()

    return observe


@dataclass
class Started:
    """What ``start_early`` leaves for serving: the wire (read by a task of the caller's, with the line that ended
    the early answers pending) and the first host with its limits' book."""

    wire: Wire
    first: tuple[Host, LimitBook]


SWITCH_INTERVAL = 0.0005  # seconds: how long the importing thread may keep the GIL from the answering one


@contextmanager
def switching_often() -> Iterator[None]:
    """Python's thread switch interval (5 ms) made ``SWITCH_INTERVAL`` for the block, then put back. The thread
    that imports the SDK holds the GIL between switches; the event loop, woken by a request or by room in a full
    pipe, waits for it up to an interval each time: 5 ms more for each early answer, and for each 64 KiB of a long
    list (0.17 s of a list of 10,000 tools)."""
    interval = sys.getswitchinterval()
    if interval <= SWITCH_INTERVAL:  # a process that switches as often already is left as it is
        yield
        return
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


async def start_early(path: Path | None, agent: str, stdin: BinaryIO, stdout: BinaryIO,
                      reading: TaskGroup) -> Started | None:
    """Build the host of the config at ``path`` and serve ``agent``'s first requests while the SDK is imported;
    None (nothing built, nothing read) when the config needs the SDK to build its host. The wire is read by a task
    started in ``reading``, which the caller cancels (and then closes the wire) when serving ends."""
    loaded = await anyio.to_thread.run_sync(load_config, path)
    if not eligible(loaded):
        return None
    book = LimitBook()

    def made() -> Host:
        host = Host(loaded, sources=supply.opened(loaded), limits=book)
        if agent in host.rules:  # (as toolcrib.mcp.state.build_lists builds the served agent's lists)
            host.view(agent).prepare()
        return host

    host = await anyio.to_thread.run_sync(made)
    view = host.view(agent)  # an unknown agent fails here, before any protocol
    wire = Wire(stdin, stdout)
    reading.start_soon(wire.read)
    answers = EarlyAnswers(view, __version__)
    observe = observer(agent)
    ready = anyio.Event()
    answered: list[int] = []

    async def answering() -> None:
        answered.append(await answer_early(wire, answers, ready, observe))

    async with anyio.create_task_group() as tg:
        tg.start_soon(answering)
        with switching_often():
            await anyio.to_thread.run_sync(importlib.import_module, SERVING)
        ready.set()
        announce_serving(agent, view)  # (after the first answers: counting resources decides them)
    log.debug("answered %d requests while the MCP SDK was imported", answered[0])
    return Started(wire, (host, book))

