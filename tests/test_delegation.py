"""Calls made upstream as the caller (issue 71): each agent's OAuth caller reaches an OpenAPI API and an upstream MCP
server as themselves, by token exchange (RFC 8693) at a real local issuer (tests/issuer.py), never with their own
token. The API checks each token it gets (signature, audience, subject, act); the upstream MCP server is another
toolcrib, over HTTP, whose [oauth] accepts only tokens for its own audience acted by toolcrib's client, and whose
audit log says who called."""

from __future__ import annotations

import base64
import json
import time
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


@pytest.fixture(autouse=True)
def nothing_kept() -> Iterator[None]:
    """Each test starts with no grant, vault, exchanger or kept token of another's (they live in the process)."""
    from toolcrib import consent, delegation

    for kept in (consent._VAULTS, consent._CONSENTING, delegation._EXCHANGERS):
        kept.clear()
    consent._CURRENT.clear()
    yield


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
        team = f", team {request.headers.get('x-team')}, tenant {request.headers.get('x-tenant')}" \
            if request is not None and "x-team" in request.headers else ""
        return "I got " + given[-1] + " (" + base64.b64encode(given[-1].encode()).decode() + ")" + team

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
    monkeypatch.setenv("TENANT", "acme-corp")
    loaded = config_from(oauth(issuer) + f"""
[mcps.echo]
url = "{echo_server[0]}"
headers = {{ Authorization = "Bearer ${{ECHO_TOKEN}}", X-Team = "blue", X-Tenant = "${{TENANT}}" }}
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

    # base64 too; of the other headers, the one from a variable is a secret, the one written in the config is not
    assert anyio.run(main) == ["I got *** (***), team blue, tenant ***"] * 4
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

[credentials]
key = "${CRED_KEY}"

[mcps.github]
url = "https://api.example/mcp"
timeout = 5
[mcps.github.consent]
authorization_endpoint = "https://github.example/authorize"
token_endpoint = "https://github.example/token"
client_id = "gh"
redirect_uri = "https://tools.example/oauth/callback"
""", "")
    code, out, _ = cli("--config", path, "check")
    assert code == 1  # (the servers do not answer, the document is not there: errors)
    assert [line for line in out.splitlines() if "is called " in line] == [
        "upstream server 'github' is called with each person's own grant, given at https://github.example/authorize; "
        "a call by no signed-in person gets an error",
        "upstream server 'tickets' is called as each caller: a token exchanged for audience 'tickets', scopes read "
        "write; a call with none to exchange gets an error",
        "OpenAPI source 'billing' is called as each caller: a token exchanged for audience 'billing-api'; a call "
        "with none to exchange gets its own credential"]
    code, out, _ = cli("--config", path, "check", "--json")
    assert code == 1 and json.loads(out)["called_as_the_caller"] == {
        "upstream server 'github'": {"consent": "https://github.example/authorize", "scopes": [], "fallback": False},
        "upstream server 'tickets'": {"audience": "tickets", "scopes": ["read", "write"], "resource": None,
                                      "fallback": False},
        "OpenAPI source 'billing'": {"audience": "billing-api", "scopes": [], "resource": None, "fallback": True}}


# -- each person's own grant (authorization code with PKCE) ------------------------------------------------------

KEY = base64.b64encode(bytes(range(32))).decode()
CONSENTING = {**SECRET, "CRED_KEY": KEY, "PETS_SECRET": "pets-secret"}


def consent_host(tmp_path: Path, issuer: Issuer, api_url: str, extra: str = "") -> Any:
    from toolcrib.config import load_config

    (tmp_path / "petstore.json").write_text(json.dumps(document()))
    config = tmp_path / "toolcrib.toml"
    config.write_text(oauth(issuer) + f"""
[credentials]
key = "${{CRED_KEY}}"

[openapi.pets]
document = "petstore.json"
base_url = "{api_url}"
operations = ["getPetById"]
bearer = "service-token-abc"
[openapi.pets.consent]
authorization_endpoint = "{issuer.url}/authorize"
token_endpoint = "{issuer.url}/token"
client_id = "toolcrib-pets"
client_secret = "${{PETS_SECRET}}"
scopes = ["pets:read"]
resource = "{PETS}"
redirect_uri = "{RESOURCE}/oauth/callback"
{extra}""")
    return opened_host(load_config(config), env=CONSENTING)


