"""The documented deployment, run: three stateless replicas behind a real nginx with deploy/nginx.conf (only the
ports changed), checked through nginx with the SDK's client in both eras; and the Kubernetes manifests and the
Dockerfile checked against Kubernetes' schemas and toolcrib's own command line."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
import yaml

from conftest import ROOT
from serving import CONFIG, TOKENS, accept, http_client, run_writer_over_http, start_http

# slow: every test starts servers in processes of their own (nginx, uvicorn replicas); CI runs them all
pytestmark = pytest.mark.slow

DEPLOY = ROOT / "deploy"
SECRET = "a-state-secret-all-replicas-share-0123456789"


# -- the manifests and the image -----------------------------------------------------------------------------------


def test_the_kubernetes_manifests_are_valid_and_their_config_loads() -> None:
    import kubernetes_validate

    from toolcrib.cli import main
    from toolcrib.config import parse_config

    docs = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "toolcrib.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["Secret", "ConfigMap", "Deployment", "Service"]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)  # raises, naming the field, when invalid
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["toolcrib.toml"]
    loaded = parse_config(config, "the ConfigMap", ROOT)
    secret = next(d for d in docs if d["kind"] == "Secret")["stringData"]
    assert {a.token_env for a in loaded.config.agents.values()} <= set(secret)
    assert len(secret["TOOLCRIB_STATE_SECRET"]) >= 32
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert (container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"]) == (
        "/readyz", "/healthz")
    # the container's command is one toolcrib takes
    assert container["command"] == ["toolcrib"]
    main.make_context("toolcrib", list(container["args"]))


def test_the_redis_manifest_is_valid_and_the_commented_cluster_table_loads() -> None:
    import kubernetes_validate

    from toolcrib.config import parse_config

    docs = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "redis.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["Secret", "Deployment", "Service", "NetworkPolicy"]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    toolcrib = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "toolcrib.yaml").read_text()) if d]
    config = next(d for d in toolcrib if d["kind"] == "ConfigMap")["data"]["toolcrib.toml"]
    uncommented = re.sub(r"^# (\[cluster\]|redis_url|required)", r"\1", config, flags=re.M)
    cluster = parse_config(uncommented, "the ConfigMap", ROOT).config.cluster
    assert cluster is not None and (cluster.redis_url, cluster.required) == (
        "redis://:${REDIS_PASSWORD}@toolcrib-redis:6379/0", True)
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["metadata"]["name"] + ":6379" in cluster.redis_url
    assert '".[cluster]"' in (DEPLOY / "Dockerfile").read_text()  # the image has the Redis client


def test_the_dockerfile_runs_a_command_toolcrib_takes() -> None:
    from toolcrib.cli import main

    text = (DEPLOY / "Dockerfile").read_text()
    command = re.search(r"^CMD (\[.*?\])$", text.replace("\\\n", ""), flags=re.M | re.S)
    assert command is not None
    args = yaml.safe_load(command.group(1))
    assert args[0] == "toolcrib"
    main.make_context("toolcrib", args[1:])
    assert "USER toolcrib" in text and "HEALTHCHECK" in text and "/healthz" in text


# -- behind nginx ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _behind_nginx(tmp_path: Path, config_text: str, *extra: str,
                  env: dict[str, str] | None = None) -> Iterator[tuple[str, list[Any], Path]]:
    """Three replicas of ``serve --http`` (with ``extra`` options) behind a real nginx with deploy/nginx.conf."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        pytest.skip("nginx is not installed (.ci/run installs it from Debian's packages)")
    config = tmp_path / "toolcrib.toml"
    config.write_text(config_text)
    env = {"TOOLCRIB_STATE_SECRET": SECRET, **(env or {})}
    replicas = [start_http(config, *extra, env=env) for _ in range(3)]
    ports = [int(base.rsplit(":", 1)[1]) for _, base, _ in replicas]
    listen = _free_port()
    text = (DEPLOY / "nginx.conf").read_text()
    for placeholder, port in zip((8001, 8002, 8003), ports, strict=True):
        text = text.replace(f"127.0.0.1:{placeholder}", f"127.0.0.1:{port}")
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    (tmp_path / "nginx").mkdir()
    (tmp_path / "nginx" / "nginx.conf").write_text(text)
    errors = tmp_path / "nginx" / "error.log"
    with errors.open("wb") as err:
        proc = subprocess.Popen([nginx, "-p", str(tmp_path / "nginx"), "-c", str(tmp_path / "nginx" / "nginx.conf"),
                                 "-g", f"daemon off; pid {tmp_path / 'nginx' / 'nginx.pid'}; error_log stderr;"],
                                stderr=err)
    base = f"http://127.0.0.1:{listen}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{base}/healthz").status_code == 200:
                break
        except httpx2.HTTPError:
            time.sleep(0.05)
    else:
        proc.kill()
        for replica, _, _ in replicas:
            replica.kill()
        pytest.fail(f"nginx did not answer: {errors.read_text()[-2000:]}")
    try:
        yield base, replicas, errors
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for replica, _, _ in replicas:
            if replica.poll() is None:
                replica.kill()
                replica.wait(timeout=30)


