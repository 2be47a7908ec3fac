"""``[cluster]``: limits counted across replicas on a real redis-server (tests/redis_server.py). Each "replica" is a
``Host`` with its own store and book, as each serving process has; they share only the Redis."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolcrib
from conftest import config_from, redis_command, sse_messages, until
from packs import Pack
from redis_server import HANG_GUARD, RedisServer
from replicas import http_replicas
from toolcrib.cluster import Store, limiter
from toolcrib.errors import ConfigError
from toolcrib.host import Host

GATES: dict[str, asyncio.Event] = {}
RUNNING: list[str] = []
SYNC_GATE = threading.Event()


@toolcrib.tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


@toolcrib.tool
async def hold(tag: str) -> str:
    """Run until the test lets it end."""
    RUNNING.append(tag)
    await GATES.setdefault(tag, asyncio.Event()).wait()
    return f"held {tag}"


@toolcrib.tool
def hold_sync(tag: str) -> str:
    """Run in a worker thread until the test lets it end."""
    RUNNING.append(tag)
    SYNC_GATE.wait(HANG_GUARD)
    return f"held {tag}"


@toolcrib.tool(timeout=0.2)
def overstay() -> str:
    """Outlive its own timeout in a worker thread (a thread cannot be stopped)."""
    SYNC_GATE.wait(HANG_GUARD)
    return "too late"


@toolcrib.tool
async def hold_talking(tag: str, ctx: toolcrib.Context) -> str:
    """Say how far it got, before and after the test lets it go on."""
    await ctx.report_progress(1, 2, "before")
    await GATES.setdefault(tag, asyncio.Event()).wait()
    await ctx.report_progress(2, 2, "after")
    return f"held {tag}"


PACK = Pack(ping, hold, hold_sync, hold_talking, overstay)


def config(url: str, limits: str, cluster: str = "") -> str:
    return (f'[cluster]\nredis_url = "{url}"\n{cluster}\n[agents.a.permissions]\nplugins = {{ allow = ["t"] }}\n'
            f'tools = {{ allow = ["*"] }}\n[agents.a.limits]\n{textwrap.dedent(limits)}\n')


@asynccontextmanager
async def replicas(text: str, n: int = 2, env: dict[str, str] | None = None) -> AsyncIterator[list[Host]]:
    """``n`` hosts, each with its own connection to the store (as ``serve`` opens one per process)."""
    async with AsyncExitStack() as stack:
        hosts = []
        for _ in range(n):
            loaded = config_from(text)
            book, store = await stack.enter_async_context(limiter(loaded, env))
            assert store is not None
            host = Host(loaded, plugins={"t": PACK}, autoload=False, env={}, limits=book)
            stack.callback(host.close)
            hosts.append(host)
        yield hosts


def run(main: Any) -> Any:
    return anyio.run(main, backend="asyncio")  # the redis client's asyncio API


# -- rates ------------------------------------------------------------------------------------------------------


def test_replicas_sharing_one_redis_admit_exactly_the_rate_between_them(redis_url: str) -> None:
    async def main() -> list[Any]:
        async with replicas(config(redis_url, 'rate = "5/minute"')) as (one, two):
            return [await (one if i % 2 else two).call("a", "t__ping", {}) for i in range(9)]

    results = run(main)
    assert [r.is_error for r in results] == [False] * 5 + [True] * 4
    for refused in results[5:]:
        assert refused.text in ("Rate limited: agent 'a' may make at most 5 calls a minute; try again in 12 s.",
                                "Rate limited: agent 'a' may make at most 5 calls a minute; try again in 11 s.")


@pytest.mark.parametrize(("overall", "tools", "refused"), [
    ("1/hour", "10/hour", "Rate limited: agent 'a' may make at most 1 calls an hour; try again in 3600 s."),
    ("10/hour", "1/hour", "Rate limited: agent 'a' may make at most 1 calls of t__* an hour; try again in 3600 s."),
])
def test_every_limit_covering_a_call_is_taken_or_none_and_the_full_one_is_named(
        redis_url: str, overall: str, tools: str, refused: str) -> None:
    text = config(redis_url, f'rate = "{overall}"\n[agents.a.limits.tools."t__*"]\nrate = "{tools}"\n')

    async def main() -> tuple[list[str], list[Any]]:
        async with replicas(text) as (one, two):
            said = [(await host.call("a", "t__ping", {})).text for host in (one, two)]
        buckets = [await redis_command(redis_url, "HGET", key, "tokens") for key in await _keys(redis_url)]
        return said, sorted(float(b) for b in buckets)

    said, tokens = run(main)
    assert said[0] == "pong" and said[1] in (refused, refused.replace("3600 s", "3599 s"))
    assert tokens == [0.0, 9.0]  # the refused call took from neither bucket


def test_where_the_store_is_says_host_port_and_database_or_the_socket_never_the_password() -> None:
    where = {url: Store(config_from(f'[cluster]\nredis_url = "{url}"\n').config.cluster).where  # type: ignore[arg-type]
             for url in ("redis://:pw@cache:6380/2", "rediss://user:pw@cache.example.com", "unix:///run/redis.sock",
                         "redis://localhost")}
    assert where == {"redis://:pw@cache:6380/2": "cache:6380/2", "rediss://user:pw@cache.example.com":
                     "cache.example.com:6379", "unix:///run/redis.sock": "/run/redis.sock",
                     "redis://localhost": "localhost:6379"}


def test_a_limit_counts_on_redis_clock_and_a_changed_limit_starts_afresh(redis_url: str) -> None:
    """The bucket refills on Redis' clock (its TIME), not a replica's; a reload that keeps the limit keeps its
    count, one that changes it gets keys of its own."""

    async def main() -> tuple[list[bool], list[bool], list[bytes]]:
        async with replicas(config(redis_url, 'rate = "2/hour"'), n=1) as (one,):
            first = [(await one.call("a", "t__ping", {})).is_error for _ in range(3)]
        async with replicas(config(redis_url, 'rate = "2/hour"'), n=1) as (again,):  # a restart: the count stays
            kept = [(await again.call("a", "t__ping", {})).is_error]
        async with replicas(config(redis_url, 'rate = "3/hour"'), n=1) as (changed,):
            kept += [(await changed.call("a", "t__ping", {})).is_error for _ in range(4)]
        keys = sorted(await redis_command(redis_url, "KEYS", "*"))
        return first, kept, keys

    first, kept, keys = run(main)
    assert first == [False, False, True]
    assert kept == [True, False, False, False, True]
    assert len(keys) == 2 and all(k.startswith(b"toolcrib:limit:") and k.endswith(b":rate") for k in keys)


def test_the_key_prefix_keeps_deployments_apart(redis_url: str) -> None:
    async def main() -> list[bool]:
        async with replicas(config(redis_url, 'rate = "1/hour"', 'key_prefix = "blue:"'), n=1) as (blue,), \
                replicas(config(redis_url, 'rate = "1/hour"', 'key_prefix = "green:"'), n=1) as (green,):
            return [(await host.call("a", "t__ping", {})).is_error for host in (blue, green, blue)]

    assert run(main) == [False, False, True]


# -- in flight ----------------------------------------------------------------------------------------------------


def test_in_flight_counts_the_calls_running_on_every_replica_and_each_end_gives_its_place_back(
        redis_url: str) -> None:
    GATES.clear()
    RUNNING.clear()
    SYNC_GATE.clear()

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with replicas(config(redis_url, "in_flight = 2")) as (one, two), anyio.create_task_group() as tg:
            async def call(host: Host, tool: str, tag: str) -> None:
                seen[tag] = await host.call("a", tool, {"tag": tag})

            tg.start_soon(call, one, "t__hold", "x")
            tg.start_soon(call, two, "t__hold_sync", "y")  # its lease ends on a worker thread
            await until(lambda: _true(len(RUNNING) == 2), "two calls running")
            seen["third"] = await one.call("a", "t__ping", {})
            flight = _flight_key(await _keys(redis_url))
            seen["places"] = await redis_command(redis_url, "ZCARD", flight)
            GATES["x"].set()
            SYNC_GATE.set()
            await until(lambda: _true("x" in seen and "y" in seen), "both calls ended")
            await until(lambda: _zero(redis_url, flight), "both places given back")
            seen["after"] = [(await host.call("a", "t__ping", {})).text for host in (one, two) * 4]  # no rate
        return seen

    seen = run(main)
    assert seen["third"].is_error and seen["third"].text == (
        "Rate limited: agent 'a' may make at most 2 calls at once; try again when one of them has finished.")
    assert seen["places"] == 2
    assert (seen["x"].text, seen["y"].text, seen["after"]) == ("held x", "held y", ["pong"] * 8)


def test_a_long_call_renews_its_place_so_it_outlasts_the_lease(redis_url: str) -> None:
    GATES.clear()
    RUNNING.clear()

    async def main() -> list[Any]:
        text = config(redis_url, "in_flight = 1", "lease_seconds = 0.3")
        found: list[Any] = []
        async with replicas(text) as (one, two), anyio.create_task_group() as tg:
            async def long() -> None:
                found.append(await one.call("a", "t__hold", {"tag": "long"}))

            tg.start_soon(long)
            await until(lambda: _true(RUNNING == ["long"]), "the long call running")
            flight = _flight_key(await _keys(redis_url))
            scores = [await redis_command(redis_url, "ZRANGE", flight, 0, -1, "WITHSCORES")]
            while len({s[0][1] for s in scores}) < 4:  # three renewals: well past one lease
                await asyncio.sleep(0.05)
                scores.append(await redis_command(redis_url, "ZRANGE", flight, 0, -1, "WITHSCORES"))
            found.append(await two.call("a", "t__ping", {}))  # the place is still taken
            GATES["long"].set()
        return found

    refused, ended = run(main)
    assert refused.text == ("Rate limited: agent 'a' may make at most 1 calls at once; try again when one of them has "
                            "finished.")
    assert ended.text == "held long"


KILLED = """
import asyncio, sys
sys.path[:0] = {paths!r}
from conftest import config_from
from toolcrib.cluster import Store, limiter
from toolcrib.limits import compile_limits

