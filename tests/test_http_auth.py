"""HTTP serving's gate, in-process (the ASGI app itself, through httpx's ASGI transport): each agent behind its own
token, every bad credential refused alike, Host and Origin checked. tests/test_serve.py does the same against a
real server subprocess; these are quick, so that they run in the quick suite and under mutation testing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn

from conftest import make_host
from http_app import CONFIG, TOKENS, bearer, serving
from packs import FILES
from toolcrib.mcp.http import HttpApp, HttpOptions, ServeError, check_bind, is_loopback
from toolcrib.mcp.state import ServingState

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}




def run(check: Callable[[HttpApp, httpx2.AsyncClient], Any], **options: Any) -> None:
    async def main() -> None:
        async with serving(**options) as (app, client):
            await check(app, client)

    anyio.run(main)




def test_only_agents_with_a_token_of_their_own_are_served(caplog: pytest.LogCaptureFixture) -> None:
    async def check(app: HttpApp, client: httpx2.AsyncClient) -> None:
        assert sorted(app.endpoints) == ["reader"]  # writer and twin share a token; silent and nokey have none

    run(check)
    messages = [r.getMessage() for r in caplog.records]
    assert "agent 'silent' is not served over HTTP: it has no token_env" in messages
    assert "agent 'nokey' is not served over HTTP: $TOK_UNSET is not set" in messages
    assert "agent 'twin' is not served over HTTP: agent 'writer' has the same token" in messages
    assert "agent 'writer' is not served over HTTP: agent 'twin' has the same token" in messages


def test_the_right_token_gets_in() -> None:
    async def check(app: HttpApp, client: httpx2.AsyncClient) -> None:
        answer = await client.post("/agents/reader/mcp", json=INITIALIZE, headers={**HEADERS, **bearer("r" * 32)})
        assert answer.status_code == 200
        assert "mcp-session-id" in answer.headers
        lowercase = await client.post("/agents/reader/mcp", json=INITIALIZE,
                                      headers={**HEADERS, "authorization": "bearer " + "r" * 32})
        assert lowercase.status_code == 200  # the scheme is case-insensitive, as RFC 6750 says
        spaced = await client.post("/agents/reader/mcp", json=INITIALIZE,
                                   headers={**HEADERS, "authorization": "Bearer   " + "r" * 32})
        assert spaced.status_code == 200  # "Bearer" 1*SP token

    run(check)


@pytest.mark.parametrize(("path", "headers", "error"), [
    ("/agents/reader/mcp", {}, None),
    ("/agents/reader/mcp", bearer("nope"), "invalid_token"),
    ("/agents/reader/mcp", bearer("r" * 31), "invalid_token"),
    ("/agents/reader/mcp", bearer("r" * 32 + "x"), "invalid_token"),
    ("/agents/reader/mcp", bearer("w" * 32), "invalid_token"),  # another agent's token
    ("/agents/ghost/mcp", bearer("r" * 32), "invalid_token"),  # no such agent
    ("/agents/silent/mcp", bearer("x"), "invalid_token"),  # an agent without a token
    ("/agents/writer/mcp", bearer("w" * 32), "invalid_token"),  # an agent whose token another shares
    ("/agents/reader/mcp", {"Authorization": "Basic cmVhZGVyOng="}, None),
    ("/agents/reader/mcp", {"Authorization": "Bearer"}, None),
    ("/agents/reader/mcp", {"Authorization": "Bearer "}, None),
    (f"/agents/reader/mcp?access_token={'r' * 32}", {}, "invalid_request"),
    (f"/agents/reader/mcp?x=1&Token={'r' * 32}", bearer("r" * 32), "invalid_request"),
    ("/agents/reader/mcp?auth=x", bearer("r" * 32), "invalid_request"),
    ("/agents/reader/mcp?authorization=Bearer%20x", bearer("r" * 32), "invalid_request"),
    ("/agents/reader/mcp?BEARER=x", bearer("r" * 32), "invalid_request"),
    ("/agents/reader/mcp?token=a=b", bearer("r" * 32), "invalid_request"),  # the key is what precedes the first =
])
def test_every_bad_credential_gets_the_same_401(path: str, headers: dict[str, str], error: str | None) -> None:
    async def check(app: HttpApp, client: httpx2.AsyncClient) -> None:
        answer = await client.post(path, json=INITIALIZE, headers={**HEADERS, **headers})
        assert answer.status_code == 401
        challenge = answer.headers["www-authenticate"]
        body = answer.json()
        if error is None:
            assert challenge == 'Bearer realm="toolcrib"'
            assert body == {"error": "unauthorized",
                            "error_description": "this endpoint needs Authorization: Bearer <the agent's token>"}
        elif error == "invalid_request":
            description = "tokens are accepted only in the Authorization header"
            assert challenge == f'Bearer realm="toolcrib", error="invalid_request", error_description="{description}"'
            assert body == {"error": "invalid_request", "error_description": description}
        else:
            description = "the token is not valid for this endpoint"
            assert challenge == f'Bearer realm="toolcrib", error="invalid_token", error_description="{description}"'
            assert body == {"error": "invalid_token", "error_description": description}
        assert "reader" not in answer.text and "r" * 32 not in answer.text

    run(check)


def test_a_wrong_token_and_an_unknown_agent_look_the_same() -> None:
    async def check(app: HttpApp, client: httpx2.AsyncClient) -> None:
        wrong = await client.post("/agents/reader/mcp", json=INITIALIZE, headers={**HEADERS, **bearer("nope")})
        ghost = await client.post("/agents/ghost/mcp", json=INITIALIZE, headers={**HEADERS, **bearer("nope")})
        assert (wrong.status_code, wrong.text, wrong.headers["www-authenticate"]) == (
            ghost.status_code, ghost.text, ghost.headers["www-authenticate"])

    run(check)


@pytest.mark.parametrize(("host", "origin", "status"), [
    ("127.0.0.1:8000", None, 200),
    ("localhost:8000", "http://localhost:5173", 200),
    ("attacker.example:8000", None, 421),
    ("127.0.0.1:8000", "http://evil.example", 403),
    ("proxy.example", None, 200),
    ("proxy.example:8443", "https://app.example", 200),
    ("proxy.example.evil", None, 421),
])
def test_host_and_origin_are_checked(host: str, origin: str | None, status: int) -> None:
    async def check(app: HttpApp, client: httpx2.AsyncClient) -> None:
        headers = {**HEADERS, **bearer("r" * 32), "Host": host}
        if origin is not None:
            headers["Origin"] = origin
        answer = await client.post("/agents/reader/mcp", json=INITIALIZE, headers=headers)
        assert answer.status_code == status

    run(check, allowed_hosts=["proxy.example"], allowed_origins=["https://app.example"])


def test_tokens_come_from_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in TOKENS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TOK_UNSET", raising=False)
    app = HttpApp(ServingState(make_host(CONFIG, {"files": FILES})), HttpOptions())
    assert app.credentials() == {"reader": [("TOK_READER", b"r" * 32)]}


def test_the_app_runs_its_lifespan_as_an_asgi_server_drives_it() -> None:
    """uvicorn starts the app with a lifespan scope (no path): the agents' endpoint's shortcut past the router is for
    HTTP requests only, and the lifespan (the session managers' task group) runs and ends."""
    app = HttpApp(ServingState(make_host(CONFIG, {"files": FILES})), HttpOptions(), env=TOKENS)

    async def main() -> list[str]:
        asked = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        answered: list[str] = []

        async def receive() -> dict[str, Any]:
            return asked.pop(0)

        async def send(message: dict[str, Any]) -> None:
            answered.append(message["type"])

        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
        return answered

    assert anyio.run(main) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_agents_that_share_a_token_are_not_served_and_each_is_told_why(caplog: pytest.LogCaptureFixture) -> None:
    env = {"TOK_READER": "s" * 32, "TOK_WRITER": "s" * 32}
    app = HttpApp(ServingState(make_host(CONFIG, {"files": FILES})), HttpOptions(), env=env)
    assert app.credentials() == {}
    assert app.not_served == {"reader": "agent 'writer' has the same token", "writer": "agent 'reader' has the same "
                              "token", "nokey": "$TOK_UNSET is not set", "silent": "it has no token_env",
                              "twin": "$TOK_TWIN is not set"}
    assert [r.getMessage() for r in caplog.records if "same token" in r.getMessage()] == [
        "agent 'reader' is not served over HTTP: agent 'writer' has the same token",
        "agent 'writer' is not served over HTTP: agent 'reader' has the same token"]
    three = HttpApp(ServingState(make_host(CONFIG, {"files": FILES})), HttpOptions(), env={**env, "TOK_TWIN": "s" * 32})
    assert three.credentials() == {}
    assert {name: three.not_served[name] for name in ("reader", "twin", "writer")} == {
        "reader": "agents 'twin' and 'writer' have the same token",
        "twin": "agents 'reader' and 'writer' have the same token",
        "writer": "agents 'reader' and 'twin' have the same token"}
    four = HttpApp(ServingState(make_host(CONFIG, {"files": FILES})), HttpOptions(),
                   env={**env, "TOK_TWIN": "s" * 32, "TOK_UNSET": "s" * 32})
    assert four.credentials() == {}
    assert four.not_served["nokey"] == "agents 'reader', 'twin' and 'writer' have the same token"


def test_a_short_token_is_served_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    env = {"TOK_READER": "r" * 15, "TOK_WRITER": "w" * 16}  # the least a token should have: 16 characters
    app = HttpApp(ServingState(make_host(CONFIG, {"files": FILES})), HttpOptions(), env=env)
    assert app.credentials() == {"reader": [("TOK_READER", b"r" * 15)], "writer": [("TOK_WRITER", b"w" * 16)]}
    warnings = [r.getMessage() for r in caplog.records if "shorter" in r.getMessage()]
    assert warnings == ["agent 'reader': its token is shorter than 16 characters; use a long random one"]


def test_why_an_agent_is_not_served_names_every_variable(
        caplog: pytest.LogCaptureFixture) -> None:
    text = """
[oauth]
issuer = "https://idp.example"
audience = "https://toolcrib.example"
[agents.pair]
token_env = ["TOK_A", "TOK_B"]
[agents.rotating]
token_env = ["TOK_OLD", "TOK_NEW"]
[agents.claimed.identity]
claims = { sub = "svc" }
[agents.bare]
"""
    env = {"TOK_OLD": "o" * 15, "TOK_NEW": "n" * 32}
    app = HttpApp(ServingState(make_host(text, {})), HttpOptions(), env=env)
    assert app.credentials() == {"claimed": [], "rotating": [("TOK_OLD", b"o" * 15), ("TOK_NEW", b"n" * 32)]}
    assert sorted(r.getMessage() for r in caplog.records) == [  # an identity is enough, with [oauth]
        "agent 'bare' is not served over HTTP: it has no token_env",
        "agent 'pair' is not served over HTTP: $TOK_A and $TOK_B are not set",
        "agent 'rotating': the token in $TOK_OLD is shorter than 16 characters; use a long random one"]


def test_a_reload_rotates_tokens_and_stops_endpoints_whose_token_went() -> None:
    env = dict(TOKENS)

    async def main() -> None:
        async with serving(env=env) as (app, client):
            async def status(token: str) -> int:
                answer = await client.post("/agents/reader/mcp", json=INITIALIZE, headers={**HEADERS, **bearer(token)})
                return answer.status_code

            assert await status("r" * 32) == 200
            env["TOK_READER"] = "n" * 32
            await app.sync()
            assert (await status("r" * 32), await status("n" * 32)) == (401, 200)
            assert app.endpoints["reader"].tokens == [("TOK_READER", b"n" * 32)]
            stopped = app.endpoints["reader"].stop
            del env["TOK_READER"]
            await app.sync()
            assert sorted(app.endpoints) == []
            assert stopped is not None and stopped.cancel_called  # its session manager is stopped
            assert await status("n" * 32) == 401

    anyio.run(main)


def test_stateless_endpoints_open_no_sessions() -> None:
    async def check(app: HttpApp, client: httpx2.AsyncClient) -> None:
        answer = await client.post("/agents/reader/mcp", json=INITIALIZE, headers={**HEADERS, **bearer("r" * 32)})
        assert answer.status_code == 200
        assert "mcp-session-id" not in answer.headers

    run(check, stateless=True)


def test_session_limits_idle_time_and_body_size_apply() -> None:
    limited = "[host]\nhttp_max_sessions = 1\nhttp_session_idle = 0.2\n" + CONFIG

    async def main() -> None:
        async with serving(config=limited) as (_app, client):
            headers = {**HEADERS, **bearer("r" * 32)}
            first = await client.post("/agents/reader/mcp", json=INITIALIZE, headers=headers)
            assert first.status_code == 200
            second = await client.post("/agents/reader/mcp", json=INITIALIZE, headers=headers)
            assert second.status_code == 503  # one session per agent at most
            await anyio.sleep(0.6)  # the first one sits idle past http_session_idle and is closed
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            gone = await client.post("/agents/reader/mcp", json=ping,
                                     headers={**headers, "mcp-session-id": first.headers["mcp-session-id"],
                                              "mcp-protocol-version": "2025-11-25"})
            assert gone.status_code == 404
            big = await client.post("/agents/reader/mcp", content=b" " * (4 * 1024 * 1024 + 1),
                                    headers=headers)
            assert big.status_code == 413

    anyio.run(main)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_are_listened_on_without_asking(host: str) -> None:
    assert is_loopback(host) is True
    assert check_bind(HttpOptions(host=host)) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "[2001:db8::1]", "example.com", "LOCALHOST.",
                                  "localhost.example.com", ""])
