"""Calls made upstream as the caller (issue 71): each agent's OAuth caller reaches an OpenAPI API and an upstream MCP
server as themselves, by token exchange (RFC 8693) at a real local issuer (tests/issuer.py), never with their own
token. The API checks each token it gets (signature, audience, subject, act); the upstream MCP server is another
toolcrib, over HTTP, whose [oauth] accepts only tokens for its own audience acted by toolcrib's client, and whose
audit log says who called."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from mcp.server.mcpserver import Context, MCPServer

from issuer import Issuer
from openapi_api import _json, document, opened_host, serve

RESOURCE = "http://127.0.0.1:8000"
PETS = "https://pets.example"  # the API's audience, as the issuer names it
STATIC = {"TOK_READER": "r" * 32}
SECRET = {"GW_SECRET": "gw-secret-123"}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
ALICE = {"client_id": "reader-cli", "sub": "alice", "aud": RESOURCE, "scope": "pets"}
BOB = {**ALICE, "sub": "bob"}


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        running.clients["toolcrib-gw"] = (SECRET["GW_SECRET"], {})
        yield running


def oauth(issuer: Issuer) -> str:
    return f"""
[oauth]
issuer = "{issuer.url}"
audience = "{RESOURCE}"
[oauth.client]
token_endpoint = "{issuer.url}/token"
id = "toolcrib-gw"
secret = "${{GW_SECRET}}"

[agents.reader]
token_env = "TOK_READER"
[agents.reader.identity]
claims = {{ client_id = "reader-*" }}
[agents.reader.permissions]
plugins = {{ allow = ["*"] }}
mcps = {{ allow = ["*"] }}
tools = {{ allow = ["*"] }}
resources = {{ allow = ["*"] }}
prompts = {{ allow = ["*"] }}
"""


class PetApi:
    """The API's side: each token it was sent, verified as the API would (the issuer's key, its own audience), or
    why it was refused."""

    def __init__(self, issuer: Issuer) -> None:
        self.issuer = issuer
        self.seen: list[dict[str, Any]] = []

    def pet(self, request: Any, petId: int) -> Any:
        token = request.headers.get("authorization", "").partition(" ")[2]
        try:
            claims = jwt.decode(token, self.issuer.public_pem(), algorithms=["RS256"], audience=PETS)
        except jwt.PyJWTError as exc:
            self.seen.append({"refused": str(exc), "token": token})
            return _json({"message": "unauthorized"}, 401)
        self.seen.append({"claims": claims, "token": token})
        return _json({"id": petId, "name": f"pet of {claims['sub']}", "photoUrls": [], "note": token})


@asynccontextmanager
async def serving(host: Any) -> AsyncIterator[httpx2.AsyncClient]:
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    app = HttpApp(ServingState(host), HttpOptions(stateless=True), env=STATIC)
    try:
        async with app.app.router.lifespan_context(app.app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url=RESOURCE, timeout=30) as client:
                yield client
    finally:
        host.close()


async def call(client: httpx2.AsyncClient, token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One stateless tools/call as the holder of ``token``: its result."""
    return await rpc(client, token, "tools/call", {"name": tool, "arguments": arguments})