async def main():
    loaded = config_from({text!r})
    async with limiter(loaded) as (book, store):
        limits = list(compile_limits("a", loaded.config.agents["a"].limits))
        lease = await book.admit("a", limits)
        print("held" if lease.__class__.__name__ == "Lease" else lease.text, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_replica_killed_mid_call_gives_its_place_back_within_one_lease(redis_url: str) -> None:
    text = config(redis_url, "in_flight = 1", "lease_seconds = 3")
    tests = str(Path(__file__).parent)
    proc = subprocess.Popen([sys.executable, "-c", KILLED.format(paths=[tests], text=text)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": tests})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"

        async def main() -> tuple[Any, float, Any]:
            async with replicas(text, n=1) as (host,):
                proc.kill()  # SIGKILL: it gives nothing back
                proc.wait(HANG_GUARD)
                refused = await host.call("a", "t__ping", {})
                flight = _flight_key(await _keys(redis_url))
                expiry = float((await redis_command(redis_url, "ZRANGE", flight, 0, -1, "WITHSCORES"))[0][1])
                now = await redis_command(redis_url, "TIME")
                left = expiry / 1000 - (int(now[0]) + int(now[1]) / 1e6)
                admitted = None
                deadline = time.monotonic() + HANG_GUARD
                while admitted is None or admitted.is_error:
                    assert time.monotonic() < deadline, "the killed replica's place never came back"
                    await asyncio.sleep(0.1)
                    admitted = await host.call("a", "t__ping", {})
                return refused, left, admitted

        refused, left, admitted = run(main)
    finally:
        proc.kill()
        proc.wait(HANG_GUARD)
    assert refused.text.startswith("Rate limited: agent 'a' may make at most 1 calls at once")
    assert 0 < left <= 3.0  # the dead replica's lease runs out within one lease of its last renewal
    assert admitted.text == "pong"


# -- when Redis is gone -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fail_open", [False, True])
def test_while_redis_is_down_limited_calls_fail_closed_or_open_and_it_recovers_by_itself(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fail_open: bool) -> None:
    server = RedisServer(tmp_path / "redis", password="s3cret-password-of-the-store").start()
    text = config("redis://:${STORE_PASSWORD}@127.0.0.1:" + f"{server.port}/0", 'rate = "100/minute"',
                  f"fail_open = {str(fail_open).lower()}\ntimeout = 0.5")
    env = {"STORE_PASSWORD": "s3cret-password-of-the-store"}

    async def main() -> list[Any]:
        async with replicas(text, n=1, env=env) as (host,):
            results = [await host.call("a", "t__ping", {})]
            server.stop()
            results += [await host.call("a", "t__ping", {}) for _ in range(2)]
            results.append(await host.call("a", "t__ping", {}))
            server.start()
            results.append(await host.call("a", "t__ping", {}))
            return results

    try:
        with caplog.at_level(logging.INFO, logger="toolcrib.cluster"):
            results = run(main)
    finally:
        server.stop()
    down = ("Rate limited: agent 'a' has limits, and the store that counts them across replicas is unreachable; "
            "try again shortly.")
    middle = ["pong"] * 3 if fail_open else [down] * 3
    assert [r.text for r in results] == ["pong", *middle, "pong"]
    said = [r.getMessage() for r in caplog.records if r.name == "toolcrib.cluster"]
    where = f"127.0.0.1:{server.port}/0"
    assert said[0] == f"limits are counted on the shared store (Redis at {where})"
    assert re.fullmatch(rf"the shared store \(Redis at {re.escape(where)}\) is unreachable: ConnectionError: .+",
                        said[1]), said[1]
    assert said[2:] == [f"the shared store (Redis at {where}) answers again"]  # each change said once
    assert not any("s3cret" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("required", [True, False])
def test_readyz_says_the_store_is_unreachable_only_where_the_operator_requires_it(tmp_path: Path,
                                                                                  required: bool) -> None:
    import httpx2

    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    server = RedisServer(tmp_path / "redis").start()
    text = config(server.url, 'rate = "5/minute"', f"required = {str(required).lower()}\ntimeout = 0.5") + (
        '[agents.a]\ntoken_env = "TOK_A"\n')

    async def main() -> list[tuple[int, Any]]:
        seen = []
        loaded = config_from(text)
        async with limiter(loaded) as (book, store):
            served = ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={}, limits=book))
            served.store = store
            app = HttpApp(served, HttpOptions(), env={"TOK_A": "a" * 32})
            async with app.app.router.lifespan_context(app.app), httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client:
                for step in (lambda: None, server.stop, server.start):
                    step()
                    answer = await client.get("/readyz")
                    seen.append((answer.status_code, answer.json()))
        return seen

    try:
        seen = run(main)
    finally:
        server.stop()
    down = (503, {"status": "store unreachable"}) if required else (200, {"status": "ready"})
    assert seen == [(200, {"status": "ready"}), down, (200, {"status": "ready"})]


def test_a_cluster_table_is_checked_and_its_password_variable_must_be_set(redis_url: str) -> None:
    with pytest.raises(ConfigError) as bad:
        config_from('[cluster]\nredis_url = "http://user:pw@example.com"\nkey_prefix = "a b"\nlease = 3\n')
    assert [str(p) for p in bad.value.problems] == [
        "error: toolcrib.toml: cluster.lease: unknown key 'lease'; expected one of: "
        "redis_url, key_prefix, fail_open, required, lease_seconds, timeout"]
    with pytest.raises(ConfigError) as bad:
        config_from('[cluster]\nredis_url = "http://user:pw@example.com"\nkey_prefix = "a b"\n')
    assert [str(p) for p in bad.value.problems] == [
        "error: toolcrib.toml: cluster.redis_url: expected a redis://, rediss:// or unix:// URL (or a ${VARIABLE} "
        "that holds one), got one starting 'http' (the rest is not shown: it may hold a password)",
        "error: toolcrib.toml: cluster.key_prefix: expected a non-empty prefix without spaces or braces (braces are "
        "Redis Cluster hash tags), such as \"toolcrib:\""]
    with pytest.raises(ConfigError) as bad:
        config_from('[cluster]\nredis_url = "redis://:$PASSWORD@redis:6379"\n')
    assert [p.message for p in bad.value.problems] == [
        "a '$' that is not ${VARIABLE}: write each environment variable as ${NAME}"]

    async def main() -> None:
        async with limiter(config_from('[cluster]\nredis_url = "redis://:${NOT_SET_ANYWHERE}@x"\n'), env={}):
            raise AssertionError("opened without its password")

    with pytest.raises(ConfigError) as missing:
        run(main)
    assert [str(p) for p in missing.value.problems] == [
        "error: toolcrib.toml: cluster.redis_url: the URL names ${NOT_SET_ANYWHERE}, which is not set"]

    unopened = Store(config_from(f'[cluster]\nredis_url = "{redis_url}"\n').config.cluster)  # type: ignore[arg-type]
    assert run(unopened.ping) is False  # not opened: not ready

    async def whole() -> None:  # the whole URL in a variable (a managed Redis's, from a secret), checked once known
        async with limiter(config_from('[cluster]\nredis_url = "${STORE_URL}"\n'), env={"STORE_URL": "tcp://x"}):
            raise AssertionError("opened a URL that is not Redis'")

    with pytest.raises(ConfigError) as wrong:
        run(whole)
    assert [str(p) for p in wrong.value.problems] == [
        "error: toolcrib.toml: cluster.redis_url: expected a redis://, rediss:// or unix:// URL once its variables "
        "are expanded (the value is not shown: it may hold a password)"]


def test_without_a_cluster_table_limits_stay_in_memory_and_redis_is_never_imported() -> None:
    code = ("import sys, anyio\nfrom toolcrib.cluster import Store, limiter\nfrom toolcrib.config import parse_config\n"
            "from pathlib import Path\nasync def main():\n"
            "    async with limiter(parse_config('[agents.a]\\n', 't', Path('.'))) as (book, store):\n"
            "        print(type(book).__name__, store, 'redis' in sys.modules)\nanyio.run(main)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD)
    assert out.stdout == "LimitBook None False\n", out.stderr


# -- helpers --------------------------------------------------------------------------------------------------------


async def _true(value: bool) -> bool:
    return value


async def _keys(url: str) -> list[bytes]:
    return sorted(await redis_command(url, "KEYS", "*"))


def _flight_key(keys: list[bytes]) -> bytes:
    flights = [k for k in keys if k.endswith(b":flight")]
    assert len(flights) == 1, keys
    return flights[0]


async def _zero(url: str, key: bytes) -> bool:
    return int(await redis_command(url, "ZCARD", key)) == 0




# -- events across replicas -----------------------------------------------------------------------------------------


def two_config_files(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch,
                     cluster: str = "") -> tuple[str, Path, Path]:
    """The config of two serving processes (one file each, as two replicas have) serving this file's pack."""
    monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "t=test_cluster:PACK")
    text = f'[cluster]\nredis_url = "{url}"\n{cluster}[agents.a.permissions]\nplugins = {{ allow = ["t"] }}\n' \
           'tools = { allow = ["*"] }\n'
    first, second = tmp_path / "one.toml", tmp_path / "two.toml"
    first.write_text(text)
    second.write_text(text)
    return text, first, second


def test_a_reload_on_one_replica_makes_every_other_reload_and_tell_its_clients(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two serving states (as two ``serve`` processes have), each with its own config file and connection: the
    one that reloads tells the other, which reloads its own file at once and tells its clients what changed."""
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import serving_state

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch)

    async def main() -> tuple[list[str], list[str], str]:
        async with serving_state(first) as one, serving_state(second) as two, \
                Client(build_server(two, "a"), cache=None) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            async with client.listen(tools_list_changed=True) as events:
                second.write_text(text.replace('tools = { allow = ["*"] }', 'tools = { allow = ["t__ping"] }'))
                assert await one.reload() is True  # its own file did not change: nothing for its own clients
                with anyio.fail_after(HANG_GUARD):  # a hang guard
                    event = await events.__anext__()
            after = [t.name for t in (await client.list_tools()).tools]
        return before, after, type(event).__name__

    before, after, event = run(main)
    assert (before, after, event) == (["t__hold", "t__hold_sync", "t__hold_talking", "t__overstay", "t__ping"],
                                      ["t__ping"], "ToolsListChanged")


def test_only_well_formed_events_of_other_replicas_are_acted_on(redis_url: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    from toolcrib.cluster import Fanout

    heard: list[tuple[str, dict[str, str]]] = []

    async def handle(kind: str, fields: dict[str, str]) -> None:
        if fields.get("uri") == "boom://":
            raise RuntimeError("the handler failed")
        heard.append((kind, fields))

    async def main() -> None:
        store = Store(config_from(f'[cluster]\nredis_url = "{redis_url}"\n').config.cluster)  # type: ignore[arg-type]
        await store.open()
        fanout = Fanout(store)
        for data in (b"not json", json.dumps([1]), json.dumps({"kind": "drop_tables", "from": "x"}),
                     json.dumps({"kind": "resource_updated", "from": "x"}),  # no URI
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": "a://" + "x" * 3000}),
                     json.dumps({"kind": "reload", "from": fanout.replica}),  # its own echo
                     json.dumps({"kind": "reload", "from": "x", "pad": "y" * 5000}),  # too long
                     None, 7,
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": "notes://today", "n": 1}),
                     json.dumps({"kind": "reload", "from": "other"}),
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": "u" * 2000}),  # the longest
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": "u" * 2001}),
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": ""}),
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": "v"}),
                     json.dumps({"kind": "task_update", "from": "x", "task": "A" * 31}),  # not a task's id
                     json.dumps({"kind": "task_update", "from": "x", "task": "A" * 31 + "/"}),
                     json.dumps({"kind": "task_update", "from": "x"}),
                     json.dumps({"kind": "task_update", "from": "x", "task": "Az09_-" + "b" * 26}),
                     fanout.message("reload"),  # its own, as it publishes it: an echo
                     Fanout(store).message("resource_updated", uri="w://x"),  # another replica's
                     json.dumps({"kind": "resource_updated", "from": "x", "uri": "boom://"})):
            await fanout._dispatch(data, handle)
        await store.close()

    with caplog.at_level(logging.ERROR, logger="toolcrib.cluster"):
        run(main)
    assert heard == [("resource_updated", {"uri": "notes://today"}), ("reload", {}),
                     ("resource_updated", {"uri": "u" * 2000}), ("resource_updated", {"uri": "v"}),
                     ("task_update", {"task": "Az09_-" + "b" * 26}), ("resource_updated", {"uri": "w://x"})]
    assert [r.getMessage() for r in caplog.records] == [
        "an event from another replica (resource_updated) could not be handled"]


@pytest.mark.slow
def test_the_replicas_hear_each_other_again_once_redis_is_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import serving_state

    server = RedisServer(tmp_path / "redis").start()
    text, first, second = two_config_files(tmp_path, server.url, monkeypatch, "timeout = 0.5\n")

    async def main() -> list[str]:
        async with serving_state(first) as one, serving_state(second) as two, \
                Client(build_server(two, "a"), cache=None) as client, \
                client.listen(tools_list_changed=True) as events:
            server.stop()
            assert await one.reload() is True  # unheard: Redis is gone, and one goes on alone
            server.start()
            second.write_text(text.replace('tools = { allow = ["*"] }', 'tools = { allow = ["t__ping"] }'))
            deadline = time.monotonic() + HANG_GUARD
            while True:  # until two has subscribed again (it retries by itself, waiting up to 5 s)
                assert time.monotonic() < deadline, "two never heard of one's reload again"
                await one.reload()
                with anyio.move_on_after(1):
                    event = await events.__anext__()
                    break
            return [type(event).__name__, *(t.name for t in (await client.list_tools()).tools)]

    try:
        assert run(main) == ["ToolsListChanged", "t__ping"]
    finally:
        server.stop()


def test_a_replica_starts_while_redis_is_down_and_refuses_limited_calls_until_it_answers() -> None:
    from redis_server import free_port

    text = config(f"redis://127.0.0.1:{free_port()}/0", 'rate = "5/minute"', "timeout = 0.5")

    async def main() -> list[str]:
        async with replicas(text, n=1) as (host,):
            return [(await host.call("a", "t__ping", {})).text for _ in range(2)]

    assert run(main) == ["Rate limited: agent 'a' has limits, and the store that counts them across replicas is "
                         "unreachable; try again shortly."] * 2


def test_a_sync_handler_that_outlives_its_call_keeps_its_place_until_it_really_ends(redis_url: str) -> None:
    """Its call times out and is answered, but its thread runs on, holding its place in in_flight; when the thread
    returns, its lease is given back from that thread (through the task that maintains the leases)."""
    SYNC_GATE.clear()

    async def main() -> tuple[str, int, str, int]:
        async with replicas(config(redis_url, "in_flight = 1"), n=1) as (host,):
            timed_out = (await host.call("a", "t__overstay", {})).text
            flight = _flight_key(await _keys(redis_url))
            held = int(await redis_command(redis_url, "ZCARD", flight))
            refused = (await host.call("a", "t__ping", {})).text
            SYNC_GATE.set()  # the thread returns
            await until(lambda: _zero(redis_url, flight), "the place given back from the worker thread")
            return timed_out, held, refused, int(await redis_command(redis_url, "EXISTS", flight))

    timed_out, held, refused, left = run(main)
    assert timed_out == "Tool t__overstay timed out after 0.2 seconds and was stopped."
    assert (held, left) == (1, 0)
    assert refused == ("Rate limited: agent 'a' may make at most 1 calls at once; try again when one of them has "
                       "finished.")


def test_closing_the_book_gives_back_the_places_its_running_calls_held(redis_url: str) -> None:
    """A replica that stops (SIGTERM, the end of serve) gives its places back at once, not a lease later."""
    from toolcrib.limits import compile_limits

    async def main() -> tuple[int, int]:
        loaded = config_from(config(redis_url, "in_flight = 3"))
        limits = list(compile_limits("a", loaded.config.agents["a"].limits))
        async with limiter(loaded) as (book, _):
            for _ in range(2):
                assert type(await book.admit("a", limits)).__name__ == "Lease"  # never given back by the call
            flight = _flight_key(await _keys(redis_url))
            held = int(await redis_command(redis_url, "ZCARD", flight))
        return held, int(await redis_command(redis_url, "EXISTS", flight))

    assert run(main) == (2, 0)


# -- approvals used once in the fleet -------------------------------------------------------------------------------


def test_an_approval_runs_its_call_once_in_the_whole_fleet(tmp_path: Path, redis_url: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The round that carries a yes, sent to every replica (one after the other, then to both at once): the call
    runs once. The claim is stored under a digest, never the token, and expires with the state."""
    import mcp_types as types
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.roundtrip import REUSED
    from toolcrib.mcp.state import serving_state

    monkeypatch.setenv("TOOLCRIB_STATE_SECRET", "one-secret-for-every-replica-of-the-fleet")
    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch, cluster='key_prefix = "once-test:"\n')
    for path in (first, second):
        path.write_text(text + 'ask = ["t__ping"]\n')
    yes = {"toolcrib_approval": types.ElicitResult(action="accept", content={})}

    async def accept(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={})

    async def main() -> tuple[list[Any], list[Any], list[bytes]]:
        async with serving_state(first) as one, serving_state(second) as two, \
                Client(build_server(one, "a"), cache=None, elicitation_callback=accept) as left, \
                Client(build_server(two, "a"), cache=None, elicitation_callback=accept) as right:
            asked = await left.session.call_tool("t__ping", {}, allow_input_required=True)
            assert isinstance(asked, types.InputRequiredResult)
            state = asked.request_state
            one_after_other = [await client.session.call_tool("t__ping", {}, input_responses=yes, request_state=state)
                               for client in (right, left, right)]
            again = await left.session.call_tool("t__ping", {}, allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult)
            at_once = await asyncio.gather(*(
                client.session.call_tool("t__ping", {}, input_responses=yes, request_state=again.request_state)
                for client in (left, right, left, right)))
            keys = sorted(await redis_command(redis_url, "KEYS", "once-test:once:*"))
            ttls = [await redis_command(redis_url, "PTTL", key) for key in keys]
            assert all(600_000 < ttl <= 660_000 for ttl in ttls), ttls  # the state's TTL and the clock skew allowed
            assert not any(state.encode() in key for key in keys)
            return one_after_other, list(at_once), keys

    one_after_other, at_once, keys = run(main)
    assert [r.content[0].text for r in one_after_other] == ["pong", REUSED, REUSED]
    assert sorted(r.content[0].text for r in at_once) == sorted(["pong", REUSED, REUSED, REUSED])
    assert len(keys) == 2 and all(re.fullmatch(rb"once-test:once:[0-9a-f]{32}", key) for key in keys)


def test_while_redis_is_down_no_approval_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Approvals fail closed even where limits fail open; once Redis is back the same approval is used."""
    import mcp_types as types
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.roundtrip import ONCE_UNREACHABLE
    from toolcrib.mcp.state import serving_state

    server = RedisServer(tmp_path / "redis").start()
    text, first, _ = two_config_files(tmp_path, server.url, monkeypatch, cluster="fail_open = true\ntimeout = 0.5\n")
    first.write_text(text + 'ask = ["t__ping"]\n')
    yes = {"toolcrib_approval": types.ElicitResult(action="accept", content={})}

    async def accept(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={})

    async def main() -> list[Any]:
        async with serving_state(first) as one, \
                Client(build_server(one, "a"), cache=None, elicitation_callback=accept) as client:
            asked = await client.session.call_tool("t__ping", {}, allow_input_required=True)
            assert isinstance(asked, types.InputRequiredResult)
            server.stop()
            down = await client.session.call_tool("t__ping", {}, input_responses=yes,
                                                  request_state=asked.request_state)
            server.start()
            back = await client.session.call_tool("t__ping", {}, input_responses=yes,
                                                  request_state=asked.request_state)
            return [down, back]

    try:
        down, back = run(main)
    finally:
        server.stop()
    assert (down.is_error, down.content[0].text) == (True, ONCE_UNREACHABLE)
    assert (back.is_error, back.content[0].text) == (False, "pong")


# -- 2025-11-25 sessions every replica serves -------------------------------------------------------------------------

MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": "Bearer " + "a" * 32}
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "fleet-test", "version": "1"}}}




async def post(client: Any, body: dict[str, Any], session: str | None = None, **headers: str) -> Any:
    extra = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"} if session else {}
    return await client.post("/agents/a/mcp", json=body, headers={**MCP_HEADERS, **extra, **headers})


def test_a_session_one_replica_opened_is_served_by_another_and_a_delete_ends_it_everywhere(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a client set on the session (a subscription, a log level) goes with it; the records in Redis are named
    by digests, never the session id, and the DELETE on one replica is a 404 on the other at once."""
    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch, cluster='key_prefix = "sess:"\n')
    for path in (first, second):
        path.write_text(text + '[agents.a]\ntoken_env = "TOK_A"\n')

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with http_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two):
            opened = await post(one, INITIALIZE)
            session = opened.headers["mcp-session-id"]
            seen["opened"] = opened.status_code
            seen["initialized"] = (await post(two, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                              session)).status_code
            listed = await post(two, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session)
            seen["listed"] = (listed.status_code, [t["name"] for t in sse_messages(listed.text)[0]["result"]["tools"]])
            called = await post(one, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                      "params": {"name": "t__ping", "arguments": {}}}, session)
            seen["called"] = sse_messages(called.text)[0]["result"]["content"]
            level = await post(two, {"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
                                     "params": {"level": "error"}}, session)
            seen["level"] = sse_messages(level.text)[0]["result"]
            keys = sorted(k.decode() for k in await redis_command(redis_url, "KEYS", "sess:*"))
            seen["keys"] = [re.sub(r"[0-9a-f]{32}", "<digest>", k) for k in keys]
            seen["no id in keys"] = not any(session in k for k in keys)
            fields = await redis_command(redis_url, "HGETALL", next(k for k in keys if k.startswith("sess:session:")))
            seen["record"] = (fields[b"agent"], fields[b"owner"], fields[b"version"], json.loads(fields[b"state"]))
            seen["ttl"] = await redis_command(redis_url, "PTTL", next(k for k in keys if k.startswith("sess:session:")))
            ended = await one.delete("/agents/a/mcp", headers={**MCP_HEADERS, "mcp-session-id": session,
                                                                "mcp-protocol-version": "2025-11-25"})
            seen["ended"] = ended.status_code

            async def gone() -> bool:
                answer = await post(two, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, session)
                return answer.status_code == 404

            await until(gone, "the other replica stops serving the ended session")
            seen["keys after"] = sorted(k.decode() for k in await redis_command(redis_url, "KEYS", "sess:*"))
            stranger = await post(two, {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, "f" * 32)
            seen["unknown"] = (stranger.status_code, stranger.json())
        return seen

    seen = run(main)
    assert seen["opened"] == 200 and seen["initialized"] == 202
    assert seen["listed"] == (200, ["t__hold", "t__hold_sync", "t__hold_talking", "t__overstay", "t__ping"])
    assert seen["called"] == [{"type": "text", "text": "pong"}]
    assert seen["level"] == {}
    assert seen["keys"] == ["sess:session:<digest>", "sess:sessions:<digest>", "sess:stream:<digest>"]
    assert seen["no id in keys"] is True
    assert seen["record"] == (b"a", b"", b"2025-11-25", {"subscriptions": [], "log_level": "error"})
    assert 1_700_000 < seen["ttl"] <= 1_800_000  # [host] http_session_idle, 30 minutes by default
    assert seen["ended"] == 200
    assert seen["keys after"] == []
    assert seen["unknown"] == (404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600,
                                                                             "message": "Session not found"}})


