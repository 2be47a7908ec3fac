"""OAuth access tokens as identities (issue 17): a real issuer made here (tests/issuer.py: RSA keys, a JWKS and
discovery served over loopback HTTP, client_credentials grants), toolcrib's HTTP app in-process through httpx's ASGI
transport, and once a real ``toolcrib serve --http`` found by the SDK's own OAuth client through the metadata."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY

import toolcrib
from conftest import make_host
from issuer import Issuer
from packs import FILES, Pack
from toolcrib.mcp import oauth
from toolcrib.mcp.http import HttpApp, HttpOptions
from toolcrib.mcp.state import ServingState
from wire_pack import META, routed

RESOURCE = "http://127.0.0.1:8000"
STATIC = {"TOK_OLD": "o" * 32, "TOK_NEW": "n" * 32}


def config(issuer: str, extra: str = "") -> str:
    return f"""
[oauth]
issuer = "{issuer}"
audience = "{RESOURCE}"
scopes_supported = ["tools", "tools:write"]

[agents.reader]
token_env = ["TOK_OLD", "TOK_NEW"]
[agents.reader.identity]
claims = {{ client_id = "reader-*", groups = ["staff", "admins"] }}
[agents.reader.identity.needs_scope."tools:write"]
tools = ["files__write"]
[agents.reader.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["files__read", "files__write"] }}

[agents.ops]
[agents.ops.identity]
claims = {{ sub = "svc-ops" }}
scopes = ["tools"]
[agents.ops.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["files__touch"] }}
{extra}"""


READER = {"client_id": "reader-cli", "sub": "alice", "groups": ["staff"], "aud": RESOURCE, "scope": "tools"}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


@asynccontextmanager
async def serving(text: str, env: dict[str, str] | None = None, base_dir: Path | None = None,
                  packs: dict[str, Any] | None = None) -> AsyncIterator[tuple[HttpApp, httpx2.AsyncClient]]:
    host = make_host(text, {"files": FILES, **(packs or {})}, base_dir=base_dir)
    app = HttpApp(ServingState(host), HttpOptions(stateless=True), env=STATIC if env is None else env)
    try:
        async with app.app.router.lifespan_context(app.app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url=RESOURCE, timeout=30) as client:
                yield app, client
    finally:
        host.close()


async def rpc(client: httpx2.AsyncClient, agent: str, token: str, method: str,
              params: dict[str, Any] | None = None) -> tuple[int, Any, httpx2.Response]:
    """One stateless JSON-RPC request: (status, the JSON-RPC message or the error body, the response)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    answer = await client.post(f"/agents/{agent}/mcp", json=body,
                               headers={**HEADERS, "Authorization": f"Bearer {token}"})
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
        return answer.status_code, json.loads(data[-1]), answer
    return answer.status_code, answer.json(), answer


async def tool_names(client: httpx2.AsyncClient, agent: str, token: str) -> list[str]:
    status, message, _ = await rpc(client, agent, token, "tools/list")
    assert status == 200, message
    return [tool["name"] for tool in message["result"]["tools"]]


def test_a_valid_access_token_acts_as_the_agent_its_claims_name(issuer: Issuer) -> None:
    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            token = issuer.sign(READER)
            assert await tool_names(client, "reader", token) == ["files__read"]  # no tools:write scope
            writer = issuer.sign({**READER, "scope": "tools tools:write", "groups": ["admins", "x"]})
            assert await tool_names(client, "reader", writer) == ["files__read", "files__write"]
            ops = issuer.sign({"sub": "svc-ops", "aud": RESOURCE, "scope": "tools other"})
            assert await tool_names(client, "ops", ops) == ["files__touch"]

    anyio.run(main)


