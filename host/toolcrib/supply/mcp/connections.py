"""The open upstream connections of one serving process or CLI command (``UpstreamPool``): how a server is reached
(stdio, confined or not, or streamable HTTP), listed, listened to, restarted when it dies, and closed. The only
module of toolcrib that imports the SDK's client."""

from __future__ import annotations

import contextlib
import functools
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
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup

from toolcrib.config import LoadedConfig, MissingVariable
from toolcrib.config import expand as expand_variables
from toolcrib.consent import Consenting
from toolcrib.content import ToolResult
from toolcrib.credentials import NONE as NO_CREDENTIALS
from toolcrib.credentials import Credentials
from toolcrib.delegation import Acting, caller_auth
from toolcrib.entries import PACK, Entry, Kind, Provenance
from toolcrib.errors import ToolError
from toolcrib.plugins import PluginRecord
from toolcrib.sources import Offer
from toolcrib.supply.mcp.conversion import contents_of, item_entries, tool_entries
from toolcrib.supply.mcp.isolated import ENTRY_POINT
from toolcrib.supply.mcp.pack_calls import Lane, opened
from toolcrib.supply.mcp.pack_checks import CheckLine, remote_check
from toolcrib.supply.mcp.runners import (
    answer_task_question,
    elicit,
    elicitation_completed,
    forward_log,
    sample,
)
from toolcrib.supply.mcp.settings import McpConfig
from toolcrib.supply.mcp.source import UpstreamSource

log = logging.getLogger("toolcrib.upstream")


@dataclass
class Connection:
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
    pack: bool = False  # an isolated pack (toolcrib.supply.mcp.isolated): its entries are the pack's, under "plugins"
    since: float = 0.0  # time.monotonic() when it was ready
    lane: Lane | None = None  # an isolated pack's calls lane
    # an isolated pack's: which of its items have their own is_available or describe (kind -> listed name -> what),
    # asked of its process for each agent (toolcrib.supply.mcp.pack_checks), each within check_seconds
    checks: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    check_seconds: float = 5.0
    kind: Kind = PACK  # the kind its pool serves servers as (toolcrib.supply.mcp.KIND)
    acting: Acting | Consenting | None = None  # how its calls are made as their caller (exchange, consent)
    secrets: Credentials = NO_CREDENTIALS  # its headers, as sent: kept out of what reaches an agent

    @property
    def what(self) -> str:
        """What it is called in messages."""
        return "isolated pack" if self.pack else "upstream server"

    @functools.cached_property
    def provenance(self) -> Provenance:
        """Its entries' provenance: an isolated pack's are the pack's (``plugins``), a server's its kind's."""
        if self.pack:
            return Provenance(self.namespace, PACK, trusted=self.config.trusted, where=f"[packs.{self.namespace}]")
        return Provenance(self.namespace, self.kind, "mcps", trusted=self.config.trusted,
                          where=f"[mcps.{self.namespace}]")

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
        from toolcrib.supply.mcp.isolated import server_config

        servers |= {ns: server_config(loaded, ns) for ns in sorted(loaded.isolated_packs())}
    return servers


def _key(config: McpConfig) -> str:
    return json.dumps(config.model_dump(), sort_keys=True)