@asynccontextmanager
async def uvicorn_replicas(paths: list[Path], env: dict[str, str]) -> AsyncIterator[list[str]]:
    """One replica per config file, each a real uvicorn server on a loopback port in this process (so the test's
    gates reach their tools): their base URLs. ``SERVED`` holds their serving states meanwhile, ``APPS`` their
    HTTP apps."""
    import uvicorn

    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import serving_state

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    async with AsyncExitStack() as stack:
        # uvicorn leaves its own signal handlers in place when its serve() is cancelled, and sse_starlette takes a
        # SIGTERM handler whose server is exiting to mean that every later SSE stream of the process must end
        stack.callback(lambda: [signal.signal(sig, handler) for sig, handler in handlers.items()])
        states = [await stack.enter_async_context(serving_state(path)) for path in paths]
        SERVED[:] = states
        APPS[:] = [HttpApp(state, HttpOptions(), env=env) for state in states]
        servers = [uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
                   for app in APPS]
        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(server.serve)
                await until(functools.partial(_started, server), "uvicorn started")
            try:
                yield [f"http://127.0.0.1:{s.servers[0].sockets[0].getsockname()[1]}" for s in servers]
            finally:
                for server in servers:
                    server.should_exit = True


SERVED: list[Any] = []
APPS: list[Any] = []