BAD = {
    "expired": lambda i: i.sign(READER, lifetime=-120),  # beyond the 30 s leeway
    "not yet valid": lambda i: i.sign({**READER, "nbf": 4102444800}),
    "wrong audience": lambda i: i.sign({**READER, "aud": "http://127.0.0.1:9999"}),
    "wrong issuer": lambda i: i.sign({**READER, "iss": "http://127.0.0.1:1"}),
    "no expiry": lambda i: i.sign({**READER, "exp": None}),
    "unknown key id": lambda i: i.sign(READER, kid="key-never-published"),
    "another key, same id": lambda i: i.sign(READER, key=Issuer().keys[0][1]),
    "alg none": lambda i: jwt.encode({**READER, "iss": i.url, "exp": 4102444800}, None, algorithm="none",
                                     headers={"kid": i.keys[0][0]}),
    "HS256 with the public key": lambda i: _hs256_with(i.public_pem(), {**READER, "iss": i.url, "exp": 4102444800},
                                                       i.keys[0][0]),
    "claims of no agent": lambda i: i.sign({**READER, "client_id": "stranger"}),
    "group not listed": lambda i: i.sign({**READER, "groups": ["guests"]}),
    "another agent's token": lambda i: i.sign({"sub": "svc-ops", "aud": RESOURCE, "scope": "tools"}),
    "not a JWT": lambda i: "x" * 40,
    "a static token of another agent": lambda i: "p" * 32,
}


def _hs256_with(secret: bytes, claims: dict[str, Any], kid: str) -> str:
    """The key-confusion attack: HMAC "signed" with the issuer's public key, which a careless verifier would use
    as the shared secret. Built by hand because PyJWT itself refuses to use a PEM key as an HMAC secret."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_token_gets_the_answer_of_a_wrong_static_token(issuer: Issuer, case: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        env = {**STATIC, "TOK_OPS_UNUSED": "p" * 32}
        extra = '[agents.other]\ntoken_env = "TOK_OPS_UNUSED"\n'
        async with serving(config(issuer.url, extra), env=env) as (_, client):
            token = BAD[case](issuer)
            refused = await rpc(client, "reader", token, "tools/list")
            wrong_static = await rpc(client, "reader", "q" * 32, "tools/list")
            for status, body, answer in (refused, wrong_static):
                assert status == 401
                assert body == {"error": "invalid_token", "error_description": "the token is not valid for this "
                                "endpoint"}
                assert answer.headers["www-authenticate"] == (
                    'Bearer realm="toolcrib", resource_metadata="http://127.0.0.1:8000/.well-known/'
                    'oauth-protected-resource/agents/reader/mcp", error="invalid_token", '
                    'error_description="the token is not valid for this endpoint"')
            assert await tool_names(client, "reader", issuer.sign(READER)) == ["files__read"]  # a good one still is

    with caplog.at_level(logging.INFO, logger="toolcrib.serve"):
        anyio.run(main)
    token_text = BAD[case]  # the log says why, never the token itself
    assert all("eyJ" not in r.getMessage() for r in caplog.records), token_text
    if case in ("claims of no agent", "group not listed", "another agent's token"):
        assert "access token refused on agent 'reader''s endpoint: its claims are not the agent's identity" in [
            r.getMessage() for r in caplog.records]


def test_a_token_without_a_required_scope_is_forbidden_and_told_which(issuer: Issuer) -> None:
    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            token = issuer.sign({"sub": "svc-ops", "aud": RESOURCE, "scope": "other"})
            status, body, answer = await rpc(client, "ops", token, "tools/list")
            assert (status, body) == (403, {"error": "insufficient_scope",
                                            "error_description": "the token needs the scopes: tools"})
            assert answer.headers["www-authenticate"] == (
                'Bearer realm="toolcrib", error="insufficient_scope", scope="tools", resource_metadata='
                '"http://127.0.0.1:8000/.well-known/oauth-protected-resource/agents/ops/mcp"')

    anyio.run(main)


def test_a_token_lacking_one_of_two_required_scopes_is_told_both(issuer: Issuer) -> None:
    extra = """
