"""What the MCP front end keeps on the shared store of ``[cluster]`` (``toolcrib.cluster.Store``): the approvals
2026-07-28 calls carry, used up once in the fleet (``RedisOnce``); 2025-11-25 sessions every replica can serve
(``RedisSessions``) and their events (``RedisEvents``); MCP tasks any replica answers for (``RedisTasks``).
Sessions are never named by their id in Redis or between replicas (``session_digest``): the id is the client's
secret."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from toolcrib.approvals import (
    ANSWERED,
    MAX_PENDING,
    NOT_PENDING,
    WRONG_DIGEST,
    Desk,
    DeskFull,
    DeskUnreachable,
    Pending,
    new_id,
)
from toolcrib.cluster import TASK_ID, Fanout, Store, unreachable
from toolcrib.mcp.roundtrip import OnceUnreachable
from toolcrib.mcp.sessions import EVENTS_PER_SESSION, MESSAGE, SessionRecord, ends
from toolcrib.mcp.tasks import NOT_FOUND, TERMINAL, Task, Tasks, TasksUnavailable, Work

log = logging.getLogger("toolcrib.cluster")


class RedisOnce:
    """The approvals 2026-07-28 calls carry between rounds, used up on Redis (``toolcrib.mcp.roundtrip.Once``): one
    ``SET NX`` per claim, so of two replicas given the same approval at once exactly one runs the call. The key is
    ``<key_prefix>once:<digest of the token>`` and expires when the state it came in does; the token itself is
    random, sealed in the state, and never stored. While Redis does not answer, no approval is used (fail closed:
    ``fail_open`` is for limits only)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def claim(self, token: str, until: float) -> bool:
        client = self.store.client
        if client is None:
            raise OnceUnreachable
        key = self.store.key("once", hashlib.sha256(token.encode()).hexdigest()[:32])
        milliseconds = max(1, math.ceil((until - time.time()) * 1000))
        try:
            first = await client.set(key, b"1", nx=True, px=milliseconds)
        except unreachable() as exc:
            self.store.failed(exc)
            raise OnceUnreachable from None
        self.store.answered()
        return bool(first)


# KEYS: the agent's session set. ARGV: the session's digest, how many the agent may have, ms it lives idle.
# Answers 1 when there was room (the session now counts), 0 when the agent has as many as it may.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""


def session_digest(agent: str, session: str) -> str:
    """How a session is named in Redis and between replicas: never by its id, which is the client's secret."""
    return hashlib.sha256(f"{agent}\0{session}".encode()).hexdigest()[:32]


