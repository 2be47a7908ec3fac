"""One agent's view as an MCP server (the SDK's low-level ``Server``), both protocol eras.

toolcrib's own pipeline does all the work: the SDK adds no second validation layer and, unless
``TOOLCRIB_MCP_TRACING=1``, no tracing middleware on the hot path. A hidden or unknown tool gets the protocol
error ``-32602 Unknown tool: <name>``, word for word the same for both; everything else is a result.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import warnings
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolcrib.calls import ApprovalPending
from toolcrib.errors import UnknownToolError
from toolcrib.serve.state import ServingState

log = logging.getLogger("toolcrib.serve")

TRACING_ENV = "TOOLCRIB_MCP_TRACING"
APPROVAL_KEY = "toolcrib_approval"
_SECRET = secrets.token_bytes(32)  # seals approval round-trips (2026-07-28) to the exact call they approve

_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)

INSTRUCTIONS = "Tools served by toolcrib. Each tool is named <namespace>__<tool>: its pack or server, then its name."


class _Channel:
    """Progress and log messages from a running handler to this request's client."""

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._ctx = ctx

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        await self._ctx.session.report_progress(progress, total, message)

    async def log(self, level: str, message: str, logger: str | None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging is deprecated as of 2026-07-28, yet clients still use it
            await self._ctx.session.send_log_message(level, message, logger,  # type: ignore[arg-type]
                                                     related_request_id=self._ctx.request_id)


def _seal(agent: str, name: str, arguments: Mapping[str, Any]) -> str:
    payload = json.dumps([agent, name, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hmac.new(_SECRET, payload.encode(), hashlib.sha256).hexdigest()


def build_server(state: ServingState, agent: str) -> Server[Any]:
    """The MCP server for ``agent``; it reads ``state``'s current host on every request, so reloads apply."""

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> Any:
        if params is not None and params.cursor is not None:
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor: this server returns one page")
        if ctx.protocol_version not in _MODERN:
            state.remember_session(agent, ctx.session)
        # Wire dicts, not models: the SDK validates the result once on its way out, never twice. The extra keys
        # are what 2026-07-28 requires (no caching: lists change on reload); the handshake era sieves them off.
        return {"tools": state.view(agent).mcp_tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        view = state.view(agent)
        arguments = params.arguments if params.arguments is not None else {}
        try:
            result = await view.call(params.name, arguments, approver=_approver(ctx, params, arguments),
                                     channel=_Channel(ctx))
        except UnknownToolError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except ApprovalPending as need:
            request = types.ElicitRequest(params=types.ElicitRequestFormParams(
                message=need.message,
                requested_schema={"type": "object", "properties": {}},
            ))
            return types.InputRequiredResult(input_requests={APPROVAL_KEY: request},
                                             request_state=_seal(agent, params.name, arguments))
        wire = result.to_wire()
        wire["resultType"] = "complete"
        return wire

    def _approver(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams,
                  arguments: Mapping[str, Any]) -> Any:
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return None
        if ctx.protocol_version in _MODERN:
            responses = params.input_responses or {}
            answer = responses.get(APPROVAL_KEY)

            async def modern(_agent: str, tool: str, args: Mapping[str, Any], message: str) -> bool | None:
                if answer is None:
                    raise ApprovalPending(message)
                if params.request_state is None or not hmac.compare_digest(
                        params.request_state, _seal(agent, params.name, arguments)):
                    return False  # an answer that was not given for exactly this call approves nothing
                return getattr(answer, "action", None) == "accept"

            return modern

        if not ctx.session.can_send_request:
            return None  # no back-channel (stateless HTTP): nothing can be asked

        async def legacy(_agent: str, tool: str, args: Mapping[str, Any], message: str) -> bool | None:
            result = await ctx.session.elicit_form(message, {"type": "object", "properties": {}},
                                                   related_request_id=ctx.request_id)
            return result.action == "accept"

        return legacy

    async def fast_list(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        """tools/list from the view's cached wire list, without the SDK validating 1000 tool objects again on
        every request (about a third of a large list's cost). Anything unusual goes the SDK's way."""
        if ctx.method != "tools/list" or (ctx.params and set(ctx.params) - {"_meta"}):
            return await call_next(ctx)
        modern = ctx.protocol_version in _MODERN
        if not modern:
            connection = getattr(ctx.session, "_connection", None)
            if connection is None or not connection.initialize_accepted:
                return await call_next(ctx)  # the SDK answers a request that came before the handshake
            state.remember_session(agent, ctx.session)
            return {"tools": state.view(agent).mcp_tools}
        return {"tools": state.view(agent).mcp_tools, "resultType": "complete", "ttlMs": 0,
                "cacheScope": "private", "_meta": {SERVER_INFO_META_KEY: server.server_info_stamp}}

    server: Server[Any] = Server(
        "toolcrib",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=lambda ctx, params: state.listener(agent)(ctx, params),
    )
    if os.environ.get(TRACING_ENV, "") in ("", "0"):
        server.middleware.clear()  # the SDK's OpenTelemetry middleware costs about a third of a call
    server.middleware.append(fast_list)
    return server


def _version() -> str:
    from toolcrib import __version__

    return __version__
