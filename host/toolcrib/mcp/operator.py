"""The operator endpoint of ``toolcrib serve --http`` (``[operator]``): where operators answer the approvals that
agents' ``approvals`` send them (``toolcrib.approvals``).

    GET  /operator/approvals                       the pending approvals (JSON), with the operator's token
    POST /operator/approvals/<id>                  {"decision": "approve" | "deny", "digest": ...}, with the token
    GET  /operator/approvals/<id>/<decision>?sig=  a signed one-time link (a webhook's): a page that asks to confirm
    POST /operator/approvals/<id>/<decision>       that page's form: answers, once

The JSON endpoints take only the operator's bearer token (never an agent's: serving refuses a config whose operator
token is an agent's) and only ``application/json`` bodies (a page on another site cannot send one); a link is its
own credential, bound to one call's digest and one decision, and only its page's form answers it (a chat app that
fetches the link to preview it answers nothing). Host and Origin are checked as for the agents' endpoints.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from toolcrib.approvals import ANSWERED, NOT_PENDING, Desk, DeskUnreachable, Pending
from toolcrib.config import OperatorConfig
from toolcrib.mcp.oauth import bearer_token

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 10.0  # seconds to deliver one webhook notification


class OperatorEndpoint:
    """The routes above, for one desk and one operator token."""

    def __init__(self, desk: Desk, config: OperatorConfig, token: str, guard: TransportSecurityMiddleware,
                 keep: Callable[[asyncio.Task[None]], None] | None = None,
                 identify: Callable[[str], Awaitable[str | None]] | None = None) -> None:
        self.desk = desk
        self.config = config
        self.token = token
        self._token = token.encode()
        self._guard = guard  # the agents' Host/Origin checks (TransportSecurityMiddleware)
        self._keep = keep  # holds a task sent on its way (ServingState.keep)
        self.identify = identify  # an OAuth access token -> who it is as the operator ([operator] identity)
        if config.webhook is not None:
            desk.notify.append(self._send_webhook)

    def routes(self) -> list[Route]:
        return [Route("/operator/credentials", endpoint=_reachable(self._grants), methods=["GET"]),
                Route("/operator/credentials/revoke", endpoint=_reachable(self._revoke), methods=["POST"]),
                Route("/operator/approvals", endpoint=_reachable(self._list), methods=["GET"]),
                Route("/operator/approvals/{id}", endpoint=_reachable(self._answer), methods=["POST"]),
                Route("/operator/approvals/{id}/{decision}", endpoint=_reachable(self._link), methods=["GET", "POST"])]

    # -- the token's endpoints -------------------------------------------------------------------------------

    async def who(self, token: str) -> str | None:
        """Who a token is, as the operator (``token $VARIABLE``, or an OAuth subject and client): the operator
        token, or an access token of ``[operator] identity``; None for anything else (an agent's token among
        them)."""
        if hmac.compare_digest(token.encode("latin-1", "replace"), self._token):
            return f"token ${self.config.token_env}"
        return await self.identify(token) if self.identify is not None and token else None

    async def _authorized(self, request: Request, is_post: bool = False) -> Response | None:
        """None when the request may go on (``request.state.by`` then says who it is); else the refusal."""
        refused: Response | None = await self._guard.validate_request(request, is_post=is_post)
        if refused is not None:
            return refused
        supplied = bearer_token(request.headers.get("authorization", ""))
        by = await self.who(supplied) if supplied is not None else None
        if by is None:
            return JSONResponse({"error": "invalid_token", "error_description": "this endpoint needs "
                                 "Authorization: Bearer <the operator token>"}, status_code=401,
                                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        request.state.by = f"the operator ({by})"
        return None

    async def _list(self, request: Request) -> Response:
        refused = await self._authorized(request)
        if refused is not None:
            return refused
        return JSONResponse({"approvals": [p.public() for p in await self.desk.pending()]})

    async def _grants(self, request: Request) -> Response:
        """The grants people gave sources (``toolcrib.consent``): whose, for which, until when; never a token."""
        refused = await self._authorized(request)
        if refused is not None:
            return refused
        from toolcrib.consent import current

        vault = current()
        return JSONResponse({"grants": await vault.grants() if vault is not None else []})

    async def _revoke(self, request: Request) -> Response:
        """Revoke grants: ``{"subject": ..., "source": ...}``, each a string or null (any); the grants revoked."""
        refused = await self._authorized(request, is_post=True)
        if refused is not None:
            return refused
        body = await _json_of(request)
        if not isinstance(body, dict) or set(body) - {"subject", "source"} or \
                not all(isinstance(body.get(k), str | None) for k in ("subject", "source")):
            return JSONResponse({"error": 'expected {"subject": "<a subject>" or null, "source": "<mcps.x or '
                                 'openapi.x>" or null}'}, status_code=400)
        from toolcrib.consent import current

        vault = current()
        revoked = await vault.forget(body.get("subject"), body.get("source")) if vault is not None else []
        for grant in revoked:
            log.info("%s revoked %s's grant to %s", request.state.by, grant["subject"], grant["source"])
        return JSONResponse({"revoked": revoked})

    async def _answer(self, request: Request) -> Response:
        refused = await self._authorized(request, is_post=True)
        if refused is not None:
            return refused
        body = await _json_of(request)
        decision = body.get("decision") if isinstance(body, dict) else None
        given = body.get("digest") if isinstance(body, dict) else None
        if decision not in ("approve", "deny") or not isinstance(given, str):
            return JSONResponse({"error": 'expected {"decision": "approve" or "deny", "digest": "<the digest the '
                                 'pending approval shows>"}'}, status_code=400)
        outcome = await self.desk.answer(request.path_params["id"], decision == "approve", given, request.state.by)
        if outcome != ANSWERED:
            return JSONResponse({"error": outcome}, status_code=404 if outcome == NOT_PENDING else 409)
        return JSONResponse({"status": "approved" if decision == "approve" else "denied"})

    # -- signed links --------------------------------------------------------------------------------------------

    async def _link(self, request: Request) -> Response:
        refused: Response | None = await self._guard.validate_request(request)
        if refused is not None:
            return refused
        approval_id, decision = request.path_params["id"], request.path_params["decision"]
        if request.method == "GET":
            signature = request.query_params.get("sig", "")
        else:
            form = await small_form(request)
            if form is None:
                return _page("Refused", "<p>Expected the page's own form.</p>", 400)
            signature = form.get("sig", "")
        pending = await self.desk.check_link(approval_id, decision, signature)
        if pending is None:
            return _page("Nothing to answer", "<p>This link answers nothing: the approval was answered, it expired, "
                         "its call ended, or the link is not valid.</p>", 404)
        if request.method == "GET":  # a page that asks: fetching a link (a chat app's preview) answers nothing
            verb = "Approve" if decision == "approve" else "Deny"
            return _page(f"{verb} this call?", _describe(pending) +
                         f'<form method="post"><input type="hidden" name="sig" value="{html.escape(signature)}">'
                         f'<button type="submit">{verb}</button></form>')
        outcome = await self.desk.answer(approval_id, decision == "approve", pending.digest,
                                         "the operator (webhook link)")
        if outcome != ANSWERED:
            return _page("Nothing to answer", f"<p>{html.escape(outcome)}.</p>", 404)
        done = "approved" if decision == "approve" else "denied"
        return _page(f"Call {done}", f"<p>{html.escape(pending.tool)} for agent {html.escape(pending.agent)} is "
                     f"{done}.</p>")

    def links(self, pending: Pending) -> dict[str, str] | None:
        """The approve and deny links of a pending approval, where ``[operator] url`` says where operators reach
        the server."""
        base = self.config.url
        if base is None:
            return None
        base = base.rstrip("/")
        return {f"{decision}_url": f"{base}/operator/approvals/{pending.id}/{decision}?sig="
                f"{self.desk.signature(pending, decision)}" for decision in ("approve", "deny")}

    async def _send_webhook(self, pending: Pending) -> None:
        """Tell the webhook of a pending approval, on a task of its own (the call's wait does not wait for it)."""
        task = asyncio.get_running_loop().create_task(self._post(pending))
        if self._keep is not None:
            self._keep(task)

    async def _post(self, pending: Pending) -> None:
        assert self.config.webhook is not None
        body = {"event": "approval_pending", **pending.public(), **(self.links(pending) or {})}
        try:
            async with httpx2.AsyncClient(timeout=WEBHOOK_TIMEOUT, follow_redirects=False) as client:
                response = await client.post(self.config.webhook, json=body)
            if response.status_code >= 300:
                log.warning("the approvals webhook answered %d for approval %s", response.status_code, pending.id)
        except httpx2.HTTPError as exc:
            log.warning("the approvals webhook could not be told of approval %s: %s", pending.id, exc)


def _reachable(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint``, answering 503 while the shared store of pending approvals does not answer."""
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except DeskUnreachable:
            return JSONResponse({"error": "the shared store of pending approvals is unreachable; try again "
                                 "shortly"}, status_code=503)

    return guarded


MAX_FORM_BYTES = 4096  # a form anyone may post (a link's, the console's sign-in) is this small, or refused


async def capped_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it is past ``limit`` bytes (read no further) or the client has gone (a body
    that did not come whole within ``toolcrib.mcp.http.BODY_SECONDS`` reads as that)."""
    from starlette.requests import ClientDisconnect

    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return None
    except ClientDisconnect:
        return None
    return bytes(body)


async def small_form(request: Request) -> dict[str, str] | None:
    """A urlencoded form of at most ``MAX_FORM_BYTES`` (first value of each field), or None for anything else:
    forms that anyone may post are read without spooling uploads or reading a large body."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return None
    body = await capped_body(request, MAX_FORM_BYTES)
    if body is None:
        return None
    try:
        fields = urllib.parse.parse_qs(body.decode(), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items()}


def _describe(pending: Pending) -> str:
    """The call a link answers, as the operator is shown it: escaped, every character that would not show as
    itself marked (``toolcrib.names.shown``)."""
    from toolcrib.approvals import who
    from toolcrib.names import shown

    expires = pending.public()["expires"]
    rows = [("Agent", pending.agent), ("Who", who(pending.principal)),
            ("Tool", pending.tool), ("Arguments", json.dumps(pending.arguments, indent=2, ensure_ascii=False)),
            ("Asked by", pending.rule), ("Call", pending.call_id or "-"), ("Expires", f"{expires[11:19]} UTC")]
    cells = "".join(f"<tr><th>{name}</th><td><pre>{html.escape(shown(value))}</pre></td></tr>" for name, value in rows)
    return f"<table>{cells}</table>"


# The link's page, styled as the console is (its own style, inline: the endpoint serves no files; allowed by its
# hash, so the Content-Security-Policy still allows no other style and no script).
_STYLE = ("body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24}"
          "h1{margin:0;padding:.6em 1.2em;background:#22303c;color:#fff;font-size:1.3em}"
          "table,p,form{margin:1em 1.2em}table{border-collapse:collapse;display:block;max-width:100%;overflow-x:auto}"
          "th,td{border:1px solid #d0d7de;padding:.3em .6em;text-align:left;vertical-align:top;overflow-wrap:anywhere}"
          "th{background:#f3f5f7}pre{margin:0;white-space:pre-wrap}"
          "button{font-size:1em;padding:.4em 1.2em;color:#fff;background:#22303c;border:0;border-radius:3px}")
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
                        '</title><meta name="referrer" content="same-origin"><meta name="viewport" '
                        f'content="width=device-width, initial-scale=1"><style>{_STYLE}</style></head>'
                        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>", status_code=status,
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; "
                                                            "form-action 'self'"})


async def _json_of(request: Request) -> Any:
    """A request's JSON body (at most ``MAX_FORM_BYTES``), or None for one that is not JSON."""
    data = await capped_body(request, MAX_FORM_BYTES)
    try:
        return json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None


__all__ = ["MAX_FORM_BYTES", "OperatorEndpoint", "small_form"]