class RedisEvents(EventStore):
    """One session's events on a Redis stream (``<key_prefix>stream:<session digest>``, its newest
    ``EVENTS_PER_SESSION``, expiring with the session), for the SDK's transport (``EventStore``): event ids are
    the stream's own. A client that reconnects with ``Last-Event-ID``, on any replica, gets what its stream got
    since, then the rest as any replica stores it, until its response (a request's stream) or until it leaves
    (the standalone stream). While Redis does not answer, events are not kept (the live stream still gets them)."""

    def __init__(self, store: Store, key: str) -> None:
        self.store = store
        self.key = key
        self._unkept = 0
        self.newest = "0-0"  # the newest event of the session this replica knows of (stored, or when taken up)
        self.closed = False

    def close(self) -> None:
        """The session ended: what is still sent is not kept (it would make its events outlive it)."""
        self.closed = True

    async def store_event(self, stream_id: str, message: Any) -> str:
        """Keep one event (one ``XADD``; the stream's expiry is kept by the session's). A priming event is not
        stored: its id names its stream and the newest event this replica knows of the session, so a client
        resuming from it gets every event of its stream after that one."""
        if message is None:
            return f"{self.newest}~{stream_id}"
        client = self.store.client
        added: Any = None
        if client is not None and not self.closed:
            data = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            try:
                added = await client.xadd(self.key, {"s": stream_id, "m": data}, maxlen=EVENTS_PER_SESSION,
                                          approximate=True, nomkstream=True)  # never again once the session ended
            except unreachable() as exc:
                self.store.failed(exc)
        if added is None:
            self._unkept += 1
            return f"unkept-{self._unkept}"  # not resumable from: a client that comes back with it starts afresh
        self.store.answered()
        self.newest = added.decode() if isinstance(added, bytes) else str(added)
        return self.newest

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        client = self.store.client
        if client is None or len(last_event_id) > 300:
            return None
        cursor, primed, stream = last_event_id.partition("~")
        if not _EVENT_ID.fullmatch(cursor) or (primed and not stream):
            return None
        found: Any = [(cursor, {b"s": stream.encode()})] if primed else None
        if found is None:
            try:
                found = await client.xrange(self.key, cursor, cursor)
            except unreachable() as exc:
                self.store.failed(exc)
                return None
        if not found:
            return None
        stream = found[0][1].get(b"s", b"").decode()
        block = max(50, int(self.store.config.timeout * 500))  # a blocking read answers within the store's timeout
        first = True
        while True:
            entries: Any
            try:
                if first:
                    entries = await client.xrange(self.key, f"({cursor}", "+", count=200)
                    first = len(entries) == 200
                else:
                    answer: Any = await client.xread({self.key: cursor}, count=200, block=block)
                    entries = answer[0][1] if answer else []
            except unreachable() as exc:
                self.store.failed(exc)
                return None  # the stream ends; the client reconnects with the last event it got
            for event_id, fields in entries:
                cursor = event_id.decode()
                data = fields.get(b"m", b"")
                if fields.get(b"s", b"").decode() != stream or not data:
                    continue
                try:
                    message = MESSAGE.validate_json(data)
                except ValueError:
                    continue
                await send_callback(EventMessage(message, cursor))
                if ends(json.loads(data), stream):
                    return None


