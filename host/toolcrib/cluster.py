"""State every replica shares (``[cluster]``), on Redis: the counts of ``[agents.<name>.limits]`` and the events every
replica hears (``Fanout``); what the MCP front end keeps there (sessions, their events, approvals used up) is in
``toolcrib.mcp.fleet``, on the same ``Store``.

Without ``[cluster]`` nothing here is imported and each process keeps its own counts (``toolcrib.limits``). With it,
``serve`` opens one ``Store`` (a connection pool of the ``redis`` client's asyncio API) and counts every replica's
calls in one ``RedisLimitBook``:

- a rate is a token bucket per limit, taken and refilled in one server-side script on Redis' own clock, so
  replicas whose clocks differ still agree;
- ``in_flight`` is a sorted set of leases per limit, each scored with the time it expires: a running call renews
  its lease every third of ``lease_seconds``; a lease whose replica died (SIGKILL, a lost node) is not renewed
  and stops counting within ``lease_seconds``;
- one script checks every limit covering a call and takes them all, or none: two replicas never both take the
  last place.

Keys are ``<key_prefix>limit:<digest>:rate`` and ``:flight``, where the digest is of the limit as the config
states it (agent, tool pattern, rate, in_flight): a limit a reload does not change keeps its count, a changed one
starts afresh, as in memory. Every key expires when it is no longer used. Nothing in a key comes from a request;
lease ids are random and never leave the process.

While Redis does not answer (``timeout`` seconds per request), a call under a limit is refused with a result that
says the limit store is unreachable, or let through uncounted with ``fail_open = true``; the client reconnects by
itself, and counts resume where Redis kept them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from toolcrib.config import ClusterConfig, LoadedConfig, expand
from toolcrib.errors import ConfigError, Problem
from toolcrib.limits import Lease, Limit, LimitBook, Limiter, Refusal, _refusal

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("toolcrib.cluster")

# KEYS: per limit, its bucket and its lease set. ARGV: lease id, lease ms, then per limit: count, period ms,
# in_flight (0: that part is not limited). Answers {0, 0} when the call is taken through every limit, else
# {the 1-based limit that is full, ms until it lets one more through (-1: when a running call ends)}.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local n = (#ARGV - 2) / 3
local have = {}
for i = 1, n do
  local count = tonumber(ARGV[3 * i])
  local period = tonumber(ARGV[3 * i + 1])
  local flight = tonumber(ARGV[3 * i + 2])
  if flight > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2 * i], '-inf', now)
    if redis.call('ZCARD', KEYS[2 * i]) >= flight then
      return {i, -1}
    end
  end
  if count > 0 then
    local state = redis.call('HMGET', KEYS[2 * i - 1], 'tokens', 'at')
    local tokens = tonumber(state[1]) or count
    local at = tonumber(state[2]) or now
    tokens = math.min(count, tokens + math.max(0, now - at) * count / period)
    if tokens < 1 then
      return {i, math.ceil((1 - tokens) * period / count)}
    end
    have[i] = tokens
  end
end
for i = 1, n do
  local count = tonumber(ARGV[3 * i])
  local period = tonumber(ARGV[3 * i + 1])
  if count > 0 then
    redis.call('HSET', KEYS[2 * i - 1], 'tokens', tostring(have[i] - 1), 'at', now)
    redis.call('PEXPIRE', KEYS[2 * i - 1], math.ceil(period * 2))
  end
  if tonumber(ARGV[3 * i + 2]) > 0 then
    redis.call('ZADD', KEYS[2 * i], now + lease, ARGV[1])
    redis.call('PEXPIRE', KEYS[2 * i], lease * 2)
  end
end
return {0, 0}
"""