async def rpc(client: httpx2.AsyncClient, token: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One stateless request to the reader's endpoint as the holder of ``token``: its result."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = await client.post("/agents/reader/mcp", json=body, headers={**HEADERS, "Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])["result"]  # type: ignore[no-any-return]
    assert "result" in answer.json(), answer.json()
    return answer.json()["result"]  # type: ignore[no-any-return]


def text_of(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result["content"])


def pets_host(tmp_path: Path, issuer: Issuer, api_url: str, exchange: str) -> Any:
    from toolcrib.config import load_config

    (tmp_path / "petstore.json").write_text(json.dumps(document()))
    config = tmp_path / "toolcrib.toml"
    config.write_text(oauth(issuer) + f"""
[openapi.pets]
document = "petstore.json"
base_url = "{api_url}"
operations = ["getPetById"]
bearer = "service-token-abc"
exchange = {{ {exchange} }}
""")
    return opened_host(load_config(config), env=SECRET)


def test_each_caller_reaches_an_openapi_api_as_themselves_never_with_their_own_token(tmp_path: Path,
                                                                                     issuer: Issuer) -> None:
    api = PetApi(issuer)
    with serve(document(), [("/pet/<int:petId>", ["GET"], api.pet)], prefix="/v2", validate=False) as running:
        host = pets_host(tmp_path, issuer, running.base_url, f'audience = "{PETS}", scopes = ["pets:read"]')
        alice, bob = issuer.sign(ALICE), issuer.sign(BOB)

        async def main() -> list[dict[str, Any]]:
            async with serving(host) as client:
                return [await call(client, token, "pets__getPetById", {"petId": n})
                        for n, token in ((1, alice), (2, bob), (3, alice))]

        results = anyio.run(main)
    assert [r.get("isError", False) for r in results] == [False, False, False]
    assert [json.loads(text_of(r))["name"] for r in results] == ["pet of alice", "pet of bob", "pet of alice"]
    claims = [seen["claims"] for seen in api.seen]
    assert [(c["sub"], c["aud"], c["act"], c["scope"], c["client_id"]) for c in claims] == [
        ("alice", PETS, {"sub": "toolcrib-gw"}, "pets:read", "reader-cli"),
        ("bob", PETS, {"sub": "toolcrib-gw"}, "pets:read", "reader-cli"),
        ("alice", PETS, {"sub": "toolcrib-gw"}, "pets:read", "reader-cli")]
    sent = [seen["token"] for seen in api.seen]
    assert alice not in sent and bob not in sent and "service-token-abc" not in sent  # neither theirs nor the service's
    assert sent[0] == sent[2] != sent[1]  # alice's exchanged token was kept for her next call; bob has his own
    assert [g["audience"] for g in issuer.granted] == [PETS, PETS]  # two exchanges for three calls
    assert all(token not in text_of(r) for r, token in zip(results, sent, strict=True))  # echoed: taken out
    assert json.loads(text_of(results[0]))["note"] == "***"


def test_a_caller_with_no_token_to_exchange_or_whose_exchange_fails_gets_an_error_naming_the_source(
        tmp_path: Path, issuer: Issuer) -> None:
    api = PetApi(issuer)
    issuer.refused_subjects.add("mallory")
    with serve(document(), [("/pet/<int:petId>", ["GET"], api.pet)], prefix="/v2", validate=False) as running:
        strict = pets_host(tmp_path, issuer, running.base_url, f'audience = "{PETS}"')

        async def main(host: Any) -> list[dict[str, Any]]:
            async with serving(host) as client:
                return [await call(client, STATIC["TOK_READER"], "pets__getPetById", {"petId": 1}),
                        await call(client, issuer.sign({**ALICE, "sub": "mallory"}), "pets__getPetById",
                                   {"petId": 1})]

        static, refused = anyio.run(main, strict)
        assert api.seen == []  # the API never heard of either
        lenient = pets_host(tmp_path, issuer, running.base_url, f'audience = "{PETS}", fallback = true')
        fell_back = anyio.run(main, lenient)
    assert (static["isError"], text_of(static)) == (True, (
        "OpenAPI source 'pets' is called as its caller (token exchange), and this call carries no OAuth access "
        "token to exchange: only a client signed in through [oauth] can call it"))
    assert (refused["isError"], text_of(refused)) == (True, (
        "OpenAPI source 'pets' could not be called as its caller: the token endpoint refused (400, invalid_grant: "
        "this subject may not be delegated)"))
    # fallback = true: both go with the source's own credential, which this API refuses
    assert [seen["token"] for seen in api.seen] == ["service-token-abc", "service-token-abc"]
    assert [r["isError"] for r in fell_back] == [True, True]
    assert text_of(fell_back[0]).startswith("GET /pet/{petId} answered HTTP 401")


def test_an_exchange_without_a_client_or_on_a_stdio_server_is_a_config_error(tmp_path: Path) -> None:
    from toolcrib.config import load_config
    from toolcrib.errors import ConfigError

    config = tmp_path / "toolcrib.toml"
    config.write_text("""
[mcps.local]
command = "python3"
exchange = { audience = "x" }
[openapi.pets]
document = "p.json"
exchange = { audience = "y", scoops = [] }
""")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert [p.message for p in info.value.problems] == [
        "unknown key 'scoops' (did you mean 'scopes'?); expected one of: audience, scopes, resource, fallback"]
    config.write_text(config.read_text().replace(", scoops = []", ""))
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert [(p.where.split(": ", 1)[1], p.message) for p in info.value.problems] == [
        ("mcps.local.exchange", "a token exchange applies to url servers only: a stdio server gets no caller's "
                                "token"),
        ("mcps.local.exchange", "a token exchange needs [oauth] with [oauth.client] (toolcrib's client at the "
                                "issuer, which exchanges the caller's token)"),
        ("openapi.pets.exchange", "a token exchange needs [oauth] with [oauth.client] (toolcrib's client at the "
                                  "issuer, which exchanges the caller's token)")]


INNER = "https://inner.example"  # the upstream toolcrib's audience


@pytest.mark.slow
def test_each_caller_reaches_an_upstream_mcp_server_as_themselves(tmp_path: Path, issuer: Issuer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream is another toolcrib over HTTP: its agent takes its static token (what the outer toolcrib lists
    its tools with) or an access token for its own audience acted by toolcrib's client; its audit log says who
    each call came from. Three calls by two people: two exchanges, each reaching it as its own subject."""
    from serving import CONFIG, TOKENS, start_http
    from toolcrib.host import Host
    from toolcrib.supply import supply

    audit = tmp_path / "inner-audit.jsonl"
    inner = tmp_path / "inner.toml"
    inner.write_text(f'[host]\naudit_log = "{audit}"\n\n[oauth]\nissuer = "{issuer.url}"\naudience = "{INNER}"\n'
                     + CONFIG + '\n[agents.writer.identity]\nclaims = { "act.sub" = "toolcrib-gw" }\n')
    proc, base, _ = start_http(inner)
    monkeypatch.setenv("INNER_TOKEN", TOKENS["TOK_WRITER"])
    monkeypatch.setenv("GW_SECRET", SECRET["GW_SECRET"])
    from conftest import config_from

    loaded = config_from(oauth(issuer) + f"""
[mcps.inner]
url = "{base}/agents/writer/mcp"
headers = {{ Authorization = "Bearer ${{INNER_TOKEN}}" }}
exchange = {{ audience = "{INNER}" }}
""")
    alice, bob = issuer.sign(ALICE), issuer.sign(BOB)

    async def main() -> list[dict[str, Any]]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), plugins={}, autoload=False, env={})
            async with serving(host) as client:
                return [await call(client, token, "inner__files_read", {"path": "notes.txt"})
                        for token in (alice, bob, alice, STATIC["TOK_READER"])]

    try:
        results = anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert [(r.get("isError", False), text_of(r)) for r in results] == [
        (False, "contents of notes.txt"), (False, "contents of notes.txt"), (False, "contents of notes.txt"),
        (True, "upstream server 'inner' is called as its caller (token exchange), and this call carries no OAuth "
               "access token to exchange: only a client signed in through [oauth] can call it")]
    called = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(line["tool"], line["identity"]) for line in called] == [
        ("files__read", {"kind": "oauth", "subject": who, "client": "reader-cli", "issuer": issuer.url})
        for who in ("alice", "bob", "alice")]
    assert [g["audience"] for g in issuer.granted] == [INNER, INNER]


@pytest.fixture
def echo_server() -> Iterator[tuple[str, list[str]]]:
    """An MCP server (the SDK's MCPServer, streamable HTTP, uvicorn on a thread) whose one tool says what
    Authorization its request came with, as a careless server might; and each it was given."""
    import threading
    import time

    import uvicorn

    server = MCPServer("echo")
    given: list[str] = []

    @server.tool(description="Say what Authorization the request came with.")
    def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
        request = ctx.request_context.request
        given.append(request.headers.get("authorization", "nothing") if request is not None else "nothing")
        return "I got " + given[-1] + " (" + base64.b64encode(given[-1].encode()).decode() + ")"

    @server.resource("echo://who/{name}", description="What Authorization the read came with.")
    def who(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
        return whoami(ctx)

    @server.prompt(description="What Authorization the prompt's request came with.")
    def greet(ctx: Context) -> str:  # type: ignore[type-arg]
        return whoami(ctx)

    app = server.streamable_http_app(stateless_http=True, json_response=True)
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    while not running.started and thread.is_alive():
        time.sleep(0.02)
    yield f"http://127.0.0.1:{running.servers[0].sockets[0].getsockname()[1]}/mcp", given
    running.should_exit = True
    thread.join(10)


def test_no_credential_of_an_upstream_server_reaches_the_agent_though_it_echo_them(
        echo_server: tuple[str, list[str]], issuer: Issuer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own header (what a static caller's call goes with, by fallback) and the token exchanged for a
    caller come back from it as *** in every form, as an OpenAPI source's credentials do."""
    from conftest import config_from
    from toolcrib.host import Host
    from toolcrib.supply import supply

    monkeypatch.setenv("GW_SECRET", SECRET["GW_SECRET"])
    monkeypatch.setenv("ECHO_TOKEN", "service-token-xyz")
    loaded = config_from(oauth(issuer) + f"""
[mcps.echo]
url = "{echo_server[0]}"
headers = {{ Authorization = "Bearer ${{ECHO_TOKEN}}" }}
exchange = {{ audience = "echo", fallback = true }}
""")

    async def main() -> list[dict[str, Any]]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), plugins={}, autoload=False, env={})
            async with serving(host) as client:
                alice = issuer.sign(ALICE)
                found = [text_of(await call(client, token, "echo__whoami", {}))
                         for token in (alice, STATIC["TOK_READER"])]
                read = await rpc(client, alice, "resources/read", {"uri": "echo://who/me"})
                found.append(read["contents"][0]["text"])
                prompt = await rpc(client, alice, "prompts/get", {"name": "echo__greet"})
                found.append(prompt["messages"][0]["content"]["text"])
                return found

    assert anyio.run(main) == ["I got *** (***)"] * 4  # base64 too
    exchanged, service, read, prompt = echo_server[1]
    assert service == "Bearer service-token-xyz"  # the static caller's, by fallback
    for sent in (exchanged, read, prompt):  # a read and a prompt go as the caller too
        assert jwt.decode(sent.removeprefix("Bearer "), options={"verify_signature": False})["sub"] == "alice"
    assert exchanged == read == prompt  # one exchange, kept
    assert [g["audience"] for g in issuer.granted] == ["echo"]


BAD_ANSWERS = [
    (200, b"<html>hello</html>", "the token endpoint answered 200 with no JSON object"),
    (200, b"[1, 2]", "the token endpoint answered 200 with no JSON object"),
    (503, b"", "the token endpoint answered 503 with no JSON object"),
    (400, b'{"error": "invalid_target", "error_description": "no such\\u200b audience"}',
     "the token endpoint refused (400, invalid_target: no such audience)"),
    (401, b'{"message": "who are you"}', "the token endpoint refused (401, no error code)"),
    (200, b'{"token_type": "Bearer"}', "the token endpoint's answer has no access_token"),
    (200, b'{"access_token": "a b", "token_type": "Bearer"}', "the token endpoint's answer has no access_token"),
    (200, b'{"access_token": "t", "token_type": "mac"}', "the token endpoint gave a token of type 'mac', not Bearer"),
    (200, b'{"access_token": "t", "token_type": "Bearer", "expires_in": "300"}',
     "the token endpoint's expires_in is '300', not a number of seconds"),
    (200, b'{"access_token": "t", "token_type": "Bearer", "expires_in": true}',
     "the token endpoint's expires_in is True, not a number of seconds"),
    (200, b'{"access_token": "t", "token_type": "Bearer", "expires_in": 0}',
     "the token endpoint's expires_in is 0, not a number of seconds"),
    (200, b'{"access_token": "' + b"x" * 100_001 + b'", "token_type": "Bearer"}',
     "the token endpoint answered 200 with no JSON object"),
]


def test_a_token_endpoint_that_answers_badly_gives_no_token_and_says_why() -> None:
    """Each answer of a real HTTP endpoint that is not a token: an ``ExchangeFailed`` in the endpoint's words,
    never a token and never anything else raised. One that is, with no expiry stated, is kept a minute."""
    from toolcrib.delegation import ExchangeFailed, Exchanger
    from toolcrib.delegation_settings import ExchangeConfig

    answers: list[tuple[int, bytes]] = []
    forms: list[dict[str, str]] = []

    def token(request: Any) -> Any:
        from werkzeug.wrappers import Response

        forms.append({**request.form, "auth": request.headers.get("authorization", "")})
        status, body = answers.pop(0)
        return Response(body, status, content_type="application/json")

    with serve({"openapi": "3.0.0"}, [("/token", ["POST"], token)], validate=False) as endpoint:
        exchanger = Exchanger(f"{endpoint.base_url}/token", "gw", "s3cret")
        for status, body, said in BAD_ANSWERS:
            answers.append((status, body))
            with pytest.raises(ExchangeFailed) as info:
                exchanger.token("subject-token", ExchangeConfig(audience="api", scopes=["a", "b"], resource="https://api"))
            assert str(info.value) == said
        answers.append((200, b'{"access_token": "good", "token_type": "N_A"}'))
        got = [exchanger.token("subject-token", ExchangeConfig(audience="api")) for _ in range(2)]
        # kept until a tenth of its life (or 30 s, if less) before it expires, per subject, audience and scopes
        now = [0.0]
        exchanger = Exchanger(f"{endpoint.base_url}/token", "gw", "s3cret", clock=lambda: now[0])
        answers += [(200, b'{"access_token": "t%d", "token_type": "bearer", "expires_in": 100}' % i) for i in range(4)]
        for at, subject, scopes in ((0, "s", []), (89.9, "s", []), (90.1, "s", []), (90.2, "s", ["x"]),
                                    (90.3, "other", []), (90.4, "s", ["x"])):
            now[0] = at
            got.append(exchanger.token(subject, ExchangeConfig(audience="api", scopes=scopes)))
    assert got == ["good", "good", "t0", "t0", "t1", "t2", "t3", "t2"]  # the first two: asked once, kept a minute
    assert forms[0] == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": "subject-token",
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token", "audience": "api",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token", "scope": "a b",
        "resource": "https://api", "auth": "Basic " + base64.b64encode(b"gw:s3cret").decode()}
    assert len(forms) == len(BAD_ANSWERS) + 5


