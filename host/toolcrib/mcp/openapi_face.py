"""Each agent's view as an OpenAPI 3.1 tool server (``toolcrib serve --http --openapi``), for clients that call tools
over plain HTTP rather than MCP (Open WebUI's tool servers, as mcpo serves them; any client generated from the
document):

    GET  /agents/<agent>/openapi.json     the agent's listed tools, one POST operation each
    POST /agents/<agent>/tools/<tool>     call one: the JSON body is its arguments

Behind the agent's own tokens (or OAuth identity), as its MCP endpoint is; through the same call pipeline, limits
and audit. The answer is MCP's ``CallToolResult`` as JSON (``content``, ``structuredContent`` where the tool
declares an output schema, ``isError``): 200, or 400 for an error result (413 for a body past 4 MiB). A tool the
agent does not see answers as a path that does not exist: 404 ``Not Found``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from toolcrib.errors import UnknownToolError

if TYPE_CHECKING:
    from toolcrib.mcp.http import HttpApp
    from toolcrib.view import AgentView

MAX_BODY_BYTES = 4 * 1024 * 1024  # as an MCP request's
_CONTENT = {"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}},
                                       "required": ["type"]}}


def routes(app: HttpApp) -> list[Route]:
    face = _Face(app)
    return [Route("/agents/{agent}/openapi.json", endpoint=face.document, methods=["GET"]),
            Route("/agents/{agent}/tools/{tool}", endpoint=face.call, methods=["POST"])]


def _not_found() -> Response:
    """What Starlette answers for a path no route matches."""
    return PlainTextResponse("Not Found", status_code=404)


class _Channel:
    """The call's client as the pipeline sees it: who is calling (for the audit); no progress, no questions."""

    def __init__(self, identity: Any) -> None:
        self._identity = identity

    @property
    def identity(self) -> dict[str, str] | None:
        found: dict[str, str] | None = self._identity.record() if self._identity is not None else None
        return found

    @property
    def principal(self) -> Any:
        return self._identity

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        return None

    async def log(self, level: str, message: str, logger: str | None) -> None:
        return None


class _Face:
    def __init__(self, app: HttpApp) -> None:
        self.app = app

    async def _view(self, request: Request, post: bool = False) -> tuple[AgentView, Any] | Response:
        refused = await self.app.origin_guard.validate_request(request, is_post=post)
        if refused is not None:
            return refused
        found = await self.app.authenticate(request.scope)
        if isinstance(found, Response):
            return found
        endpoint, identity = found
        lacking = identity.lacking if identity.kind == "oauth" else frozenset()
        return self.app.state.view(endpoint.agent, lacking), identity

    async def document(self, request: Request) -> Response:
        found = await self._view(request)
        if isinstance(found, Response):
            return found
        view, _ = found
        return JSONResponse(document(view))

    async def call(self, request: Request) -> Response:
        # a body must say it is JSON; a call with none (a tool that takes no arguments) has no Content-Type to say
        sends = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
        found = await self._view(request, post=sends)
        if isinstance(found, Response):
            return found
        view, identity = found
        name = request.path_params["tool"]
        if view.lookup(name) is None:
            return _not_found()
        try:
            body = await _body(request)
        except _TooLarge:
            return JSONResponse(_error(f"the request body is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB"),
                                status_code=413)
        if not isinstance(body, dict):
            return JSONResponse(_error("the request body must be a JSON object: the tool's arguments, by name"),
                                status_code=400)
        try:
            result = await view.call(name, body, channel=_Channel(identity))
        except UnknownToolError:  # gone meanwhile (a reload)
            return _not_found()
        return JSONResponse(result.to_wire(), status_code=400 if result.is_error else 200)


class _TooLarge(Exception):
    pass


async def _body(request: Request) -> Any:
    """The JSON body (``{}`` for none), None for one that is not JSON; ``_TooLarge`` past ``MAX_BODY_BYTES``."""
    from toolcrib.mcp.operator import capped_body

    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY_BYTES:
        raise _TooLarge
    data = await capped_body(request, MAX_BODY_BYTES)
    if data is None:
        raise _TooLarge
    try:
        return json.loads(data) if data.strip() else {}
    except (ValueError, RecursionError):  # nested past what Python parses: as bad as any other body
        return None


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def document(view: AgentView) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``view``'s listed tools (a recursive model's definitions as components)."""
    from toolcrib import __version__

    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for tool in view.listed_tools:
        name = tool["name"]
        result: dict[str, Any] = {"type": "object", "properties": {"content": _CONTENT, "isError": {"type": "boolean"}},
                                  "required": ["content", "isError"]}
        if "outputSchema" in tool:
            result["properties"]["structuredContent"] = _components(tool["outputSchema"], f"{name}.output", components)
        arguments = tool["inputSchema"]
        operation: dict[str, Any] = {
            "operationId": name,
            "summary": tool.get("title") or name,
            "description": tool["description"],
            "responses": {"200": {"description": "The tool's result", "content": {"application/json": {
                "schema": result}}}, "400": {"description": "An error result (isError), or a body that is not the "
                                             "tool's arguments", "content": {"application/json": {"schema": result}}}},
        }
        if arguments.get("properties") or arguments.get("additionalProperties", True) is not False:
            # a body only where the tool takes arguments (a client such as Open WebUI's sends none for a tool that
            # takes none, and refuses to call an operation that declares one), required only where one is
            operation["requestBody"] = {"required": bool(arguments.get("required")), "content": {
                "application/json": {"schema": _components(arguments, f"{name}.input", components)}}}
        if isinstance(tool.get("annotations"), dict):
            operation["x-mcp-annotations"] = tool["annotations"]
        paths[f"/tools/{name}"] = {"post": operation}
    out: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": f"toolcrib: agent {view.agent}", "version": __version__,
                 "description": f"The tools agent {view.agent!r} sees, served by toolcrib; each call goes through "
                                "its permissions, limits and audit."},
        "servers": [{"url": f"/agents/{view.agent}"}],
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
    if components:
        out["components"]["schemas"] = components
    return out


def _components(schema: dict[str, Any], prefix: str, components: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the ``$defs`` it keeps (a recursive model's) moved to the document's components, each
    ``#/$defs/X`` then ``#/components/schemas/<prefix>.X`` (in a document, ``#`` is the document's root)."""
    defs = schema.get("$defs")
    if not isinstance(defs, dict) or not defs:
        return schema

    def moved(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            out = {k: moved(v) for k, v in node.items() if k != "$defs"}
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                out["$ref"] = f"#/components/schemas/{prefix}.{ref.removeprefix('#/$defs/')}"
            return out
        if isinstance(node, list):
            return [moved(v) for v in node]
        return node

    for key, value in defs.items():
        components[f"{prefix}.{key}"] = moved(value)
    result: dict[str, Any] = moved(schema)
    return result


__all__ = ["document", "routes"]