[agents.admin]
[agents.admin.identity]
claims = { sub = "svc-admin" }
scopes = ["tools", "tools:write"]
[agents.admin.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["files__touch"] }
"""

    async def main() -> None:
        async with serving(config(issuer.url, extra)) as (_, client):
            token = issuer.sign({"sub": "svc-admin", "aud": RESOURCE, "scope": "tools"})
            status, body, answer = await rpc(client, "admin", token, "tools/list")
            assert (status, body) == (403, {"error": "insufficient_scope",
                                            "error_description": "the token needs the scopes: tools tools:write"})
            assert answer.headers["www-authenticate"] == (
                'Bearer realm="toolcrib", error="insufficient_scope", scope="tools tools:write", resource_metadata='
                '"http://127.0.0.1:8000/.well-known/oauth-protected-resource/agents/admin/mcp"')
            both = issuer.sign({"sub": "svc-admin", "aud": RESOURCE, "scope": "tools:write tools"})
            assert await tool_names(client, "admin", both) == ["files__touch"]

    anyio.run(main)


def test_a_tool_hidden_for_want_of_a_scope_answers_like_a_tool_that_does_not_exist(issuer: Issuer) -> None:
    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            plain = issuer.sign(READER)
            hidden = await rpc(client, "reader", plain, "tools/call", {"name": "files__write",
                                                                        "arguments": {"path": "a", "text": "b"}})
            missing = await rpc(client, "reader", plain, "tools/call", {"name": "files__nothing", "arguments": {}})
            assert hidden[1]["error"] == {"code": -32602, "message": "Unknown tool: files__write"}
            assert missing[1]["error"] == {"code": -32602, "message": "Unknown tool: files__nothing"}
            scoped = issuer.sign({**READER, "scope": "tools:write"})
            _, message, _ = await rpc(client, "reader", scoped, "tools/call",
                                           {"name": "files__write", "arguments": {"path": "a", "text": "bc"}})
            assert message["result"]["content"][0]["text"] == "wrote 2 characters to a"

    anyio.run(main)


def test_static_tokens_rotate_without_downtime(issuer: Issuer) -> None:
    async def main() -> None:
        env = dict(STATIC)
        async with serving(config(issuer.url), env=env) as (app, client):
            assert await tool_names(client, "reader", "o" * 32) == ["files__read", "files__write"]
            assert await tool_names(client, "reader", "n" * 32) == ["files__read", "files__write"]
            del env["TOK_OLD"]  # the old token retired: a reload drops it, the new one keeps working
            await app.sync()
            assert (await rpc(client, "reader", "o" * 32, "tools/list"))[0] == 401
            assert await tool_names(client, "reader", "n" * 32) == ["files__read", "files__write"]

    anyio.run(main)


def test_a_session_stays_with_the_principal_that_opened_it(issuer: Issuer) -> None:
    """Two people whose tokens both act as the reader: neither can carry on the other's session, nor can a holder
    of the agent's static token or the same person through another client (the SDK binds a session to the user
    toolcrib gives it: client, issuer, subject)."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}

    async def main() -> None:
        host = make_host(config(issuer.url), {"files": FILES})
        app = HttpApp(ServingState(host), HttpOptions(), env=STATIC)  # stateful: sessions live on the server
        async with app.app.router.lifespan_context(app.app), httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url=RESOURCE, timeout=30) as client:
            alice, bob = issuer.sign(READER), issuer.sign({**READER, "sub": "bob"})
            alice_elsewhere = issuer.sign({**READER, "client_id": "reader-web"})  # the same person, another client
            opened = await client.post("/agents/reader/mcp", json=initialize,
                                       headers={**HEADERS, "Authorization": f"Bearer {alice}"})
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            statuses = []
            for token in (alice, bob, "n" * 32, alice_elsewhere):
                answer = await client.post("/agents/reader/mcp", json=listing,
                                           headers={**HEADERS, **session, "Authorization": f"Bearer {token}"})
                statuses.append(answer.status_code)
            assert statuses == [200, 404, 404, 404]
        host.close()

    anyio.run(main)


