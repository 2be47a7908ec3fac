"""What an operator sees of a serving toolcrib, in-process: probes, Prometheus metrics, one log line per request
(text and JSON), and OpenTelemetry spans that continue the caller's trace."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from conftest import make_host, traced
from packs import FILES, MISC
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.http import HttpApp, HttpOptions
from toolcrib.mcp.state import ServingState
from toolcrib.observe import JsonFormatter, Metrics

CONFIG = """
[agents.reader]
token_env = "TOK_READER"
[agents.reader.permissions]
plugins = { allow = ["files", "misc"] }
tools = { allow = ["files__read", "misc__add"] }
"""
TOKENS = {"TOK_READER": "r" * 32, "TOK_METRICS": "m" * 32}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "Authorization": "Bearer " + "r" * 32}


def state(config: str = CONFIG, metrics: Metrics | None = None) -> ServingState:
    host = make_host(config, {"files": FILES, "misc": MISC}) if metrics is None else None
    if metrics is not None:
        from conftest import config_from
        from toolcrib.host import Host

        host = Host(config_from(config), plugins={"files": FILES, "misc": MISC}, autoload=False, env={},
                    metrics=metrics)
    served = ServingState(host)  # type: ignore[arg-type]
    served.metrics = metrics
    return served


@asynccontextmanager
async def serving(served: ServingState) -> AsyncIterator[tuple[HttpApp, httpx2.AsyncClient]]:
    app = HttpApp(served, HttpOptions(), env=TOKENS)
    async with app.app.router.lifespan_context(app.app):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000", timeout=30) as client:
            yield app, client


def test_probes_say_ready_only_between_start_and_drain_and_nothing_else() -> None:
    served = state()
    app = HttpApp(served, HttpOptions(), env=TOKENS)

    async def main() -> None:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://10.0.0.7:8000") as client:
            # before the lifespan has set the endpoints up: alive, not ready
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            starting = await client.get("/readyz")
            assert (starting.status_code, starting.json()) == (503, {"status": "starting"})
            async with app.app.router.lifespan_context(app.app):
                ready = await client.get("/readyz")  # no token, any Host: a probe comes from the orchestrator
                assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
                app.draining = lambda: True
                draining = await client.get("/readyz")
                assert (draining.status_code, draining.json()) == (503, {"status": "draining"})
                assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/metrics")).status_code == 404  # metrics are off unless asked for

    anyio.run(main)


def _sample(text: str, name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def test_metrics_count_calls_by_outcome_and_time_them() -> None:
    metrics = Metrics()
    served = state(metrics=metrics)

    async def main() -> str:
        async with serving(served) as (_, client):
            async with Client(build_server(served, "reader"), cache=None) as mcp:
                await mcp.call_tool("misc__add", {"a": 1, "b": 2})
                await mcp.call_tool("misc__add", {"a": 1, "b": 2})
                await mcp.call_tool("misc__add", {"a": "x"})
                with pytest.raises(Exception, match="Unknown tool"):
                    await mcp.call_tool("misc__secret_tool_name", {})
            answer = await client.get("/metrics")
            assert answer.headers["content-type"].startswith("text/plain; version=")
            await client.post("/agents/reader/mcp", json=INITIALIZE, headers=HEADERS)
            return (await client.get("/metrics")).text

    text = anyio.run(main)
    assert _sample(text, "toolcrib_tool_calls_total", agent="reader", tool="misc__add", outcome="ok") == 2
    assert _sample(text, "toolcrib_tool_calls_total", agent="reader", tool="misc__add", outcome="invalid") == 1
    assert _sample(text, "toolcrib_tool_calls_total", agent="reader", tool="(unknown)", outcome="unknown") == 1
    assert "misc__secret_tool_name" not in text  # a name an agent made up never becomes a label
    assert _sample(text, "toolcrib_tool_call_duration_seconds_count", agent="reader") == 4
    assert _sample(text, "toolcrib_http_sessions", agent="reader") == 1


def test_metrics_behind_their_own_token() -> None:
    metrics = Metrics()
    served = state('[host]\nmetrics_token_env = "TOK_METRICS"\n' + CONFIG, metrics)

    async def main() -> None:
        async with serving(served) as (_, client):
            bare = await client.get("/metrics")
            assert (bare.status_code, bare.json(), bare.headers["www-authenticate"]) == (401, {
                "error": "unauthorized", "error_description": "this endpoint needs Authorization: Bearer <the metrics "
                "token>"}, 'Bearer realm="toolcrib"')
            wrong = await client.get("/metrics", headers={"Authorization": "Bearer " + "r" * 32})
            assert (wrong.status_code, wrong.json()["error"], wrong.headers["www-authenticate"]) == (
                401, "invalid_token", 'Bearer realm="toolcrib", error="invalid_token", error_description="this '
                'endpoint needs Authorization: Bearer <the metrics token>"')
            answer = await client.get("/metrics", headers={"authorization": "Bearer " + "m" * 32})
            assert answer.status_code == 200 and "toolcrib_reloads_total" in answer.text

    anyio.run(main)
    unset = state('[host]\nmetrics_token_env = "TOK_METRICS_NOT_SET"\n' + CONFIG, Metrics())

    async def closed() -> None:  # a variable that is not set lets no one in, an empty token least of all
        async with serving(unset) as (_, client):
            for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer " + "m" * 32}):
                assert (await client.get("/metrics", headers=headers)).status_code == 401

    anyio.run(closed)


def test_reloads_are_counted() -> None:
    metrics = Metrics()
    first = state(metrics=metrics)
    good = first.host
    results = iter([good, ValueError("broken")])

    def make() -> Any:
        outcome = next(results)
        if isinstance(outcome, Exception):
            from toolcrib.errors import ConfigError, Problem

            raise ConfigError([Problem("error", "toolcrib.toml", "broken")])
        return outcome

    served = ServingState(good, make_host=make)
    served.metrics = metrics
    assert anyio.run(served.reload) is True
    assert anyio.run(served.reload) is False
    text = metrics.render()[0].decode()
    assert (_sample(text, "toolcrib_reloads_total", result="ok"), _sample(text, "toolcrib_reloads_total",
                                                                           result="rejected")) == (1, 1)


def test_noted_observations_are_counted_whenever_collected_from_any_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call only notes its observation; every collection (a scrape, or any reader of the registry) folds what was
    noted in first, and the notes never pile up past observe.FOLD_AT."""
    from toolcrib import observe

    metrics = Metrics()
    metrics.observe("a", "tool", "fs__read", "allowed", False, 0.002)
    metrics.observe("a", "tool", "fs__read", "allowed", True, 0.2)
    metrics.observe("a", "resource", "docs://x", "unknown", True, 0.0)
    sample = metrics.registry.get_sample_value
    assert (sample("toolcrib_tool_calls_total", {"agent": "a", "tool": "fs__read", "outcome": "ok"}),
            sample("toolcrib_tool_calls_total", {"agent": "a", "tool": "fs__read", "outcome": "error"}),
            sample("toolcrib_tool_call_duration_seconds_count", {"agent": "a"}),
            sample("toolcrib_tool_call_duration_seconds_bucket", {"agent": "a", "le": "0.0025"}),
            sample("toolcrib_item_requests_total", {"agent": "a", "kind": "resource", "outcome": "unknown"})) == (
        1, 1, 2, 1, 1)

    monkeypatch.setattr(observe, "FOLD_AT", 3)
    for _ in range(3):
        metrics.observe("b", "tool", "fs__read", "allowed", False, 0.001)
    assert len(metrics._noted) == 0  # folded without a scrape: memory stays bounded

    def calls() -> None:
        for _ in range(2000):
            metrics.observe("c", "tool", "fs__read", "denied", True, 0.001)

    def scrapes() -> None:
        for _ in range(50):
            metrics.render()

    threads = [threading.Thread(target=calls) for _ in range(4)] + [threading.Thread(target=scrapes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sample("toolcrib_tool_calls_total", {"agent": "c", "tool": "fs__read", "outcome": "denied"}) == 8000


def test_one_log_line_per_request_in_json(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="toolcrib.requests")
    served = state()

    async def main() -> None:
        async with Client(build_server(served, "reader"), mode="legacy", cache=None) as mcp:
            await mcp.list_tools()
            await mcp.call_tool("misc__add", {"a": 40, "b": 2})
            await mcp.call_tool("misc__add", {"a": "x"})

    anyio.run(main)
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "toolcrib.requests"]
    assert [(line["method"], line["target"], line["outcome"], line["agent"]) for line in lines] == [  # no notifications
        ("initialize", None, "ok", "reader"), ("tools/list", None, "ok", "reader"),
        ("tools/call", "misc__add", "ok", "reader"), ("tools/call", "misc__add", "tool error", "reader")]
    assert all(line["level"] == "info" and isinstance(line["duration_ms"], float) for line in lines)
    assert lines[2]["message"].startswith("reader tools/call misc__add ok ")


def test_spans_per_request_continue_the_callers_trace() -> None:
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    served = state()

    async def main() -> None:
        tracer = trace.get_tracer("the agent")
        async with Client(build_server(served, "reader"), mode="legacy", cache=None) as mcp:
            with tracer.start_as_current_span("the agent's turn") as parent:
                carrier: dict[str, Any] = {}
                inject(carrier)
                await mcp.call_tool("misc__add", {"a": 1, "b": 1}, meta=carrier)
                assert parent.get_span_context().trace_id

    with traced() as exporter:
        anyio.run(main)
    finished = exporter.get_finished_spans()
    turn = next(s for s in finished if s.name == "the agent's turn")
    call = next(s for s in finished if s.name == "tools/call misc__add" and s.instrumentation_scope.name == "toolcrib")
    assert dict(call.attributes) == {"mcp.method.name": "tools/call", "toolcrib.agent": "reader",
                                     "gen_ai.tool.name": "misc__add", "toolcrib.outcome": "ok"}
    # toolcrib's span continues the caller's trace: under the client's span for the request, under the turn
    assert call.context.trace_id == turn.context.trace_id
    client = next(s for s in finished if call.parent is not None and s.context.span_id == call.parent.span_id)
    assert client.parent is not None and client.parent.span_id == turn.context.span_id


def test_metrics_without_a_token_check_host_and_origin_as_agent_endpoints_do() -> None:
    """A DNS-rebinding page (Host: its own name) reads no agent or tool names; behind a token, any Host scrapes."""

    async def get(served: ServingState, base: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        app = HttpApp(served, HttpOptions(), env=TOKENS)
        async with app.app.router.lifespan_context(app.app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url=base) as client:
                answer = await client.get("/metrics", headers=headers)
                return answer.status_code, answer.text

    async def main() -> None:
        open_metrics = state(metrics=Metrics())
        assert await get(open_metrics, "http://rebound.example:8000") == (421, "Invalid Host header")
        assert await get(open_metrics, "http://127.0.0.1:8000", {"origin": "http://rebound.example"}) == (
            403, "Invalid Origin header")
        assert (await get(open_metrics, "http://127.0.0.1:8000"))[0] == 200
        guarded = ServingState(make_host('[host]\nmetrics_token_env = "TOK_METRICS"\n' + CONFIG,
                                         {"files": FILES, "misc": MISC}))
        guarded.metrics = Metrics()
        status, text = await get(guarded, "http://10.0.0.7:8000", {"authorization": "Bearer " + "m" * 32})
        assert status == 200 and "toolcrib_tool_calls_total" in text

    anyio.run(main)


def test_the_metrics_token_is_read_from_the_environment_when_none_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOK_METRICS_ENV", "e" * 32)
    served = ServingState(make_host('[host]\nmetrics_token_env = "TOK_METRICS_ENV"\n' + CONFIG,
                                    {"files": FILES, "misc": MISC}))
    served.metrics = Metrics()

    async def main() -> tuple[int, int]:
        app = HttpApp(served, HttpOptions())  # no env given: the process's own
        async with app.app.router.lifespan_context(app.app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
                good = await client.get("/metrics", headers={"authorization": "Bearer " + "e" * 32})
                bad = await client.get("/metrics", headers={"authorization": "Bearer " + "m" * 32})
                return good.status_code, bad.status_code

    assert anyio.run(main) == (200, 401)


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--log-requests"], ["--log-level", "debug"]])
def test_serve_logs_a_line_per_request_only_when_asked(tmp_path: Path, flags: list[str]) -> None:
    """A line per request is off by default (it cost 15-20% of a busy HTTP server's throughput); ``--log-requests``
    or ``--log-level debug`` writes it."""
    config = tmp_path / "toolcrib.toml"
    config.write_text('[agents.a]\n')
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    done = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "a", "--config", str(config),
                           "--no-reload", *flags], input="".join(json.dumps(m) + "\n" for m in lines),
                          capture_output=True, text=True, timeout=120,
                          env={**env, "TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1"})
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, 2]
    logged = [line.split(" ok ")[0] for line in done.stderr.splitlines() if "toolcrib.requests" in line]
    expected = ["INFO toolcrib.requests: a initialize", "INFO toolcrib.requests: a tools/list"]
    assert logged == (expected if flags else [])