class RedisSessions:
    """2025-11-25 sessions every replica serves (``toolcrib.mcp.sessions``): per session a hash
    ``<key_prefix>session:<digest>`` (agent, owner, protocol version, the client's initialize params, what it set
    since, the replica it listens on) and its events, both expiring ``idle`` seconds after its last request; per
    agent a sorted set ``<key_prefix>sessions:<agent digest>`` of its sessions by expiry, which caps them at
    ``cap``. While Redis does not answer, a new session is opened in its replica only, and a session another
    replica opened cannot be taken up (404: the client opens a new one)."""

    def __init__(self, store: Store, fanout: Fanout, idle: float, cap: int) -> None:
        self.store = store
        self.fanout = fanout
        self.replica = fanout.replica
        self.ttl_ms = max(1000, math.ceil(idle * 1000))
        self.cap = cap
        self._touched: dict[str, float] = {}
        self._elsewhere: set[str] = set()  # the sessions whose client listens on another replica (digests)
        self._warned: set[str] = set()  # what the log said could not be done, while Redis does not answer

    def tells(self, agent: str, session: str) -> bool:
        """Whether this replica tells the session of changes: its client last opened its stream here (or has not
        opened one anywhere else)."""
        return session_digest(agent, session) not in self._elsewhere

    def heard(self, kind: str, digest: str) -> None:
        """Another replica said its client listens there now (``listening``), or the session ended."""
        if kind == "listening":
            self._elsewhere.add(digest)
            if len(self._elsewhere) > 64 * self.cap:  # bounded: forgetting one at worst tells its client twice
                self._elsewhere.pop()
        else:
            self._elsewhere.discard(digest)

    def _key(self, agent: str, session: str) -> str:
        return self.store.key("session", session_digest(agent, session))

    def _set(self, agent: str) -> str:
        return self.store.key("sessions", hashlib.sha256(agent.encode()).hexdigest()[:32])

    def events(self, agent: str, session: str, after: str = "") -> RedisEvents:
        events = RedisEvents(self.store, self.store.key("stream", session_digest(agent, session)))
        if _EVENT_ID.fullmatch(after):
            events.newest = after
        return events

    async def _run(self, what: str, request: Callable[[Any], Awaitable[Any]]) -> tuple[bool, Any]:
        client = self.store.client
        if client is None:
            return False, None
        try:
            answer = await request(client)
        except unreachable() as exc:
            self.store.failed(exc)
            if what in self._warned:  # said once per outage
                return False, None
            self._warned.add(what)
            if what == "looked up":
                log.warning("a session another replica may hold could not be looked up on the shared store; its "
                            "client is told it does not exist (404) and opens a new one")
            else:
                log.warning("a session could not be %s on the shared store; it is served by this replica only",
                            what)
            return False, None
        self.store.answered()
        self._warned.clear()
        return True, answer

    async def reserve(self, agent: str, session: str) -> bool:
        """Count a session about to open, and start its event stream (with an event of no stream: events are
        only ever added to a stream that exists, so none outlives its session)."""
        events = self.store.key("stream", session_digest(agent, session))

        async def count(client: Any) -> Any:
            admitted = await client.eval(_RESERVE, 1, self._set(agent), session_digest(agent, session), self.cap,
                                         self.ttl_ms)
            if admitted == 1:
                async with client.pipeline(transaction=False) as pipe:
                    pipe.xadd(events, {"s": "", "m": b""})
                    pipe.pexpire(events, self.ttl_ms)
                    await pipe.execute()
            return admitted

        done, answer = await self._run("counted", count)
        return not done or answer == 1

    async def opened(self, agent: str, session: str, record: SessionRecord) -> None:
        fields = {"agent": agent, "owner": record.owner, "version": record.version, "params": record.params,
                  "state": json.dumps(record.state), "home": record.home}

        async def write(client: Any) -> None:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hset(self._key(agent, session), mapping=fields)
                pipe.pexpire(self._key(agent, session), self.ttl_ms)
                await pipe.execute()

        await self._run("recorded", write)
        self._touched[session] = time.monotonic()

    async def find(self, agent: str, session: str) -> SessionRecord | None:
        async def read(client: Any) -> Any:
            async with client.pipeline(transaction=False) as pipe:
                pipe.hgetall(self._key(agent, session))
                pipe.xrevrange(self.store.key("stream", session_digest(agent, session)), count=1)
                return await pipe.execute()

        done, answer = await self._run("looked up", read)
        if not done or not answer[0]:
            return None
        fields, newest = answer

        try:
            text = {k.decode(): v.decode() for k, v in fields.items()}
        except UnicodeDecodeError:  # not a record toolcrib wrote: as if there were none
            log.warning("the session record of agent %r in Redis is not one toolcrib can read; it is ignored", agent)
            return None
        if text.get("agent") != agent:
            return None
        try:
            state = json.loads(text.get("state", "{}"))
        except ValueError:
            state = {}
        if text.get("home", "") != self.replica:
            self.heard("listening", session_digest(agent, session))
        await self.touch(agent, session)
        return SessionRecord(owner=text.get("owner", ""), version=text.get("version", ""),
                             params=text.get("params", ""), state=state if isinstance(state, dict) else {},
                             home=text.get("home", ""), newest_event=newest[0][0].decode() if newest else "")

    async def touch(self, agent: str, session: str) -> None:
        """Keep the session's record alive: at most every tenth of its idle time from one replica."""
        now = time.monotonic()
        if now - self._touched.get(session, -math.inf) < self.ttl_ms / 10_000:
            return
        self._touched[session] = now
        if len(self._touched) > 4 * self.cap:
            self._touched = {k: v for k, v in self._touched.items() if now - v < self.ttl_ms / 1000}

        async def refresh(client: Any) -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.pexpire(self._key(agent, session), self.ttl_ms)
                pipe.pexpire(self.store.key("stream", session_digest(agent, session)), self.ttl_ms)
                pipe.eval(_RESERVE, 1, self._set(agent), session_digest(agent, session), 2 ** 31, self.ttl_ms)
                await pipe.execute()

        await self._run("kept", refresh)

    async def save_state(self, agent: str, session: str, state: dict[str, Any]) -> None:
        """What the client set, for every replica: stored, and the replicas holding the session told to read it."""
        done, _ = await self._run("updated", lambda c: c.hset(self._key(agent, session), "state", json.dumps(state)))
        if done:
            await self.fanout.publish("session_state", session=session_digest(agent, session))

    async def listening(self, agent: str, session: str) -> None:
        self._elsewhere.discard(session_digest(agent, session))
        await self._run("updated", lambda c: c.hset(self._key(agent, session), "home", self.replica))
        await self.fanout.publish("listening", session=session_digest(agent, session))
        self._touched.pop(session, None)
        await self.touch(agent, session)

    async def ended(self, agent: str, session: str) -> None:
        digest = session_digest(agent, session)
        self._touched.pop(session, None)

        async def forget(client: Any) -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.delete(self._key(agent, session), self.store.key("stream", digest))
                pipe.zrem(self._set(agent), digest)
                await pipe.execute()

        await self._run("ended", forget)
        await self.fanout.publish("session_ended", session=digest)