@pytest.fixture
def behind_nginx(tmp_path: Path) -> Iterator[tuple[str, list[Any], Path]]:
    with _behind_nginx(tmp_path, '[host]\nshutdown_timeout = 3\n' + CONFIG, "--stateless", "--metrics",
                       "--log-format", "json", "--log-requests") as found:  # (a line per request: who served what)
        yield found


def _calls_total(base: str) -> float:
    """The calls counted by all three replicas, scraped through nginx (which replica answers a scrape is nginx's
    choice: scrape until each has answered, telling them apart by their start time)."""
    counted: dict[str, float] = {}
    for _ in range(60):
        text = httpx2.get(f"{base}/metrics").text
        started = next(line for line in text.splitlines() if line.startswith("toolcrib_start_time_seconds "))
        counted[started] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                               if line.startswith("toolcrib_tool_calls_total{"))
        if len(counted) == 3:
            return sum(counted.values())
    raise AssertionError(f"60 scrapes through nginx reached only {len(counted)} replicas")


def test_three_replicas_behind_nginx(behind_nginx: tuple[str, list[Any], Path]) -> None:
    base, replicas, _ = behind_nginx
    logs = [log for _, _, log in replicas]

    # probes and metrics through nginx, without a token
    assert httpx2.get(f"{base}/healthz").json() == {"status": "ok"}
    assert httpx2.get(f"{base}/readyz").json() == {"status": "ready"}
    before = _calls_total(base)

    async def both_eras() -> int:
        calls = 0
        for mode in ("auto", "legacy"):
            for agent, token, tool, arguments in (("reader", "TOK_READER", "misc__add", {"a": 2, "b": 3}),
                                                   ("writer", "TOK_WRITER", "files__read", {"path": "x"})):
                http, client = await http_client(f"{base}/agents/{agent}/mcp", TOKENS[token], mode,
                                                 elicitation_callback=lambda c, p: accept())
                async with http, client:
                    names = [t.name for t in (await client.list_tools()).tools]
                    assert tool in names and ("misc__add" in names) == (agent == "reader")
                    result = await client.call_tool(tool, arguments)
                    assert not result.is_error, result
                    calls += 1
        # an approval round trip (2026-07-28): asked on one replica, answered on another
        http, client = await http_client(f"{base}/agents/writer/mcp", TOKENS["TOK_WRITER"], "auto",
                                         elicitation_callback=lambda c, p: accept())
        async with http, client:
            approved = await client.call_tool("files__write", {"path": "a.txt", "text": "hi"})
            assert approved.content[0].text == "wrote 2 characters to a.txt"  # type: ignore[union-attr]
        return calls + 2  # the approval's two rounds

    calls = anyio.run(both_eras)
    # a sub-agent run across replicas: each model turn is a round of the same call
    ran = anyio.run(run_writer_over_http, base, "auto")
    assert ran.content == [types.TextContent(text="notes say: contents of notes")]
    served = [sum(1 for line in log.read_text().splitlines() if '"method": "tools/call"' in line) for log in logs]
    assert sum(1 for n in served if n) >= 2, served  # the calls were spread over the replicas
    after = _calls_total(base)
    assert after >= before + calls  # the call counter moved (the sub-agent's inner calls count too)


