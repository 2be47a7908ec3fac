"""The operator's console (``[operator] console = true``): server-rendered pages at ``/console/`` of
``toolcrib serve --http``, for operators only. Who sees what and why, the sources and their state, the config
check's warnings, the live feed of decisions, and the pending approvals, which are the only thing it changes.

It opens with the operator's token (typed once into its login form; an agent's token never opens it), kept as a
signed, HttpOnly, SameSite=Strict cookie that holds no token. Every form carries a CSRF token tied to that cookie,
and Host and Origin are checked as for the agents' endpoints. Pages are Jinja2 templates with autoescaping (every
argument value, name and reason is escaped), and a Content-Security-Policy that allows only the console's own
script and style; the live parts read JSON and write text, never HTML.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import itertools
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from toolcrib.approvals import ANSWERED, Desk, DeskUnreachable, who
from toolcrib.audit import record as audit_record
from toolcrib.config import LoadedConfig
from toolcrib.errors import Problem
from toolcrib.mcp.operator import small_form
from toolcrib.permissions import permits

if TYPE_CHECKING:
    from toolcrib.host import Host

COOKIE = "toolcrib_console"
SESSION_SECONDS = 12 * 3600
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{24}")  # a session's random id (18 bytes), named in its cookie
FEED_KEPT = 200  # decisions the feed shows a page that opens
SHOWN = 500  # tools a page explains (each hidden one costs an explain): the first ones, by name
# (Referrer-Policy no-referrer would make the browser send "Origin: null" with the console's own form posts)
HEADERS = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
           "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                      "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"}


NEEDS_JINJA = ("console = true needs Jinja2, which renders the console's pages, and it is not installed: "
               "pip install 'toolcrib[console]'")

log = logging.getLogger("toolcrib.console")


def installed() -> bool:
    """Whether the console can render its pages (Jinja2 is an extra: ``toolcrib[console]``)."""
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return False
    return True


def probe(loaded: LoadedConfig) -> list[Problem]:
    """What ``toolcrib check`` says of the console: an error where the config asks for it and it cannot render."""
    operator = loaded.config.operator
    if operator is None or not operator.console or installed():
        return []
    return [Problem("error", f"{loaded.source}: operator.console", NEEDS_JINJA)]


def _note(record: Any) -> str:
    """What the sources page notes of a source, as ``toolcrib plugins`` does: why it failed, or what it said."""
    if not record.error:
        return ""
    return f"error: {record.error}" if record.state == "failed" else str(record.error)


class Feed:
    """The decisions of the serving process as they are made (``Pipeline.watch``), the last ``FEED_KEPT`` kept,
    for the console's pages that listen (server-sent events)."""

    def __init__(self) -> None:
        self.kept: collections.deque[dict[str, Any]] = collections.deque(maxlen=FEED_KEPT)
        self.running: dict[int, dict[str, Any]] = {}  # the calls running now, by key
        self._keys = itertools.count(1)
        self._listeners: set[MemoryObjectSendStream[dict[str, Any]]] = set()

    def __call__(self, item: Any) -> None:
        record = audit_record(item)
        self.kept.append(record)
        self._send(record)

    def begin(self, agent: str, tool: str) -> int:
        """A call starts running (``Pipeline.watch``): its key, for ``end``."""
        key = next(self._keys)
        self.running[key] = {"event": "started", "key": key, "agent": agent, "tool": tool,
                             "since": time.strftime("%H:%M:%S", time.gmtime()), "waiting": False}
        self._send(self.running[key])
        return key

    def waiting(self, key: int, waiting: bool) -> None:
        """A running call waits for an approval (its client's or an operator's), or no longer does."""
        running = self.running.get(key)
        if running is not None and running.get("waiting", False) != waiting:
            running["waiting"] = waiting
            self._send({"event": "waiting", "key": key, "waiting": waiting})

    def end(self, key: int) -> None:
        if self.running.pop(key, None) is not None:
            self._send({"event": "ended", "key": key})

    def _send(self, event: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            try:
                listener.send_nowait(event)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._listeners.discard(listener)  # a page that does not keep up is dropped; it reconnects

    def subscribe(self) -> Any:
        """A stream of what happens from now on (its receiving end): registered at once, so that nothing between
        this and the first read is missed."""
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](100)
        self._listeners.add(send)
        return receive

    def snapshot(self) -> dict[str, Any]:
        """The calls running now, as one event (a page that connects replaces its table with it)."""
        return {"event": "running", "running": list(self.running.values())}