_EVENT_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


__all__ = ["RedisEvents", "RedisOnce", "RedisSessions", "session_digest"]


# Hold a call for an operator unless its agent has MAX_PENDING held already (on any replica): count and store in one
# step. KEYS: the record, every pending id by expiry, the agent's; ARGV: the record, its expiry (s), its time to
# live (ms), now (s), MAX_PENDING, its id.
_HOLD = """
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[6])
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return 1
"""


def _pending(raw: bytes | str, approval_id: str) -> Pending | None:
    """A pending approval's record as Redis holds it; None (and a warning) for one that is not one: a damaged or
    foreign record is skipped, and the rest served."""
    try:
        return Pending.from_record(json.loads(raw))
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        log.warning("the approval record %r in Redis is not one toolcrib can read (%s); it is skipped",
                    approval_id, exc)
        return None


class RedisDesk(Desk):
    """Pending approvals every replica sees (``toolcrib.approvals``): a call held on one replica is listed, and
    answered, on any. ``<prefix>approval:<id>`` holds what the operator is shown (the arguments included) until
    the call's approval expires, ``<prefix>approvals`` lists the ids by expiry, and an answer is one ``SET NX`` of
    ``<prefix>approval:<id>:answer`` (of two operators answering at once, one answer counts), which the replica
    holding the call reads within ``POLL`` seconds. While Redis does not answer, no call is held and none is
    approved (fail closed)."""

    POLL = 0.25  # seconds between the holding replica's looks for an answer

    def __init__(self, store: Store, link_key: bytes | None = None) -> None:
        super().__init__(link_key)
        self.store = store

    def _client(self) -> Any:
        client = self.store.client
        if client is None:
            raise DeskUnreachable
        return client

    async def ask(self, agent: str, principal: Any, tool: str, arguments: Mapping[str, Any], rule: str,
                  call_id: str, version: str, timeout: float) -> tuple[bool | None, str]:
        client = self._client()
        now = time.time()
        pending = Pending(new_id(), agent, principal, tool, dict(arguments), rule, call_id, version, now, now + timeout)
        key, answered = self.store.key("approval", pending.id), self.store.key("approval", pending.id, "answer")
        # the agent's pending ids, by expiry: what MAX_PENDING counts
        mine = self.store.key("approvals", "agent", agent)
        ttl = max(1, math.ceil(timeout * 1000))
        try:  # counted and stored in one step, so that replicas holding an agent's calls at once never pass the cap
            held = await client.eval(_HOLD, 3, key, self.store.key("approvals"), mine,
                                     json.dumps(pending.record(), default=repr), pending.expires, ttl, now,
                                     MAX_PENDING, pending.id)
        except unreachable() as exc:
            self.store.failed(exc)
            raise DeskUnreachable from None
        if not held:
            raise DeskFull
        try:
            await self._tell(pending)
            while True:
                try:
                    answer = await client.get(answered)
                except unreachable() as exc:  # an answer given meanwhile is read when Redis answers again
                    self.store.failed(exc)
                    answer = None
                if answer is not None:
                    approve, by = json.loads(answer)
                    return bool(approve), str(by)
                remaining = pending.expires - time.time()
                if remaining <= 0:
                    return None, ""
                await anyio.sleep(min(self.POLL, remaining))
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    async with client.pipeline(transaction=False) as pipe:
                        pipe.delete(key, answered)
                        pipe.zrem(self.store.key("approvals"), pending.id)
                        pipe.zrem(mine, pending.id)
                        await pipe.execute()
                except unreachable() as exc:  # the records expire by themselves
                    self.store.failed(exc)

    async def end_session(self, session_id: str, until: float) -> None:
        """Signed out on every replica: ``<prefix>console:ended:<id>`` until the cookie would have expired."""
        ttl = max(1, math.ceil((until - time.time()) * 1000))
        try:
            await self._client().set(self.store.key("console", "ended", session_id), "1", px=ttl)
        except unreachable() as exc:
            self.store.failed(exc)
            raise DeskUnreachable from None

    async def session_ended(self, session_id: str) -> bool:
        try:
            return bool(await self._client().exists(self.store.key("console", "ended", session_id)))
        except unreachable() as exc:
            self.store.failed(exc)
            raise DeskUnreachable from None

    async def pending(self) -> list[Pending]:
        client = self._client()
        index = self.store.key("approvals")
        try:
            now = time.time()
            await client.zremrangebyscore(index, "-inf", now)
            ids = [i.decode() if isinstance(i, bytes) else i for i in await client.zrange(index, 0, -1)]
            records = await client.mget([self.store.key("approval", i) for i in ids]) if ids else []
        except unreachable() as exc:
            self.store.failed(exc)
            raise DeskUnreachable from None
        found = [p for i, r in zip(ids, records, strict=True) if r is not None
                 for p in [_pending(r, i)] if p is not None]
        return sorted((p for p in found if p.expires > now), key=lambda p: p.created)

    async def get(self, approval_id: str) -> Pending | None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", approval_id):
            return None
        try:
            record = await self._client().get(self.store.key("approval", approval_id))
        except unreachable() as exc:
            self.store.failed(exc)
            raise DeskUnreachable from None
        pending = _pending(record, approval_id) if record is not None else None
        return pending if pending is not None and pending.expires > time.time() else None

    async def answer(self, approval_id: str, approve: bool, given_digest: str, by: str) -> str:
        pending = await self.get(approval_id)
        if pending is None:
            return NOT_PENDING
        if not hmac.compare_digest(given_digest.encode(), pending.digest.encode()):
            return WRONG_DIGEST
        ttl = max(1, math.ceil((pending.expires - time.time()) * 1000))
        try:
            first = await self._client().set(self.store.key("approval", approval_id, "answer"),
                                             json.dumps([approve, by]), nx=True, px=ttl)
        except unreachable() as exc:
            self.store.failed(exc)
            raise DeskUnreachable from None
        return ANSWERED if first else NOT_PENDING