def test_a_killed_replica_loses_only_its_calls_in_flight(behind_nginx: tuple[str, list[Any], Path]) -> None:
    base, replicas, errors = behind_nginx
    killed = replicas[1][1].rsplit(":", 1)[1]

    async def main() -> list[bool]:
        outcomes: list[bool] = []

        async def one(client: Any) -> None:
            try:
                result = await client.call_tool("misc__slow", {"seconds": 2})
                outcomes.append(not result.is_error)
            except Exception:  # the connection to the killed replica broke
                outcomes.append(False)

        http, client = await http_client(f"{base}/agents/runner/mcp", TOKENS["TOK_RUNNER"])
        async with http, client, anyio.create_task_group() as tg:
            for _ in range(9):  # three in flight on each replica
                tg.start_soon(one, client)
            await anyio.sleep(0.8)
            replicas[1][0].send_signal(signal.SIGKILL)
        after = []
        http2, client2 = await http_client(f"{base}/agents/runner/mcp", TOKENS["TOK_RUNNER"])
        async with http2, client2:
            for _ in range(6):  # nginx passes every new call to the replicas that are left
                after.append(not (await client2.call_tool("misc__slow", {"seconds": 0})).is_error)
        assert after == [True] * 6
        return outcomes

    outcomes = anyio.run(main)
    # nginx says which calls were in flight on the killed replica when it went: exactly those are lost
    lost = [line for line in errors.read_text().splitlines() if f"127.0.0.1:{killed}/agents/runner/mcp" in line
            and "prematurely closed" in line]
    assert 1 <= len(lost) <= 9 - 2, lost
    assert (len(outcomes), outcomes.count(False)) == (9, len(lost)), (outcomes, lost)


def test_sigterm_with_an_open_stream_stops_within_the_shutdown_timeout(
        behind_nginx: tuple[str, list[Any], Path]) -> None:
    base, replicas, _ = behind_nginx

    async def main() -> None:
        http, client = await http_client(f"{base}/agents/reader/mcp", TOKENS["TOK_READER"], "auto")
        async with http, client, client.listen(tools_list_changed=True):  # a stream the server never ends by itself
                for replica, _, _ in replicas:
                    replica.send_signal(signal.SIGTERM)
                started = time.monotonic()
                for replica, _, log in replicas:
                    # [host] shutdown_timeout = 3: open streams are closed then; the bound here only keeps a
                    # broken shutdown from hanging the suite
                    code = await anyio.to_thread.run_sync(lambda r=replica: r.wait(timeout=60))
                    assert code == 0, log.read_text()[-2000:]
                    assert "stopped on SIGTERM" in log.read_text()
                assert time.monotonic() - started < 3 + 30

    try:
        anyio.run(main)
    except BaseException as exc:  # the stream ends with the server: whatever the client makes of that
        if not all(r.poll() == 0 for r, _, _ in replicas):
            raise
        del exc



# -- sharing one Redis ([cluster]) ---------------------------------------------------------------------------------

CLUSTER = """
[cluster]
redis_url = "${TOOLCRIB_TEST_REDIS}"
lease_seconds = 2
[host]
shutdown_timeout = 3
[agents.reader]
token_env = "TOK_READER"
[agents.reader.permissions]
plugins = { allow = ["misc", "notes"] }
tools = { allow = ["*"] }
resources = { allow = ["*"] }
[agents.reader.limits.tools."misc__*"]
rate = "7/minute"
[agents.runner]
token_env = "TOK_RUNNER"
[agents.runner.permissions]
plugins = { allow = ["misc"] }
tools = { allow = ["misc__slow*"] }
[agents.runner.limits]
in_flight = 2
[agents.silent]
"""


