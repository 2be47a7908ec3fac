"""Upstream MCP servers (``[mcps.<namespace>]``): sources whose tools appear as ``<namespace>__<tool>``.

Each server is connected by a task of its own (the SDK's client holds a task group for the life of the
connection), listed once, and kept open; its tools become catalog entries like a pack's, filtered by the ``mcps``
and ``tools`` rules, and its resources, resource templates and prompts pass through the same way (``resources``
and ``prompts`` rules), every text cleaned as a tool's is. Their annotations are untrusted unless the operator
marks the server ``trusted = true``.
A server that cannot be started or does not answer within its ``timeout`` is reported as failed; the others are
unaffected. ``UpstreamPool.sync`` keeps connections whose config did not change across reloads.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, create_model

from toolcrib.config import LoadedConfig, McpConfig, MissingVariable
from toolcrib.config import expand as expand_variables
from toolcrib.content import ToolResult
from toolcrib.declarations import Prompt, Resource, template_variables
from toolcrib.entries import Entry
from toolcrib.errors import InvalidArgumentsError, Suspend, ToolError
from toolcrib.mcp.checks import CheckLine, remote_check, remote_describe
from toolcrib.mcp.lane import Lane, LaneClosed, opened
from toolcrib.names import clean, clean_schema, full_name, serving_names
from toolcrib.plugins import PluginRecord
from toolcrib.runner import Call
from toolcrib.sources import Offer
from toolcrib.tool import ANNOTATION_KEYS, Tool

log = logging.getLogger("toolcrib.upstream")

# Arguments go to the upstream server as they are (after the pipeline's size and shape checks); it validates them.
_ANY_ARGUMENTS: type[BaseModel] = create_model("upstream_arguments", __config__=ConfigDict(extra="allow"))


@dataclass
class _Connection:
    namespace: str
    config: McpConfig
    key: str
    client: Any = None
    tools: list[Any] = field(default_factory=list)
    error: str | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    entries: list[Entry] = field(default_factory=list)
    curated_by: LoadedConfig | None = None  # the config ``entries`` were curated by (a lazy server's)
    resources: list[Any] = field(default_factory=list)
    templates: list[Any] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)
    listing_problems: list[str] = field(default_factory=list)
    stale: bool = False  # the server said its lists changed: list them again at the next sync
    held: frozenset[str] = frozenset()  # a lazy server's tools the lock holds back (``UpstreamPool.load``)
    pack: bool = False  # an isolated pack (toolcrib.isolation): its entries are the pack's, under "plugins"
    since: float = 0.0  # time.monotonic() when it was ready
    lane: Lane | None = None  # an isolated pack's calls lane
    # an isolated pack's: which of its items have their own is_available or describe (kind -> listed name -> what),
    # asked of its process for each agent (toolcrib.mcp.checks), each within check_seconds
    checks: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    check_seconds: float = 5.0

    @property
    def what(self) -> str:
        """What it is called in messages."""
        return "isolated pack" if self.pack else "upstream server"

    def check_line(self) -> CheckLine | None:
        """The checks line of its process while it runs (an isolated pack's)."""
        lane = self.lane
        return lane.checks if lane is not None and lane.closed is None else None

    def own_check(self, kind: str, key: str) -> Any:
        """The ``is_available`` of an isolated pack's item that has one: its process asked, for each agent."""
        if "is_available" not in self.checks.get(kind, {}).get(key, ()):
            return None
        return remote_check(self.check_line, kind, key, lambda: self.check_seconds)


_LIST_CHANGED = {"ToolListChangedNotification", "PromptListChangedNotification", "ResourceListChangedNotification"}


MAX_PAGES = 100  # of one list from one server: a server that pages on forever is cut off there
LISTEN_ACK_SECONDS = 5.0  # a connection waits this long for its listen stream's acknowledgment before it serves
RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # seconds before a dead server is started again, while it
STEADY_SECONDS = 60.0  # keeps dying within this long of a start (one that served longer starts over at the first)


async def _every(fetch: Any, key: str) -> list[Any]:
    """All pages of a paginated list (``fetch(cursor=...)``), up to ``MAX_PAGES``."""
    found: list[Any] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor=cursor)
        found.extend(getattr(page, key))
        cursor = page.next_cursor
        if not cursor:
            break
    return found