def _target(loaded: LoadedConfig, config: McpConfig) -> Any:
    """How to reach the server: ``StdioServerParameters``, or ``(url, headers)``. Values of ``env`` and ``headers``
    may name the host's environment variables, ``${NAME}`` (a secret stays out of the config file)."""
    if config.url is not None:  # (with exchange, each request of a call goes with the caller's token instead)
        return (config.url, {k: expand(v, f"headers.{k}") for k, v in config.headers.items()},
                config.exchange is not None or config.consent is not None)
    from mcp import StdioServerParameters

    cwd = str(loaded.resolve(config.cwd)) if config.cwd else None
    env = {k: expand(v, f"env.{k}") for k, v in config.env.items()}
    if config.confine:
        from toolcrib.supply.mcp.confinement import launcher

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
async def _transport(target: Any, tail: deque[str], namespace: str) -> AsyncIterator[Any]:
    """What ``mcp.Client`` connects through: a stdio server whose stderr is read into ``tail`` (its last lines say
    why it failed: "No module named mcp_server_time"), or a streamable-HTTP one with the configured headers (and,
    where it is called as its caller, each call's own token: ``toolcrib.delegation.caller_auth``)."""
    if isinstance(target, tuple):
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        url, headers, as_caller = target
        auth = caller_auth(namespace) if as_caller else None
        async with httpx2.AsyncClient(headers=headers, auth=auth, timeout=httpx2.Timeout(30, read=300)) as http:
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

    def __init__(self, tg: TaskGroup, kind: Kind) -> None:
        self._tg = tg
        self.kind = kind  # (toolcrib.supply.mcp.KIND: handed in, as this module is that kind's)
        self._connections: dict[str, Connection] = {}  # each server's current connection (a lazy one's too)
        self._sources: dict[str, UpstreamSource] = {}  # what the last ``sources`` gave
        self._locks: dict[str, anyio.Lock] = {}
        self._loaded: LoadedConfig | None = None
        self._packs: frozenset[str] = frozenset()  # the isolated packs among the servers (toolcrib.supply.mcp.isolated)
        self._restarts: dict[str, int] = {}  # namespace -> the step of RESTART_DELAYS its next restart waits
        # Called when a connected server says its tools, resources or prompts changed (the serving state reloads,
        # so the new definitions go through everything a start does: curation, the lock, the rules).
        self.changed: Callable[[], Coroutine[Any, Any, Any]] | None = None

    def sources(self, loaded: LoadedConfig, only: frozenset[str] | None = None) -> list[UpstreamSource]:
        """A source per server ``loaded`` names (``toolcrib.sources.Source``), none opened: the last call's source of
        a server is given again while its config is unchanged and its connection alive (opening it again lists
        what changed), a new one otherwise. With ``only``, every server not named in it is left out (a command that
        needs only some)."""
        self._loaded = loaded
        self._packs = loaded.isolated_packs()
        made: dict[str, UpstreamSource] = {}
        for ns, config in sorted(_servers(loaded).items()):
            if only is not None and ns not in only and ns not in self._packs:
                continue
            key = _key(config)
            earlier = self._sources.get(ns)
            if earlier is not None and earlier.key == key and earlier.alive:
                made[ns] = earlier
                continue
            pack = ns in self._packs
            record = PluginRecord(name=ns, kind="pack" if pack else "mcp", state="loaded",
                                  entry_point=ENTRY_POINT if pack else config.command or config.url,
                                  pinned=not pack and not config.trusted and not config.follow_changes)
            made[ns] = UpstreamSource(self, ns, config, key, Offer(record), "plugins" if pack else "mcps")
        self._sources = made
        return list(made.values())

    async def open(self, source: UpstreamSource) -> None:
        """Connect ``source``'s server (unless it is connected already, or lazy: an agent's load connects it) and
        offer what it lists; one that cannot be started or does not answer within its ``timeout`` fails alone."""
        config, ns, record = source.config, source.name, source.offer().record
        if not config.enabled:
            record.state = "disabled"
            return
        if config.lazy:
            record.state = "lazy"  # connected when an agent loads it (toolcrib__load_mcp)
            return
        loaded = self._loaded
        assert loaded is not None
        connection = source.connection
        if connection is None:
            connection = source.connection = Connection(ns, config, source.key, pack=ns in self._packs,
                                                        kind=self.kind)
            self._connections[ns] = connection
            self._tg.start_soon(self._run, connection, loaded, loaded.config.host.call_timeout)
            with anyio.move_on_after(config.timeout):
                await connection.ready.wait()
            if not connection.ready.is_set():
                connection.error = f"did not answer within {config.timeout:g} seconds"
                connection.scope.cancel()
        elif connection.stale and connection.client is not None:
            connection.stale = False
            try:
                connection.tools = await _every(connection.client.list_tools, "tools")
                connection.listing_problems.clear()
                await _list_items(connection, connection.client)
            except Exception as exc:
                log.warning("upstream server %r could not be listed again: %s", ns, why_failed(exc))
        offer = source.offer()
        if connection.error is not None or connection.client is None:
            record.fail(f"cannot connect: {connection.error}")
            offer.entries = []
            self._forget(source)
            return
        record.state, record.error = "loaded", None
        problems: list[str] = list(connection.listing_problems)
        offer.entries = tool_entries(connection, problems)
        record.tool_count = len(offer.entries)
        offer.entries += item_entries(connection, problems)
        if problems:
            record.error = "; ".join(problems)

    def close(self, source: UpstreamSource) -> None:
        """End ``source``'s connection (a lazy one's too): its server is no longer offered, or no longer so."""
        self._forget(source)
        if self._sources.get(source.name) is source:
            del self._sources[source.name]
        if source.connection is not None:
            source.connection.scope.cancel()

    def _forget(self, source: UpstreamSource) -> None:
        """``source``'s connection is not the pool's any more: the next ``sources`` makes its server a new one."""
        if source.connection is not None and self._connections.get(source.name) is source.connection:
            del self._connections[source.name]
            source.connection.scope.cancel()

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
                connection = Connection(namespace, config, _key(config), kind=self.kind)
                self._connections[namespace] = connection
                source = self._sources.get(namespace)
                if source is not None and source.lazy:
                    source.connection = connection  # (ended with it)
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
                    raise ToolError(f"MCP server {namespace!r} could not be listed again: {why_failed(exc)}") from None
                connection.curated_by = None
            if connection.curated_by is not loaded:  # first load, or the config was reloaded since: curate again
                from toolcrib import lock as definitions
                from toolcrib.curation import curate

                curated, _ = curate({e.name: e for e in tool_entries(connection, [])}, loaded)
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
        return ToolResult(content=tuple({"type": "resource", "resource": item} for item in contents_of(result)))

    async def _run(self, connection: Connection, loaded: LoadedConfig, read_timeout: float) -> None:
        tail: deque[str] = deque(maxlen=STDERR_LINES)
        target: Any = None
        with connection.scope:
            try:
                async with contextlib.AsyncExitStack() as stack:
                    config = connection.config
                    if connection.pack:  # its calls take a lane of their own (toolcrib.supply.mcp.pack_calls)
                        lane, lane_env, folder = await stack.enter_async_context(opened(connection.namespace, self._tg))
                        config = config.model_copy(update={"env": {**config.env, **lane_env},
                                                           "write": [*config.write, folder]})
                        lane.on_timeout = lambda tool: self._overran(connection, tool)
                        connection.check_seconds = loaded.config.host.availability_timeout
                        connection.lane = lane
                    target = _target(loaded, config)
                    if isinstance(target, tuple):  # its secrets: what authorizes, and what came from a variable
                        connection.secrets = Credentials({k: v for k, v in target[1].items() if k.lower() in (
                            "authorization", "proxy-authorization", "cookie") or "${" in config.headers[k]}, {})
                    try:
                        connection.acting = loaded.acting(config, f"upstream server {connection.namespace!r}",
                                                          f"mcps.{connection.namespace}")
                    except (MissingVariable, ToolError) as exc:
                        raise UpstreamConfigError(str(exc)) from None
                    await self._session(connection, target, tail, read_timeout)
            except Exception as exc:  # a server that cannot start, answers garbage, or dies
                await anyio.sleep(0.05)  # its last words on stderr are on their way
                connection.error = why_failed(exc, list(tail))
                log.warning("%s %r: %s", connection.what, connection.namespace, connection.error)
                connection.client = None
                if connection.ready.is_set() and self._connections.get(connection.namespace) is connection:
                    self._tg.start_soon(self._revive, connection)  # it was serving, and died: start it again
                connection.ready.set()
            finally:
                temporary = (getattr(target, "env", None) or {}).get("TMPDIR") if connection.config.confine else None
                if temporary:  # a confined server's own temporary folder and process group go with it
                    from toolcrib.supply.mcp.confinement import end_group

                    with anyio.CancelScope(shield=True):
                        await end_group(Path(temporary))
                    shutil.rmtree(temporary, ignore_errors=True)

    async def _session(self, connection: Connection, target: Any, tail: deque[str], read_timeout: float) -> None:
        """Connect to the server, list what it offers, and serve it until the session ends."""
        from mcp import Client

        async def on_message(message: Any) -> None:
            if type(message).__name__ in _LIST_CHANGED:  # handshake-era notifications
                self._stale(connection)
            elif type(message).__name__ == "ElicitCompleteNotification":
                await elicitation_completed(connection.namespace, str(message.params.elicitation_id))

        async def on_log(params: Any) -> None:  # (the session is the client's, known once it is open)
            await forward_log(client.session, params)

        # log_level: 2026-07-28 servers send log messages only to requests that ask (the agent's client's own
        # level then filters what it is sent)
        async with _transport(target, tail, connection.namespace) as transport, Client(
                transport, mode="auto", cache=None, read_timeout_seconds=read_timeout,
                message_handler=on_message, elicitation_callback=elicit, logging_callback=on_log, log_level="debug",
                sampling_callback=sample, extensions=[_tasks_client()(answer_task_question)]) as client:
            connection.tools = await _every(client.list_tools, "tools")
            await _list_items(connection, client)
            line = connection.check_line()
            if line is not None:  # an isolated pack's: which checks its process runs for each agent
                connection.checks = await anyio.to_thread.run_sync(line.inventory, connection.check_seconds)
            connection.client = client
            connection.since = time.monotonic()
            await self._listen(connection, client)  # sets ready once the server's changes will be heard

    async def _revive(self, connection: Connection) -> None:
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

    def _overran(self, connection: Connection, tool: str) -> None:
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

    def _stale(self, connection: Connection) -> None:
        log.info("upstream server %r says its lists changed", connection.namespace)
        connection.stale = True
        if self.changed is not None and self._connections.get(connection.namespace) is connection:
            self._tg.start_soon(self.changed)

    async def _listen(self, connection: Connection, client: Any) -> None:
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
        self._sources.clear()