def test_three_replicas_sharing_one_redis_keep_fleet_wide_limits_and_tell_every_subscriber(
        tmp_path: Path, redis_url: str) -> None:
    """Behind nginx's round robin, an agent's ``7/minute`` admits exactly 7 of a burst of 12 between the three
    replicas, and ``in_flight = 2`` exactly 2 of 6 concurrent calls; a resource one replica's pack updates reaches a
    client listening on another."""
    env = {"TOOLCRIB_TEST_REDIS": redis_url, "TOOLCRIB_PLUGINS": "misc=packs:MISC,notes=packs:NOTES"}
    with _behind_nginx(tmp_path, CLUSTER, "--stateless", env=env) as (base, replicas, _):
        async def burst() -> tuple[list[Any], list[Any]]:
            http, client = await http_client(f"{base}/agents/reader/mcp", TOKENS["TOK_READER"])
            async with http, client:
                rated = [await client.call_tool("misc__add", {"a": 1, "b": i}) for i in range(12)]
            flights: list[Any] = []
            http, client = await http_client(f"{base}/agents/runner/mcp", TOKENS["TOK_RUNNER"])
            async with http, client, anyio.create_task_group() as tg:
                async def one() -> None:
                    flights.append(await client.call_tool("misc__slow", {"seconds": 3}))
                for _ in range(6):
                    tg.start_soon(one)
            return rated, flights

        rated, flights = anyio.run(burst)
        texts = [r.content[0].text for r in rated]  # type: ignore[union-attr]
        assert texts[:7] == [str(1 + i) for i in range(7)]
        assert all(t.startswith("Rate limited: agent 'reader' may make at most 7 calls of misc__* a minute; try "
                                "again in ")
                   for t in texts[7:]), texts
        done = sorted(f.content[0].text for f in flights)  # type: ignore[union-attr]
        assert done == ["Rate limited: agent 'runner' may make at most 2 calls at once; try again when one of them "
                        "has finished."] * 4 + ["done"] * 2

        async def across() -> Any:
            listener, toucher = replicas[0][1], replicas[1][1]
            http, client = await http_client(f"{listener}/agents/reader/mcp", TOKENS["TOK_READER"])
            http2, other = await http_client(f"{toucher}/agents/reader/mcp", TOKENS["TOK_READER"])
            async with http, client, http2, other, client.listen(resource_subscriptions=["notes://today"]) as events:
                touched = await other.call_tool("notes__touch_note", {})
                assert touched.content[0].text == "updated"  # type: ignore[union-attr]
                with anyio.fail_after(30):  # a hang guard
                    return await events.__anext__()

        event = anyio.run(across)
        assert (type(event).__name__, event.uri) == ("ResourceUpdated", "notes://today")


def test_three_stateful_replicas_sharing_one_redis_serve_every_session_anywhere(tmp_path: Path) -> None:
    """Without --stateless, behind nginx's round robin: a 2025-11-25 session's requests land on every replica and
    are all served; a call whose stream the server closes mid-call (``http_stream_seconds``) is resumed by the
    SDK's own client through nginx, on whichever replica, and answers; with Redis stopped mid-run a limited call
    fails closed with the documented message, and once Redis is back the same replicas count again."""
    from redis_server import RedisServer

    redis = RedisServer(tmp_path / "redis").start()
    text = CLUSTER.replace("[host]\n", "[host]\nhttp_stream_seconds = 0.5\n").replace(
        "lease_seconds = 2\n", "lease_seconds = 2\ntimeout = 0.5\n")
    env = {"TOOLCRIB_TEST_REDIS": redis.url, "TOOLCRIB_PLUGINS": "misc=packs:MISC,notes=packs:NOTES"}
    try:
        with _behind_nginx(tmp_path, text, env=env) as (base, replicas, _):
            async def session() -> tuple[list[str], str, list[str]]:
                http, client = await http_client(f"{base}/agents/reader/mcp", TOKENS["TOK_READER"], "legacy")
                async with http, client:
                    sums = [(await client.call_tool("misc__add", {"a": 1, "b": i})).content[0].text  # type: ignore[union-attr]
                            for i in range(6)]
                    slow = (await client.call_tool("misc__slow", {"seconds": 2})).content[0].text  # type: ignore[union-attr]
                    redis.stop()
                    down = [(await client.call_tool("misc__add", {"a": 0, "b": 0})).content[0].text]  # type: ignore[union-attr]
                    redis.start()
                    deadline = time.monotonic() + 60  # a hang guard: the replicas reconnect by themselves
                    while True:
                        again = (await client.call_tool("misc__add", {"a": 2, "b": 2})).content[0].text  # type: ignore[union-attr]
                        if again == "4" or time.monotonic() > deadline:
                            break
                        await anyio.sleep(0.2)
                    return sums, slow, [*down, again]

            sums, slow, down_then_back = anyio.run(session)
            took_up = [log.read_text().count("took up a session another replica opened") for _, _, log in replicas]
    finally:
        redis.stop()
    assert sums == ["1", "2", "3", "4", "5", "6"]
    assert slow == "done"
    assert down_then_back == ["Rate limited: agent 'reader' has limits, and the store that counts them across "
                              "replicas is unreachable; try again shortly.", "4"]
    assert sum(took_up) >= 1, took_up  # round robin sent the session's requests to replicas that had not opened it