# KEYS: lease sets. ARGV: lease ms, then one lease id per key: each lease that is still held expires a lease from
# now (on Redis' clock); one already gone stays gone.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], lease * 2)
end
return #KEYS
"""


def unreachable() -> tuple[type[BaseException], ...]:
    """What a request to Redis that did not get its answer raises: no connection, no answer in time, or an error
    reply (out of memory, a replica that is read-only, a wrong password)."""
    from redis.exceptions import RedisError

    return (RedisError, OSError, asyncio.TimeoutError)


class Store:
    """The Redis every replica shares: one client (a connection pool) for the process, opened in the serving loop.
    ``up`` says whether its last request was answered; the change either way is logged once."""

    def __init__(self, config: ClusterConfig, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.url = expand(config.redis_url, "the URL", env)  # a ValueError names an unset one
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("expected a redis://, rediss:// or unix:// URL once its variables are expanded (the "
                             "value is not shown: it may hold a password)")
        parts = urlsplit(self.url)  # where it is, for the log: never the password
        self.where = f"{parts.hostname}:{parts.port or 6379}{parts.path}" if parts.hostname else parts.path
        self.up = True
        self.client: Redis | None = None

    async def open(self) -> None:
        import redis.asyncio  # an ImportError without the [cluster] extra (``limiter`` says how to install it)

        timeout = self.config.timeout
        self.client = redis.asyncio.Redis.from_url(self.url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                                   retry_on_timeout=False, health_check_interval=15)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    def key(self, *parts: str) -> str:
        return self.config.key_prefix + ":".join(parts)

    def answered(self) -> None:
        if not self.up:
            self.up = True
            log.warning("the shared store (Redis at %s) answers again", self.where)

    def failed(self, exc: BaseException) -> None:
        if self.up:
            self.up = False
            log.error("the shared store (Redis at %s) is unreachable: %s", self.where,
                      f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)

    async def ping(self) -> bool:
        """Whether Redis answers now (``/readyz``)."""
        if self.client is None:
            return False
        try:
            await asyncio.wait_for(self.client.ping(), self.config.timeout)
        except unreachable() as exc:
            self.failed(exc)
            return False
        self.answered()
        return True


class RedisLimitBook:
    """``toolcrib.limits.Limiter`` on a ``Store``: every replica's calls counted together. ``open`` starts the
    task that renews the leases of this process's running calls and gives back the ones that ended; ``close``
    gives every lease back."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fail_open = store.config.fail_open
        self._lease_ms = max(1, round(store.config.lease_seconds * 1000))
        self._held: dict[str, tuple[str, ...]] = {}  # lease id -> the lease sets it is in
        self._ended: list[tuple[str, tuple[str, ...]]] = []
        self._lock = threading.Lock()  # leases end on worker threads too
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._keys: dict[tuple[Any, ...], tuple[str, str]] = {}
        self._admit: Any = None
        self._renew: Any = None

    async def open(self) -> None:
        client = self.store.client
        assert client is not None, "open the store first"
        self._admit, self._renew = client.register_script(_ADMIT), client.register_script(_RENEW)
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._task = asyncio.create_task(self._maintain(), name="toolcrib-leases")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        with self._lock:
            ended = [*self._ended, *self._held.items()]
            self._ended, self._held = [], {}
        await self._give_back(ended)

    def keys(self, limit: Limit) -> tuple[str, str]:
        """The bucket and the lease set of one limit."""
        found = self._keys.get(limit.key)
        if found is None:
            digest = hashlib.sha256(json.dumps(limit.key).encode()).hexdigest()[:24]
            found = self._keys[limit.key] = (self.store.key("limit", digest, "rate"),
                                             self.store.key("limit", digest, "flight"))
        return found

    async def admit(self, agent: str, limits: list[Limit]) -> Refusal | Lease:
        lease_id = secrets.token_hex(12)
        keys: list[str] = []
        argv: list[Any] = [lease_id, self._lease_ms]
        for limit in limits:
            keys += self.keys(limit)
            argv += [limit.rate.count if limit.rate else 0, round(limit.rate.seconds * 1000) if limit.rate else 0,
                     limit.in_flight or 0]
        try:
            full, wait = await self._admit(keys=keys, args=argv)
        except unreachable() as exc:
            self.store.failed(exc)
            if self.fail_open:
                return Lease(self, None)
            return Refusal(f"Rate limited: agent {agent!r} has limits, and the store that counts them across "
                           "replicas is unreachable; try again shortly.", "limit store", None)
        self.store.answered()
        if full:
            limit = limits[int(full) - 1]
            return _refusal(agent, limit, None if int(wait) < 0 else int(wait) / 1000)
        flights = tuple(self.keys(limit)[1] for limit in limits if limit.in_flight is not None)
        if not flights:
            return Lease(self, None)
        with self._lock:
            self._held[lease_id] = flights
        return Lease(self, lease_id)

    def leave(self, token: Any) -> Awaitable[None] | None:
        """On the serving loop (the call is over): an awaitable that gives the places back, so that the next call
        finds them free; from a worker thread (a sync handler that outlived its call ended): given back by the
        maintaining task, soon."""
        if token is None:
            return None
        with self._lock:
            flights = self._held.pop(token, None)
        if flights is None:
            return None
        loop, wake = self._loop, self._wake
        if loop is not None and _running_loop() is loop:
            return self._give_back([(token, flights)])
        with self._lock:
            self._ended.append((token, flights))
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the lease expires by itself
                loop.call_soon_threadsafe(wake.set)
        return None

    async def _maintain(self) -> None:
        """Give back what ended (at once) and renew what runs (every third of a lease), until cancelled."""
        assert self._wake is not None
        every = self._lease_ms / 3000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), every)
            self._wake.clear()
            with self._lock:
                ended, self._ended = self._ended, []
                held = list(self._held.items())
            try:
                await self._give_back(ended)
                if held:
                    await self._renew_all(held)
            except Exception:  # never the end of renewing: running calls would lose their places
                log.exception("the leases of running calls could not be renewed or given back; trying again")

    async def _give_back(self, ended: list[tuple[str, tuple[str, ...]]]) -> None:
        client = self.store.client
        if not ended or client is None:
            return
        try:
            async with client.pipeline(transaction=False) as pipe:
                for lease_id, flights in ended:
                    for key in flights:
                        pipe.zrem(key, lease_id)
                await pipe.execute()
        except unreachable() as exc:  # each lease expires by itself within lease_seconds
            self.store.failed(exc)
        else:
            self.store.answered()

    async def _renew_all(self, held: list[tuple[str, tuple[str, ...]]]) -> None:
        keys = [key for _, flights in held for key in flights]
        ids = [lease_id for lease_id, flights in held for _ in flights]
        try:
            await self._renew(keys=keys, args=[self._lease_ms, *ids])
        except unreachable() as exc:
            self.store.failed(exc)
        else:
            self.store.answered()