class Console:
    """The console's routes, for one serving state, desk and operator token."""

    def __init__(self, state: Any, desk: Desk, token: str, guard: TransportSecurityMiddleware,
                 who: Callable[[str], Awaitable[str | None]]) -> None:
        import jinja2

        self.state = state
        self.desk = desk
        self._who = who  # a token -> who it is as the operator (OperatorEndpoint.who), or None
        self._key = hmac.new(token.encode(), b"toolcrib console sessions", hashlib.sha256).digest()
        self._guard = guard
        self.feed = Feed()
        state.open_feed(self.feed)
        self._templates = jinja2.Environment(
            loader=jinja2.PackageLoader("toolcrib", "templates/console"), autoescape=True,
            undefined=jinja2.StrictUndefined)

    def routes(self) -> list[Mount]:
        pages: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
            ("/", self._index, ["GET"]), ("/agents/{agent}", self._agent, ["GET"]), ("/matrix", self._matrix, ["GET"]),
            ("/sources", self._sources, ["GET"]), ("/approvals", self._approvals, ["GET"]),
            ("/approvals/{id}", self._answer, ["POST"]), ("/credentials", self._grants, ["GET"]),
            ("/credentials/revoke", self._revoke, ["POST"]), ("/feed", self._feed_page, ["GET"]),
            ("/feed/events", self._events, ["GET"]), ("/logout", self._logout, ["POST"])]
        routes = [Route(path, self._guarded(endpoint), methods=methods) for path, endpoint, methods in pages]
        routes += [Route("/login", self._login, methods=["GET", "POST"]),
                   Route("/static/{name}", self._static, methods=["GET"])]
        return [Mount("/console", routes=routes)]

    # -- who may look ------------------------------------------------------------------------------------------

    def _session(self, expires: int, who: str, session_id: str) -> str:
        named = base64.urlsafe_b64encode(who.encode()).decode().rstrip("=")
        signature = hmac.new(self._key, f"session|{expires}|{named}|{session_id}".encode(), hashlib.sha256).hexdigest()
        return f"{expires}.{named}.{session_id}.{signature}"

    def _signed_in(self, request: Request) -> tuple[str, str, str, int] | None:
        """The request's session cookie, who signed in with it, its session's id and expiry, if it is one this
        console signed and it has not expired (whether it was signed out is the desk's to say)."""
        cookie = request.cookies.get(COOKIE, "")
        expires, _, rest = cookie.partition(".")
        named, _, rest = rest.partition(".")
        session_id, _, _ = rest.partition(".")
        if not (expires.isascii() and expires.isdigit()) or len(expires) > 12 or int(expires) < time.time():
            return None  # (int() of thousands of digits raises, and so does int("²"), which isdigit() lets by)
        if not _SESSION_ID.fullmatch(session_id):
            return None
        try:
            who = base64.urlsafe_b64decode(named + "=" * (-len(named) % 4)).decode()
        except ValueError:
            return None
        signed = hmac.compare_digest(cookie.encode(), self._session(int(expires), who, session_id).encode())
        return (cookie, who, session_id, int(expires)) if signed else None

    def csrf(self, session: str) -> str:
        return hmac.new(self._key, f"csrf|{session}".encode(), hashlib.sha256).hexdigest()

    def _guarded(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            refused: Response | None = await self._guard.validate_request(request)
            if refused is not None:
                return refused
            signed_in = self._signed_in(request)
            try:
                ended = signed_in is None or await self.desk.session_ended(signed_in[2])
            except DeskUnreachable:  # whether it was signed out cannot be known: nothing opens (fail closed)
                return self._page("message.html", None, status=503, title="Unavailable",
                                  message="The shared store (Redis) does not answer: the console opens again when "
                                          "it does.")
            if signed_in is None or ended:
                return RedirectResponse("/console/login", status_code=303, headers=HEADERS)
            session, request.state.who, request.state.session_id, request.state.expires = signed_in
            if request.method == "POST":
                form = await small_form(request)
                request.state.form = form or {}
                if form is None or not hmac.compare_digest(form.get("csrf", "").encode(),
                                                           self.csrf(session).encode()):
                    return self._page("message.html", session, status=403, title="Refused",
                                      message="This form is not the console's (its CSRF token differs): open the "
                                              "page again and resubmit.")
            request.state.session = session
            return await endpoint(request)

        return guarded

    async def _login(self, request: Request) -> Response:
        refused: Response | None = await self._guard.validate_request(request)
        if refused is not None:
            return refused
        if request.method == "GET":
            return self._page("login.html", None, message="")
        form = await small_form(request)
        who = await self._who(form.get("token", "").strip()) if form is not None else None
        if who is None:
            return self._page("login.html", None, status=401,
                              message="That is not the operator token; an agent's token never opens the console.")
        expires = int(time.time()) + SESSION_SECONDS
        response = RedirectResponse("/console/", status_code=303, headers=HEADERS)
        session = self._session(expires, who, secrets.token_urlsafe(18))
        response.set_cookie(COOKIE, session, max_age=SESSION_SECONDS, path="/console",
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    async def _logout(self, request: Request) -> Response:
        """Sign out: the session ends on the server (on every replica, with ``[cluster]``), not only in this
        browser, so a copy of its cookie opens nothing either."""
        try:
            await self.desk.end_session(request.state.session_id, request.state.expires)
        except DeskUnreachable:
            return self._page("message.html", request.state.session, status=503, title="Not signed out",
                              message="The shared store (Redis) does not answer, so the session could not be ended "
                                      "everywhere: sign out again when it does.")
        response = RedirectResponse("/console/login", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path="/console")
        return response

    # -- pages ----------------------------------------------------------------------------------------------------

    def _page(self, template: str, session: str | None, status: int = 200, **values: Any) -> Response:
        body = self._templates.get_template(template).render(
            csrf=self.csrf(session) if session else "", signed_in=session is not None, **values)
        return Response(body, status_code=status, media_type="text/html; charset=utf-8", headers=HEADERS)

    async def _index(self, request: Request) -> Response:
        host = self.state.host
        # in a worker thread: the config check builds every tool's models and schemas (about 1 ms a tool, once) and
        # every agent's view, which the event loop would otherwise spend away from the agents' clients
        agents, problems = await anyio.to_thread.run_sync(_overview, host)
        return self._page("index.html", request.state.session, agents=agents, problems=problems,
                          source=host.loaded.source, pending=len(await self.desk.pending()))

    async def _agent(self, request: Request) -> Response:
        host = self.state.host
        name = request.path_params["agent"]
        if name not in host.agents:
            return self._page("message.html", request.state.session, status=404, title="No such agent",
                              message=f"No agent is named {name!r} in this config.")
        page = await anyio.to_thread.run_sync(_agent_page, host, name)  # its view and explains: see _overview
        return self._page("agent.html", request.state.session, **page, usage=host.pipeline.limit_usage(name))

    async def _matrix(self, request: Request) -> Response:
        agents, rows, more = await anyio.to_thread.run_sync(_matrix_rows, self.state.host)  # see _overview
        return self._page("matrix.html", request.state.session, agents=agents, rows=rows, more=more)

    async def _sources(self, request: Request) -> Response:
        host = self.state.host
        records = [{"name": r.name, "kind": r.kind, "state": r.state, "made": " ".join(filter(None, (
            r.distribution, r.version))), "tools": r.tool_count, "note": _note(r)} for r in host.records]
        held = [{"name": e.name, "why": e.held} for e in host.catalog.entries.values() if e.held is not None]
        return self._page("sources.html", request.state.session, records=records, held=held)

    async def _approvals(self, request: Request) -> Response:
        from toolcrib.names import shown  # what would not show as itself is marked: what differs looks different

        pending = [dict(p.public(), agent=shown(p.agent), tool=shown(p.tool), rule=shown(p.rule),
                        arguments=shown(json.dumps(p.arguments, indent=2, ensure_ascii=False)),
                        principal=shown(who(p.principal)))
                   for p in await self.desk.pending()]
        return self._page("approvals.html", request.state.session, pending=pending, message=self._said(request))

    async def _answer(self, request: Request) -> Response:
        form = request.state.form
        decision, given = form.get("decision", ""), form.get("digest", "")
        if decision not in ("approve", "deny"):
            return PlainTextResponse("expected decision = approve or deny", status_code=400, headers=HEADERS)
        held = await self.desk.get(request.path_params["id"])  # what it was, for the page that says it is done
        outcome = await self.desk.answer(request.path_params["id"], decision == "approve", given,
                                         f"the operator ({request.state.who}, in the console)")
        if outcome == ANSWERED and held is not None:
            said = (f"{'Approved' if decision == 'approve' else 'Denied'}: agent {held.agent}'s call of {held.tool} "
                    f"({held.call_id}).")
        else:
            said = f"Not answered: {outcome}."
        # the page shows a text only with the console's signature (any replica's: they share the operator token),
        # so a link made elsewhere cannot put words on it
        query = urlencode({"done": said, "sig": self._signed_said(said)}, quote_via=quote)
        return RedirectResponse(f"/console/approvals?{query}", status_code=303, headers=HEADERS)

    async def _grants(self, request: Request) -> Response:
        """The grants people gave sources (``toolcrib.consent``), each with its revoke button; never a token."""
        from toolcrib.consent import current
        from toolcrib.names import shown

        vault = current()
        grants = [{**g, "who": shown(g["subject"]), "by": shown(g["issuer"]), "at": shown(g["source"]),
                   "until": "no expiry" if g["expires"] is None else
                   time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(g["expires"]))}
                  for g in (await vault.grants() if vault is not None else [])]
        return self._page("credentials.html", request.state.session, grants=grants, message=self._said(request))

    async def _revoke(self, request: Request) -> Response:
        from toolcrib.consent import current

        form = request.state.form
        subject, source = form.get("subject", ""), form.get("source", "")
        vault = current()
        revoked = await vault.forget(subject, source) if vault is not None and subject and source else []
        for grant in revoked:
            log.info("the operator (%s, in the console) revoked %s's grant to %s", request.state.who,
                     grant["subject"], grant["source"])
        from toolcrib.names import shown

        said = shown(f"Revoked: {subject}'s grant to {source}.") if revoked else "Nothing was revoked: no such grant."
        query = urlencode({"done": said, "sig": self._signed_said(said)}, quote_via=quote)
        return RedirectResponse(f"/console/credentials?{query}", status_code=303, headers=HEADERS)

    def _said(self, request: Request) -> str:
        """What the page is to say it did (``done``), where the console signed it (``sig``); else nothing."""
        said = request.query_params.get("done", "")
        signed = hmac.compare_digest(request.query_params.get("sig", "").encode(), self._signed_said(said).encode())
        return said if signed else ""

    def _signed_said(self, said: str) -> str:
        return hmac.new(self._key, b"said|" + said.encode(), hashlib.sha256).hexdigest()

    async def _feed_page(self, request: Request) -> Response:
        return self._page("feed.html", request.state.session, kept=list(reversed(self.feed.kept)),
                          running=list(self.feed.running.values()))

    async def _events(self, request: Request) -> Response:
        events = self.feed.subscribe()  # before the snapshot: a call that starts in between is in one or the other

        async def stream() -> AsyncIterator[bytes]:
            async with events:  # closed when the page goes: the feed then drops its end at its next event
                yield b"retry: 2000\n\n"
                yield _event(self.feed.snapshot())
                async for record in events:
                    yield _event(record)

        return StreamingResponse(stream(), media_type="text/event-stream", headers=HEADERS)

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        kinds = {"console.css": "text/css", "console.js": "text/javascript"}
        if name not in kinds:
            return PlainTextResponse("not found", status_code=404, headers=HEADERS)
        text = resources.files("toolcrib").joinpath("templates", "console", name).read_text()
        return Response(text, media_type=kinds[name], headers={**HEADERS, "Cache-Control": "max-age=300"})


def _event(record: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(record, ensure_ascii=False, default=repr)}\n\n".encode()


def _overview(host: Host) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The first page's agents (each with what it may do) and the config check's problems."""
    config = host.loaded.config
    agents = []
    for name in sorted(host.agents):
        view = host.view(name)
        agent = config.agents[name]
        agents.append({"name": name, "mode": agent.mode, "approvals": agent.approvals, "tools": len(view.names),
                       "searching": agent.tool_search is not None, "limits": agent.limits is not None})
    problems = [{"severity": p.severity, "where": p.where, "message": p.message} for p in host.problems()]
    return agents, problems


def _agent_page(host: Host, name: str) -> dict[str, Any]:
    """What an agent's page shows of it: the tools it sees, why it does not see the others (the first
    ``SHOWN``), its resources, prompts, skills and the agents it may hand a task to."""
    view = host.view(name)
    listed = {t["name"] for t in view.listed_tools}
    tools = [{"name": vt.name, "served": vt.served, "description": " ".join(vt.description.split("\n\n", 1)[0].split()),
              "read_only": vt.entry.read_only, "listed": vt.served in listed} for vt in view.tools]
    hidden = []
    others = [n for n in sorted(host.catalog.entries) if view.lookup(n) is None]
    for entry_name in others[:SHOWN]:
        decision = host.explain(name, entry_name)
        failed = [c for c in decision.checks if not c.passed] if decision is not None else []
        hidden.append({"name": entry_name, "reason": "; ".join(c.detail for c in failed) or "held back"})
    agent = host.loaded.config.agents[name]
    rules = view.rules
    skills = sorted(k for k in set(host.skills) | set(host.loaded.config.skills) if permits(rules, "skills", k))
    subagents = sorted(a for a in host.loaded.config.agents if a != name and permits(rules, "subagents", a))
    return {"agent": name, "config": agent, "tools": tools, "skills": skills, "subagents": subagents,
            "hidden": hidden, "more": len(others) - len(hidden), "resources": [r.name for r in view.resources],
            "prompts": [prompt.name for prompt in view.prompts],
            "limits": agent.limits.model_dump(exclude_none=True) if agent.limits is not None else None}


def _matrix_rows(host: Host) -> tuple[list[str], list[dict[str, Any]], int]:
    """Who sees which tool (the first ``SHOWN``), and why not: the agents, the rows, and how many more tools."""
    agents = sorted(host.agents)
    rows = []
    tools = sorted(host.catalog.entries)
    for tool in tools[:SHOWN]:
        cells = []
        for agent in agents:
            if host.view(agent).lookup(tool) is not None:
                cells.append({"visible": True, "reason": "visible"})
                continue
            decision = host.explain(agent, tool)
            failed = [c for c in decision.checks if not c.passed] if decision is not None else []
            cells.append({"visible": False, "reason": "; ".join(c.detail for c in failed) or "held back"})
        rows.append({"tool": tool, "cells": cells})
    return agents, rows, len(tools) - len(rows)


__all__ = ["Console", "Feed"]