async def _started(server: Any) -> bool:
    return bool(server.started)


def sse_events(text: str) -> list[dict[str, str]]:
    """The SSE events of a body: each a dict of its fields (id, data, retry, event)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if name:
                fields[name] = value[1:] if value.startswith(" ") else value
        if fields:
            events.append(fields)
    return events


@pytest.mark.parametrize("shared", [True, False], ids=["on another replica", "in one process"])
def test_a_stream_dropped_mid_call_resumes_with_nothing_lost(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, shared: bool) -> None:
    """A call's stream opens with a priming event (an id, no data, and when to retry); the client drops it after
    the first progress note, and reconnects with that ``Last-Event-ID``: to another replica with ``[cluster]``, to
    the same process (its events in memory) without. It gets the rest as the call (still running where it
    started) makes it, its answer last, and the stream ends there."""
    import httpx2

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch)
    for path in (first, second):
        path.write_text(text + '[agents.a]\ntoken_env = "TOK_A"\n')
    if not shared:
        first.write_text(first.read_text().split("\n", 2)[2])  # no [cluster]
        second = first
    GATES.pop("resume", None)
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "t__hold_talking", "arguments": {"tag": "resume"}, "_meta": {"progressToken": "p"}}}

    async def main() -> tuple[list[dict[str, str]], list[dict[str, str]], list[Any], str]:
        async with uvicorn_replicas(sorted({first, second}), {"TOK_A": "a" * 32}) as bases, \
                httpx2.AsyncClient(timeout=30) as http:
            one, two = bases[0], bases[-1]
            opened = await http.post(f"{one}/agents/a/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(f"{one}/agents/a/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                            headers={**MCP_HEADERS, **session})
            before = ""
            async with http.stream("POST", f"{one}/agents/a/mcp", json=call,
                                   headers={**MCP_HEADERS, **session}) as stream:
                async for chunk in stream.aiter_text():
                    before += chunk
                    if '"before"' in before and before.endswith("\r\n\r\n"):
                        break  # the client drops the stream here
            dropped = sse_events(before)
            last = next(e["id"] for e in reversed(dropped) if e.get("data"))
            after = ""
            async with http.stream("GET", f"{two}/agents/a/mcp", headers={
                    **MCP_HEADERS, **session, "Last-Event-ID": last}) as resumed:
                GATES.setdefault("resume", asyncio.Event()).set()  # the call goes on, on the first replica
                async for chunk in resumed.aiter_text():
                    after += chunk
            events = sse_events(after)
            again = await http.get(f"{two}/agents/a/mcp", headers={**MCP_HEADERS, **session, "Last-Event-ID": last})
            primed = await http.get(f"{two}/agents/a/mcp", headers={
                **MCP_HEADERS, **session, "Last-Event-ID": dropped[0]["id"]})
            return dropped, events, [again.status_code, sse_events(again.text), sse_events(primed.text)], last

    dropped, resumed, again, last = run(main)
    priming = dropped[0]
    assert (priming["data"], priming["retry"], bool(priming["id"])) == ("", "1000", True)
    assert [json.loads(e["data"])["params"]["message"] for e in dropped[1:]] == ["before"]
    messages = [json.loads(e["data"]) for e in resumed if e.get("data")]
    assert [m.get("params", {}).get("message") for m in messages[:-1]] == ["after"]
    assert messages[-1] == {"jsonrpc": "2.0", "id": 7, "result": {
        "content": [{"type": "text", "text": "held resume"}], "isError": False}}
    ids = [e["id"] for e in resumed if e.get("data")]
    assert ids == sorted(ids, key=lambda i: tuple(int(n) for n in i.split("-"))) and last not in ids
    assert all(re.fullmatch(r"[0-9]+-[0-9]+" if shared else r"[0-9]+", i) for i in [last, *ids])  # stored events
    # the same place resumed again replays the same, now all stored; from the priming event, everything
    assert again[0] == 200
    assert [json.loads(e["data"]) for e in again[1] if e.get("data")] == messages
    assert [json.loads(e["data"]) for e in again[2] if e.get("data")] == [
        json.loads(e["data"]) for e in dropped[1:]] + messages
    assert re.fullmatch(r"[0-9]+-[0-9]+~7" if shared else r"[0-9]+", priming["id"]), priming["id"]


def test_on_every_replica_a_session_serves_only_the_principal_that_opened_it(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice opens a session on one replica; on the other, her next request is served, and Bob's (another subject),
    the agent's static token and Alice through another client all get the 404 of a session that does not exist."""
    from issuer import Issuer

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch)
    with Issuer() as issuer:
        agent = ('[agents.a]\ntoken_env = "TOK_A"\n[agents.a.identity]\nclaims = { client_id = "cli-*" }\n'
                 f'[oauth]\nissuer = "{issuer.url}"\naudience = "http://127.0.0.1:8000"\n')
        for path in (first, second):
            path.write_text(text + agent)
        claims = {"client_id": "cli-a", "sub": "alice", "aud": "http://127.0.0.1:8000"}
        alice, bob = issuer.sign(claims), issuer.sign({**claims, "sub": "bob"})
        elsewhere = issuer.sign({**claims, "client_id": "cli-web"})

        async def main() -> list[int]:
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            async with http_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two):
                opened = await post(one, INITIALIZE, Authorization=f"Bearer {alice}")
                session = opened.headers["mcp-session-id"]
                statuses = []
                for token in (bob, "a" * 32, elsewhere, alice):
                    answer = await post(two, listing, session, Authorization=f"Bearer {token}")
                    statuses.append(answer.status_code)
                return statuses

        assert run(main) == [404, 404, 404, 200]