def test_any_other_address_needs_allow_remote(host: str) -> None:
    assert is_loopback(host) is False
    with pytest.raises(ServeError) as refused:
        check_bind(HttpOptions(host=host))
    assert str(refused.value) == (
        f"refusing to listen on {host}: every agent's endpoint would be reachable from the network; pass "
        "--allow-remote to do it on purpose (tokens are still required; add --allowed-host for the name clients use)")
    check_bind(HttpOptions(host=host, allow_remote=True))  # said on purpose


class _Recorded(uvicorn.Server):
    """uvicorn's own server, remembered: the test reaches the one ``serve_http`` makes to stop it as SIGTERM would."""

    made: list[uvicorn.Server] = []

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.made.append(self)


SERVED = "[host]\nshutdown_timeout = 2.5\n" + CONFIG  # twin and nokey have no token set here: not served


@pytest.mark.parametrize(("host", "stateless", "metrics", "tokens", "line"), [
    ("127.0.0.1", False, False, True, "agents: reader (1 tools), writer (4 tools); sessions"),
    ("127.0.0.2", True, True, False, "agents: none (nokey: $TOK_UNSET is not set; reader: $TOK_READER is not set; "
     "silent: it has no token_env; twin: $TOK_TWIN is not set; writer: $TOK_WRITER is not set); stateless; "
     "metrics at /metrics"),
    ("127.0.0.1", False, False, "twin", "agents: reader (1 tools) (not served: twin: agent 'writer' has the same "
     "token; writer: agent 'twin' has the same token); sessions"),
    ("127.0.0.1", True, False, "openapi", "agents: reader (1 tools), writer (4 tools); stateless; OpenAPI tool "
     "servers at /agents/<name>/openapi.json"),
], ids=["sessions", "stateless-metrics-watched", "a-token-shared", "openapi"])
def test_serve_http_listens_announces_and_drains_in_process(
        host: str, stateless: bool, metrics: bool, tokens: bool | str, line: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``serve_http`` itself (tests/test_serve.py runs it in a subprocess, out of mutation testing's sight): it
    listens where asked, says so in one line, sends no Server header, and once told to stop answers /readyz 503."""
    from toolcrib.mcp import http as http_module
    from toolcrib.observe import Metrics

    monkeypatch.setattr(http_module.uvicorn, "Server", _Recorded)
    for variable in ("TOK_READER", "TOK_WRITER"):
        if tokens:
            monkeypatch.setenv(variable, variable[4].lower() * 32)
        else:
            monkeypatch.delenv(variable, raising=False)
    if tokens == "twin":  # an agent that shares the writer's token: neither is served, and the banner says why
        monkeypatch.setenv("TOK_TWIN", "w" * 32)
    _Recorded.made.clear()
    state = ServingState(make_host(SERVED, {"files": FILES}))
    if metrics:
        state.metrics = Metrics()
    watched = tmp_path / "toolcrib.toml"
    watched.write_text(SERVED)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(http_module.serve_http, state, HttpOptions(host=host, port=0, stateless=stateless,
                                                                     openapi=tokens == "openapi"),
                          watched if metrics else None)
            while not (_Recorded.made and _Recorded.made[0].started):
                await anyio.sleep(0.01)
            server = _Recorded.made[0]
            port = server.servers[0].sockets[0].getsockname()[1]
            seen["port"] = port
            seen["config"] = server.config
            async with httpx2.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as client:
                ready = await client.get("/readyz")
                seen["ready"] = (ready.status_code, ready.json(), ready.headers.get("server"))
                listed = await client.post("/agents/reader/mcp", json=INITIALIZE,
                                           headers={**HEADERS, **bearer("r" * 32), "Host": f"127.0.0.1:{port}"})
                seen["initialize"] = listed.status_code
                server.should_exit = True  # what uvicorn sets on SIGTERM
                seen["draining"] = server.config.app.draining()
            # serve_http returns by itself once uvicorn has stopped (the task group would wait forever otherwise)

    anyio.run(main)
    assert seen["ready"] == (200, {"status": "ready"}, None)
    assert seen["initialize"] == (200 if tokens else 401)  # an agent not served looks like a wrong token
    assert seen["draining"] is True
    config = seen["config"]
    assert (config.host, config.port, config.lifespan, config.log_level, config.timeout_graceful_shutdown) == (
        host, 0, "on", "warning", 3)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"toolcrib: serving over HTTP at http://{host}:{seen['port']}/agents/<name>/mcp; {line}; "
        "probes at /healthz and /readyz")


def test_serve_http_refuses_a_remote_address_before_it_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.mcp import http as http_module

    monkeypatch.setattr(http_module.uvicorn, "Server", _Recorded)
    _Recorded.made.clear()
    state = ServingState(make_host(SERVED, {"files": FILES}))
    with pytest.raises(ServeError, match=r"^refusing to listen on 0\.0\.0\.0: "):
        anyio.run(http_module.serve_http, state, HttpOptions(host="0.0.0.0", port=0))
    assert _Recorded.made == []


@pytest.mark.parametrize(("config", "options", "line"), [
    ('[operator]\ntoken_env = "TOK_OP"\n', {"agents": False, "console": True},
     "toolcrib: the operator's console at http://127.0.0.1:{port}/console/ (no agent is served here)"),
    ("", {}, "toolcrib: serving over HTTP at http://127.0.0.1:{port}/agents/<name>/mcp; agents: none (no agent has "
             "a token); sessions; probes at /healthz and /readyz"),
    ('[operator]\ntoken_env = "TOK_OP"\nconsole = true\n', {},
     "toolcrib: serving over HTTP at http://127.0.0.1:{port}/agents/<name>/mcp; agents: none (no agent has a token); "
     "sessions; the operator's console at http://127.0.0.1:{port}/console/; probes at /healthz and /readyz"),
], ids=["console-only", "no-agents", "agents-and-console"])
def test_serve_http_says_what_it_serves_when_it_serves_no_agent(
        config: str, options: dict[str, Any], line: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``toolcrib console`` serves the console only; a config with no agent serves none: the banner says which."""
    from toolcrib.mcp import http as http_module

    monkeypatch.setattr(http_module.uvicorn, "Server", _Recorded)
    monkeypatch.setenv("TOK_OP", "o" * 32)
    _Recorded.made.clear()
    state = ServingState(make_host(config, {"files": FILES}))

    async def main() -> tuple[int, str]:
        written = ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(http_module.serve_http, state, HttpOptions(port=0, **options))
            with anyio.fail_after(10):  # the banner comes once the server has started (a hang guard)
                while "toolcrib: " not in written:
                    await anyio.sleep(0.01)
                    written += capsys.readouterr().err
            server = _Recorded.made[0]
            server.should_exit = True
            return int(server.servers[0].sockets[0].getsockname()[1]), written

    port, written = anyio.run(main)
    assert [text for text in written.splitlines() if text.startswith("toolcrib: ")] == [line.format(port=port)]


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/.well-known/oauth-protected-resource",
                                  "/.well-known/oauth-protected-resource/agents/reader/mcp"])
def test_probes_metrics_and_metadata_answer_get_and_head_only(path: str) -> None:
    async def main() -> None:
        oauth = '[oauth]\nissuer = "https://idp.example"\naudience = "http://127.0.0.1:8000"\n'
        async with serving(config=oauth + CONFIG, metrics=True) as (_, client):
            statuses = [(await client.request(method, path)).status_code
                        for method in ("GET", "HEAD", "POST", "PUT", "DELETE")]
        assert statuses[:2] == [200, 200] and statuses[2:] == [405, 405, 405]

    anyio.run(main)


@pytest.mark.parametrize("supplied", ["", "XXXX", "x" * 32], ids=["empty", "short", "long"])
def test_metrics_behind_a_token_variable_that_is_not_set_let_nobody_in(supplied: str) -> None:
    async def main() -> None:
        config = '[host]\nmetrics_token_env = "TOK_METRICS_UNSET"\n' + CONFIG
        async with serving(config=config, metrics=True) as (_, client):
            answer = await client.get("/metrics", headers={"Authorization": f"Bearer {supplied}"})
        assert answer.status_code == 401

    anyio.run(main)