def test_a_reload_brings_oauth_identities_in_changes_them_and_takes_them_out(issuer: Issuer) -> None:
    """The endpoints follow the config: an [oauth] table added by a reload lets tokens in, a changed audience
    refuses tokens for the old one (the verifier is made again), and a config without it refuses them all."""
    static_only = config(issuer.url).split("[agents.reader]", 1)[1]
    static_only = "[agents.reader]" + static_only.replace(
        '[agents.reader.identity]\nclaims = { client_id = "reader-*", groups = ["staff", "admins"] }\n'
        '[agents.reader.identity.needs_scope."tools:write"]\ntools = ["files__write"]\n', "").replace(
        '[agents.ops.identity]\nclaims = { sub = "svc-ops" }\nscopes = ["tools"]\n', "")

    async def main() -> None:
        async with serving(static_only) as (app, client):
            token = issuer.sign(READER)
            assert (await rpc(client, "reader", token, "tools/list"))[0] == 401
            assert await tool_names(client, "reader", "n" * 32) == ["files__read", "files__write"]
            app.state.host = make_host(config(issuer.url), {"files": FILES})
            await app.sync()
            assert await tool_names(client, "reader", token) == ["files__read"]
            app.state.host = make_host(config(issuer.url).replace(f'audience = "{RESOURCE}"',
                                                                  'audience = "https://elsewhere.example/mcp"'),
                                       {"files": FILES})
            await app.sync()
            assert (await rpc(client, "reader", token, "tools/list"))[0] == 401
            app.state.host = make_host(static_only, {"files": FILES})
            await app.sync()
            assert (await rpc(client, "reader", token, "tools/list"))[0] == 401
            assert await tool_names(client, "reader", "n" * 32) == ["files__read", "files__write"]

    anyio.run(main)


def test_a_key_rotated_mid_run_is_fetched_once_and_the_old_one_retired(issuer: Issuer,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oauth, "MIN_REFETCH", 0.0)  # a real run waits 30 s between fetches for unknown key ids

    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            assert await tool_names(client, "reader", issuer.sign(READER)) == ["files__read"]
            old = issuer.sign(READER)
            assert issuer.fetches == 1
            assert await tool_names(client, "reader", old) == ["files__read"]
            assert issuer.fetches == 1  # cached
            issuer.rotate()  # the old key is withdrawn, a new one signs
            assert await tool_names(client, "reader", issuer.sign(READER)) == ["files__read"]
            assert issuer.fetches == 2
            assert (await rpc(client, "reader", old, "tools/list"))[0] == 401

    anyio.run(main)