def test_an_agent_has_at_most_http_max_sessions_in_the_whole_fleet(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sessions opened on one replica fill an agent's two; the third, on the other replica, is refused, and
    once one ends the other replica opens one again."""
    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch)
    for path in (first, second):
        path.write_text("[host]\nhttp_max_sessions = 2\n" + text + '[agents.a]\ntoken_env = "TOK_A"\n')

    async def main() -> list[Any]:
        async with http_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two):
            sessions = [(await post(one, INITIALIZE)).headers["mcp-session-id"] for _ in range(2)]
            refused = await post(two, INITIALIZE)
            await one.delete("/agents/a/mcp", headers={**MCP_HEADERS, "mcp-session-id": sessions[0],
                                                        "mcp-protocol-version": "2025-11-25"})
            again = await post(two, INITIALIZE)
            return [refused.status_code, refused.json(), again.status_code]

    refused, body, again = run(main)
    assert (refused, body, again) == (503, {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32603, "message": "Too many open sessions"}}, 200)


def test_a_change_is_told_once_to_a_session_that_two_replicas_hold(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session opened on one replica, used on both, listening on the second: a reload (which both replicas make)
    reaches its stream once, from the replica it listens on, and is kept once among its events."""
    import httpx2

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch, cluster='key_prefix = "once-told:"\n')
    for path in (first, second):
        path.write_text(text + '[agents.a]\ntoken_env = "TOK_A"\n')
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    async def main() -> tuple[list[Any], list[Any]]:
        async with uvicorn_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two), \
                httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(f"{one}/agents/a/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            for base in (one, two):
                answer = await http.post(f"{base}/agents/a/mcp", json=listing, headers={**MCP_HEADERS, **session})
                assert answer.status_code == 200
            heard = ""
            async with http.stream("GET", f"{two}/agents/a/mcp", headers={**MCP_HEADERS, **session}) as stream:
                for path in (first, second):
                    path.write_text(path.read_text().replace('tools = { allow = ["*"] }',
                                                             'tools = { allow = ["t__ping"] }'))
                assert await SERVED[0].reload() is True  # as on SIGHUP: replica one reloads, and tells replica two
                async for chunk in stream.aiter_text():
                    heard += chunk
                    if "list_changed" in heard:
                        break

            async def reloaded_both() -> bool:
                names = []
                for base in (one, two):
                    answer = await http.post(f"{base}/agents/a/mcp", json=listing, headers={**MCP_HEADERS, **session})
                    names.append([t["name"] for t in sse_messages(answer.text)[0]["result"]["tools"]])
                return names == [["t__ping"], ["t__ping"]]

            await until(reloaded_both, "both replicas reloaded")
            await anyio.sleep(0.5)  # what the other replica might (wrongly) still send
            keys = await redis_command(redis_url, "KEYS", "once-told:stream:*")
            kept = await redis_command(redis_url, "XRANGE", keys[0], "-", "+")
            return [m for m in sse_messages(heard)], [json.loads(f[b"m"]) for _, f in kept if f.get(b"m")]

    heard, kept = run(main)
    assert heard == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    assert [m.get("method") for m in kept].count("notifications/tools/list_changed") == 1


def test_while_redis_is_down_each_replica_serves_the_sessions_it_holds_and_opens_new_ones_for_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer(tmp_path / "redis").start()
    text, first, second = two_config_files(tmp_path, server.url, monkeypatch, cluster="timeout = 0.5\n")
    for path in (first, second):
        path.write_text(text + '[agents.a]\ntoken_env = "TOK_A"\n')
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    async def main() -> list[int]:
        statuses = []
        async with http_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two):
            held = (await post(one, INITIALIZE)).headers["mcp-session-id"]
            server.stop()
            statuses.append((await post(one, listing, held)).status_code)  # held here: served
            opened = await post(two, INITIALIZE)  # opened for itself
            statuses.append(opened.status_code)
            statuses.append((await post(two, listing, opened.headers["mcp-session-id"])).status_code)
            statuses.append((await post(two, listing, held)).status_code)  # not held there, not found: 404
            server.start()
            shared = (await post(one, INITIALIZE)).headers["mcp-session-id"]
            statuses.append((await post(two, listing, shared)).status_code)  # Redis back: taken up again
        return statuses

    try:
        with caplog.at_level(logging.WARNING, logger="toolcrib.cluster"):
            statuses = run(main)
    finally:
        server.stop()
    assert statuses == [200, 200, 200, 404, 200]
    said = {r.getMessage() for r in caplog.records if r.name == "toolcrib.cluster"}
    assert said >= {"a session could not be counted on the shared store; it is served by this replica only",
                    "a session another replica may hold could not be looked up on the shared store; its client is "
                    "told it does not exist (404) and opens a new one"}


