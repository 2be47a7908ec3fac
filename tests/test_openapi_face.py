"""Each agent's view as an OpenAPI tool server (``serve --http --openapi``), in-process through httpx's ASGI
transport: the document and every answer judged by openapi-core against the document itself, the same tokens as
the MCP endpoint, and a hidden tool answering exactly as a path that does not exist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2

from http_app import CONFIG, bearer, serving

JSON = {"Content-Type": "application/json"}
ENV = {"TOK_READER": "r" * 32, "TOK_WRITER": "w" * 32}


def judged(document: dict[str, Any], response: httpx2.Response) -> None:
    """openapi-core's verdict on ``response`` (and its request) against ``document``: raises if either is not
    what the document says."""
    from openapi_core import OpenAPI
    from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request, Response

    request = response.request
    environ = EnvironBuilder(method=request.method, base_url="http://127.0.0.1:8000", path=request.url.path,
                             headers=dict(request.headers), data=request.content).get_environ()
    judge = OpenAPI.from_dict(document)
    judge.validate_response(WerkzeugOpenAPIRequest(Request(environ)), WerkzeugOpenAPIResponse(
        Response(response.content, status=response.status_code, headers=dict(response.headers))))


def test_an_agent_s_document_lists_exactly_its_tools_with_the_schemas_mcp_serves() -> None:
    from openapi_core import OpenAPI

    async def main() -> tuple[Any, ...]:
        async with serving(ENV, openapi=True) as (app, client):
            reader = (await client.get("/agents/reader/openapi.json", headers=bearer("r" * 32))).json()
            writer = (await client.get("/agents/writer/openapi.json", headers=bearer("w" * 32))).json()
            listed = app.state.view("writer").listed_tools
            return reader, writer, {t["name"]: t["inputSchema"] for t in listed}

    reader, writer, schemas = anyio.run(main)
    OpenAPI.from_dict(reader)  # a valid OpenAPI 3.1 document (openapi-spec-validator, through openapi-core)
    assert (reader["openapi"], reader["servers"], list(reader["paths"])) == (
        "3.1.0", [{"url": "/agents/reader"}], ["/tools/files__read"])
    read = reader["paths"]["/tools/files__read"]["post"]
    assert (read["operationId"], read["description"], read["requestBody"]["content"]["application/json"]["schema"]) \
        == ("files__read", "Read a file.", schemas["files__read"])
    assert list(writer["paths"]) == ["/tools/files__read", "/tools/files__rm", "/tools/files__touch",
                                     "/tools/files__write"]  # in the order MCP lists them
    assert reader["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}


def test_a_call_goes_through_the_pipeline_and_its_answer_is_what_the_document_says(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    config = f'[host]\naudit_log = "{audit}"\n' + CONFIG

    async def main() -> list[tuple[int, Any]]:
        async with serving(ENV, openapi=True, config=config) as (_, client):
            document = (await client.get("/agents/reader/openapi.json", headers=bearer("r" * 32))).json()
            seen = []
            for body in ({"path": "notes.txt"}, {"path": 7}, {}):
                answer = await client.post("/agents/reader/tools/files__read", json=body,
                                           headers={**bearer("r" * 32), **JSON})
                judged(document, answer)
                seen.append((answer.status_code, answer.json()))
            not_json = await client.post("/agents/reader/tools/files__read", content=b"[1, 2",
                                         headers={**bearer("r" * 32), **JSON})
            judged(document, not_json)
            seen.append((not_json.status_code, not_json.json()))
            huge = await client.post("/agents/reader/tools/files__read", content=b'{"path": "' + b"x" * (5 << 20) +
                                     b'"}', headers={**bearer("r" * 32), **JSON})
            seen.append((huge.status_code, huge.json()))
            return seen

    ok, wrong_type, missing, not_json, huge = anyio.run(main)
    assert huge == (413, {"content": [{"type": "text", "text": "the request body is larger than 4 MiB"}],
                          "isError": True})
    assert ok == (200, {"content": [{"type": "text", "text": "contents of notes.txt"}], "isError": False})
    assert wrong_type == (400, {"content": [{"type": "text", "text": (
        "Invalid arguments for files__read:\n- path: Input should be a valid string (got 7)")}], "isError": True})
    assert missing == (400, {"content": [{"type": "text", "text": (
        "Invalid arguments for files__read:\n- path: required argument is missing")}], "isError": True})
    assert not_json == (400, {"content": [{"type": "text", "text": (
        "the request body must be a JSON object: the tool's arguments, by name")}], "isError": True})
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["agent"], r["tool"], r["identity"]) for r in records] == [
        ("reader", "files__read", {"kind": "token", "credential": "$TOK_READER"})] * 3


def test_a_hidden_tool_answers_as_a_path_that_does_not_exist_and_tokens_are_the_mcp_endpoint_s() -> None:
    def shown(response: httpx2.Response) -> tuple[int, bytes, str | None]:
        return response.status_code, response.content, response.headers.get("content-type")

    async def main() -> dict[str, Any]:
        async with serving(ENV, openapi=True) as (_, client):
            reader = {**bearer("r" * 32), **JSON}
            return {
                "hidden": shown(await client.post("/agents/reader/tools/files__write", json={}, headers=reader)),
                "unknown": shown(await client.post("/agents/reader/tools/files__nothing", json={}, headers=reader)),
                "nowhere": shown(await client.post("/agents/reader/elsewhere", json={}, headers=reader)),
                "no token": shown(await client.post("/agents/reader/tools/files__read", json={}, headers=JSON)),
                "mcp, no token": shown(await client.post("/agents/reader/mcp", json={}, headers=JSON)),
                "other's token": (await client.get("/agents/reader/openapi.json", headers=bearer("w" * 32))
                                  ).status_code,
            }

    seen = anyio.run(main)
    assert seen["hidden"] == seen["unknown"] == seen["nowhere"] == (404, b"Not Found", "text/plain; charset=utf-8")
    assert seen["no token"] == seen["mcp, no token"] and seen["no token"][0] == 401
    assert seen["other's token"] == 401


def test_without_openapi_no_document_is_served() -> None:
    async def main() -> int:
        async with serving() as (_, client):
            return (await client.get("/agents/reader/openapi.json", headers=bearer("r" * 32))).status_code

    assert anyio.run(main) == 404


def test_a_body_is_declared_only_where_a_tool_takes_arguments_and_required_only_where_one_is() -> None:
    """A client such as Open WebUI's sends no body to a tool that takes no arguments, and refuses to call an
    operation that declares one; mcpo declares none there."""
    import toolcrib
    from packs import FILES, TALK, Pack

    @toolcrib.tool(annotations={"readOnlyHint": True})
    def now() -> str:
        """The time."""
        return "noon"

    config = '[agents.a]\ntoken_env = "TOK_A"\n[agents.a.permissions]\nplugins = { allow = ["*"] }\n' \
             'tools = { allow = ["clock__now", "talk__chatty", "files__read"] }\n'

    async def main() -> tuple[dict[str, Any], httpx2.Response]:
        async with serving({"TOK_A": "a" * 32}, config, packs={"files": FILES, "clock": Pack(now), "talk": TALK},
                           openapi=True) as (_, client):
            document = (await client.get("/agents/a/openapi.json", headers=bearer("a" * 32))).json()
            called = await client.post("/agents/a/tools/clock__now", headers=bearer("a" * 32))  # no body
            judged(document, called)
            return document, called

    document, called = anyio.run(main)
    bodies = {path: operation["post"].get("requestBody", {}).get("required") for path, operation in
              document["paths"].items()}
    assert bodies == {"/tools/clock__now": None, "/tools/files__read": True, "/tools/talk__chatty": False}
    assert (called.status_code, called.json()) == (200, {"content": [{"type": "text", "text": "noon"}],
                                                         "isError": False})