def test_an_unreachable_token_endpoint_gives_no_token_and_says_why() -> None:
    from toolcrib.delegation import ExchangeFailed, Exchanger
    from toolcrib.delegation_settings import ExchangeConfig

    with pytest.raises(ExchangeFailed) as info:
        Exchanger("http://127.0.0.1:9/token", "gw", "s").token("t", ExchangeConfig(audience="api"))
    assert str(info.value).startswith("the token endpoint could not be reached (ConnectError: ")


def test_check_says_which_sources_are_called_as_each_caller(cli_config: Any, issuer: Issuer) -> None:
    from conftest import cli

    path = cli_config(oauth(issuer) + """
[mcps.tickets]
url = "http://127.0.0.1:9/mcp"
timeout = 5
exchange = { audience = "tickets", scopes = ["read", "write"] }

[mcps.plain]
url = "http://127.0.0.1:9/mcp"
timeout = 5

[openapi.billing]
document = "billing.json"
exchange = { audience = "billing-api", fallback = true }
""", "")
    code, out, _ = cli("--config", path, "check")
    assert code == 1  # (the servers do not answer, the document is not there: errors)
    assert [line for line in out.splitlines() if "called as each caller" in line] == [
        "upstream server 'tickets' is called as each caller: a token exchanged for audience 'tickets', scopes read "
        "write; a call with none to exchange gets an error",
        "OpenAPI source 'billing' is called as each caller: a token exchanged for audience 'billing-api'; a call "
        "with none to exchange gets its own credential"]
    code, out, _ = cli("--config", path, "check", "--json")
    assert code == 1 and json.loads(out)["called_as_the_caller"] == {
        "upstream server 'tickets'": {"audience": "tickets", "scopes": ["read", "write"], "resource": None,
                                      "fallback": False},
        "OpenAPI source 'billing'": {"audience": "billing-api", "scopes": [], "resource": None, "fallback": True}}