def test_what_a_client_sets_on_one_replica_holds_on_every_replica_that_holds_its_session(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replica two takes the session up first; then the client subscribes to a resource and sets its log level on
    replica one, and listens on replica two. A pack on replica two updates the resource: replica two, which tells
    the session of changes, knows of the subscription and tells it, once."""
    import httpx2

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch)
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "t=test_cluster:PACK,notes=packs:NOTES")
    for path in (first, second):
        path.write_text(text.replace('plugins = { allow = ["t"] }', 'plugins = { allow = ["t", "notes"] }') +
                        'resources = { allow = ["*"] }\n[agents.a]\ntoken_env = "TOK_A"\n')
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    async def main() -> list[Any]:
        async with uvicorn_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two), \
                httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(f"{one}/agents/a/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            headers = {**MCP_HEADERS, **session}
            assert (await http.post(f"{two}/agents/a/mcp", json=listing, headers=headers)).status_code == 200
            for body in ({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                          "params": {"uri": "notes://today"}},
                         {"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "error"}}):
                assert (await http.post(f"{one}/agents/a/mcp", json=body, headers=headers)).status_code == 200

            async def followed() -> bool:  # replica two has heard (a hang guard, not a measured wait)
                return await _state_of_session(1, session["mcp-session-id"]) == (
                    {"notes://today"}, "error")

            await until(followed, "replica two follows what the client set on replica one")
            return await _touched_while_listening(http, f"{two}/agents/a/mcp", headers, 1)

    heard = run(main)
    assert heard == [{"jsonrpc": "2.0", "method": "notifications/resources/updated",
                      "params": {"uri": "notes://today"}}]


@pytest.mark.waits
@pytest.mark.parametrize("cluster", [False, True])
def test_a_listening_stream_hears_what_is_sent_as_soon_as_its_client_has_its_headers(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, cluster: bool) -> None:
    """The SDK starts the task that makes a session's listening stream (where notifications go) beside the one that
    sends the stream's headers, and drops a notification sent before the stream exists (it is only stored, for a
    client that comes back with an event id it never got). Here that task is held back 0.3 s, as a loaded machine
    may hold it back for a moment (what once made the test above miss its update): the headers still wait for the
    stream, so a resource updated as soon as the client has them reaches it."""
    import httpx2
    import sse_starlette.sse

    given = sse_starlette.sse.EventSourceResponse.__init__

    def held_back(self: Any, *args: Any, data_sender_callable: Any = None, **kwargs: Any) -> None:
        if data_sender_callable is not None:
            sender = data_sender_callable

            async def data_sender_callable() -> None:
                await anyio.sleep(0.3)
                await sender()

        given(self, *args, data_sender_callable=data_sender_callable, **kwargs)

    monkeypatch.setattr(sse_starlette.sse.EventSourceResponse, "__init__", held_back)
    monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "notes=packs:NOTES")
    path = tmp_path / "toolcrib.toml"
    path.write_text((f'[cluster]\nredis_url = "{redis_url}"\n' if cluster else "") +
                    '[agents.a]\ntoken_env = "TOK_A"\n[agents.a.permissions]\nplugins = { allow = ["notes"] }\n'
                    'tools = { allow = ["*"] }\nresources = { allow = ["*"] }\n')

    async def main() -> list[Any]:
        async with uvicorn_replicas([path], {"TOK_A": "a" * 32}) as (one,), httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(f"{one}/agents/a/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            headers = {**MCP_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            subscribe = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                         "params": {"uri": "notes://today"}}
            assert (await http.post(f"{one}/agents/a/mcp", json=subscribe, headers=headers)).status_code == 200
            return await _touched_while_listening(http, f"{one}/agents/a/mcp", headers, 0)

    assert run(main) == [{"jsonrpc": "2.0", "method": "notifications/resources/updated",
                          "params": {"uri": "notes://today"}}]


async def _touched_while_listening(http: Any, endpoint: str, headers: dict[str, str], replica: int) -> list[Any]:
    """Open the session's listening stream at ``endpoint`` (on ``replica``); once it is open there, have the notes
    pack update notes://today (from another connection); what the stream carried until the update (or the hang
    guard: its pings would keep it open for good)."""
    import httpx2

    async with http.stream("GET", endpoint, headers=headers) as stream:
        sid = headers["mcp-session-id"]
        await until(lambda: _listening_there(replica, "a", sid), "the listening stream is open on the replica")
        touch = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                 "params": {"name": "notes__touch_note", "arguments": {}}}
        async with httpx2.AsyncClient(timeout=30) as other:
            touched = await other.post(endpoint, json=touch, headers=headers)
            assert sse_messages(touched.text)[0]["result"]["content"][0]["text"] == "updated"
        return await _heard_until(stream, "resources/updated")


async def _heard_until(stream: Any, marker: str) -> list[Any]:
    """The messages a listening stream carries until one has ``marker`` in it (or the hang guard: its pings would
    keep it open for good)."""
    heard = ""
    with anyio.move_on_after(HANG_GUARD):
        async for chunk in stream.aiter_text():
            heard += chunk
            if marker in heard:
                break
    return sse_messages(heard)


async def _listening_there(replica: int, agent: str, sid: str) -> bool:
    """Whether a replica's transport of a session has its listening stream. The SDK makes it in a task started
    beside the response, so a client holding the response's headers may be ahead of it; a notification sent in
    between has no stream to go to (a test that updates at once then hears nothing, now and then)."""
    from mcp.server.streamable_http import GET_STREAM_KEY

    from toolcrib.mcp.fleet import session_digest

    return any(GET_STREAM_KEY in manager._server_instances[found]._request_streams
               for manager, found in APPS[replica]._sessions_of(session_digest(agent, sid))
               if found in manager._server_instances)


async def _state_of_session(replica: int, sid: str) -> tuple[set[str], str | None]:
    """What a replica's connection of a session holds of what its client set (subscriptions, log level)."""
    from toolcrib.mcp.sessions import LOG_LEVEL, SUBSCRIPTIONS

    for connection in [c for sessions in SERVED[replica]._sessions.values() for c in sessions.values()]:
        connection = getattr(connection, "_connection", connection)
        if getattr(connection, "session_id", None) == sid:
            return set(connection.state.get(SUBSCRIPTIONS, ())), connection.state.get(LOG_LEVEL)
    return set(), None