def test_a_token_verified_once_is_remembered_until_it_expires(issuer: Issuer,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    class Later:  # the oauth module's clock, moved on by the test (PyJWT keeps the real one)
        offset = 0.0

        def time(self) -> float:
            return time.time() + self.offset

        def monotonic(self) -> float:
            return time.monotonic()

    later = Later()
    monkeypatch.setattr(oauth, "time", later)

    async def main() -> None:
        async with serving(config(issuer.url)) as (app, client):
            token = issuer.sign(READER, lifetime=60)
            for _ in range(3):
                assert await tool_names(client, "reader", token) == ["files__read"]
            assert app.verifier is not None and list(app.verifier._verified) == [token]
            later.offset = 60 + 20  # within the 30 s leeway (with room for a slow machine)
            assert await tool_names(client, "reader", token) == ["files__read"]
            later.offset = 60 + 31 + 1  # past it (exp counts from a whole second)
            assert (await rpc(client, "reader", token, "tools/list"))[0] == 401
            assert list(app.verifier._verified) == []

    anyio.run(main)


def test_unknown_key_ids_do_not_make_the_server_hammer_the_issuer(issuer: Issuer) -> None:
    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            for n in range(5):
                assert (await rpc(client, "reader", issuer.sign(READER, kid=f"nope-{n}"), "tools/list"))[0] == 401
            assert issuer.fetches == 1

    anyio.run(main)


def test_a_jwks_file_serves_air_gapped_setups_and_is_read_again_when_it_changes(issuer: Issuer,
                                                                                 tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(issuer.jwks()))
    text = config("https://idp.internal.example").replace(
        'scopes_supported', 'jwks_file = "jwks.json"\nscopes_supported')

    async def main() -> None:
        async with serving(text, base_dir=tmp_path) as (_, client):
            token = issuer.sign({**READER, "iss": "https://idp.internal.example"})
            assert await tool_names(client, "reader", token) == ["files__read"]
            issuer.rotate()
            fresh = issuer.sign({**READER, "iss": "https://idp.internal.example"})
            assert (await rpc(client, "reader", fresh, "tools/list"))[0] == 401
            keys.write_text(json.dumps(issuer.jwks(), indent=1))  # another size: seen as changed at once
            assert await tool_names(client, "reader", fresh) == ["files__read"]
            assert issuer.fetches == 0  # nothing went over the network

    anyio.run(main)


def test_protected_resource_metadata_names_the_issuer_and_nothing_about_agents(issuer: Issuer) -> None:
    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            expected = {"resource": RESOURCE, "authorization_servers": [issuer.url],
                        "scopes_supported": ["tools", "tools:write"], "bearer_methods_supported": ["header"],
                        "resource_name": "toolcrib"}
            for path in ("/.well-known/oauth-protected-resource",
                         "/.well-known/oauth-protected-resource/agents/reader/mcp",
                         "/.well-known/oauth-protected-resource/agents/no-such-agent/mcp"):
                answer = await client.get(path)
                assert (answer.status_code, answer.json()) == (200, expected), path
                assert answer.headers["cache-control"] == "public, max-age=300"
                assert (await client.post(path, json={})).status_code == 405, path  # read-only, as RFC 9728 has it
            status, _, answer = await rpc(client, "no-such-agent", issuer.sign(READER), "tools/list")
            assert status == 401 and "resource_metadata=" in answer.headers["www-authenticate"]
        async with serving("[agents.a]\ntoken_env = 'TOK_NEW'\n") as (_, client):
            for path in ("/.well-known/oauth-protected-resource",  # no [oauth]: nothing to say, to anyone
                         "/.well-known/oauth-protected-resource/agents/a/mcp"):
                answer = await client.get(path)
                assert (answer.status_code, answer.json()) == (404, {"error": "not_found"}), path

    anyio.run(main)


def test_every_refusal_points_at_the_metadata_of_the_endpoint_it_refused(issuer: Issuer) -> None:
    """RFC 9728: each 401/403 names where the client finds the issuer. The URL comes from ``resource_url`` when
    configured (a trailing "/" dropped), else from the request's own scheme and Host header, never from a Host
    header that is not a host."""
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    async def challenges(client: httpx2.AsyncClient, host: str | None = None) -> list[tuple[int, str]]:
        extra = {"Host": host} if host is not None else {}
        sent = [("/agents/reader/mcp?access_token=x", {"Authorization": "Bearer " + "n" * 32}),
                ("/agents/reader/mcp", {}),
                ("/agents/reader/mcp", {"Authorization": "Bearer " + "x" * 32}),
                ("/agents/ops/mcp", {"Authorization": "Bearer " + issuer.sign({"sub": "svc-ops", "aud": RESOURCE})})]
        found = []
        for path, headers in sent:
            answer = await client.post(path, json=listing, headers={**HEADERS, **headers, **extra})
            found.append((answer.status_code, answer.headers["www-authenticate"]))
        return found

    def expected(metadata: str | None) -> list[tuple[int, str]]:
        where = f', resource_metadata="{metadata}"' if metadata else ""
        return [
            (401, f'Bearer realm="toolcrib"{where}, error="invalid_request", error_description="tokens are accepted '
                  'only in the Authorization header"'),
            (401, f'Bearer realm="toolcrib"{where}'),
            (401, f'Bearer realm="toolcrib"{where}, error="invalid_token", error_description="the token is not valid '
                  'for this endpoint"'),
            (403, f'Bearer realm="toolcrib", error="insufficient_scope", scope="tools"{where}'
                  .replace("/agents/reader/", "/agents/ops/"))]

    async def main() -> None:
        async with serving(config(issuer.url)) as (_, client):
            assert await challenges(client) == expected(
                "http://127.0.0.1:8000/.well-known/oauth-protected-resource/agents/reader/mcp")
            assert await challenges(client, host="evil.example/x") == expected(None)
        public = config(issuer.url).replace("scopes_supported", 'resource_url = "https://toolcrib.example/"\n'
                                                                "scopes_supported")
        async with serving(public) as (_, client):
            assert await challenges(client) == expected(
                "https://toolcrib.example/.well-known/oauth-protected-resource/agents/reader/mcp")

    anyio.run(main)


def test_the_audit_log_records_who_called_and_never_the_token(issuer: Issuer, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    text = config(issuer.url).replace("[oauth]", f'[host]\naudit_log = "{log}"\n\n[oauth]')

    async def main() -> None:
        async with serving(text) as (_, client):
            token = issuer.sign(READER)
            await rpc(client, "reader", token, "tools/call", {"name": "files__read", "arguments": {"path": "a"}})
            await rpc(client, "reader", "n" * 32, "tools/call", {"name": "files__read", "arguments": {"path": "a"}})

    anyio.run(main)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["identity"] for line in lines] == [
        {"kind": "oauth", "subject": "alice", "client": "reader-cli", "issuer": issuer.url},
        {"kind": "token", "credential": "$TOK_NEW"},
    ]
    assert "eyJ" not in log.read_text() and "n" * 32 not in log.read_text()


def test_an_unreachable_issuer_refuses_tokens_and_keeps_static_ones_working(caplog: pytest.LogCaptureFixture
                                                                            ) -> None:
    gone = Issuer()  # never started, and closed: nothing listens on its port
    gone.__exit__()

    async def main() -> None:
        async with serving(config(gone.url)) as (_, client):
            assert (await rpc(client, "reader", gone.sign(READER), "tools/list"))[0] == 401
            assert await tool_names(client, "reader", "n" * 32) == ["files__read", "files__write"]

    anyio.run(main)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("the OAuth issuer's keys could not be fetched: no jwks_uri "
                                                     f"in the issuer's metadata ({gone.url}/.well-known/")


# -- a real server, a real client -----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_sdk_client_finds_the_issuer_through_the_metadata_and_gets_in(issuer: Issuer, tmp_path: Path) -> None:
    """``toolcrib serve --http`` in a subprocess; the SDK's ClientCredentialsOAuthProvider gets a 401, reads the
    protected resource metadata it names, the issuer's metadata, asks the issuer for a token for this resource
    (RFC 8707), and calls a tool with it."""
    from mcp import Client
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

    from serving import subprocess_env, wait_for

    issuer.clients["reader-svc"] = ("s3cret-s3cret", {"groups": ["staff"]})
    with socket.socket() as probe:  # the audience names the port, so it is chosen before the server starts
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    path = tmp_path / "toolcrib.toml"
    path.write_text(config(issuer.url).replace(RESOURCE, base).replace('"files"', '"files", "misc"')
                    .replace('"files__read", "files__write"', '"files__read", "misc__add"'))
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolcrib.cli", "serve", "--http", "--port", str(port),
                                 "--config", str(path)], stderr=err, env=subprocess_env())
    wait_for(log, "probes at /healthz")

    class Memory:
        tokens: OAuthToken | None = None
        info: OAuthClientInformationFull | None = None

        async def get_tokens(self) -> OAuthToken | None:
            return self.tokens

        async def set_tokens(self, tokens: OAuthToken) -> None:
            self.tokens = tokens

        async def get_client_info(self) -> OAuthClientInformationFull | None:
            return self.info

        async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
            self.info = client_info

    async def main() -> Any:
        url = f"{base}/agents/reader/mcp"
        provider = ClientCredentialsOAuthProvider(url, Memory(), "reader-svc", "s3cret-s3cret", issuer=issuer.url)
        async with (httpx2.AsyncClient(auth=provider, timeout=30) as http,
                    Client(streamable_http_client(url, http_client=http)) as client):
            listed = [tool.name for tool in (await client.list_tools()).tools]
            result = await client.call_tool("misc__add", {"a": 2, "b": 3})
            return listed, result

    try:
        listed, result = anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert listed == ["files__read", "misc__add"]
    assert result.content[0].text == "5"
    # the scopes the metadata advertises, for the resource the metadata names
    assert issuer.granted == [{"grant_type": "client_credentials", "resource": base,
                               "scope": "tools tools:write"}]


