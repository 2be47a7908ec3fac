"""The host being served, swapped whole on reload, and who to tell when an agent's tool list changes."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import signal
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)

from toolcrib.approvals import Desk
from toolcrib.config import LoadedConfig
from toolcrib.declarations import add_update_listener
from toolcrib.errors import ConfigError, contained
from toolcrib.host import Host
from toolcrib.mcp.roundtrip import MemoryOnce, Once, StateSeal
from toolcrib.mcp.sdk import connection_of
from toolcrib.mcp.sessions import SUBSCRIPTIONS, LocalSessions, Sessions, shared_state
from toolcrib.mcp.statekeys import state_keys
from toolcrib.mcp.tasks import Tasks
from toolcrib.observe import Metrics
from toolcrib.supply.mcp.isolated import ENTRY_POINT as ISOLATED
from toolcrib.uris import normalize
from toolcrib.view import AgentView, thaw_builds

if TYPE_CHECKING:
    from toolcrib.cluster import Fanout, Store

log = logging.getLogger("toolcrib.serve")

MAX_SESSIONS = 1024
SETTLE_SECONDS = 0.2  # a changed config is reloaded once it has not changed for this long
SETTLE_CHECKS = 25


@asynccontextmanager
async def serving_state(path: Path | None, metrics: Metrics | None = None,
                        serves: Collection[str] | None = None) -> AsyncIterator[ServingState]:
    """The state to serve from the config at ``path``, with its upstream MCP servers connected; a reload reads
    the file again and keeps the connections whose config did not change. With ``metrics``, every host built
    reports into them. With ``[cluster]``, limits are counted on the shared store (``toolcrib.cluster``), opened
    here for the life of the state. Each host is built with the lists of the agents it ``serves`` (every agent
    when None; ``build_lists``)."""
    from toolcrib.cluster import Fanout, limiter
    from toolcrib.config import load_config
    from toolcrib.mcp.fleet import RedisOnce, RedisSessions, RedisTasks
    from toolcrib.supply import supply

    first: list[LoadedConfig] = [await anyio.to_thread.run_sync(load_config, path)]
    cluster = first[0].config.cluster
    async with supply() as sources_of, limiter(first[0]) as (limits, store), anyio.create_task_group() as tg:
        from toolcrib.consent import share

        share(store)  # people's grants to sources ([credentials]) are kept on it, where every replica finds them

        async def build() -> Host:
            loaded = first.pop() if first else await anyio.to_thread.run_sync(load_config, path)
            if loaded.config.cluster != cluster:
                log.warning("%s: [cluster] changed; the change applies when serve is restarted", loaded.source)
            sources = await sources_of.sync(loaded)

            def made() -> Host:
                host = Host(loaded, sources=sources, metrics=metrics, limits=limits)
                build_lists(host, host.agents if serves is None else serves)
                return host

            return await anyio.to_thread.run_sync(made)

        state = ServingState(await build(), make_host=build)
        state.watch_resources()  # (a pack's catalog_changed reloads, whoever listens)
        state.serves = serves
        state.metrics = metrics
        state.store = store
        if store is not None:  # approvals are used once in the whole fleet; updates and reloads reach every replica
            state.once = RedisOnce(store)
            state.fanout = Fanout(store)
            served = state.host.loaded.config.host
            state.sessions = RedisSessions(store, state.fanout, served.http_session_idle, served.http_max_sessions)
            state.tasks = RedisTasks(store, state.fanout)  # MCP tasks any replica answers for
            subscribed = anyio.Event()
            tg.start_soon(functools.partial(state.fanout.listen, state.on_event, ready=subscribed))
            with anyio.move_on_after(store.config.timeout * 2):
                await subscribed.wait()
        if metrics is not None:
            metrics.watch(upstreams=lambda: {r.name: r.state == "loaded" for r in state.host.records
                                             if (r.kind == "mcp" or r.entry_point == ISOLATED)
                                             and r.state in ("loaded", "failed")})
        sources_of.changed = state.reload  # a server that redefines its tools is listed again, and the lock re-applied
        try:
            yield state
        finally:
            tg.cancel_scope.cancel()
            await state.tasks.close()
            state.host.close()
            share(None)


class ServingState:
    """The current ``Host`` for every front end. ``reload`` builds a new host from the config file and swaps it
    in only if it loads; the old one keeps serving otherwise. Views are immutable, so a call that started under
    the old host finishes under it."""

    def __init__(self, host: Host, make_host: Callable[[], Host] | Callable[[], Awaitable[Host]] | None = None,
                 secret: bytes | Sequence[bytes] | None = None) -> None:
        self.host = host
        keys = state_keys() if secret is None else [secret] if isinstance(secret, bytes) else list(secret)
        self.seal = StateSeal(keys)  # seals 2026-07-28 round-trip states
        self.once: Once = MemoryOnce()  # where the approvals they carry are used up (with [cluster]: on Redis)
        self._make_host = make_host
        # one reload at a time, each built after the last one's swap: two at once (an upstream server that says its
        # lists changed twice) could swap in the one built from the older listing last
        self._reloading = anyio.Lock()
        # per agent and the scopes its requests' tokens lack: what a listener may hear is what its token may read
        self._buses: dict[tuple[str, frozenset[str]], InMemorySubscriptionBus] = {}
        self._listeners: dict[tuple[str, frozenset[str]], ListenHandler] = {}
        self._sessions: dict[str, OrderedDict[int, Any]] = {}
        self.on_reload: list[Callable[[], Awaitable[None]]] = []  # front ends that must follow (new agents, tokens)
        self._updates: Callable[[str | None], None] | None = None
        self._sending: set[asyncio.Task[None]] = set()  # resource updates on their way (held, or they may vanish)
        self.metrics: Metrics | None = None  # the serving process's, when it keeps them
        self.store: Store | None = None  # the shared store of [cluster], when serving with one
        self.fanout: Fanout | None = None  # and how events reach the other replicas through it
        self.sessions: Sessions = LocalSessions()  # where 2025-11-25 HTTP sessions are kept beyond this replica
        self.session_ended: list[Callable[[str], Awaitable[None]]] = []  # told of a session another replica ended
        self.session_state_changed: list[Callable[[str], Awaitable[None]]] = []  # ... or whose client set something
        self.desk: Desk | None = None  # where operators answer approvals, when an operator endpoint is served
        self.serves: Collection[str] | None = None  # the agents a process serves (None: every agent of the config)
        self.feed: Any = None  # the operator console's live feed (toolcrib.mcp.console.Feed), when it is served
        self.tasks = Tasks()  # the MCP tasks of every agent served (toolcrib.mcp.tasks)

    def open_feed(self, feed: Any) -> None:
        """Hand ``feed`` every decision of this host and of every host a reload brings (``Pipeline.watch``)."""
        self.feed = feed
        self.host.pipeline.watch(feed)

    def open_desk(self, desk: Desk) -> None:
        """Send the approvals that agents' ``approvals`` give to an operator to ``desk`` (the operator endpoint's),
        under this host and every host a reload brings."""
        self.desk = desk
        self.host.pipeline.desk = desk

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold a task sent on its way until it is done (the event loop keeps only a weak reference)."""
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def view(self, agent: str, lacking: frozenset[str] = frozenset()) -> AgentView:
        return self.host.view(agent, lacking)

    # -- who is listening --------------------------------------------------------------------------------

    def listener(self, agent: str, lacking: frozenset[str] = frozenset()) -> ListenHandler:
        """The ``subscriptions/listen`` handler of one agent (2026-07-28 clients) for requests whose OAuth token
        lacks ``lacking`` (of ``identity.needs_scope``): it hears of the resources such a request may read only."""
        self.watch_resources()
        key = (agent, lacking)
        if key not in self._listeners:
            self._buses[key] = InMemorySubscriptionBus()
            self._listeners[key] = ListenHandler(self._buses[key])
        return self._listeners[key]

    def remember_session(self, agent: str, session: Any) -> None:
        """Keep a handshake-era session, to push ``notifications/tools/list_changed`` to its connection.

        The SDK hands each request its own session object over one connection; one is kept per connection
        (the newest), at most ``MAX_SESSIONS`` per agent, and those that fail to take a notification are dropped.
        """
        self.watch_resources()
        sessions = self._sessions.setdefault(agent, OrderedDict())
        key = id(connection_of(session) or session)
        sessions.pop(key, None)
        sessions[key] = session
        while len(sessions) > MAX_SESSIONS:
            sessions.popitem(last=False)

    def forget_session(self, agent: str, connection: Any) -> None:
        """A session's connection on this replica ended: nothing more to tell it."""
        self._sessions.get(agent, OrderedDict()).pop(id(connection), None)

    async def session_changed(self, agent: str, connection: Any) -> None:
        """A client set something on its session (subscriptions, log level) that every replica must know."""
        if connection is not None and connection.session_id is not None:
            await self.sessions.save_state(agent, connection.session_id, shared_state(connection))

    def _tells(self, agent: str, session: Any) -> bool:
        """Whether this replica tells ``session`` of changes (with shared sessions, one replica does)."""
        connection = connection_of(session) or session
        sid = getattr(connection, "session_id", None)
        return sid is None or self.sessions.tells(agent, sid)

    async def notify_changed(self, agent: str, lists: Sequence[str] = ("tools",)) -> None:
        """Tell ``agent``'s clients that these of its lists changed (``tools``, ``resources``, ``prompts``)."""
        for (listening, _), bus in list(self._buses.items()):
            if listening == agent:
                for name in lists:
                    await bus.publish(_EVENTS[name]())
        sessions = self._sessions.get(agent, OrderedDict())
        for key, session in list(sessions.items()):
            if not self._tells(agent, session):
                continue
            try:
                with anyio.fail_after(5):
                    for name in lists:
                        await getattr(session, _SENDERS[name])()
            except Exception:  # a closed connection: nothing to tell, ever again
                sessions.pop(key, None)
                log.debug("could not notify a session of agent %r", agent, exc_info=True)

    async def resource_updated(self, uri: str) -> None:
        """Tell the clients that subscribed to ``uri`` (and may read it) that it changed."""
        uri = normalize(uri)
        for agent, lacking in list(self._buses):
            if agent in self.host.rules and self.view(agent, lacking).resource(uri) is not None:
                await self._buses[(agent, lacking)].publish(ResourceUpdated(uri=uri))
        for agent in list(self._sessions):
            if agent not in self.host.rules or self.view(agent).resource(uri) is None:
                continue  # an agent that may not read it learns nothing of it
            for key, session in list(self._sessions.get(agent, OrderedDict()).items()):
                connection = connection_of(session) or session  # a request's session, or the connection itself
                if uri not in getattr(connection, "state", {}).get(SUBSCRIPTIONS, ()) or \
                        not self._tells(agent, session):
                    continue
                try:
                    with anyio.fail_after(5):
                        await session.send_resource_updated(uri)
                except Exception:
                    self._sessions[agent].pop(key, None)

    async def _updated(self, uri: str) -> None:
        """A resource this process's packs updated: its own clients hear of it, and every other replica's."""
        await self.resource_updated(uri)
        if self.fanout is not None:
            await self.fanout.publish("resource_updated", uri=uri)  # Redis unreachable: heard on this replica only

    async def on_event(self, kind: str, fields: Mapping[str, str]) -> None:
        """An event another replica published (``toolcrib.cluster.Fanout``)."""
        if kind == "resource_updated":
            await self.resource_updated(fields["uri"])
        elif kind == "reload":
            await self.reload(announce=False)
        elif kind in ("listening", "session_ended"):
            self.sessions.heard(kind, fields["session"])
            if kind == "session_ended":
                for end in list(self.session_ended):
                    await end(fields["session"])
        elif kind == "session_state":
            for changed in list(self.session_state_changed):
                await changed(fields["session"])
        elif kind == "task_update":
            await self.tasks.heard(fields["task"])

    def watch_resources(self) -> None:
        """Start passing ``toolcrib.resource_updated(uri)`` (from any thread) on to the clients, and reloading on
        ``toolcrib.catalog_changed()``; call it from the event loop that serves."""
        if self._updates is not None:
            return
        loop = asyncio.get_running_loop()
        asked = [False, False]  # (a reload was asked for since the last began, one runs): asks coalesce

        async def reloads() -> None:
            # One reload after another while they are asked for: any number of catalog_changed() calls during a
            # reload make one more, never a queue of them (a pack tool an agent calls in a loop cannot make the
            # host, or with [cluster] the fleet, reload once per call).
            try:
                while asked[0]:
                    asked[0] = False
                    await self.reload()
            finally:
                asked[1] = False

        def send(uri: str | None) -> None:
            if uri is not None:
                self.keep(loop.create_task(self._updated(uri)))
                return
            asked[0] = True
            if not asked[1]:
                asked[1] = True
                self.keep(loop.create_task(reloads()))

        def updated(uri: str | None) -> None:
            try:
                loop.call_soon_threadsafe(send, uri)
            except RuntimeError:  # that loop is closed: this state serves no one any more
                stop()

        self._updates = updated
        stop = add_update_listener(updated)

    # -- reload --------------------------------------------------------------------------------------------

    async def reload(self, *, announce: bool = True) -> bool:
        """Load the config again; on success swap hosts and notify agents whose list changed. With ``[cluster]``,
        the other replicas are told to reload too (unless ``announce`` is false: the reload one of them asked
        for), so that a changed config file is followed at once everywhere it has arrived."""
        async with self._reloading:
            done = await self._reload()
            if done:
                thaw_builds()  # where builds were frozen (toolcrib serve): the replaced host's cycles can go
        if self.metrics is not None and self._make_host is not None:
            self.metrics.reloads.labels("ok" if done else "rejected").inc()
        if done and announce and self.fanout is not None:
            await self.fanout.publish("reload")
        return done

    async def _reload(self) -> bool:
        if self._make_host is None:
            return False
        try:
            if inspect.iscoroutinefunction(self._make_host):
                new = await self._make_host()
            else:
                new = await anyio.to_thread.run_sync(self._make_host)
        except ConfigError as exc:
            log.error("reload rejected, still serving the previous config:\n%s", exc)
            return False
        except BaseException as exc:
            if not contained(exc):
                raise
            log.error("reload failed, still serving the previous config", exc_info=exc)
            return False
        if not new.agents and self.host.agents:
            # An empty (or emptied, half-written) file is no replacement for a config that serves agents.
            log.error("reload rejected, still serving the previous config: %s defines no agents (is it empty, or being "
                      "written?)", new.loaded.source)
            new.close()
            return False
        # what `toolcrib check` says of it, in a worker thread (it builds every tool's schemas and every agent's
        # view: seconds at 10,000 tools, which the event loop would otherwise spend away from every client)
        problems = [p for p in await anyio.to_thread.run_sync(new.problems) if p.severity == "error"]
        for problem in problems:
            log.warning("after reload: %s", problem)
        new.pipeline.desk = self.desk
        if self.feed is not None:
            new.pipeline.watch(self.feed)
        old, self.host = self.host, new
        for follow in list(self.on_reload):
            await follow()
        changed = []
        compared = set(old.agents) | set(new.agents)
        if self.serves is not None:
            # a process that serves some agents (stdio: one) compares those, and any other one with clients here:
            # building every other agent's views on both hosts, on the event loop, would tell no one anything
            told = {agent for agent, _ in self._buses} | {agent for agent, kept in self._sessions.items() if kept}
            compared &= set(self.serves) | told
        for agent in sorted(compared):
            differing = [name for name in _LISTS
                         if _listed(old, agent, name) != _listed(new, agent, name)]
            if differing:
                changed.append(agent)
                await self.notify_changed(agent, differing)
        log.info("reloaded the config; agents whose tools changed: %s", ", ".join(changed) or "none")
        old.close()
        return True

    async def watch(self, path: Path, interval: float = 1.0) -> None:
        """Reload when the config file, or the Cedar policies it names (``[policy] cedar``), changes (polled: no
        extra dependency), or on SIGHUP."""

        def one(file: Path) -> tuple[int, int] | None:
            try:
                st = os.stat(file)
            except OSError:
                return None
            return st.st_mtime_ns, st.st_size

        def stamp() -> tuple[tuple[int, int] | None, ...] | None:
            config = one(path)
            if config is None:
                return None
            loaded = self.host.loaded
            cedar = loaded.config.policy.cedar
            return (config, one(loaded.base_dir / cedar)) if cedar is not None else (config,)

        last = stamp()
        async with anyio.create_task_group() as tg:
            if hasattr(signal, "SIGHUP"):
                tg.start_soon(self._on_sighup)
            while True:
                await anyio.sleep(interval)
                current = stamp()
                if current is None or current == last:
                    continue
                # An editor may write the file in several steps: reload once it has stopped changing.
                for _ in range(SETTLE_CHECKS):
                    await anyio.sleep(SETTLE_SECONDS)
                    settled, current = current, stamp()
                    if current == settled:
                        break
                last = current
                if current is not None:
                    await self.reload()

    async def _on_sighup(self) -> None:
        try:
            with anyio.open_signal_receiver(signal.SIGHUP) as signals:
                async for _ in signals:
                    await self.reload()
        except NotImplementedError:  # pragma: no cover - platforms without signal handling in the loop
            return


_EVENTS: dict[str, type[ToolsListChanged | ResourcesListChanged | PromptsListChanged]] = {
    "tools": ToolsListChanged, "resources": ResourcesListChanged, "prompts": PromptsListChanged}
_SENDERS = {"tools": "send_tool_list_changed", "resources": "send_resource_list_changed",
            "prompts": "send_prompt_list_changed"}


def build_lists(host: Host, agents: Iterable[str]) -> None:
    """Build what ``agents`` are served first on ``host`` (their views, tools lists and search indexes:
    ``AgentView.prepare``), as the host is built, in its worker thread: neither the first requests nor a reload,
    which compares the tools of the old host with the new one's, then build them on the event loop, where every
    other request would wait. A name the config does not define is passed over."""
    for agent in agents:
        if agent in host.rules:
            host.view(agent).prepare()


_LISTS = ("tools", "resources", "prompts")


def _listed(host: Host, agent: str, name: str) -> Any:
    """What ``agent`` sees of one list on ``host`` (None when there is no such agent)."""
    if agent not in host.rules:
        return None
    view = host.view(agent)
    if name == "resources":
        return view.mcp_resources, view.mcp_templates
    return view.mcp_tools if name == "tools" else view.mcp_prompts