@pytest.mark.parametrize("required", [False, True])
def test_check_says_whether_the_clusters_redis_answers(tmp_path: Path, redis_url: str,
                                                       monkeypatch: pytest.MonkeyPatch, required: bool) -> None:
    """``toolcrib check`` asks the Redis of ``[cluster]``: nothing to say while it answers; a warning when it does
    not (an error, exit 1, where the operator requires it); the password never shown."""
    from conftest import cli
    from redis_server import free_port

    monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("STORE_PASSWORD", "a-password-nobody-sees")
    config = tmp_path / "toolcrib.toml"
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "t=test_cluster:PACK")
    agents = '[agents.a.permissions]\nplugins = { allow = ["t"] }\ntools = { allow = ["*"] }\n'
    config.write_text(f'[cluster]\nredis_url = "{redis_url}"\nrequired = {str(required).lower()}\n' + agents)
    up = cli("check", "--config", str(config))
    port = free_port()
    config.write_text(f'[cluster]\nredis_url = "redis://:${{STORE_PASSWORD}}@127.0.0.1:{port}/0"\ntimeout = 0.5\n'
                      f'required = {str(required).lower()}\n' + agents)
    down = cli("check", "--config", str(config))
    assert up == (0, f"{config}: 1 agent(s), 5 tool(s), 0 error(s), 0 warning(s)\n", "")
    severity = "error" if required else "warning"
    assert down[0] == (1 if required else 0)
    assert re.fullmatch(
        rf"{severity}: {re.escape(str(config))}: cluster.redis_url: Redis at 127\.0\.0\.1:{port}/0 does not answer "
        r"\(ConnectionError: .+\); limits, sessions and one-time approvals cannot be shared until it does\n", down[2])
    assert down[1] == f"{config}: 1 agent(s), 5 tool(s), {int(required)} error(s), {int(not required)} warning(s)\n"
    assert "a-password-nobody-sees" not in down[1] + down[2]