# -- operators: explain, config mistakes ----------------------------------------------------------------------


def test_explain_says_which_credentials_act_as_the_agent_and_which_scope_guards_the_tool(cli_config: Any) -> None:
    from conftest import cli

    path = cli_config(config("https://idp.example.com"), "files=packs:FILES")
    code, out, _ = cli("explain", "--config", path, "--agent", "reader", "files__write")
    assert code == 0
    assert out.splitlines()[-4:] == [
        "  over HTTP, as this agent:",
        "    static tokens  $TOK_OLD, $TOK_NEW",
        "    OAuth tokens   client_id reader-*; groups staff | admins",
        "    an OAuth token sees files__write only with the scope tools:write",
    ]
    code, out, _ = cli("explain", "--config", path, "--agent", "ops", "files__touch", "--json")
    assert json.loads(out)["identity"] == {"claims": {"sub": ["svc-ops"]}, "scopes": ["tools"]}
    code, out, _ = cli("explain", "--config", path, "--agent", "reader", "files__read", "--json")
    assert "needs_scope" not in json.loads(out)["identity"]


def test_oauth_and_identity_mistakes_name_the_key() -> None:
    from conftest import problems

    assert problems("""
        [oauth]
        issuer = "idp.example.com"
        audience = "https://tools.example.com"
        jwks_url = "https://idp.example.com/keys"
        jwks_file = "keys.json"
        algorithms = ["RS256", "HS256", "none"]
        [agents.a.identity]
        claims = { sub = "", groups = [] }
        [agents.a.identity.needs_scope.write]
        tools = ["fs__write_file(/etc/**)"]
    """) == [
        "error: conf.toml: oauth.issuer: expected an https:// URL, got 'idp.example.com'",
        "error: conf.toml: oauth.jwks_file: give jwks_url or jwks_file, not both",
        "error: conf.toml: oauth.algorithms[1]: 'HS256' is not accepted: only asymmetric signatures are (RS256, "
        "RS384, RS512, PS256, PS384, PS512, ES256, ES256K, ES384, ES512, EdDSA); a shared secret or 'none' would let "
        "anyone who has it mint tokens",
        "error: conf.toml: oauth.algorithms[2]: 'none' is not accepted: only asymmetric signatures are (RS256, "
        "RS384, RS512, PS256, PS384, PS512, ES256, ES256K, ES384, ES512, EdDSA); a shared secret or 'none' would let "
        "anyone who has it mint tokens",
        "error: conf.toml: agents.a.identity.claims.sub: expected a value or glob, got an empty string",
        "error: conf.toml: agents.a.identity.claims.groups: expected one or more values or globs, got []",
        "error: conf.toml: agents.a.identity.needs_scope.write.tools[0]: 'fs__write_file(/etc/**)': a scope hides "
        "whole tools; argument specifiers belong in permissions",
    ]
    assert problems('[agents.a.identity]\nclaims = { sub = "x" }\n') == [
        "error: conf.toml: agents.a.identity: needs an [oauth] table: the issuer whose tokens are verified"]
    assert problems('[oauth]\nissuer = "https://i"\naudience = "https://r"\n[agents.a.identity]\nclaims = {}\n') == [
        "error: conf.toml: agents.a.identity.claims: name at least one claim (sub, client_id, groups, ...): with "
        "none, every token the issuer signs would act as this agent"]