def why_failed(exc: BaseException, stderr: Sequence[str] = ()) -> str:
    """Why a server failed: its own last words on stderr when it said any (the real cause: "No module named
    mcp_server_time"), else the error, unwrapped from the task groups it came through."""
    if stderr:
        said = " | ".join(stderr[-5:])
        return f"it stopped, saying: {said[-600:]}"
    from toolcrib.supply.mcp.confinement import ConfinementError

    if isinstance(exc, UpstreamConfigError | ConfinementError):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(why_failed(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _list_items(connection: Connection, client: Any) -> None:
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
            connection.listing_problems.append(f"its {attribute} could not be listed: {why_failed(exc)}")


# -- toolcrib as the client of an upstream server's tasks -----------------------------------------------------------


@functools.cache
def _tasks_client() -> Any:
    """``UpstreamTasks``, made when the first server is connected: the SDK's client and the MCP types are imported
    then (a host without upstream servers never imports them)."""
    import mcp_types as types
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp.shared.exceptions import MCPError
    from pydantic import ConfigDict, TypeAdapter

    from toolcrib.mcp.tasks import EXTENSION, TERMINAL, poll_seconds

    class Created(types.Result):
        """SEP-2663's CreateTaskResult, as an upstream server answers a call with it."""

        model_config = ConfigDict(extra="allow")
        result_type: Literal["task"] = "task"
        task_id: str
        poll_interval_ms: int | None = None

    class Request(types.Request[dict[str, Any], str]):
        method: str
        params: dict[str, Any]

    anything: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])

    class UpstreamTasks(ClientExtension):
        """toolcrib's client of an upstream server that answers a call with a task (2026-07-28): the call waits
        while the task is polled (at its ``pollIntervalMs``), each of the task's questions is put to the agent's
        client of that call (``ask``, with the checks of any question a server asks), and a call that ends before
        its task (cancelled, timed out, refused) cancels the task upstream. A task that fails is the server's
        refusal of the call; one the server cancelled is a tool error."""

        identifier = EXTENSION

        def __init__(self, ask: Callable[[str, dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]) -> None:
            self.ask = ask

        def claims(self) -> list[ResultClaim[Any]]:
            return [ResultClaim(result_type="task", model=Created, resolve=self.resolve)]

        async def resolve(self, created: Created, ctx: ClaimContext) -> Any:
            session = ctx.session

            async def send(method: str, **params: Any) -> dict[str, Any]:
                # read as a dict: the SDK's types have no shapes for the tasks extension's methods
                found: dict[str, Any] = await session.send_request(  # type: ignore[type-var]
                    Request(method=method, params=params), anything)
                return found

            wait = poll_seconds(created.poll_interval_ms)
            ended: dict[str, Any] | None = None
            try:
                while ended is None:
                    task = await send("tasks/get", taskId=created.task_id)
                    status = task.get("status")
                    if status in TERMINAL:
                        ended = task
                    elif status == "input_required":
                        asked = task.get("inputRequests") or {}
                        answers = {key: await self.ask(str(request.get("method")), dict(request.get("params") or {}))
                                   for key, request in asked.items() if isinstance(request, dict)}
                        await send("tasks/update", taskId=created.task_id, inputResponses=answers)
                    else:
                        await anyio.sleep(poll_seconds(task.get("pollIntervalMs", wait * 1000)))
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    try:
                        await send("tasks/cancel", taskId=created.task_id)
                    except Exception:  # the call's own end is what is reported
                        log.debug("an upstream task could not be cancelled", exc_info=True)
                raise
            if ended["status"] == "completed":
                return types.CallToolResult.model_validate(ended.get("result"), by_name=False)
            if ended["status"] == "failed":
                error = ended["error"] if isinstance(ended.get("error"), dict) else {}
                code = error.get("code")
                raise MCPError(code=code if isinstance(code, int) else types.INTERNAL_ERROR,
                               message=str(error.get("message") or ended.get("statusMessage") or "its task failed"))
            why = ended.get("statusMessage") or "no reason given"
            raise ToolError(f"the upstream server cancelled the call's task ({why})")

    return UpstreamTasks