def test_without_the_redis_client_check_and_serve_say_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.cluster import probe

    monkeypatch.setitem(sys.modules, "redis", None)  # as if not installed: importing it raises ImportError
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    loaded = config_from('[cluster]\nredis_url = "redis://127.0.0.1:1/0"\n')
    needs = ("a [cluster] table needs the redis client, which is not installed: pip install 'toolcrib[cluster]'")
    assert [str(p) for p in probe(loaded)] == [f"error: toolcrib.toml: cluster: {needs}"]

    async def main() -> None:
        async with limiter(loaded):
            raise AssertionError("served without its client")

    with pytest.raises(ConfigError) as refused:
        run(main)
    assert [str(p) for p in refused.value.problems] == [f"error: toolcrib.toml: cluster: {needs}"]


@pytest.mark.waits
def test_a_session_used_on_any_replica_stays_alive_and_speaks_its_negotiated_version(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Each request on a session (on whichever replica) keeps its record from expiring (at most every tenth of the
    idle time); a request whose MCP-Protocol-Version header names an older version than the session negotiated
    still gets the negotiated version's stream (a call that streams opens it with a priming event that says when to
    retry); an unknown session id is refused and logged."""
    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch, cluster='key_prefix = "alive:"\n')
    for path in (first, second):
        path.write_text("[host]\nhttp_session_idle = 2\n" + text + '[agents.a]\ntoken_env = "TOK_A"\n')
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    async def main() -> tuple[list[int], str, int]:
        async with http_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two):
            session = (await post(one, INITIALIZE)).headers["mcp-session-id"]
            key = next(k for k in await redis_command(redis_url, "KEYS", "alive:session:*"))
            ttls = []
            for replica in (two, one, two):
                await asyncio.sleep(0.6)
                listed = sse_messages((await post(replica, listing, session)).text)[0]
                assert [t["name"] for t in listed["result"]["tools"]][:2] == ["t__hold", "t__hold_sync"], listed
                ttls.append(await redis_command(redis_url, "PTTL", key))
            GATES["older"] = asyncio.Event()
            GATES["older"].set()
            talking = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {  # a call that streams
                "name": "t__hold_talking", "arguments": {"tag": "older"}, "_meta": {"progressToken": "o"}}}
            older = await two.post("/agents/a/mcp", json=talking, headers={
                **MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-03-26"})
            unknown = await post(two, listing, "0" * 32)
            return ttls, older.text, unknown.status_code

    with caplog.at_level(logging.INFO, logger="toolcrib.serve"):
        ttls, older, unknown = run(main)
    assert all(1500 < ttl <= 2000 for ttl in ttls), ttls  # refreshed by each request, not 2 s after the first
    events = sse_events(older)
    assert (events[0]["data"], events[0]["retry"]) == ("", "1000")
    assert json.loads(events[-1]["data"])["result"]["content"] == [{"type": "text", "text": "held older"}]
    assert unknown == 404
    assert "agent 'a': a request for an unknown or expired session (or another principal's) was refused" in [
        r.getMessage() for r in caplog.records]


def test_a_replica_that_takes_a_session_up_asks_its_client_as_the_first_replica_would(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client declared elicitation when it opened its session on replica one; a call that needs its approval,
    made on replica two, is asked there (the capability came with the session), and the answer runs it."""
    import httpx2

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch)
    for path in (first, second):
        path.write_text(text + 'ask = ["t__ping"]\n[agents.a]\ntoken_env = "TOK_A"\n')
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "t__ping", "arguments": {}}}

    async def main() -> tuple[str, list[Any]]:
        async with uvicorn_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two), \
                httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(f"{one}/agents/a/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            headers = {**MCP_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            await http.post(f"{one}/agents/a/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                            headers=headers)
            got = ""
            asked = None
            async with http.stream("POST", f"{two}/agents/a/mcp", json=call, headers=headers) as stream:
                async for chunk in stream.aiter_text():
                    got += chunk
                    messages = sse_messages(got)
                    if asked is None and messages and messages[-1].get("method") == "elicitation/create":
                        asked = messages[-1]
                        answer = {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {}}}
                        async with httpx2.AsyncClient(timeout=30) as other:
                            accepted = await other.post(f"{two}/agents/a/mcp", json=answer, headers=headers)
                            assert accepted.status_code == 202
                    if messages and messages[-1].get("id") == 5:
                        break
            assert asked is not None
            return asked["params"]["message"], sse_messages(got)[-1]["result"]["content"]

    message, content = run(main)
    assert message == "Agent 'a' wants to call t__ping (ask rule 't__ping'). Allow this call?"
    assert content == [{"type": "text", "text": "pong"}]


def test_a_replica_that_takes_a_session_up_by_its_listening_stream_alone_tells_it_of_changes(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session opened on one replica whose client only listens on the second (no request there): the second
    takes it up with the GET and keeps it as its agent's, so a reload reaches that stream."""
    import httpx2

    text, first, second = two_config_files(tmp_path, redis_url, monkeypatch, cluster='key_prefix = "listen-only:"\n')
    for path in (first, second):
        path.write_text(text + '[agents.a]\ntoken_env = "TOK_A"\n')

    async def main() -> list[Any]:
        async with uvicorn_replicas([first, second], {"TOK_A": "a" * 32}) as (one, two), \
                httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(f"{one}/agents/a/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            async with http.stream("GET", f"{two}/agents/a/mcp", headers={**MCP_HEADERS, **session}) as stream:
                sid = session["mcp-session-id"]
                await until(lambda: _listening_there(1, "a", sid), "the listening stream is open on replica two")
                for path in (first, second):
                    path.write_text(path.read_text().replace('tools = { allow = ["*"] }',
                                                             'tools = { allow = ["t__ping"] }'))
                assert await SERVED[1].reload() is True  # replica two reloads (and tells replica one)
                return await _heard_until(stream, "list_changed")

    assert run(main) == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
