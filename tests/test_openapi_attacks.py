"""What an agent, or an API that answers anything, tries through an OpenAPI source: the operator's credentials
coming back in any form, names the agent chooses, values a header cannot hold. A real local API on loopback."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from conftest import config_from
from openapi_api import opened_host, serve
from openapi_host import RULES, call
from toolcrib.host import Host

pytest.importorskip("openapi_core")

TOKEN, KEY, QUERY_KEY, TEAM = "tok/3+secret=Z", "k3y-ABCDEFG", "q-key/9 8", "team-secret-7"


def op(operation_id: str, media: str = "application/json", method: str = "get", **extra: Any) -> dict[str, Any]:
    return {method: {"operationId": operation_id, **extra, "responses": {"200": {"description": "echo", "content": {
        media: {"schema": {"type": "string", "format": "binary"} if "json" not in media else {}}}}}}}


ECHO = {
    "openapi": "3.0.3", "info": {"title": "Echo", "version": "1"},
    "paths": {
        "/json": op("json"), "/text": op("text", "text/plain"), "/image": op("image", "image/png"),
        "/blob": op("blob", "application/octet-stream"), "/denied": op("denied"), "/encoded": op("encoded"),
        "/trace": op("traced", method="trace"),
        "/named": op("named", parameters=[
            {"name": "q", "in": "query", "explode": True, "schema": {"type": "object"}},
            {"name": "c", "in": "cookie", "explode": True, "schema": {"type": "object"}},
            {"name": "h", "in": "header", "explode": True, "schema": {"type": "object"}},
            {"name": "X-Note", "in": "header", "schema": {"type": "string"}},
            {"name": "Host", "in": "header", "schema": {"type": "string"}},
            {"name": "Content-Length", "in": "header", "schema": {"type": "string"}}]),
    },
}


def echo_routes() -> list[tuple[str, list[str], Any]]:
    from werkzeug.wrappers import Response

    def said(request: Any) -> str:
        return " ".join([request.full_path, *(f"{k}: {v}" for k, v in request.headers.items())])

    def encoded(request: Any) -> Any:
        auth = request.headers["Authorization"]
        return Response(json.dumps({
            "b64": base64.b64encode(auth.encode()).decode(),
            "shifted": base64.b64encode(b"x" + TOKEN.encode()).decode(),
            "url": base64.urlsafe_b64encode(b"ab" + KEY.encode()).decode(), "lower": quote(QUERY_KEY, safe="").lower(),
            "escaped": json.dumps(TOKEN)[1:-1].replace("/", "\\/"), TEAM: "as a key"}), content_type="application/json")

    return [
        ("/json", ["GET"], lambda r: Response(json.dumps({"saw": said(r)}), content_type="application/json")),
        ("/text", ["GET"], lambda r: Response(said(r), content_type="text/plain")),
        ("/image", ["GET"], lambda r: Response(b"\x89PNG" + said(r).encode(), content_type="image/png")),
        ("/blob", ["GET"], lambda r: Response(b"\x00" + said(r).encode(), content_type="application/octet-stream")),
        ("/denied", ["GET"], lambda r: Response(f"token {TOKEN} is not valid", status=401)),
        ("/encoded", ["GET"], encoded),
        ("/trace", ["TRACE"], lambda r: Response(said(r), content_type="application/json")),
        ("/named", ["GET"], lambda r: Response(json.dumps({"saw": "ok"}), content_type="application/json")),
    ]


def echo_host(tmp_path: Path, base_url: str, rules: str = RULES) -> Host:
    (tmp_path / "echo.json").write_text(json.dumps(ECHO))
    config = (f'[openapi.echo]\ndocument = "echo.json"\nbase_url = "{base_url}"\nbearer = "${{T}}"\n'
              'api_key = { name = "key", in = "query", value = "${Q}" }\n'
              'headers = { X-Api-Key = "${K}", X-Team = "${TEAM}" }\n' + rules)
    return opened_host(config_from(config, tmp_path), env={
        "T": TOKEN, "K": KEY, "Q": QUERY_KEY, "TEAM": TEAM})


FORMS = [TOKEN, KEY, QUERY_KEY, TEAM, quote(TOKEN, safe=""), quote(QUERY_KEY, safe=""), quote(QUERY_KEY),
         quote(QUERY_KEY, safe="").lower(), "q-key%2F9+8", "3+secret"]


def leaks(result: dict[str, Any]) -> list[str]:
    """Every form of a credential found anywhere in ``result``: its JSON, and the bytes its base64 data carries."""
    texts = [json.dumps(result, ensure_ascii=False)]
    for block in result["content"]:
        for key in ("data",):
            if key in block:
                texts.append(base64.b64decode(block[key]).decode("latin-1"))
        if "resource" in block and "blob" in block["resource"]:
            texts.append(base64.b64decode(block["resource"]["blob"]).decode("latin-1"))
    return [form for form in FORMS for text in texts if form in text]


@pytest.fixture
def echo(tmp_path: Path) -> Any:
    with serve(ECHO, echo_routes(), validate=False) as api:
        yield api, echo_host(tmp_path, api.base_url)


def test_no_credential_comes_back_in_any_answer(echo: Any) -> None:
    api, host = echo
    for tool in ("json", "text", "image", "blob", "denied", "encoded"):
        result = call(host, f"echo__{tool}", {})
        assert leaks(result) == [], tool
        sent = api.seen[-1]["headers"]
        assert (sent["authorization"], sent["x-api-key"], sent["x-team"]) == (f"Bearer {TOKEN}", KEY, TEAM)
    text = call(host, "echo__text", {})["content"][0]["text"]
    assert text.startswith("/text?key=*** ") and "Authorization: ***" in text and "X-Team: ***" in text
    assert call(host, "echo__denied", {}) == {"content": [{"type": "text", "text": (
        "GET /denied answered HTTP 401 UNAUTHORIZED: token *** is not valid")}], "isError": True}
    blob = call(host, "echo__blob", {})["content"][0]["resource"]
    assert blob["uri"] == f"{api.base_url}/blob?key=***"
    assert base64.b64decode(blob["blob"]).startswith(b"\x00/blob?key=*** ")
    structured = call(host, "echo__encoded", {})["structuredContent"]  # base64 wherever the value starts in it
    assert structured == {"b64": "***", "shifted": "eH***", "url": "YWJ***w==", "lower": "***", "escaped": "***",
                          "***": "as a key"}


def test_trace_echoes_the_request_so_it_is_no_read(tmp_path: Path) -> None:
    with serve(ECHO, echo_routes(), validate=False) as api:
        host = echo_host(tmp_path, api.base_url, RULES.replace('allow = ["pets"]', 'allow = ["echo"]'))
        assert host.catalog.entries["echo__traced"].definition.annotations == {
            "readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}
        assert "echo__traced" not in [t.name for t in host.view("planner").tools]
        assert "echo__json" in [t.name for t in host.view("planner").tools]
        assert leaks(call(host, "echo__traced", {})) == []


@pytest.mark.parametrize(("arguments", "error"), [
    ({"h": {"Host": "internal"}}, None),  # a header object is one header: its keys are values
    ({"q": {"key": "mine"}}, "argument 'q' cannot set the query 'key': toolcrib sets it"),
    ({"q": {"KEY": "mine"}}, "argument 'q' cannot set the query 'KEY': toolcrib sets it"),
    ({"c": {"a;b": "1"}}, "argument 'c': 'a;b' cannot be the name of a cookie (letters, digits and "
                          "!#$%&'*+-.^_`|~ only)"),
    ({"c": {"a b": "1"}}, "argument 'c': 'a b' cannot be the name of a cookie (letters, digits and "
                          "!#$%&'*+-.^_`|~ only)"),
    ({"X-Note": "a\x00b"}, "argument 'X-Note' cannot hold the character U+0000: it is a header"),
    ({"X-Note": "a\x0bb"}, "argument 'X-Note' cannot hold the character U+000B: it is a header"),
    ({"X-Note": "a\u2028b"}, "argument 'X-Note' cannot hold the character U+2028: it is a header"),
    ({"X-Note": "a\x7fb"}, "argument 'X-Note' cannot hold the character U+007F: it is a header"),
    ({"X-Note": "a\r\nHost: evil"}, "argument 'X-Note' cannot hold a line break: it is a header"),
])
def test_names_come_from_the_document_and_values_stay_values(echo: Any, arguments: dict[str, Any],
                                                            error: str | None) -> None:
    api, host = echo
    before = len(api.seen)
    result = call(host, "echo__named", arguments)
    if error is not None:
        assert result == {"content": [{"type": "text", "text": error}], "isError": True}
        assert len(api.seen) == before  # nothing was sent
        return
    assert result["isError"] is False
    sent = api.seen[-1]
    assert (sent["headers"]["host"], sent["headers"]["h"]) == (api.base_url.split("//")[1], "Host=internal")


def test_framing_and_credential_headers_are_no_arguments(echo: Any) -> None:
    api, host = echo
    schema = host.catalog.entries["echo__named"].definition.input_schema
    assert sorted(schema["properties"]) == ["X-Note", "c", "h", "q"]  # not Host, not Content-Length
    call(host, "echo__named", {"q": {"page": "2", "x y": "z&w"}, "c": {"theme": "dark"}, "X-Note": "é"})
    sent = api.seen[-1]
    assert sent["query"] == "page=2&x+y=z%26w&key=q-key%2F9+8"
    # Latin-1, as HTTP/1.1 carries it
    assert (sent["headers"]["cookie"], sent["headers"]["x-note"]) == ("theme=dark", "é")


def test_a_fetched_document_does_not_choose_a_private_address_to_call(tmp_path: Path) -> None:
    """Without ``base_url``, a fetched document's server is called, but a private address only where the operator
    named it (the document URL's own host): a document cannot send calls, and the token, to another local port."""
    from werkzeug.wrappers import Response

    with serve(ECHO, echo_routes(), validate=False) as target:
        elsewhere = dict(ECHO, servers=[{"url": target.base_url}])
        here = dict(ECHO, servers=[{"url": "{origin}", "variables": {"origin": {"default": "http://ORIGIN"}}}])
        documents = {"elsewhere.json": elsewhere, "here.json": here}
        with serve(ECHO, [("/<name>", ["GET"], lambda request, name: Response(
                json.dumps(documents.get(name, {"saw": name})).replace("http://ORIGIN", origin[0]),
                content_type="application/json"))],
                validate=False) as source:
            origin = [source.base_url]
            config = (f'[openapi.echo]\ndocument_url = "{source.base_url}/elsewhere.json"\nbearer = "${{T}}"\n'
                      f'[openapi.same]\ndocument_url = "{source.base_url}/here.json"\n{RULES}')
            host = opened_host(config_from(config, tmp_path), env={"T": TOKEN})
            refused = call(host, "echo__json", {})
            assert refused == {"content": [{"type": "text", "text": (
                "GET /json: 127.0.0.1 resolves to a loopback address; calls from private networks are refused (an "
                "operator can allow them in [openapi.echo])")}], "isError": True}
            assert target.seen == []  # nothing reached it
            assert call(host, "same__json", {})["structuredContent"] == {"saw": "json"}  # the host the operator named


def bomb(levels: int) -> str:
    """A YAML document of a kilobyte whose aliases expand it ninefold at each level (9**levels nodes)."""
    lines = ["openapi: 3.0.3", "info: {title: Bomb, version: '1'}", "paths: {}",
             "x-a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"x-a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("text", "error"), [
    (bomb(10), "expands to more than 1,000,000 nodes through its aliases (an alias bomb?); it is not read"),
    ("openapi: 3.0.3\nx-loop: &l [*l]\n", "refers to itself through an alias, which no JSON value can"),
    ("openapi: 3.0.3\nx-a: &a " + "[" * 200 + "]" * 200 + "\nx-b: " + "[*a, " * 100 + "]" * 100 + "\n",
     "nests deeper than 256 levels"),
    ("openapi: 3.0.3\nx-deep: " + "[" * 5000 + "]" * 5000 + "\n", "is nested too deeply to be read"),
    ('{"openapi": "3.0.3", "x": ' + "[" * 200_000 + "]" * 200_000 + "}", "is nested too deeply to be read"),
])
def test_a_document_that_would_expand_without_bound_fails_its_source_alone(tmp_path: Path, text: str,
                                                                          error: str) -> None:
    (tmp_path / "bomb.yaml").write_text(text)
    (tmp_path / "fine.yaml").write_text(bomb(3))  # aliases that expand a little are fine
    config = (f'[openapi.bomb]\ndocument = "bomb.yaml"\nbase_url = "http://127.0.0.1:9"\n'
              f'[openapi.fine]\ndocument = "fine.yaml"\nbase_url = "http://127.0.0.1:9"\n{RULES}')
    host = opened_host(config_from(config, tmp_path), env={})
    records = {r.name: (r.state, r.error) for r in host.records if r.kind == "openapi"}
    assert records == {"bomb": ("failed", f"{tmp_path / 'bomb.yaml'} {error}"), "fine": ("loaded", None)}