def _servers(loaded: LoadedConfig) -> dict[str, McpConfig]:
    """The config's upstream servers and its isolated packs, each as the stdio server it is started as."""
    servers = dict(loaded.config.mcps)
    if loaded.isolated_packs():
        from toolcrib.isolation import server_config

        servers |= {ns: server_config(loaded, ns) for ns in sorted(loaded.isolated_packs())}
    return servers


def _key(config: McpConfig) -> str:
    return json.dumps(config.model_dump(), sort_keys=True)


def _target(loaded: LoadedConfig, config: McpConfig) -> Any:
    """How to reach the server: ``StdioServerParameters``, or ``(url, headers)``. Values of ``env`` and ``headers``
    may name the host's environment variables, ``${NAME}`` (a secret stays out of the config file)."""
    if config.url is not None:
        return config.url, {k: expand(v, f"headers.{k}") for k, v in config.headers.items()}
    from mcp import StdioServerParameters

    cwd = str(loaded.resolve(config.cwd)) if config.cwd else None
    env = {k: expand(v, f"env.{k}") for k, v in config.env.items()}
    if config.confine:
        from toolcrib.confinement import launcher

        command, args, env = launcher(loaded, config, env)
        return StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    return StdioServerParameters(command=config.command or "", args=config.args, env=env or None, cwd=cwd)


def expand(value: str, where: str, env: Mapping[str, str] | None = None) -> str:
    """``toolcrib.config.expand``: a missing variable keeps the server from starting (``UpstreamConfigError``)."""
    try:
        return expand_variables(value, where, env)
    except MissingVariable as exc:
        raise UpstreamConfigError(str(exc)) from None


class UpstreamConfigError(ValueError):
    """What keeps toolcrib from even starting an upstream server (a missing environment variable)."""


STDERR_LINES = 20  # of a stdio server's stderr, kept to say why it failed


@asynccontextmanager
async def _transport(target: Any, tail: deque[str]) -> AsyncIterator[Any]:
    """What ``mcp.Client`` connects through: a stdio server whose stderr is read into ``tail`` (its last lines say
    why it failed: "No module named mcp_server_time"), or a streamable-HTTP one with the configured headers."""
    if isinstance(target, tuple):
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        url, headers = target
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
            yield streamable_http_client(url, http_client=http)
        return
    from mcp.client.stdio import stdio_client

    read_fd, write_fd = os.pipe()
    errlog = os.fdopen(write_fd, "w")

    def drain() -> None:
        with os.fdopen(read_fd, errors="replace") as lines:
            for line in lines:
                if line.strip():
                    tail.append(line.rstrip())
                    log.debug("upstream stderr: %s", line.rstrip())

    reader = threading.Thread(target=drain, name="toolcrib-upstream-stderr", daemon=True)
    reader.start()
    try:
        yield stdio_client(target, errlog=errlog)
    finally:
        errlog.close()  # the child's copy closes when it exits; then the reader ends