def test_a_tool_hidden_by_a_lacking_scope_answers_its_routing_header_like_a_tool_that_does_not_exist(
        issuer: Issuer) -> None:
    """A 2026-07-28 call may carry its arguments in headers (``x-mcp-header``), which are checked against the tool's
    schema before the call. The schema is the one the token's view has: a tool its token lacks the scope for is not
    in it, so a mismatched header gets the answer a tool that does not exist gets, not a mismatch that tells the
    tool is there."""
    text = config(issuer.url).replace('tools = ["files__write"]', 'tools = ["files__write", "r__route"]').replace(
        'plugins = { allow = ["files"] }\ntools = { allow = ["files__read", "files__write"] }',
        'plugins = { allow = ["files", "r"] }\ntools = { allow = ["files__read", "files__write", "r__route"] }', 1)
    assert text.count("r__route") == 2

    async def call(client: httpx2.AsyncClient, token: str, name: str) -> tuple[int, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": name, "arguments": {"region": "eu"}, "_meta": META}}
        answer = await client.post("/agents/reader/mcp", json=body, headers={
            **HEADERS, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call", "Mcp-Name": name, "Mcp-Param-Region": "us"})
        return answer.status_code, answer.json()

    async def main() -> list[tuple[int, Any]]:
        async with serving(text, packs={"r": Pack(routed)}) as (_, client):
            lacking, scoped = issuer.sign(READER), issuer.sign({**READER, "scope": "tools tools:write"})
            return [await call(client, lacking, "r__route"), await call(client, lacking, "r__nothing"),
                    await call(client, scoped, "r__route")]

    hidden, missing, seen = anyio.run(main)
    assert seen[0] == 400 and "Mcp-Param-Region header does not match" in seen[1]["error"]["message"]
    assert hidden[0] == missing[0]
    assert json.dumps(hidden[1]).replace("r__route", "NAME") == json.dumps(missing[1]).replace("r__nothing", "NAME")


def test_an_mcp_task_is_its_oauth_subject_s_and_another_subject_or_the_agent_s_static_token_finds_none(
        issuer: Issuer) -> None:
    """A task made with alice's token is alice's, through a new token of hers too; bob, who acts as the same agent,
    and the agent's static token get what a task that does not exist gets."""
    from packs import JOBS

    text = config(issuer.url).replace(
        'plugins = { allow = ["files"] }\ntools = { allow = ["files__read", "files__write"] }',
        'plugins = { allow = ["files", "jobs"] }\ntools = { allow = ["files__read", "files__write", "jobs__only"] }',
        1)
    tasks = {**META, CLIENT_CAPABILITIES_META_KEY: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}

    async def send(client: httpx2.AsyncClient, token: str, method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": tasks}}
        answer = await client.post("/agents/reader/mcp", json=body, headers={
            **HEADERS, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": method, **({"Mcp-Name": params["name"]} if "name" in params else {})})
        return answer.json()

    async def main() -> list[Any]:
        async with serving(text, packs={"jobs": JOBS}) as (_, client):
            alice = issuer.sign(READER)
            made = (await send(client, alice, "tools/call", {"name": "jobs__only", "arguments": {"x": 7}}))["result"]
            assert made["resultType"] == "task"
            asked = {"taskId": made["taskId"]}
            with anyio.fail_after(30):
                while (found := await send(client, alice, "tasks/get", asked))["result"]["status"] == "working":
                    await anyio.sleep(0.01)
            again = await send(client, issuer.sign(READER, lifetime=600), "tasks/get", asked)  # a new token of hers
            bob = await send(client, issuer.sign({**READER, "sub": "bob"}), "tasks/get", asked)
            static = await send(client, "o" * 32, "tasks/get", asked)
            cancel = await send(client, issuer.sign({**READER, "sub": "bob"}), "tasks/cancel", asked)
            return [found, again, bob, static, cancel]

    found, again, bob, static, cancel = anyio.run(main)
    assert found["result"]["result"]["content"] == [{"type": "text", "text": "only 7"}]
    assert again["result"]["status"] == "completed"
    for refused in (bob, static, cancel):
        assert refused["error"] == {"code": -32602, "message": "Failed to retrieve task: Task not found"}


def test_a_policy_sees_who_a_call_acts_for_its_verified_claims_and_never_a_token(issuer: Issuer) -> None:
    """toolcrib_policy's principal over HTTP: the OAuth subject with its client, issuer, scopes and verified claims,
    or the static token's variable; the same call is refused for one and not the other."""
    seen: list[dict[str, Any]] = []

    class StaffOnly:
        @toolcrib.hookimpl
        def toolcrib_policy(self, request: Any) -> Any:
            if request.action != "call":
                return None
            seen.append(dict(request.principal))
            groups = request.principal.get("claims", {}).get("groups", [])
            return None if request.principal["kind"] == "token" or "staff" in groups else toolcrib.Deny("staff only")

    async def main() -> None:
        async with serving(config(issuer.url), packs={"staff": StaffOnly()}) as (_, client):
            for token in (issuer.sign(READER), issuer.sign({**READER, "groups": ["admins"]}), STATIC["TOK_NEW"]):
                status, message, _ = await rpc(client, "reader", token, "tools/call",
                                               {"name": "files__read", "arguments": {"path": "a"}})
                assert status == 200
                seen[-1]["answer"] = message["result"]["content"][0]["text"]

    anyio.run(main)
    assert [(p["kind"], p.get("subject"), p.get("credential"), p["answer"]) for p in seen] == [
        ("oauth", "alice", None, "contents of a"),
        ("oauth", "alice", None, "Permission denied: policy staff: staff only"),
        ("token", None, "$TOK_NEW", "contents of a")]
    assert (seen[0]["client"], seen[0]["issuer"], seen[0]["scopes"], seen[0]["claims"]["groups"]) == (
        "reader-cli", issuer.url, ["tools"], ["staff"])
    assert not any(STATIC["TOK_NEW"] in json.dumps(p, default=str) for p in seen)