# KEYS: the agent's task set, the task's record, its lease. ARGV: now, its expiry, the agent's bound, its id, its
# record, its time to live (ms), the lease (ms), this replica. Counted and stored in one step, so that replicas making
# an agent's tasks at once never pass its bound.
_ADMIT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
redis.call('SET', KEYS[3], ARGV[8], 'PX', ARGV[7])
return 1
"""
_CANCEL = "cancel"
_LAPSED = "the replica that ran it stopped before it ended"
_STOPPED = "the replica that ran it was stopped before it ended"


def _down() -> tuple[type[BaseException], ...]:
    """What a request to the store that did not get its answer raises, or its not being open."""
    return (TasksUnavailable, *unreachable())


class RedisTasks(Tasks):
    """MCP tasks every replica finds (``toolcrib.mcp.tasks``). A task runs on the replica that made it, and its
    record (status, result or error, open questions; never its call's arguments) is ``<prefix>task:<id>``,
    written at each change and kept for its time to live, so that any replica answers ``tasks/get``.
    ``<prefix>task:<id>:lease`` is held by the running replica and renewed every third of ``lease_seconds``: a
    task still working whose lease lapsed (its replica was killed) is failed, saying so, by the replica that finds
    it. A cancel (``:cancel``) or answers (``:answers``) given on another replica are written beside it and
    announced on the event channel; the running replica takes them at once, or at its next renewal if the
    announcement was lost. ``<prefix>tasks:agent:<agent>`` holds an agent's task ids by expiry: its bound counts
    the whole fleet's. While Redis does not answer, no task is made and ``tasks/*`` answer an internal error."""

    def __init__(self, store: Store, fanout: Fanout) -> None:
        super().__init__()
        self.store = store
        self.fanout = fanout
        self._lease_ms = max(1, round(store.config.lease_seconds * 1000))
        self._writes: dict[str, asyncio.Lock] = {}  # one write of a task's record at a time, the latest state
        self._dirty: set[str] = set()  # tasks changed since their record was last written
        self._sending: set[asyncio.Task[None]] = set()
        self._renewing: asyncio.Task[None] | None = None

    def _client(self) -> Any:
        client = self.store.client
        if client is None:
            raise TasksUnavailable("the shared store where tasks are kept is not open")
        return client

    def _failed(self, exc: BaseException) -> TasksUnavailable:
        self.store.failed(exc)
        return TasksUnavailable("the shared store where tasks are kept is unreachable; try again shortly")

    async def start(self, agent: str, principal: str | None, tool: str, ttl: float, most: int,
                    work: Work) -> Task | None:
        task = Task(secrets.token_urlsafe(24), agent, principal, tool, ttl)
        ttl_ms = max(1, math.ceil(ttl * 1000))
        try:  # written before it is answered with: a tasks/get on any replica finds it at once
            admitted = await self._client().eval(
                _ADMIT, 3, self.store.key("tasks", "agent", agent), self.store.key("task", task.id),
                self.store.key("task", task.id, "lease"), time.time(), task.created + ttl, most, task.id,
                json.dumps(task.record()), ttl_ms, self._lease_ms, self.fanout.replica)
        except unreachable() as exc:
            raise self._failed(exc) from None
        self.store.answered()
        if not admitted:
            return None
        task.changed = self._changed
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self._renew(), name="toolcrib task leases")
        return self._begin(task, work)

    def _changed(self, task: Task) -> None:
        if task.id in self._dirty:
            return  # a write on its way takes the latest state
        self._dirty.add(task.id)
        sending = asyncio.get_running_loop().create_task(self._write(task))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _write(self, task: Task) -> None:
        lock = self._writes.setdefault(task.id, asyncio.Lock())
        async with lock:
            self._dirty.discard(task.id)
            left = math.ceil((task.created + task.ttl - time.time()) * 1000)
            if left <= 0:
                return
            try:
                async with self._client().pipeline(transaction=True) as pipe:
                    pipe.set(self.store.key("task", task.id), json.dumps(task.record()), px=left, xx=True)
                    if task.status in TERMINAL:
                        pipe.delete(self.store.key("task", task.id, "lease"))
                    await pipe.execute()
            except _down() as exc:  # written again at the next renewal
                if not isinstance(exc, TasksUnavailable):
                    self.store.failed(exc)
                self._dirty.add(task.id)
                return
        if task.status in TERMINAL and task.id not in self._dirty:
            self._writes.pop(task.id, None)

    async def _renew(self) -> None:
        """Renew the leases of the tasks running here; take what other replicas left for them; write the records
        a lost connection kept from being written."""
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            running = [task for task in self._tasks.values() if task.status not in TERMINAL]
            for task in [t for t in self._tasks.values() if t.id in self._dirty]:
                self._dirty.discard(task.id)
                self._changed(task)
            if not running and not self._dirty:
                if not any(task.status not in TERMINAL for task in self._tasks.values()):
                    self._renewing = None
                    return
                continue
            try:
                async with self._client().pipeline(transaction=False) as pipe:
                    for task in running:
                        pipe.set(self.store.key("task", task.id, "lease"), self.fanout.replica, px=self._lease_ms)
                    await pipe.execute()
                for task in running:
                    await self._take(task)
            except _down() as exc:
                if not isinstance(exc, TasksUnavailable):
                    self.store.failed(exc)

    async def heard(self, task_id: str) -> None:
        """Another replica left a cancel or answers for a task: take them, if it runs here."""
        task = self._tasks.get(task_id)
        if task is not None and task.status not in TERMINAL:
            try:
                await self._take(task)
            except _down() as exc:  # taken at the next renewal
                if not isinstance(exc, TasksUnavailable):
                    self.store.failed(exc)

    async def _take(self, task: Task) -> None:
        key = self.store.key("task", task.id)
        async with self._client().pipeline(transaction=True) as pipe:
            pipe.get(f"{key}:cancel")
            pipe.hgetall(f"{key}:answers")
            pipe.delete(f"{key}:cancel", f"{key}:answers")
            cancel, answers, _ = await pipe.execute()
        if cancel is not None:
            failure = json.loads(cancel)
            if failure == _CANCEL:
                self._stop(task)
            else:
                await super().fail(task, failure["code"], failure["message"], failure["why"])
            return
        task.take({k.decode() if isinstance(k, bytes) else k: json.loads(v) for k, v in answers.items()})

    async def find(self, agent: str, principal: str | None, task_id: str) -> Task:
        if task_id in self._tasks:
            return await super().find(agent, principal, task_id)  # it runs here: its own state
        if not TASK_ID.fullmatch(task_id):
            raise MCPError(code=INVALID_PARAMS, message=NOT_FOUND)
        key = self.store.key("task", task_id)
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                pipe.get(key)
                pipe.exists(f"{key}:lease")
                record, leased = await pipe.execute()
        except unreachable() as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(self._failed(exc))) from None
        except TasksUnavailable as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None
        task = Task.of_record(json.loads(record)) if record is not None else None
        if task is None or task.agent != agent or task.principal != principal or task.expired(time.time()):
            raise MCPError(code=INVALID_PARAMS, message=NOT_FOUND)
        if task.status not in TERMINAL and not leased:
            task.asked = {}
            task.error = {"code": INTERNAL_ERROR, "message": f"Internal error: {_LAPSED}"}
            task.touch("failed", _LAPSED)
            await self._write(task)
        return task

    async def answer(self, task: Task, responses: Mapping[str, Any]) -> None:
        if task.runner is not None:
            return await super().answer(task, responses)
        taken = task.checked(responses)
        if taken:
            await self._leave(task, f"{self.store.key('task', task.id)}:answers",
                              {k: json.dumps(v) for k, v in taken.items()})

    async def cancel(self, task: Task) -> None:
        if task.runner is not None or task.status in TERMINAL:
            return await super().cancel(task)
        await self._leave(task, f"{self.store.key('task', task.id)}:cancel", json.dumps(_CANCEL))

    async def fail(self, task: Task, code: int, message: str, why: str) -> None:
        if task.runner is not None or task.status in TERMINAL:
            return await super().fail(task, code, message, why)
        await self._leave(task, f"{self.store.key('task', task.id)}:cancel",
                          json.dumps({"code": code, "message": message, "why": why}))
        task.error = {"code": code, "message": message}
        task.asked = {}
        task.touch("failed", why)
        await self._write(task)

    async def _leave(self, task: Task, key: str, value: str | dict[str, str]) -> None:
        """Leave a cancel or answers for the replica that runs ``task``, and tell it."""
        left = max(1, math.ceil((task.created + task.ttl - time.time()) * 1000))
        try:
            async with self._client().pipeline(transaction=True) as pipe:
                if isinstance(value, dict):
                    pipe.hset(key, mapping=value)
                    pipe.pexpire(key, left)
                else:
                    pipe.set(key, value, px=left)
                await pipe.execute()
        except unreachable() as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(self._failed(exc))) from None
        except TasksUnavailable as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None
        await self.fanout.publish("task_update", task=task.id)

    async def close(self) -> None:
        """The replica stops: its tasks still running end failed, saying so (written, so that the replicas that
        go on answer it), rather than wait for their leases to lapse."""
        if self._renewing is not None:
            self._renewing.cancel()
        with anyio.CancelScope(shield=True):
            for task in [t for t in self._tasks.values() if t.status not in TERMINAL]:
                await Tasks.fail(self, task, INTERNAL_ERROR, f"Internal error: {_STOPPED}", _STOPPED)
                await self._write(task)