class UpstreamPool:
    """The open upstream connections of one serving process (or one CLI command); ``sync`` makes a source of each
    configured server (``UpstreamSource``)."""

    def __init__(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._connections: dict[str, _Connection] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._loaded: LoadedConfig | None = None
        self._packs: frozenset[str] = frozenset()  # the isolated packs among the servers (toolcrib.isolation)
        self._restarts: dict[str, int] = {}  # namespace -> the step of RESTART_DELAYS its next restart waits
        # Called when a connected server says its tools, resources or prompts changed (the serving state reloads,
        # so the new definitions go through everything a start does: curation, the lock, the rules).
        self.changed: Callable[[], Coroutine[Any, Any, Any]] | None = None

    async def sync(self, loaded: LoadedConfig, only: frozenset[str] | None = None) -> list[UpstreamSource]:
        """Connect what the config names (reusing unchanged connections, closing the rest); return a source per
        server (``toolcrib.sources.Source``), offering its tools, resources, templates and prompts. Lazy servers
        connect when an agent loads them (``fetch``); with ``only``, every server not named in it is left out (a
        command that needs only some)."""
        self._loaded = loaded
        self._packs = loaded.isolated_packs()
        servers = _servers(loaded)
        configured = {ns: c for ns, c in servers.items() if c.enabled and (only is None or ns in only
                                                                             or ns in self._packs)}
        wanted = {ns: c for ns, c in configured.items() if not c.lazy}
        for ns in list(self._connections):
            connection = self._connections[ns]
            dead = connection.ready.is_set() and connection.client is None  # it stopped: started again below
            if ns not in configured or connection.key != _key(configured[ns]) or dead:
                self._connections.pop(ns).scope.cancel()
        for ns, connection in self._connections.items():
            if connection.stale and connection.client is not None and ns in wanted:
                connection.stale = False
                try:
                    connection.tools = await _every(connection.client.list_tools, "tools")
                    connection.listing_problems.clear()
                    await _list_items(connection, connection.client)
                except Exception as exc:
                    log.warning("upstream server %r could not be listed again: %s", ns, _describe(exc))
        starting = []
        for ns, config in sorted(wanted.items()):
            if ns not in self._connections:
                connection = _Connection(ns, config, _key(config), pack=ns in self._packs)
                self._connections[ns] = connection
                self._tg.start_soon(self._run, connection, loaded, loaded.config.host.call_timeout)
                starting.append(connection)
        for connection in starting:
            with anyio.move_on_after(connection.config.timeout):
                await connection.ready.wait()
            if not connection.ready.is_set():
                connection.error = f"did not answer within {connection.config.timeout:g} seconds"
                connection.scope.cancel()
        sources: list[UpstreamSource] = []
        for ns, config in sorted(servers.items()):
            if only is not None and ns not in only and ns not in self._packs:
                continue
            pack = ns in self._packs
            record = PluginRecord(name=ns, kind="pack" if pack else "mcp", state="loaded",
                                  entry_point="(isolated)" if pack else config.command or config.url,
                                  pinned=not pack and not config.trusted and not config.follow_changes)
            offer = Offer(record)
            sources.append(UpstreamSource(self, ns, config.enabled and config.lazy, offer,
                                          "plugins" if pack else "mcps"))
            if not config.enabled:
                record.state = "disabled"
                continue
            if config.lazy:
                record.state = "lazy"  # connected when an agent loads it (toolcrib__load_mcp)
                continue
            connection = self._connections[ns]
            if connection.error is not None or connection.client is None:
                record.fail(f"cannot connect: {connection.error}")
                self._connections.pop(ns).scope.cancel()
                continue
            problems: list[str] = list(connection.listing_problems)
            offer.entries = _entries(connection, problems)
            record.tool_count = len(offer.entries)
            offer.entries += _items(connection, problems)
            if problems:
                record.error = "; ".join(problems)
        return sources

    async def load(self, namespace: str, *, held: bool = False) -> list[Entry]:
        """Connect a lazy server (once; later calls reuse the connection) and return its tools as entries: those the
        lock does not hold back (``toolcrib.lock.hold``: changed since the lock, or unknown to a strict one), or,
        with ``held``, every one (what ``toolcrib lock`` records). Listed again when the server said its tools
        changed, so what is listed is what runs."""
        loaded = self._loaded
        config = loaded.config.mcps.get(namespace) if loaded is not None else None
        if loaded is None or config is None:
            raise ToolError(f"Unknown MCP server: {namespace}")
        lock = self._locks.setdefault(namespace, anyio.Lock())
        async with lock:
            connection = self._connections.get(namespace)
            if connection is None or connection.client is None:
                connection = _Connection(namespace, config, _key(config))
                self._connections[namespace] = connection
                self._tg.start_soon(self._run, connection, loaded, loaded.config.host.call_timeout)
                with anyio.move_on_after(config.timeout):
                    await connection.ready.wait()
                if connection.client is None:
                    self._connections.pop(namespace, None)
                    connection.scope.cancel()
                    why = connection.error or f"it did not answer within {config.timeout:g} seconds"
                    raise ToolError(f"cannot connect to MCP server {namespace!r}: {why}")
            if connection.stale and connection.client is not None:  # its tools changed: what runs is listed
                connection.stale = False
                try:
                    connection.tools = await _every(connection.client.list_tools, "tools")
                except Exception as exc:
                    raise ToolError(f"MCP server {namespace!r} could not be listed again: {_describe(exc)}") from None
                connection.curated_by = None
            if connection.curated_by is not loaded:  # first load, or the config was reloaded since: curate again
                from toolcrib import lock as definitions
                from toolcrib.curation import curate

                curated, _ = curate({e.name: e for e in _entries(connection, [])}, loaded)
                connection.entries = sorted((e for e in curated.values() if e.namespace == namespace),
                                            key=lambda e: e.name)
                pinned = (namespace,) if not config.trusted and not config.follow_changes else ()
                kept, problems = definitions.hold(loaded, {e.name: e for e in connection.entries}, pinned)
                for problem in problems:
                    log.warning("%s", problem)
                connection.held = frozenset(kept)
                connection.curated_by = loaded
            if held:
                return connection.entries
            return [e for e in connection.entries if e.name not in connection.held]

    async def read(self, namespace: str, uri: str) -> ToolResult:
        await self.load(namespace)
        from mcp.shared.exceptions import MCPError

        try:
            result = await self._connections[namespace].client.read_resource(uri)
        except MCPError as exc:
            raise ToolError(f"MCP server {namespace!r} could not read {uri!r}: {exc.error.message}") from None
        blocks = [{"type": "resource", "resource": c.model_dump(by_alias=True, mode="json", exclude_none=True)}
                  for c in result.contents]
        return ToolResult(content=tuple(blocks))

    async def _run(self, connection: _Connection, loaded: LoadedConfig, read_timeout: float) -> None:
        tail: deque[str] = deque(maxlen=STDERR_LINES)
        target: Any = None
        with connection.scope:
            try:
                async with contextlib.AsyncExitStack() as stack:
                    config = connection.config
                    if connection.pack:  # its calls take a lane of their own (toolcrib.mcp.lane)
                        lane, lane_env, folder = await stack.enter_async_context(opened(connection.namespace, self._tg))
                        config = config.model_copy(update={"env": {**config.env, **lane_env},
                                                           "write": [*config.write, folder]})
                        lane.on_timeout = lambda tool: self._overran(connection, tool)
                        connection.check_seconds = loaded.config.host.availability_timeout
                        connection.lane = lane
                    target = _target(loaded, config)
                    await self._session(connection, target, tail, read_timeout)
            except Exception as exc:  # a server that cannot start, answers garbage, or dies
                await anyio.sleep(0.05)  # its last words on stderr are on their way
                connection.error = _describe(exc, list(tail))
                log.warning("%s %r: %s", connection.what, connection.namespace, connection.error)
                connection.client = None
                if connection.ready.is_set() and self._connections.get(connection.namespace) is connection:
                    self._tg.start_soon(self._revive, connection)  # it was serving, and died: start it again
                connection.ready.set()
            finally:
                temporary = (getattr(target, "env", None) or {}).get("TMPDIR") if connection.config.confine else None
                if temporary:  # a confined server's own temporary folder and process group go with it
                    from toolcrib.confinement import end_group

                    with anyio.CancelScope(shield=True):
                        await end_group(Path(temporary))
                    shutil.rmtree(temporary, ignore_errors=True)

    async def _session(self, connection: _Connection, target: Any, tail: deque[str], read_timeout: float) -> None:
        """Connect to the server, list what it offers, and serve it until the session ends."""
        from mcp import Client

        async def on_message(message: Any) -> None:
            if type(message).__name__ in _LIST_CHANGED:  # handshake-era notifications
                self._stale(connection)

        async with _transport(target, tail) as transport, Client(
                transport, mode="auto", cache=None, read_timeout_seconds=read_timeout,
                message_handler=on_message, elicitation_callback=_elicit,
                sampling_callback=_sample) as client:
            connection.tools = await _every(client.list_tools, "tools")
            await _list_items(connection, client)
            line = connection.check_line()
            if line is not None:  # an isolated pack's: which checks its process runs for each agent
                connection.checks = await anyio.to_thread.run_sync(line.inventory, connection.check_seconds)
            connection.client = client
            connection.since = time.monotonic()
            await self._listen(connection, client)  # sets ready once the server's changes will be heard

    async def _revive(self, connection: _Connection) -> None:
        """A server (or an isolated pack) that died while serving is started again, after a back-off that doubles
        while it keeps dying soon after a start (``RESTART_DELAYS``): the serving state reloads, and the sync
        starts the dead connection again, so its entries are listed afresh and go through the lock and curation."""
        namespace = connection.namespace
        quick = time.monotonic() - connection.since < STEADY_SECONDS
        step = min(self._restarts.get(namespace, -1) + 1, len(RESTART_DELAYS) - 1) if quick else 0
        self._restarts[namespace] = step
        log.warning("upstream server %r stopped; starting it again in %g s", namespace, RESTART_DELAYS[step])
        await anyio.sleep(RESTART_DELAYS[step])
        if self.changed is not None and self._connections.get(namespace) is connection:
            await self.changed()

    def _overran(self, connection: _Connection, tool: str) -> None:
        """An isolated pack's call outlived its time: its process is ended (a sync handler's thread cannot be
        stopped from outside, and would hold on), and started again after its back-off, as one that died is."""
        if self._connections.get(connection.namespace) is not connection or connection.client is None:
            return
        log.warning("isolated pack %r: the call of %s outlived its time; its process is ended and started again",
                    connection.namespace, tool)
        connection.error = f"ended: the call of {tool} outlived its time"
        connection.client = None
        connection.scope.cancel()
        self._tg.start_soon(self._revive, connection)

    def _stale(self, connection: _Connection) -> None:
        log.info("upstream server %r says its lists changed", connection.namespace)
        connection.stale = True
        if self.changed is not None and self._connections.get(connection.namespace) is connection:
            self._tg.start_soon(self.changed)

    async def _listen(self, connection: _Connection, client: Any) -> None:
        """Wait for the server's word that its lists changed: a ``subscriptions/listen`` stream on 2026-07-28 (on
        older sessions the notifications arrive by themselves). The connection is ready once the stream is
        acknowledged, so that no change the server makes right after it is first listed goes unheard."""
        from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
        from mcp.shared.exceptions import MCPError

        async def ready_soon() -> None:  # a server that never acknowledges is ready all the same, a little later
            with anyio.move_on_after(LISTEN_ACK_SECONDS):
                await acknowledged.wait()
            connection.ready.set()

        acknowledged = anyio.Event()
        self._tg.start_soon(ready_soon)
        try:
            async with client.listen(tools_list_changed=True, prompts_list_changed=True,
                                     resources_list_changed=True) as events:
                acknowledged.set()
                async for _ in events:
                    self._stale(connection)
        except SubscriptionLost:
            if acknowledged.is_set():
                raise  # it was listening, and the stream ended: the connection went
        except (ListenNotSupportedError, MCPError, TimeoutError):
            pass
        finally:
            acknowledged.set()
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        for connection in self._connections.values():
            connection.scope.cancel()
        self._connections.clear()


@dataclass(eq=False)
class UpstreamSource:
    """One configured upstream server as a ``toolcrib.sources.Source``: what it offered when the pool last synced
    (nothing, for a lazy or disabled one), and, for a lazy one, its tools fetched on demand through the pool's
    connection. Its lifecycle is its pool's: the pool opens the connections of every source it syncs at once, and
    closes them when the config no longer names them (or the pool ends)."""

    pool: UpstreamPool
    name: str
    lazy: bool
    _offer: Offer
    dimension: str = "mcps"

    async def open(self) -> None:
        """Opened by its pool's ``sync``, with every other server of the config at once."""

    async def close(self) -> None:
        """Closed by its pool, when the config no longer names it (a connection outlives a host's reload)."""

    def offer(self) -> Offer:
        return self._offer

    async def fetch(self, name: str | None = None) -> list[Entry]:
        entries = await self.pool.load(self.name) if self.lazy else self._offer.entries
        return entries if name is None else [e for e in entries if e.name == name]

    async def read(self, uri: str) -> ToolResult:
        return await self.pool.read(self.name, uri)


def _describe(exc: BaseException, stderr: Sequence[str] = ()) -> str:
    """Why a server failed: its own last words on stderr when it said any (the real cause: "No module named
    mcp_server_time"), else the error, unwrapped from the task groups it came through."""
    if stderr:
        said = " | ".join(stderr[-5:])
        return f"it stopped, saying: {said[-600:]}"
    from toolcrib.confinement import ConfinementError

    if isinstance(exc, UpstreamConfigError | ConfinementError):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _entries(connection: _Connection, problems: list[str]) -> list[Entry]:
    names = serving_names("tool", [t.name for t in connection.tools], problems)
    made = (_entry(connection, t, names[t.name], problems) for t in connection.tools if t.name in names)
    return [e for e in made if e is not None]


def _entry(connection: _Connection, tool: Any, served: str, problems: list[str]) -> Entry | None:
    name = tool.name
    execution = getattr(tool, "execution", None)
    if execution is not None and execution.task_support == "required":
        problems.append(f"tool {name!r} is not served: it runs only as an MCP task (taskSupport 'required'), and "
                        "toolcrib does not run tasks")
        return None
    annotations: dict[str, Any] = {}
    if tool.annotations is not None:
        for key, value in tool.annotations.model_dump(by_alias=True, exclude_none=True).items():
            if key in ANNOTATION_KEYS and isinstance(value, ANNOTATION_KEYS[key]):
                annotations[key] = clean(value) if isinstance(value, str) else value
    # Upstream text is not trusted: every text an agent reads loses its hidden characters; one that cannot lose
    # them without changing what the tool takes (a property name, an enum value) keeps the tool out.
    hidden: list[str] = []
    input_schema = clean_schema(_mapping(tool.input_schema) or {"type": "object"}, hidden, "inputSchema")
    output_schema = clean_schema(_mapping(tool.output_schema), hidden, "outputSchema")
    if hidden:
        problems.append(f"tool {name!r} is not served: hidden characters in {', '.join(hidden[:3])}")
        return None
    description = clean(tool.description or "") or f"Tool {name} of the upstream server."
    title = getattr(tool, "title", None)
    namespace = connection.namespace
    runner = UpstreamRunner(connection.client, name, namespace, connection.what, connection.lane)
    describe = None
    if "describe" in connection.checks.get("tool", {}).get(name, ()):
        describe = remote_describe(connection.check_line, name, description, lambda: connection.check_seconds)
    spec = Tool(
        name=served,
        description=description,
        runner=runner,
        annotations=annotations,
        is_available=connection.own_check("tool", name),
        describe=describe,
        arguments=tuple(input_schema.get("properties", {})),
        title=clean(title) if isinstance(title, str) and title else annotations.get("title"),
        make_input=lambda: _ANY_ARGUMENTS,
        given_input_schema=input_schema,
        given_output_schema=output_schema,
        source_name=name if served != name else None,
    )
    supplier, dimension = ("pack", "plugins") if connection.pack else ("mcp", "mcps")
    return Entry(name=full_name(namespace, served), namespace=namespace, supplier=supplier, dimension=dimension,
                 source=namespace, definition=spec, trusted=connection.config.trusted)


# The call an upstream tool is running for, in the task that awaits the server's answer: a server's request during
# it (a 2026-07-28 server's input requests are answered within that task) is put to the call's own client.
CALLING: contextvars.ContextVar[Call | None] = contextvars.ContextVar("toolcrib_upstream_call", default=None)
# A handshake-era server asks in a request of its own, read by the connection's task: then the call is the one
# call in flight on that connection (with two or more, whose it is cannot be told, and it is refused).
_IN_FLIGHT: dict[int, list[Call]] = {}  # id(the connection's client session) -> its calls awaiting an answer


def _asking(context: Any) -> Call | None:
    found = CALLING.get()
    if found is not None:
        return found
    calls = _IN_FLIGHT.get(id(getattr(context, "session", None)), [])
    return calls[0] if len(calls) == 1 else None


MID_CALL = ("the agent's client speaks MCP 2026-07-28, where a call's questions are answered between its rounds, "
            "and this server asked in the middle of its call (as a 2025-11-25 server does); toolcrib cannot put that "
            "question to it")


async def _put(ask: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``ask()`` for a server's request. In the call's own task a question may suspend the call (the front end asks
    its client and the call is made again); from the connection's task, it cannot (``MID_CALL``)."""
    import mcp_types as types

    if CALLING.get() is not None:
        return await ask()
    try:
        return await ask()
    except Suspend:
        return types.ErrorData(code=types.INVALID_REQUEST, message=MID_CALL)


async def _elicit(context: Any, params: Any) -> Any:
    """A server asks the user something during a call: the call's ``Context.elicit`` asks the agent's client (with
    toolcrib's checks of the form); outside a call, or for a URL, it is refused."""
    import mcp_types as types

    call = _asking(context)
    schema = getattr(params, "requested_schema", None)
    if call is None or schema is None:
        return types.ErrorData(code=types.INVALID_REQUEST, message="toolcrib asks its client only during one call, "
                               "and only for a form")
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(by_alias=True, mode="json", exclude_none=True)
    context_of = call.context()

    async def ask() -> Any:
        try:
            answer = await context_of.elicit(params.message, schema)
        except ToolError as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
        return types.ElicitResult(action=answer.action, content=answer.content)

    return await _put(ask)


async def _sample(context: Any, params: Any) -> Any:
    """A server asks for a turn of a model during a call: the agent's client is asked, if it can sample."""
    import mcp_types as types

    call = _asking(context)
    sample = getattr(call.channel, "sample", None) if call is not None and call.channel is not None else None
    if sample is None:
        return types.ErrorData(code=types.INVALID_REQUEST, message="the agent's client cannot sample for this call")

    async def ask() -> Any:
        answer = await sample(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        return types.CreateMessageResult.model_validate(answer)

    return await _put(ask)


@dataclass(frozen=True, slots=True)
class UpstreamRunner:
    """Calls one tool of a connected upstream server with the validated arguments; the server's answer is the
    result, as it gave it (its own errors included); a refusal of the call itself is this tool's error."""

    client: Any  # the SDK's client session of the connection
    name: str  # the tool's name on the server
    namespace: str
    what: str = "upstream server"  # or "isolated pack", in its messages
    lane: Lane | None = None  # an isolated pack's calls take its lane while it is open
    is_async = True

    def start(self, model: BaseModel, call: Call) -> Any:
        return self._call(dict(model.__pydantic_extra__ or {}), call)

    async def _call(self, arguments: dict[str, Any], call: Call | None = None) -> ToolResult:
        from mcp.shared.exceptions import MCPError

        if self.lane is not None and self.lane.closed is None:
            timeout = call.tool.timeout if call is not None and call.tool is not None else None
            with contextlib.suppress(LaneClosed):
                return await self.lane.call(self.name, arguments, call, timeout)

        channel = call.channel if call is not None else None

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if channel is not None:  # the server's progress is the call's, as the agent's client sees it
                await channel.progress(done, total, message)

        token = CALLING.set(call)  # what the server asks during the call is asked on its behalf (_asking)
        connection = id(getattr(self.client, "session", None))
        if call is not None:
            _IN_FLIGHT.setdefault(connection, []).append(call)
        try:
            result = await self.client.call_tool(self.name, arguments,
                                                 progress_callback=progress if channel is not None else None)
        except MCPError as exc:
            raise ToolError(f"{self.what} {self.namespace!r} refused the call: {exc.error.message}") from None
        except BaseExceptionGroup as group:  # the SDK's task group wraps what a callback raised
            asked = group.subgroup(lambda e: isinstance(e, Suspend))
            while isinstance(asked, BaseExceptionGroup):  # the agent's client is to be asked first: the front end
                asked = asked.exceptions[0]  # does, and the call is made again (the server asks again, answered)
            if asked is not None:
                raise asked from None
            raise
        finally:
            CALLING.reset(token)
            if call is not None:
                flying = _IN_FLIGHT.get(connection, [])
                flying.remove(call)
                if not flying:
                    _IN_FLIGHT.pop(connection, None)
        return ToolResult(
            content=tuple(block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content),
            structured_content=result.structured_content,
            is_error=bool(result.is_error),
        )


async def _list_items(connection: _Connection, client: Any) -> None:
    """The server's resources, templates and prompts, as far as it offers them; a list that fails is a problem
    of this server, not a failed connection (its tools still serve)."""
    capabilities = client.server_capabilities
    lists = []
    if capabilities.resources is not None:
        lists += [("resources", client.list_resources, "resources"),
                  ("templates", client.list_resource_templates, "resource_templates")]
    if capabilities.prompts is not None:
        lists.append(("prompts", client.list_prompts, "prompts"))
    for attribute, fetch, key in lists:
        try:
            setattr(connection, attribute, await _every(fetch, key))
        except Exception as exc:
            connection.listing_problems.append(f"its {attribute} could not be listed: {_describe(exc)}")


def _items(connection: _Connection, problems: list[str]) -> list[Entry]:
    """An upstream server's resources, templates and prompts as catalog items of its namespace. Each text an agent
    reads loses its hidden characters; an item that would have to change what identifies it (a name, a URI, an
    argument's name) to lose them is not served."""
    namespace = connection.namespace
    found: list[Entry] = []
    seen: set[tuple[str, str]] = set()

    def add(what: str, name: str, item: Resource | Prompt) -> None:
        if (what, name) in seen:
            problems.append(f"{what} {name!r} is not served: the server offers two of that name")
            return
        seen.add((what, name))
        supplier, dimension = ("pack", "plugins") if connection.pack else ("mcp", "mcps")
        found.append(Entry(name=full_name(namespace, name), namespace=namespace, supplier=supplier,
                           dimension=dimension, source=namespace, definition=item, trusted=connection.config.trusted))

    for resource in connection.resources:
        made = _resource(connection, resource.name, str(resource.uri), resource, problems)
        if made is not None:
            add("resource", made.name, made)
    for template in connection.templates:
        made = _resource(connection, template.name, template.uri_template, template, problems)
        if made is not None:
            add("resource template", made.name, made)
    prompt_names = serving_names("prompt", [p.name for p in connection.prompts], problems)
    for prompt in connection.prompts:
        if prompt.name not in prompt_names:
            continue
        made_prompt = _prompt(connection, prompt, prompt_names[prompt.name], problems)
        if made_prompt is not None:
            add("prompt", made_prompt.name, made_prompt)
    return found


def _untouched(*texts: str) -> bool:
    return all(clean(t) == t for t in texts)


def _resource(connection: _Connection, name: str, uri: str, declared: Any,
              problems: list[str]) -> Resource | None:
    template = getattr(declared, "uri_template", None) is not None
    what = "resource template" if template else "resource"
    if not _untouched(name, uri):
        problems.append(f"{what} {clean(name)!r} is not served: hidden characters in its name or URI")
        return None
    parameters = template_variables(uri) if template else ()
    if template and not parameters:
        problems.append(f"resource template {name!r} is not served: {uri!r} has no variables")
        return None
    client = connection.client
    title = getattr(declared, "title", None)

    async def read(uri: str) -> list[dict[str, Any]]:
        from mcp.shared.exceptions import MCPError

        try:
            result = await client.read_resource(uri)
        except MCPError as exc:
            raise ToolError(f"upstream server {connection.namespace!r} could not read {uri!r}: "
                            f"{exc.error.message}") from None
        return [c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in result.contents]

    completions = {p: _completer(client, "ref/resource", uri, p) for p in parameters}
    return Resource(name=name, uri=uri, description=clean(declared.description or "") or f"The resource {uri}.",
                    runner=_Passthrough(lambda call: read(call.name)),
                    mime_type=clean(declared.mime_type) if declared.mime_type else None,
                    title=clean(title) if title else None, parameters=parameters, complete=completions,
                    passthrough=True, is_available=connection.own_check("resource", uri))


def _prompt(connection: _Connection, declared: Any, served: str, problems: list[str]) -> Prompt | None:
    name = declared.name
    arguments = [(a.name, clean(a.description) if a.description else None, bool(a.required))
                 for a in declared.arguments or ()]
    if not _untouched(*(a for a, _, _ in arguments)):
        problems.append(f"prompt {name!r} is not served: hidden characters in the name of an argument")
        return None
    client = connection.client
    namespace = connection.namespace

    async def get(arguments: Mapping[str, Any]) -> dict[str, Any]:
        from mcp.shared.exceptions import MCPError

        bad = sorted(k for k, v in arguments.items() if not isinstance(v, str))
        if bad:
            raise InvalidArgumentsError(f"Invalid arguments for prompt {full_name(namespace, served)}: a prompt's "
                                        f"arguments are strings ({', '.join(bad)} is not)")
        try:
            result = await client.get_prompt(name, dict(arguments))
        except MCPError as exc:
            raise ToolError(f"upstream server {namespace!r} could not give prompt {name!r}: "
                            f"{exc.error.message}") from None
        answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {k: v for k, v in answer.items() if k in ("description", "messages")}

    title = getattr(declared, "title", None)
    completions = {a: _completer(client, "ref/prompt", name, a) for a, _, _ in arguments}
    return Prompt(name=served, description=clean(declared.description or "") or f"The prompt {name} of the upstream "
                  "server.", runner=_Passthrough(lambda call: get(call.arguments)), arguments=tuple(arguments),
                  title=clean(title) if title else None, complete=completions, passthrough=True,
                  source_name=name if served != name else None, is_available=connection.own_check("prompt", name))


@dataclass(frozen=True, slots=True)
class _Passthrough:
    """Reads a resource of a connected upstream server (the call's URI) or gets one of its prompts (the call's
    arguments, as sent): the server's answer, in MCP's shape, is the result."""

    ask: Callable[[Call], Coroutine[Any, Any, Any]]
    is_async = True

    def start(self, model: BaseModel, call: Call) -> Any:
        return self.ask(call)


def _completer(client: Any, kind: str, ref: str, argument: str) -> Any:
    """A completer that asks the upstream server (nothing when it offers no completion or fails)."""

    async def complete(value: str, context: Mapping[str, str]) -> list[str]:
        import mcp_types as types

        reference: Any = (types.PromptReference(name=ref) if kind == "ref/prompt"
                          else types.ResourceTemplateReference(uri=ref))
        try:
            result = await client.complete(reference, {"name": argument, "value": value}, dict(context) or None)
        except Exception:
            log.debug("upstream completion of %s %s failed", ref, argument, exc_info=True)
            return []
        return [clean(v) for v in result.completion.values]

    return complete


def _mapping(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return json.loads(json.dumps(value)) if value else None