_EVENT_KINDS = frozenset({"resource_updated", "reload", "listening", "session_ended", "session_state", "task_update"})
_DIGEST = re.compile(r"[0-9a-f]{32}")
TASK_ID = re.compile(r"[A-Za-z0-9_-]{32}")  # an MCP task's id as toolcrib makes it: 24 random bytes, URL-safe
MAX_EVENT_BYTES = 4096


class Fanout:
    """Events every replica hears, on the Redis channel ``<key_prefix>events``: a resource a pack said was updated,
    a reload one replica made, a session whose client now listens on one replica, or that ended, a task another
    replica left a cancel or answers for. Each message
    names the replica that sent it (a random id of this process), which hears its own events directly and ignores
    their echo. What comes in is checked (a known kind, a string URI of bounded length, a session digest) before
    anything acts on it: whoever can publish on the channel can at most make a replica reload its own config file,
    tell its own clients of an update they may read anyway, end a session whose digest it knows, or make a replica look
    for what was left for a task (which only a writer of the store can leave)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.channel = store.key("events")
        self.replica = secrets.token_hex(8)

    def message(self, kind: str, **fields: str) -> str:
        """An event as this replica publishes it."""
        return json.dumps({"kind": kind, "from": self.replica, **fields}, separators=(",", ":"))

    async def publish(self, kind: str, **fields: str) -> None:
        """Tell every other replica; while Redis does not answer, the store is marked down (and it says so once),
        and only this replica's own clients hear of it."""
        client = self.store.client
        if client is None:
            return
        try:
            await client.publish(self.channel, self.message(kind, **fields))
        except unreachable() as exc:
            self.store.failed(exc)
        else:
            self.store.answered()

    async def listen(self, handle: Callable[[str, dict[str, str]], Awaitable[None]], *,
                     ready: anyio.Event | None = None) -> None:
        """Pass every other replica's events to ``handle`` (kind, fields), until cancelled; reconnects by itself
        (waiting a little longer each time, up to 5 s). ``ready`` is set once subscribed."""
        import redis.asyncio

        delay = 0.1
        while True:
            client = redis.asyncio.Redis.from_url(self.store.url, socket_connect_timeout=self.store.config.timeout,
                                                  health_check_interval=15)
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel)
                    self.store.answered()
                    delay = 0.1
                    if ready is not None:
                        ready.set()
                    while True:
                        message = await pubsub.get_message(timeout=5.0)
                        if message is not None:
                            await self._dispatch(message.get("data"), handle)
            except unreachable() as exc:
                self.store.failed(exc)
            finally:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
            await anyio.sleep(delay)
            delay = min(5.0, delay * 2)

    async def _dispatch(self, data: Any, handle: Callable[[str, dict[str, str]], Awaitable[None]]) -> None:
        if not isinstance(data, bytes | str) or len(data) > MAX_EVENT_BYTES:
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("from") == self.replica or event.get("kind") not in _EVENT_KINDS:
            return
        fields = {k: v for k, v in event.items() if k not in ("kind", "from") and isinstance(v, str)}
        if event["kind"] == "resource_updated" and not (0 < len(fields.get("uri", "")) <= 2000):
            return
        if event["kind"] in ("listening", "session_ended", "session_state") and \
                not _DIGEST.fullmatch(fields.get("session", "")):
            return
        if event["kind"] == "task_update" and not TASK_ID.fullmatch(fields.get("task", "")):
            return
        try:
            await handle(event["kind"], fields)
        except Exception:
            log.exception("an event from another replica (%s) could not be handled", event["kind"])