async def modern(client: httpx2.AsyncClient, token: str, method: str, params: dict[str, Any],
                 capabilities: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 request to the reader's endpoint from a client with ``capabilities``: the whole JSON-RPC
    answer."""
    from mcp_types import CLIENT_CAPABILITIES_META_KEY

    from wire_pack import META

    body = {"jsonrpc": "2.0", "id": 1, "method": method,
            "params": {**params, "_meta": {**META, CLIENT_CAPABILITIES_META_KEY: capabilities}}}
    answer = await client.post("/agents/reader/mcp", json=body, headers={
        **HEADERS, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method,
        **({"Mcp-Name": params["name"]} if "name" in params else {})})
    assert answer.headers.get("content-type", "").startswith("application/json"), (answer.status_code, answer.text)
    return answer.json()  # type: ignore[no-any-return]


def browse(url: str, issuer: Issuer, user: str) -> str:
    """A person's browser at the authorization server, signed in there as ``user``: where it is sent back to."""
    issuer.browser_user = user
    answer = httpx2.get(url, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    return answer.headers["location"]


def test_each_person_grants_toolcrib_access_once_and_their_calls_go_with_it(
        tmp_path: Path, issuer: Issuer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice's first call names the page to grant access at; her browser signs in there and comes back to
    /oauth/callback; her next calls go with her own token (refreshed when it expires), never bob's, who is asked
    for his own. A link works once. A client that can send its user to pages gets the protocol's -32042."""
    import re

    from toolcrib import consent

    issuer.clients["toolcrib-pets"] = ("pets-secret", {})
    api = PetApi(issuer)
    with serve(document(), [("/pet/<int:petId>", ["GET"], api.pet)], prefix="/v2", validate=False) as running:
        host = consent_host(tmp_path, issuer, running.base_url)
        alice, bob = issuer.sign(ALICE), issuer.sign(BOB)

        async def main() -> dict[str, Any]:
            got: dict[str, Any] = {}
            async with serving(host) as client:
                first = await call(client, alice, "pets__getPetById", {"petId": 1})
                got["first"] = text_of(first)
                url = re.search(r"open (\S+) in a browser", got["first"]).group(1)  # type: ignore[union-attr]
                back = browse(url, issuer, "alice@pets")
                landed = await client.get(back.removeprefix(RESOURCE))
                got["landed"] = (landed.status_code, landed.text, landed.headers["cache-control"])
                again = await client.get(back.removeprefix(RESOURCE))  # the same link, twice
                got["again"] = (again.status_code, again.text)
                got["second"] = await call(client, alice, "pets__getPetById", {"petId": 2})
                got["bob"] = text_of(await call(client, bob, "pets__getPetById", {"petId": 3}))
                got["pages"] = await modern(client, bob, "tools/call", {"name": "pets__getPetById",
                                                                        "arguments": {"petId": 3}},
                                            {"elicitation": {"url": {}}})
                got["static"] = text_of(await call(client, STATIC["TOK_READER"], "pets__getPetById", {"petId": 5}))
                monkeypatch.setattr(consent, "CLOCK", lambda: consent.time.time() + 400)  # past its expiry
                got["refreshed"] = await call(client, alice, "pets__getPetById", {"petId": 4})
                monkeypatch.setattr(consent, "CLOCK", lambda: consent.time.time() + 800)  # again: the rotated one
                got["refreshed again"] = await call(client, alice, "pets__getPetById", {"petId": 5})
                issuer.refresh_tokens.clear()  # the server forgets it: alice is asked again
                monkeypatch.setattr(consent, "CLOCK", lambda: consent.time.time() + 1200)
                got["refused"] = text_of(await call(client, alice, "pets__getPetById", {"petId": 6}))
                got["grants"] = await consent.vault_for(KEY, "key").grants()  # (the refused grant: dropped)
            return got

        got = anyio.run(main)
    assert got["first"].startswith("OpenAPI source 'pets' needs you to sign in and grant toolcrib access: open "
                                   f"{issuer.url}/authorize?response_type=code&client_id=toolcrib-pets&redirect_uri=")
    assert got["landed"][0] == 200 and got["landed"][2] == "no-store"
    assert (f"Signed in: calls of OpenAPI source &#x27;pets&#x27; by alice (of {issuer.url}) now go with the access "
            "you granted.") in got["landed"][1]
    assert got["again"][0] == 400 and "unknown, already used or expired" in got["again"][1]
    assert json.loads(text_of(got["second"]))["name"] == "pet of alice@pets"
    assert got["bob"].startswith("OpenAPI source 'pets' needs you to sign in and grant toolcrib access: open ")
    error = got["pages"]["error"]
    [page] = error["data"]["elicitations"]
    assert (error["code"], error["message"], page["mode"], page["message"]) == (
        -32042, "OpenAPI source 'pets' needs you to sign in and grant toolcrib access", "url",
        "OpenAPI source 'pets' needs you to sign in and grant toolcrib access")
    assert page["url"].startswith(f"{issuer.url}/authorize?") and re.fullmatch(r"consent:[0-9a-f]{16}",
                                                                               page["elicitationId"])
    assert json.loads(text_of(got["refreshed"]))["name"] == "pet of alice@pets"
    assert json.loads(text_of(got["refreshed again"]))["name"] == "pet of alice@pets"
    assert got["static"] == ("OpenAPI source 'pets' is called with each person's own grant, and this call is by no "
                             "person signed in through [oauth]")
    assert got["refused"].startswith("OpenAPI source 'pets' needs you to sign in and grant toolcrib access: open ")
    claims = [seen["claims"] for seen in api.seen]
    assert [(c["sub"], c["aud"], c["client_id"], c["scope"]) for c in claims] == [
        ("alice@pets", PETS, "toolcrib-pets", "pets:read")] * 3
    assert len({seen["token"] for seen in api.seen}) == 3  # the second and third: refreshed
    assert [g["grant_type"] for g in issuer.granted] == ["authorization_code", "refresh_token",
                                                         "refresh_token"]  # (then refused)
    assert got["grants"] == []


def test_what_is_kept_is_sealed_and_a_record_moved_to_another_person_does_not_open() -> None:
    from toolcrib.consent import Person, Vault

    vault = Vault(bytes(range(32)))
    alice, bob = Person("https://idp", "alice"), Person("https://idp", "bob")

    async def main() -> tuple[Any, Any, Any, list[Any]]:
        await vault.keep(alice, "mcps.tickets", {"access": "alice-token-123", "refresh": "r-456", "expires": None})
        kept = dict(vault._memory.items)
        stolen = next(iter(kept.values()))  # alice's sealed record, put under bob's name
        await vault._memory.put(f"grant:{bob.key}:mcps.tickets", stolen[0], None)
        return (await vault.grant(alice, "mcps.tickets"), await vault.grant(bob, "mcps.tickets"),
                await vault.grant(alice, "openapi.other"), [data for data, _ in kept.values()])

    mine, moved, elsewhere, sealed = anyio.run(main)
    assert mine is not None and (mine["access"], mine["refresh"]) == ("alice-token-123", "r-456")
    assert (moved, elsewhere) == (None, None)
    assert all(b"alice-token-123" not in data and b"r-456" not in data for data in sealed)


@pytest.mark.slow
def test_each_person_reaches_an_upstream_mcp_server_with_their_own_grant(tmp_path: Path, issuer: Issuer,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream is another toolcrib over HTTP that takes tokens for its own audience granted to toolcrib's
    public client there (PKCE alone, no secret); its audit log says whose grant each call came with."""
    import re

    from conftest import config_from
    from serving import CONFIG, TOKENS, start_http
    from toolcrib.host import Host
    from toolcrib.supply import supply

    issuer.clients["toolcrib-inner"] = ("", {})  # a public client
    audit = tmp_path / "inner-audit.jsonl"
    inner = tmp_path / "inner.toml"
    inner.write_text(f'[host]\naudit_log = "{audit}"\n\n[oauth]\nissuer = "{issuer.url}"\naudience = "{INNER}"\n'
                     + CONFIG + '\n[agents.writer.identity]\nclaims = { client_id = "toolcrib-inner" }\n')
    proc, base, _ = start_http(inner)
    for name, value in {**CONSENTING, "INNER_TOKEN": TOKENS["TOK_WRITER"]}.items():
        monkeypatch.setenv(name, value)
    loaded = config_from(oauth(issuer) + f"""
[credentials]
key = "${{CRED_KEY}}"

[mcps.inner]
url = "{base}/agents/writer/mcp"
headers = {{ Authorization = "Bearer ${{INNER_TOKEN}}" }}
[mcps.inner.consent]
authorization_endpoint = "{issuer.url}/authorize"
token_endpoint = "{issuer.url}/token"
client_id = "toolcrib-inner"
resource = "{INNER}"
redirect_uri = "{RESOURCE}/oauth/callback"
""")
    alice, bob = issuer.sign(ALICE), issuer.sign(BOB)

    async def main() -> list[str]:
        said = []
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), plugins={}, autoload=False, env={})
            async with serving(host) as client:
                for token, user in ((alice, "alice@inner"), (bob, "bob@inner")):
                    asked = text_of(await call(client, token, "inner__files_read", {"path": "notes.txt"}))
                    url = re.search(r"open (\S+) in a browser", asked).group(1)  # type: ignore[union-attr]
                    landed = await client.get(browse(url, issuer, user).removeprefix(RESOURCE))
                    assert landed.status_code == 200, landed.text
                for token in (alice, bob, alice):
                    said.append(text_of(await call(client, token, "inner__files_read", {"path": "notes.txt"})))
        return said

    try:
        said = anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert said == ["contents of notes.txt"] * 3
    called = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(line["tool"], line["identity"]["subject"], line["identity"]["client"]) for line in called] == [
        ("files__read", who, "toolcrib-inner") for who in ("alice@inner", "bob@inner", "alice@inner")]
    assert [g["grant_type"] for g in issuer.granted] == ["authorization_code", "authorization_code"]
    assert all("client_id" in g for g in issuer.granted)  # a public client names itself; no secret is sent


def test_with_cluster_grants_are_kept_sealed_on_redis_where_every_replica_finds_them(redis_url: str) -> None:
    """Two replicas (two stores on one real redis-server): a grant one keeps, the other reads; an authorization
    one holds, the other completes, once; revoked on one, gone for both. Redis holds only sealed bytes."""
    import redis as sync_redis

    from toolcrib import consent
    from toolcrib.cluster import Store
    from toolcrib.config import ClusterConfig
    from toolcrib.consent import Person, Vault

    alice = Person("https://idp", "alice")
    stores = [Store(ClusterConfig(redis_url=redis_url, key_prefix="tc:")) for _ in range(2)]
    one, two = Vault(bytes(range(32))), Vault(bytes(range(32)))

    async def on(store: Store, work: Any) -> Any:
        consent.share(store)
        try:
            return await work()
        finally:
            consent.share(None)

    async def main() -> list[Any]:
        for store in stores:
            await store.open()
        try:
            await on(stores[0], lambda: one.keep(alice, "mcps.tickets", {"access": "tok-alice-1", "expires": None}))
            await on(stores[0], lambda: one.hold("state-xyz", {"subject": "alice", "verifier": "v-123"}))
            found = [await on(stores[1], lambda: two.grant(alice, "mcps.tickets")),
                     await on(stores[1], lambda: two.take("state-xyz")),
                     await on(stores[0], lambda: one.take("state-xyz")),  # once
                     await on(stores[1], two.grants)]
            found.append(await on(stores[1], lambda: two.forget(subject="alice")))
            found.append(await on(stores[0], lambda: one.grant(alice, "mcps.tickets")))
            found.append(await on(stores[0], one.grants))
            await on(stores[0], lambda: one.keep(alice, "mcps.tickets", {"access": "tok-alice-2"}))
            return found
        finally:
            for store in stores:
                await store.close()

    grant, pending, again, listed, revoked, after, empty = anyio.run(main)
    assert (grant["access"], pending["verifier"], again) == ("tok-alice-1", "v-123", None)
    assert [(g["subject"], g["source"]) for g in listed] == [("alice", "mcps.tickets")]
    assert revoked == [{"issuer": "https://idp", "subject": "alice", "source": "mcps.tickets"}]
    assert (after, empty) == (None, [])
    raw = sync_redis.Redis.from_url(redis_url)
    assert [key.decode() for key in raw.keys("*")] == [f"tc:credentials:grant:{alice.key}:mcps.tickets"]
    assert b"tok-alice-2" not in raw.get(f"tc:credentials:grant:{alice.key}:mcps.tickets")


@pytest.mark.slow
def test_toolcrib_credentials_lists_and_revokes_what_people_granted_on_the_running_server(
        tmp_path: Path, issuer: Issuer) -> None:
    """A real ``toolcrib serve --http``: alice grants access through its /oauth/callback; ``toolcrib credentials``
    lists her grant (never a token), ``revoke`` takes it away, and her next call asks her again."""
    import re
    import socket
    import subprocess
    import sys

    from serving import start_http, subprocess_env

    issuer.clients["toolcrib-pets"] = ("pets-secret", {})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    api = PetApi(issuer)
    with serve(document(), [("/pet/<int:petId>", ["GET"], api.pet)], prefix="/v2", validate=False) as running:
        consent_host(tmp_path, issuer, running.base_url, '\n[operator]\ntoken_env = "TOK_OPS"\n')
        config = tmp_path / "toolcrib.toml"
        config.write_text(config.read_text().replace(f'redirect_uri = "{RESOURCE}/oauth/callback"',
                                                     f'redirect_uri = "{base}/oauth/callback"'))
        env = {**CONSENTING, "TOK_OPS": "o" * 32}
        proc, served, _ = start_http(config, "--port", str(port), "--stateless", env=env, said=None)
        assert served == base

        def credentials(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "toolcrib.cli", "credentials", "--config", str(config),
                                   "--url", base, *args], capture_output=True, text=True, timeout=60,
                                  env=subprocess_env(**env))

        alice = issuer.sign(ALICE)

        def ask() -> str:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "pets__getPetById", "arguments": {"petId": 1}}}
            answer = httpx2.post(f"{base}/agents/reader/mcp", json=body, timeout=30,
                                 headers={**HEADERS, "Authorization": f"Bearer {alice}"})
            data = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
            message = json.loads(data[-1] if data else answer.text)
            assert "result" in message, (answer.status_code, message)
            return text_of(message["result"])

        try:
            url = re.search(r"open (\S+) in a browser", ask()).group(1)  # type: ignore[union-attr]
            landed = httpx2.get(browse(url, issuer, "alice@pets"), timeout=30)
            answered = ask()
            listed = credentials()
            listed_json = credentials("--json")
            revoked = credentials("revoke", "--subject", "alice", "--source", "openapi.pets")
            after = credentials()
            asked_again = ask()
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    assert landed.status_code == 200 and json.loads(answered)["name"] == "pet of alice@pets"
    assert listed.returncode == 0 and re.fullmatch(
        rf"alice \(of {re.escape(issuer.url)}\) at openapi\.pets, expires \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n",
        listed.stdout), listed
    assert [(g["subject"], g["source"]) for g in json.loads(listed_json.stdout)] == [("alice", "openapi.pets")]
    assert "eyJ" not in listed_json.stdout  # never a token
    assert (revoked.returncode, revoked.stdout) == (0, f"revoked: alice (of {issuer.url}) at openapi.pets\n")
    assert (after.returncode, after.stdout) == (0, "no grant is kept\n")
    assert asked_again.startswith("OpenAPI source 'pets' needs you to sign in and grant toolcrib access: open ")


def test_a_consent_that_cannot_work_is_a_config_error_naming_its_key(tmp_path: Path, issuer: Issuer) -> None:
    from toolcrib.config import load_config
    from toolcrib.errors import ConfigError

    consent = ('[mcps.tickets.consent]\nauthorization_endpoint = "http://idp.example/authorize"\n'
               'token_endpoint = "https://idp.example/token"\nclient_id = "tc"\n'
               'redirect_uri = "https://tools.example/callback"\n')
    config = tmp_path / "toolcrib.toml"
    config.write_text('[mcps.tickets]\nurl = "https://tickets.example/mcp"\nexchange = { audience = "t" }\n'
                      + consent)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert [(p.where.split(": ", 1)[1], p.message) for p in info.value.problems] == [
        ("mcps.tickets.exchange", "a token exchange needs [oauth] with [oauth.client] (toolcrib's client at the "
                                  "issuer, which exchanges the caller's token)"),
        ("mcps.tickets.consent", "give exchange or consent, not both: a call goes with one token"),
        ("mcps.tickets.consent", "each person's own grant needs [oauth]: the people who sign in there are whom "
                                 "grants are kept for"),
        ("mcps.tickets.consent", "each person's own grant needs [credentials] (the key grants are kept under)"),
        ("mcps.tickets.consent.authorization_endpoint", "expected an https:// URL (http:// only on this machine: "
                                                        "127.0.0.1, [::1] or localhost), got "
                                                        "'http://idp.example/authorize'"),
        ("mcps.tickets.consent.redirect_uri", "expected toolcrib's /oauth/callback at the URL people's browsers "
                                              "reach it by, got 'https://tools.example/callback'")]


def test_a_credentials_key_that_is_no_key_fails_its_source_and_says_how_to_make_one(tmp_path: Path,
                                                                                   issuer: Issuer) -> None:
    host = consent_host(tmp_path, issuer, "http://127.0.0.1:9/v2")
    assert next(r for r in host.records if r.name == "pets").error is None
    from toolcrib.config import load_config

    config = tmp_path / "toolcrib.toml"
    for key in ("c2hvcnQ=", "not base64!"):
        record = next(r for r in opened_host(load_config(config), env={**CONSENTING, "CRED_KEY": key}).records
                      if r.name == "pets")
        assert (record.state, record.error) == ("failed", (
            "credentials.key is not 32 bytes in base64 (make one with: python -c \"import os, base64; "
            "print(base64.b64encode(os.urandom(32)).decode())\")"))


# -- sub-agents: who acts, and narrower scopes -----------------------------------------------------------------


def test_a_sub_agents_calls_name_the_agents_that_act_and_carry_only_the_scopes_each_allows(
        tmp_path: Path, issuer: Issuer) -> None:
    """With an actor key, each exchange carries an actor token toolcrib signs: the issuer (which trusts its public
    half) makes the agents the exchanged token's act chain, the one that calls outermost. Each agent of the chain
    with upstream_scopes for the source narrows what is asked; one that leaves nothing is an error naming it. The
    model cannot run here: a scripted one drives the sub-agent."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from models import ScriptedModel, text, use
    from toolcrib.config import load_config
    from toolcrib.mcp.oauth import Identity

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    issuer.trusted_actors[RESOURCE] = key.public_key()
    api = PetApi(issuer)
    (tmp_path / "petstore.json").write_text(json.dumps(document()))
    with serve(document(), [("/pet/<int:petId>", ["GET"], api.pet)], prefix="/v2", validate=False) as running:
        config = tmp_path / "toolcrib.toml"
        config.write_text(oauth(issuer).replace('secret = "${GW_SECRET}"',
                                                'secret = "${GW_SECRET}"\nactor_key = "${ACTOR_KEY}"') + f"""
[openapi.pets]
document = "petstore.json"
base_url = "{running.base_url}"
operations = ["getPetById"]
exchange = {{ audience = "{PETS}", scopes = ["pets:read", "pets:write"] }}

[agents.lead.permissions]
plugins = {{ allow = ["pets"] }}
tools = {{ allow = ["pets__getPetById", "toolcrib__run_agent"] }}
subagents = {{ allow = ["calc", "auditor"] }}

[agents.calc]
prompt = "You are calc."
upstream_scopes = {{ pets = ["pets:read"] }}
[agents.calc.permissions]
plugins = {{ allow = ["pets"] }}
tools = {{ allow = ["pets__getPetById"] }}

[agents.auditor]
upstream_scopes = {{ pets = ["pets:admin"] }}
[agents.auditor.permissions]
plugins = {{ allow = ["pets"] }}
tools = {{ allow = ["pets__getPetById"] }}
""")
        host = opened_host(load_config(config), env={**SECRET, "ACTOR_KEY": pem})

        class Alice(ScriptedModel):
            principal = Identity(kind="oauth", subject="alice", issuer=issuer.url, token=issuer.sign(ALICE))

        async def main() -> list[Any]:
            direct = await host.view("lead").call("pets__getPetById", {"petId": 1}, channel=Alice())
            model = Alice({"role": "assistant", "model": "s", "content": [use("pets__getPetById", {"petId": 2})]},
                          text("Pet 2 is here."))
            delegated = await host.view("lead").call("toolcrib__run_agent", {"agent": "calc", "task": "Find pet 2."},
                                                     channel=model)
            refused = await host.view("auditor").call("pets__getPetById", {"petId": 3}, channel=Alice())
            return [direct, delegated, model.requests[-1]["messages"][-1]["content"][0], refused]

        direct, delegated, tool_result, refused = anyio.run(main)
    assert (direct.is_error, delegated.is_error, delegated.text) == (False, False, "Pet 2 is here.")
    assert json.loads(tool_result["content"][0]["text"])["name"] == "pet of alice"
    claims = [seen["claims"] for seen in api.seen]
    assert [(c["sub"], c["act"], c["scope"]) for c in claims] == [
        ("alice", {"sub": "agent:lead"}, "pets:read pets:write"),
        ("alice", {"sub": "agent:calc", "act": {"sub": "agent:lead"}}, "pets:read")]
    assert (refused.is_error, refused.text) == (True, (
        "OpenAPI source 'pets' cannot be called by agent 'auditor': none of the scopes asked (pets:read pets:write) "
        "is in its upstream_scopes for it"))
    assert [g.get("actor_token_type") for g in issuer.granted] == ["urn:ietf:params:oauth:token-type:jwt"] * 2


def test_an_actor_key_that_is_not_set_or_is_no_key_fails_the_source_and_says_why(tmp_path: Path,
                                                                                 issuer: Issuer) -> None:
    from toolcrib.config import load_config

    (tmp_path / "petstore.json").write_text(json.dumps(document()))
    config = tmp_path / "toolcrib.toml"
    config.write_text(oauth(issuer).replace('secret = "${GW_SECRET}"',
                                            'secret = "${GW_SECRET}"\nactor_key = "${ACTOR_KEY}"') + f"""
[openapi.pets]
document = "petstore.json"
base_url = "http://127.0.0.1:9/v2"
exchange = {{ audience = "{PETS}" }}
""")
    errors = []
    for env in ({}, {"ACTOR_KEY": "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"}):
        record = next(r for r in opened_host(load_config(config), env={**SECRET, **env}).records if r.name == "pets")
        errors.append((record.state, record.error))
    assert errors[0] == ("failed", "oauth.client.actor_key names ${ACTOR_KEY}, which is not set")
    assert errors[1][0] == "failed" and errors[1][1].startswith(
        "oauth.client.actor_key is not a PEM private key without a password (")


def test_on_a_2025_11_25_session_the_page_to_grant_access_at_is_the_protocols_minus_32042(
        tmp_path: Path, issuer: Issuer) -> None:
    """The SDK's own client, on a handshake-era session over real HTTP (toolcrib's app under uvicorn on a thread),
    declaring it can send its user to pages: the first call is refused with -32042 naming the page; a client
    that cannot gets the error result with the address instead."""
    import threading
    import time

    import mcp_types as types
    import uvicorn
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    issuer.clients["toolcrib-pets"] = ("pets-secret", {})
    host = consent_host(tmp_path, issuer, "http://127.0.0.1:9/v2")
    app = HttpApp(ServingState(host), HttpOptions(), env=STATIC)
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    while not running.started and thread.is_alive():
        time.sleep(0.02)
    url = f"http://127.0.0.1:{running.servers[0].sockets[0].getsockname()[1]}/agents/reader/mcp"
    alice = issuer.sign(ALICE)

    async def on_elicit(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="accept")

    async def main() -> list[Any]:
        found: list[Any] = []
        for callback in (on_elicit, None):
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice}"}, timeout=30) as http, \
                    Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None,
                           elicitation_callback=callback) as client:
                try:
                    result = await client.call_tool("pets__getPetById", {"petId": 1})
                    found.append((result.is_error, result.content[0].text))  # type: ignore[union-attr]
                except MCPError as exc:
                    found.append(exc.error)
        return found

    try:
        refused, said = anyio.run(main)
    finally:
        running.should_exit = True
        thread.join(10)
        host.close()
    assert (refused.code, refused.message) == (-32042, "OpenAPI source 'pets' needs you to sign in and grant "
                                                       "toolcrib access")
    [page] = refused.data["elicitations"]
    assert (page["mode"], page["message"]) == ("url", "OpenAPI source 'pets' needs you to sign in and grant "
                                                      "toolcrib access")
    assert page["url"].startswith(f"{issuer.url}/authorize?response_type=code&client_id=toolcrib-pets&")
    assert said[0] is True and said[1].startswith("OpenAPI source 'pets' needs you to sign in and grant toolcrib "
                                                  f"access: open {issuer.url}/authorize?")


def test_a_served_config_with_cluster_keeps_grants_on_its_shared_store(tmp_path: Path, redis_url: str,
                                                                       issuer: Issuer) -> None:
    """serve's state opens [cluster]'s store and keeps people's grants there (every replica finds them) while it
    serves; in memory again after."""
    from toolcrib import consent
    from toolcrib.consent import Person
    from toolcrib.mcp.state import serving_state

    config = tmp_path / "toolcrib.toml"
    config.write_text(f'[cluster]\nredis_url = "{redis_url}"\nkey_prefix = "served:"\n\n[credentials]\nkey = "{KEY}"\n')
    vault = consent.vault_for(KEY, "key")
    alice = Person("https://idp", "alice")

    async def main() -> tuple[Any, Any, Any]:
        async with serving_state(config) as state:
            shared = consent._SHARED[0] is state.store
            await vault.keep(alice, "mcps.tickets", {"access": "kept-on-redis"})
            assert state.store is not None and state.store.client is not None
            on_redis = await state.store.client.exists(f"served:credentials:grant:{alice.key}:mcps.tickets")
        return shared, on_redis, (list(consent._SHARED), await vault.grant(alice, "mcps.tickets"))

    shared, on_redis, after = anyio.run(main)
    assert (shared, on_redis, after) == (True, 1, ([], None))  # (in memory after: not the store's grant)


def test_a_browser_coming_back_is_answered_for_each_way_a_sign_in_can_end(tmp_path: Path, issuer: Issuer) -> None:
    """/oauth/callback: no state, an unknown one, a refusal at the server (the link used up by it), a code the
    token endpoint refuses, a source no longer configured so, and a grant. A confidential client's id and secret go
    form-encoded in Basic (a secret with ':' and '+'), with the resource and the PKCE verifier."""
    import re

    from toolcrib.config import load_config
    from toolcrib.host import Host

    issuer.clients["toolcrib-pets"] = ("pe:ts+secret", {})
    consent_host(tmp_path, issuer, "http://127.0.0.1:9/v2").close()  # (writes the config)
    host = opened_host(load_config(tmp_path / "toolcrib.toml"), env={**CONSENTING, "PETS_SECRET": "pe:ts+secret"})
    alice = issuer.sign(ALICE)

    async def main() -> dict[str, Any]:
        from toolcrib.mcp.http import HttpApp, HttpOptions
        from toolcrib.mcp.state import ServingState

        state = ServingState(host)
        app = HttpApp(state, HttpOptions(stateless=True), env=STATIC)
        got: dict[str, Any] = {}
        async with app.app.router.lifespan_context(app.app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url=RESOURCE, timeout=30) as client:

                async def page(path: str) -> tuple[int, str]:
                    answer = await client.get(path)
                    return answer.status_code, re.search(r"<p>(.*)</p>", answer.text).group(1)  # type: ignore[union-attr]

                async def link(token: str = alice) -> str:
                    said = text_of(await call(client, token, "pets__getPetById", {"petId": 1}))
                    return re.search(r"open (\S+) in a browser", said).group(1)  # type: ignore[union-attr]

                got["no state"] = await page("/oauth/callback")
                got["unknown"] = await page("/oauth/callback?state=made-up&code=x")
                state_of = re.search(r"state=([^&]+)", await link()).group(1)  # type: ignore[union-attr]
                got["refused"] = await page(f"/oauth/callback?state={state_of}&error=access_denied")
                got["used up"] = await page(f"/oauth/callback?state={state_of}&code=x")
                state_of = re.search(r"state=([^&]+)", await link()).group(1)  # type: ignore[union-attr]
                got["bad code"] = await page(f"/oauth/callback?state={state_of}&code=not-a-code")
                back = browse(await link(), issuer, "alice@pets").removeprefix(RESOURCE)
                got["granted"] = await page(back)
                back = browse(await link(issuer.sign(BOB)), issuer, "bob@pets").removeprefix(RESOURCE)
                config = tmp_path / "toolcrib.toml"
                config.write_text(config.read_text().split("[openapi.pets.consent]")[0])
                state.host = Host(load_config(config), plugins={}, autoload=False, env={})
                got["gone"] = await page(back)
        host.close()
        return got

    got = anyio.run(main)
    unknown = ("This sign-in link is unknown, already used or expired (each works once, for ten minutes). Make the "
               "call again for a new one.")
    assert got["no state"] == got["unknown"] == got["used up"] == (400, unknown)
    assert got["refused"] == (400, "The sign-in at OpenAPI source &#x27;pets&#x27; was not completed "
                                   "(access_denied). Make the call again to retry.")
    assert got["bad code"] == (502, "The sign-in at OpenAPI source &#x27;pets&#x27; could not be completed: the "
                                    "token endpoint refused (400, invalid_grant: code, redirect_uri or verifier).")
    assert got["granted"][0] == 200
    assert got["gone"] == (400, "The source this sign-in was for is no longer called with each person&#x27;s grant.")
    [code] = [g for g in issuer.granted if g["grant_type"] == "authorization_code"]
    assert (code["redirect_uri"], code["resource"], "client_id" in code) == (
        f"{RESOURCE}/oauth/callback", PETS, False)  # (a confidential client: its id went in Basic, with its secret)


def test_a_grant_is_refreshed_only_within_its_margin_of_expiry(tmp_path: Path, issuer: Issuer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept while it has more than MARGIN (30 s) to live; refreshed once it has less."""
    from toolcrib import consent
    from toolcrib.consent import Person

    issuer.clients["toolcrib-pets"] = ("pets-secret", {})
    consent_host(tmp_path, issuer, "http://127.0.0.1:9/v2").close()
    acting = consent._CONSENTING["openapi.pets"]
    alice = Person(issuer.url, "alice")
    start = consent.time.time()

    async def main() -> list[str | None]:
        await acting.vault.keep(alice, "openapi.pets", {"access": "kept", "refresh": "made-up", "expires": start + 100})
        issuer.refresh_tokens["made-up"] = {"client": "toolcrib-pets", "sub": "alice@pets", "aud": PETS, "scope": ""}
        found = []
        principal = type("P", (), {"kind": "oauth", "issuer": issuer.url, "subject": "alice"})()
        for now in (start + 69.9, start + 70.1):
            monkeypatch.setattr(consent, "CLOCK", lambda now=now: now)
            found.append(await acting.bearer(principal))
        return found

    kept, renewed = anyio.run(main)
    assert kept == "kept" and renewed != "kept" and jwt.decode(renewed, options={"verify_signature": False})["sub"] \
        == "alice@pets"


def test_a_call_by_no_one_of_a_source_called_as_its_caller_is_an_error_naming_it(tmp_path: Path,
                                                                                 issuer: Issuer) -> None:
    """The Python API and the CLI carry no identity at all: no token to exchange."""
    host = pets_host(tmp_path, issuer, "http://127.0.0.1:9/v2", f'audience = "{PETS}"')

    async def main() -> Any:
        return await host.view("reader").call("pets__getPetById", {"petId": 1})

    result = anyio.run(main)
    assert (result.is_error, result.text) == (True, (
        "OpenAPI source 'pets' is called as its caller (token exchange), and this call carries no OAuth access "
        "token to exchange: only a client signed in through [oauth] can call it"))


def test_a_token_endpoint_that_redirects_is_not_followed_with_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A redirect (to anywhere) is an answer with no token, never a second request carrying the subject token and
    the client secret; and no more than MAX_KEPT tokens are kept, the oldest out first."""
    from werkzeug.wrappers import Response

    from toolcrib import delegation
    from toolcrib.consent import Consenting, Vault
    from toolcrib.delegation import ExchangeFailed, Exchanger
    from toolcrib.delegation_settings import ConsentConfig, ExchangeConfig

    hits: list[str] = []

    def moved(request: Any) -> Any:
        hits.append(request.path)
        return Response(b"", 307, headers={"Location": "/elsewhere"})

    def elsewhere(request: Any) -> Any:
        hits.append(request.path)
        return Response(json.dumps({"access_token": "t", "token_type": "Bearer"}), 200,
                        content_type="application/json")

    def token(request: Any) -> Any:
        hits.append(request.form["subject_token"])
        return Response(json.dumps({"access_token": f"for-{request.form['subject_token']}", "token_type": "Bearer"}),
                        200, content_type="application/json")

    routes = [("/moved", ["POST"], moved), ("/elsewhere", ["POST"], elsewhere), ("/token", ["POST"], token)]
    with serve({"openapi": "3.0.0"}, routes, validate=False) as endpoint:
        with pytest.raises(ExchangeFailed) as info:
            Exchanger(f"{endpoint.base_url}/moved", "gw", "s").token("t", ExchangeConfig(audience="api"))
        assert (str(info.value), hits) == ("the token endpoint answered 307 with no JSON object", ["/moved"])
        consenting = Consenting(ConsentConfig(authorization_endpoint="https://a", client_id="c", client_secret="s",
                                              token_endpoint=f"{endpoint.base_url}/moved",
                                              redirect_uri="https://t/oauth/callback"),
                                "s", Vault(bytes(32)), "upstream server 'x'", "mcps.x")
        with pytest.raises(ExchangeFailed) as info:
            anyio.run(consenting._token, {"grant_type": "refresh_token", "refresh_token": "r"})
        assert (str(info.value), hits) == ("the token endpoint answered 307 with no JSON object", ["/moved"] * 2)
        monkeypatch.setattr(delegation, "MAX_KEPT", 2)
        exchanger = Exchanger(f"{endpoint.base_url}/token", "gw", "s")
        got = [exchanger.token(subject, ExchangeConfig(audience="api")) for subject in ("a", "b", "c", "b", "a")]
    assert got == ["for-a", "for-b", "for-c", "for-b", "for-a"]
    assert hits[2:] == ["a", "b", "c", "a"]  # b was still kept; a, the oldest, was not


def test_in_memory_authorizations_under_way_are_bounded_and_grants_are_never_let_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that calls on and on makes an authorization each time: beyond MAX_KEPT records the oldest under way
    go (a grant never does), so memory stays bounded."""
    from toolcrib import consent
    from toolcrib.consent import Person, Vault

    monkeypatch.setattr(consent, "MAX_KEPT", 3)
    vault = Vault(bytes(32))
    alice = Person("https://idp", "alice")

    async def main() -> tuple[Any, list[Any]]:
        await vault.keep(alice, "mcps.tickets", {"access": "a"})
        for n in range(5):
            await vault.hold(f"state-{n}", {"n": n})
        return await vault.grant(alice, "mcps.tickets"), [await vault.take(f"state-{n}") for n in range(5)]

    grant, pending = anyio.run(main)
    assert grant is not None and grant["access"] == "a"
    assert pending == [None, None, None, {"n": 3}, {"n": 4}]


@pytest.mark.parametrize(("curve", "algorithm"), [(None, "RS256"), ("SECP256R1", "ES256"), ("SECP384R1", "ES384"),
                                                  ("SECP521R1", "ES512")])
def test_an_actor_token_names_the_chain_for_the_token_endpoint_alone_for_a_minute(curve: str | None,
                                                                                  algorithm: str) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    from toolcrib.delegation import ActorSigner
    from toolcrib.errors import ToolError

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if curve is None else \
        ec.generate_private_key(getattr(ec, curve)())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    signer = ActorSigner.of(pem, "https://tools.example", "https://idp.example/token")
    token = signer.sign(("lead", "planner", "calc"))
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    claims = jwt.decode(token, key.public_key(), algorithms=[algorithm], audience="https://idp.example/token",
                        issuer="https://tools.example")
    assert (claims["sub"], claims["act"]) == ("agent:calc", {"sub": "agent:planner", "act": {"sub": "agent:lead"}})
    assert claims["exp"] - claims["iat"] == 60 and abs(claims["iat"] - time.time()) < 5
    assert len(claims["jti"]) == 32 and signer.sign(("lead",)) != signer.sign(("lead",))  # a fresh jti each
    assert "act" not in jwt.decode(signer.sign(("lead",)), options={"verify_signature": False})
    other = ed25519.Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM,
                                                              serialization.PrivateFormat.PKCS8,
                                                              serialization.NoEncryption())
    with pytest.raises(ToolError) as info:
        ActorSigner.of(other, "i", "a")
    assert str(info.value) == "oauth.client.actor_key is neither an RSA nor an EC key"


def test_upstream_scopes_narrow_down_the_chain_and_choose_where_the_table_asks_none() -> None:
    from toolcrib.delegation import Acting, Exchanger
    from toolcrib.delegation_settings import ExchangeConfig
    from toolcrib.errors import ToolError

    narrowing = {"lead": {"pets": ["read", "write"]}, "calc": {"pets": ["read"], "other": ["x"]},
                 "auditor": {"pets": ["admin"]}}
    exchanger = Exchanger("http://127.0.0.1:9/token", "gw", "s")
    asked = Acting(ExchangeConfig(audience="a", scopes=["read", "write", "delete"]), exchanger, "w", "pets", narrowing)
    default = Acting(ExchangeConfig(audience="a"), exchanger, "w", "pets", narrowing)
    assert [asked.scopes(chain) for chain in ((), ("nobody",), ("lead",), ("lead", "calc"), ("calc", "lead"))] == [
        ("read", "write", "delete"), ("read", "write", "delete"), ("read", "write"), ("read",), ("read",)]
    assert [default.scopes(chain) for chain in ((), ("lead",), ("lead", "calc"))] == [(), ("read", "write"),
                                                                                     ("read",)]
    with pytest.raises(ToolError) as info:
        default.scopes(("lead", "auditor"))
    assert str(info.value) == ("w cannot be called by agent 'auditor': none of the scopes asked (read write) is in "
                               "its upstream_scopes for it")