NEEDS_CLIENT = ("a [cluster] table needs the redis client, which is not installed: pip install 'toolcrib[cluster]'")


def probe(loaded: LoadedConfig, env: Mapping[str, str] | None = None) -> list[Problem]:
    """What ``toolcrib check`` says of ``[cluster]``: whether its password variable is set, its client installed and
    its Redis answers now (an error where the operator said it must, ``required = true``; else a warning)."""
    cluster = loaded.config.cluster
    if cluster is None:
        return []
    where = f"{loaded.source}: cluster.redis_url"
    try:
        store = Store(cluster, env)
    except ValueError as exc:
        return [Problem("error", where, str(exc))]
    try:
        import redis
    except ImportError:
        return [Problem("error", f"{loaded.source}: cluster", NEEDS_CLIENT)]
    client = redis.Redis.from_url(store.url, socket_timeout=cluster.timeout, socket_connect_timeout=cluster.timeout)
    try:
        client.ping()
    except unreachable() as exc:
        said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return [Problem("error" if cluster.required else "warning", where,
                        f"Redis at {store.where} does not answer ({said}); limits, sessions and one-time approvals "
                        "cannot be shared until it does")]
    finally:
        client.close()
    return []


@asynccontextmanager
async def limiter(loaded: LoadedConfig,
                  env: Mapping[str, str] | None = None) -> AsyncIterator[tuple[Limiter, Store | None]]:
    """The book that counts ``[agents.*.limits]`` for the life of the block (``serve`` keeps one across reloads):
    in memory, or with ``[cluster]`` on the shared store, which is
    then open for the block (yielded beside it). Give the book to every ``Host`` built meanwhile
    (``Host(loaded, limits=book)``)."""
    if loaded.config.cluster is None:
        yield LimitBook(), None
        return
    try:
        store = Store(loaded.config.cluster, env)
    except ValueError as exc:  # an unset variable, or a URL that is not Redis'
        raise ConfigError([Problem("error", f"{loaded.source}: cluster.redis_url", str(exc))]) from None
    try:
        await store.open()
    except ImportError:
        raise ConfigError([Problem("error", f"{loaded.source}: cluster", NEEDS_CLIENT)]) from None
    book = RedisLimitBook(store)
    try:
        await book.open()
        log.info("limits are counted on the shared store (Redis at %s)", store.where)
        yield book, store
    finally:
        with anyio.CancelScope(shield=True):  # a cancelled serve still gives its leases back
            await book.close()
            await store.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = ["Fanout", "RedisLimitBook", "Store", "limiter", "probe", "unreachable"]
