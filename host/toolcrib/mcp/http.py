"""``toolcrib serve --http``: every agent over streamable HTTP at ``/agents/<name>/mcp``, each behind its own
credentials.

The agent is identified by its credential, never by anything the client asserts: the path names an agent, and
the request gets in only with one of that agent's static bearer tokens (``token_env``: one or several, for
rotation; compared in constant time, never logged) or, with ``[oauth]``, an access token the issuer signed whose
claims the agent's ``identity`` accepts (``toolcrib.mcp.oauth``). A missing or wrong token, another agent's token,
a token in the query string, or a path naming no agent: all get the same ``401`` with ``WWW-Authenticate`` (and,
with ``[oauth]``, the ``resource_metadata`` URL of RFC 9728, where clients find the issuer), so nothing tells an
outsider which agents exist. An access token that is the agent's but lacks its required scopes gets ``403
insufficient_scope``. Each agent has its own session manager, so a session id from one agent's endpoint means
nothing on another's, and a session opened with an access token serves only that token's principal (client,
issuer, subject). Host and Origin are checked on every endpoint (DNS-rebinding protection); request bodies are
capped at ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import html
import ipaddress
import logging
import math
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from toolcrib.approvals import Desk, link_key
from toolcrib.config import CALLBACK_PATH, IdentityConfig
from toolcrib.errors import ToolcribError
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.exchange import answer, is_modern
from toolcrib.mcp.oauth import IDENTITY, Identity, Verifier, bearer_token, claims_match, identity_of
from toolcrib.mcp.operator import OperatorEndpoint
from toolcrib.mcp.sdk import lifespan_state_of, open_session_ids, open_sessions
from toolcrib.mcp.sessions import SessionManager
from toolcrib.mcp.state import ServingState

log = logging.getLogger("toolcrib.serve")

MAX_BODY_BYTES = 4 * 1024 * 1024
BODY_SECONDS = 30.0  # a request's whole body must come within this: a client dripping it holds nothing longer
MIN_TOKEN_LENGTH = 16
_DUMMY = b"\0" * 32  # compared against when the path names no agent, so timing says nothing either


class ServeError(ToolcribError):
    exit_code = 2


@dataclass
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    allow_remote: bool = False
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)
    stateless: bool = False
    agents: bool = True  # serve the agents' endpoints (toolcrib console: the operator's console only)
    console: bool = False  # serve the console even without [operator] console = true (toolcrib console)
    openapi: bool = False  # serve each agent's view as an OpenAPI tool server too (toolcrib.mcp.openapi_face)

    def security(self) -> TransportSecuritySettings:
        hosts = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
        origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*",
                   "http://127.0.0.1", "http://localhost", "http://[::1]"]
        for host in self.allowed_hosts:
            hosts += [host] if ":" in host.rsplit("]", 1)[-1] else [host, f"{host}:*"]
        origins += self.allowed_origins
        return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class _Endpoint:
    agent: str
    tokens: list[tuple[str, bytes]]  # (the variable, its token): every one set is accepted
    identity: IdentityConfig | None
    manager: StreamableHTTPSessionManager
    app: StreamableHTTPASGIApp
    server: Any  # the agent's MCP server (toolcrib.mcp.adapter.build_server)
    stop: anyio.CancelScope | None = None


class HttpApp:
    """The ASGI app: routing, authentication, and one SDK session manager per served agent."""

    def __init__(self, state: ServingState, options: HttpOptions, env: dict[str, str] | None = None) -> None:
        self.state = state
        self.options = options
        self._env = env
        self.endpoints: dict[str, _Endpoint] = {}
        self.not_served: dict[str, str] = {}  # agent -> why it has no endpoint (the banner says so)
        self.verifier: Verifier | None = None
        self._tg: TaskGroup | None = None
        self.ready = False  # the lifespan has set every endpoint up
        self.draining: Callable[[], bool] = lambda: False  # the server is shutting down (serve_http says)
        self.answers_modern = True  # 2026-07-28 POSTs answered by toolcrib.mcp.exchange (False: all by the SDK's entry)
        self.origin_guard = TransportSecurityMiddleware(options.security())  # Host and Origin, as for agents
        metrics = state.metrics
        if metrics is not None:
            metrics.watch(sessions=self.sessions)
        # An object (not a method) as the endpoint: Starlette then routes every HTTP method to it as raw ASGI.
        routes = [Route("/agents/{agent}/mcp", endpoint=_Asgi(self._agent_endpoint)),
                  Route(METADATA_PATH + "/agents/{agent}/mcp", endpoint=self._resource_metadata, methods=["GET"]),
                  Route(METADATA_PATH, endpoint=self._resource_metadata, methods=["GET"]),
                  Route(CALLBACK_PATH, endpoint=self._consent_callback, methods=["GET"]),
                  Route("/healthz", endpoint=self._healthz, methods=["GET", "HEAD"]),
                  Route("/readyz", endpoint=self._readyz, methods=["GET", "HEAD"])]
        if metrics is not None:
            routes.append(Route("/metrics", endpoint=self._metrics, methods=["GET"]))
        if options.openapi:  # each agent's view as an OpenAPI tool server too (toolcrib.mcp.openapi_face)
            from toolcrib.mcp.openapi_face import routes as openapi_routes

            routes += openapi_routes(self)
        self.operator = self._operator_endpoint()
        self.console: Any = None
        if self.operator is not None:
            routes += self.operator.routes()
            if self.operator.config.console or options.console:
                self.console = self._console(self.operator)
                routes += self.console.routes()
        self.app = Starlette(routes=routes, lifespan=self._lifespan)

    def _console(self, operator: OperatorEndpoint) -> Any:
        from toolcrib.mcp.console import NEEDS_JINJA, Console, installed

        if not installed():
            raise ServeError(NEEDS_JINJA)
        return Console(self.state, operator.desk, operator.token, self.origin_guard, operator.who)

    def _operator_endpoint(self) -> OperatorEndpoint | None:
        """The operator endpoint (``[operator]``), when its token is set: approvals that agents send an operator
        wait on its desk."""
        config = self.state.host.loaded.config
        operator = config.operator
        if operator is None:
            return None
        env = os.environ if self._env is None else self._env
        token = env.get(operator.token_env, "")
        if not token:
            log.warning("the operator endpoint is not served: $%s is not set, so calls that need an operator's "
                        "approval are denied", operator.token_env)
            return None
        if len(token) < MIN_TOKEN_LENGTH:
            log.warning("the operator token is shorter than %d characters; use a long random one", MIN_TOKEN_LENGTH)
        for name, agent in config.agents.items():
            variables = [agent.token_env] if isinstance(agent.token_env, str) else agent.token_env or []
            if any(hmac.compare_digest(env.get(v, "").encode(), token.encode()) for v in variables):
                raise ServeError(f"the operator token (${operator.token_env}) is also agent {name!r}'s: an agent "
                                 "must never answer its own approvals; give the operator a token of its own")
        from toolcrib.mcp.fleet import RedisDesk

        # with [cluster], every replica lists and answers every replica's pending approvals
        store = self.state.store
        desk = Desk(link_key(token)) if store is None else RedisDesk(store, link_key(token))
        self.state.open_desk(desk)
        return OperatorEndpoint(desk, operator, token, self.origin_guard, self.state.keep,
                                self._operator_identity if operator.identity is not None else None)

    async def _operator_identity(self, token: str) -> str | None:
        """Who an access token is, when ``[operator] identity`` accepts it and it carries its scopes: never a token
        that also acts as an agent (an agent must not answer its own approvals)."""
        config = self.state.host.loaded.config
        operator = config.operator
        if self.verifier is None or operator is None or operator.identity is None:
            return None
        claims = await self.verifier.claims(token)
        if claims is None or not claims_match(operator.identity, claims):
            return None
        identity = identity_of(claims, operator.identity)
        if any(scope not in identity.scopes for scope in operator.identity.scopes):
            return None
        agents = [name for name, agent in config.agents.items()
                  if agent.identity is not None and claims_match(agent.identity, claims)]
        if agents:
            log.warning("an access token that acts as agent %r was refused as the operator", agents[0])
            return None
        return f"{identity.subject or '?'}, client {identity.client or '?'}"

    def sessions(self) -> dict[str, int]:
        """Open sessions by agent (the SDK's session managers keep them; zero when stateless)."""
        return {name: open_sessions(endpoint.manager) for name, endpoint in self.endpoints.items()}

    # -- probes and metrics: no token, nothing about agents or tools -------------------------------------------

    async def _healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _readyz(self, request: Request) -> Response:
        if self.draining():
            return JSONResponse({"status": "draining"}, status_code=503)
        if not self.ready:
            return JSONResponse({"status": "starting"}, status_code=503)
        store = self.state.store
        if store is not None and store.config.required and not await store.ping():
            return JSONResponse({"status": "store unreachable"}, status_code=503)  # [cluster] required = true
        # A source that failed (a pack, an isolated pack, a server, a document) is named, and the replica stays in
        # rotation: every other source serves. Names only: no error text leaves the host unauthenticated.
        failed = sorted(r.name for r in self.state.host.records if r.state == "failed" and r.kind != "builtin")
        return JSONResponse({"status": "ready", **({"failed_sources": failed} if failed else {})})

    async def _metrics(self, request: Request) -> Response:
        metrics = self.state.metrics
        assert metrics is not None
        variable = self.state.host.loaded.config.host.metrics_token_env
        if variable is None:  # open to whoever reaches it: as the agent endpoints, a DNS-rebinding page reads nothing
            refused = await self.origin_guard.validate_request(request)
            if refused is not None:
                return refused
        else:  # behind its token, which no page has: a scraper may come by any address
            expected = (self._env if self._env is not None else os.environ).get(variable, "")
            supplied = bearer_token(request.headers.get("authorization", "")) or ""
            if not expected or not hmac.compare_digest(supplied.encode("latin-1"), expected.encode()):
                return _unauthorized("invalid_token" if supplied else None, "this endpoint needs Authorization: "
                                     "Bearer <the metrics token>")
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # every route's body, here where the app is entered, so none can miss it
            receive = body_within(receive, BODY_SECONDS)
            # An agent's endpoint is most of what comes: straight to it, without Starlette's router and middleware
            # around it (its other routes, the probes and metrics, go the usual way)
            if not scope.get("root_path"):
                found = _AGENT_PATH.fullmatch(scope["path"])
                if found is not None:
                    scope["path_params"] = {"agent": found[1]}
                    await self._agent_endpoint(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    # -- which agents are served -----------------------------------------------------------------------------

    def credentials(self) -> dict[str, list[tuple[str, bytes]]]:
        """Each agent's static tokens (variable, value) from its ``token_env``; agents with none and no OAuth
        identity are not served (and are told so)."""
        env = os.environ if self._env is None else self._env
        config = self.state.host.loaded.config
        found: dict[str, list[tuple[str, bytes]]] = {}
        self.not_served = {}
        if not self.options.agents:
            return found
        for name in self.state.host.agents:
            agent = config.agents[name]
            variables = [agent.token_env] if isinstance(agent.token_env, str) else agent.token_env or []
            tokens = []
            for variable in variables:
                value = env.get(variable, "")
                if not value:
                    continue
                if len(value) < MIN_TOKEN_LENGTH:
                    which = "its token" if len(variables) == 1 else f"the token in ${variable}"
                    log.warning("agent %r: %s is shorter than %d characters; use a long random one",
                                name, which, MIN_TOKEN_LENGTH)
                tokens.append((variable, value.encode()))
            operator = getattr(self, "operator", None)
            if operator is not None and any(hmac.compare_digest(v, operator.token.encode()) for _, v in tokens):
                why = "its token is the operator's: an agent must never answer its own approvals"  # (a reload's)
                log.error("agent %r is not served over HTTP: %s", name, why)
                self.not_served[name] = why
                continue
            if not tokens and agent.identity is None:  # (the config refuses an identity without [oauth])
                if not variables:
                    why = "it has no token_env"
                else:
                    why = " and ".join(f"${v}" for v in variables) + (" is" if len(variables) == 1 else " are") + \
                        " not set"
                log.warning("agent %r is not served over HTTP: %s", name, why)
                self.not_served[name] = why
                continue
            found[name] = tokens
        owners: dict[bytes, set[str]] = {}
        for name, tokens in found.items():
            for _, secret in tokens:
                owners.setdefault(secret, set()).add(name)
        for names in owners.values():
            if len(names) > 1:
                for name in sorted(names):
                    if name in found:
                        *most, last = [repr(n) for n in sorted(names - {name})]
                        why = f"agents {', '.join(most)} and {last} have the same token" if most else \
                            f"agent {last} has the same token"
                        log.error("agent %r is not served over HTTP: %s", name, why)
                        self.not_served[name] = why
                        del found[name]
        return found

    async def sync(self) -> None:
        """Start endpoints for agents that gained a token, stop those that lost theirs (start-up and reload)."""
        assert self._tg is not None
        config = self.state.host.loaded.config
        if config.oauth is None:
            self.verifier = None
        elif self.verifier is None or self.verifier.oauth != config.oauth:
            self.verifier = Verifier(self.state.host.loaded)  # the keys fetched so far stay with an unchanged [oauth]
        wanted = self.credentials()
        for name in list(self.endpoints):
            endpoint = self.endpoints[name]
            if name not in wanted:
                del self.endpoints[name]
                if endpoint.stop is not None:
                    endpoint.stop.cancel()
            else:
                endpoint.tokens = wanted[name]
                endpoint.identity = config.agents[name].identity if config.oauth is not None else None
        for name, tokens in wanted.items():
            if name not in self.endpoints:
                host = self.state.host.loaded.config.host
                server = build_server(self.state, name)
                options: dict[str, Any] = dict(
                    app=server, security_settings=self.options.security(),
                    max_request_body_size=MAX_BODY_BYTES, session_idle_timeout=host.http_session_idle,
                    max_sessions=host.http_max_sessions)
                manager = StreamableHTTPSessionManager(stateless=True, **options) if self.options.stateless else \
                    SessionManager(agent=name, sessions=self.state.sessions,
                                   connected=functools.partial(self.state.remember_session, name),
                                   disconnected=functools.partial(self.state.forget_session, name), **options)
                identity = config.agents[name].identity if config.oauth is not None else None
                endpoint = _Endpoint(name, tokens, identity, manager, StreamableHTTPASGIApp(manager), server)
                endpoint.stop = await self._tg.start(self._run_manager, manager)
                self.endpoints[name] = endpoint

    @staticmethod
    async def _run_manager(manager: StreamableHTTPSessionManager,
                           task_status: TaskStatus[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            async with manager.run():
                task_status.started(scope)
                await anyio.sleep_forever()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Any) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await self.sync()
            self.state.on_reload.append(self.sync)
            self.state.session_ended.append(self._end_session)
            self.state.session_state_changed.append(self._refresh_session)
            self.ready = True
            yield
            self.ready = False
            self.state.on_reload.remove(self.sync)
            self.state.session_ended.remove(self._end_session)
            self.state.session_state_changed.remove(self._refresh_session)
            tg.cancel_scope.cancel()

    async def _end_session(self, digest: str) -> None:
        """Another replica ended a session (its client's DELETE): this one stops serving it too."""
        for manager, sid in self._sessions_of(digest):
            await manager.end(sid)

    async def _refresh_session(self, digest: str) -> None:
        """A session's client set something on another replica (a subscription, a log level): this one follows."""
        for manager, sid in self._sessions_of(digest):
            await manager.refresh(sid)

    def _sessions_of(self, digest: str) -> list[tuple[SessionManager, str]]:
        """The session this replica holds (if it does) that a digest names, with its manager."""
        from toolcrib.mcp.fleet import session_digest

        return [(endpoint.manager, sid) for endpoint in list(self.endpoints.values())
                if isinstance(endpoint.manager, SessionManager) for sid in open_session_ids(endpoint.manager)
                if session_digest(endpoint.agent, sid) == digest]

    # -- one request --------------------------------------------------------------------------------------------

    async def _agent_endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = await self.authenticate(scope)
        if isinstance(found, Response):
            await found(scope, receive, send)
            return
        endpoint, identity = found
        if identity.kind == "oauth":  # the SDK binds a session to the principal that opened it
            scope["user"] = AuthenticatedUser(AccessToken(
                token="", client_id=identity.client or "", scopes=sorted(identity.scopes), subject=identity.subject,
                claims={"iss": identity.issuer}))
        scope[IDENTITY] = identity
        if self.answers_modern and is_modern(scope):  # toolcrib.mcp.exchange, or the SDK's entry for the unusual
            await answer(endpoint.server, lifespan_state_of(endpoint.manager), self.origin_guard, MAX_BODY_BYTES,
                         self._header_schema, endpoint.app, scope, receive, send)
            return
        await endpoint.app(scope, receive, send)

    def _header_schema(self, scope: Scope, name: str) -> Any:
        """A tool's input schema in the view of the request's caller (its agent, and the scopes its token lacks),
        when it routes arguments into headers; None when there is nothing to check."""
        identity: Identity = scope[IDENTITY]
        return self.state.view(scope["path_params"]["agent"], identity.lacking).header_schema(name)

    async def authenticate(self, scope: Scope) -> tuple[_Endpoint, Identity] | Response:
        """The endpoint of the path's agent and who the request's bearer token says it is, or the refusal to send
        (401, or 403 for an OAuth token without the agent's scopes): the same for every route of an agent."""
        agent = scope["path_params"]["agent"]
        endpoint = self.endpoints.get(agent)
        headers = {k.lower(): v for k, v in ((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])}
        supplied = bearer_token(headers.get("authorization", ""))
        query = scope.get("query_string", b"").decode("latin-1")
        if _token_in_query(query):
            return _unauthorized("invalid_request", "tokens are accepted only in the Authorization header",
                                 self._metadata_url(scope, headers, agent))
        if supplied is None:
            return _unauthorized(None, "this endpoint needs Authorization: Bearer <the agent's token>",
                                 self._metadata_url(scope, headers, agent))
        identity = await self._identify(endpoint, supplied.encode("latin-1"))
        if identity is None or endpoint is None:
            return _unauthorized("invalid_token", "the token is not valid for this endpoint",
                                 self._metadata_url(scope, headers, agent))
        if identity.kind == "oauth":
            assert endpoint.identity is not None
            missing = [scope_ for scope_ in endpoint.identity.scopes if scope_ not in identity.scopes]
            if missing:
                return _forbidden(endpoint.identity.scopes, self._metadata_url(scope, headers, agent))
        return endpoint, identity

    async def _identify(self, endpoint: _Endpoint | None, supplied: bytes) -> Identity | None:
        """Who the token says the request is: one of the agent's static tokens (every one compared, so timing says
        nothing), else an access token its identity accepts; None for anything else."""
        matched = None
        for variable, token in endpoint.tokens if endpoint is not None and endpoint.tokens else [("", _DUMMY)]:
            if hmac.compare_digest(supplied, token) and variable:
                matched = variable
        if matched is not None:
            return Identity(kind="token", credential=f"${matched}")
        if self.verifier is None or endpoint is None or endpoint.identity is None:
            return None
        claims = await self.verifier.claims(supplied.decode("latin-1"))
        if claims is None:
            return None
        if not claims_match(endpoint.identity, claims):
            log.info("access token refused on agent %r's endpoint: its claims are not the agent's identity",
                     endpoint.agent)
            return None
        return identity_of(claims, endpoint.identity, supplied.decode("latin-1"))

    async def _consent_callback(self, request: Request) -> Response:
        """A person's browser back from a source's authorization server (``toolcrib.consent``): their grant kept,
        and a page that says for whom."""
        from toolcrib.consent import finish

        status, said = await finish(request.query_params, self.state.host.loaded.consents)
        body = (f"<!doctype html><meta charset=utf-8><title>toolcrib</title><p>{html.escape(said)}</p>").encode()
        return Response(body, status, media_type="text/html", headers={
            "Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'"})

    # -- OAuth protected resource metadata (RFC 9728) -------------------------------------------------------

    def _base_url(self, scope: Scope, headers: dict[str, str]) -> str | None:
        oauth = self.state.host.loaded.config.oauth
        if oauth is None:
            return None
        if oauth.resource_url is not None:
            return oauth.resource_url.rstrip("/")
        host = headers.get("host", "")
        if not _HOST.fullmatch(host):
            return None
        return f"{scope.get('scheme', 'http')}://{host}"

    def _metadata_url(self, scope: Scope, headers: dict[str, str], agent: str) -> str | None:
        base = self._base_url(scope, headers)
        if base is None or not _AGENT.fullmatch(agent):
            return None
        return f"{base}{METADATA_PATH}/agents/{agent}/mcp"

    async def _resource_metadata(self, request: Request) -> Response:
        """The same document for every path (it never says which agents exist): this server as a resource, and the
        issuer that grants access to it."""
        oauth = self.state.host.loaded.config.oauth
        if oauth is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        document = ProtectedResourceMetadata(
            resource=oauth.audience, authorization_servers=[oauth.issuer],
            scopes_supported=oauth.scopes_supported or None, resource_name="toolcrib",
            bearer_methods_supported=["header"])
        body = document.model_dump(mode="json", exclude_none=True)
        # as configured, not as pydantic normalises URLs (a trailing "/"): clients compare them as strings
        body.update(resource=oauth.audience, authorization_servers=[oauth.issuer])
        return JSONResponse(body, headers={"Cache-Control": "public, max-age=300"})


METADATA_PATH = "/.well-known/oauth-protected-resource"
_HOST = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
_AGENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
_AGENT_PATH = re.compile(r"/agents/([^/]+)/mcp")  # Starlette's route "/agents/{agent}/mcp", as it matches


class _Asgi:
    def __init__(self, handler: Any) -> None:
        self._handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handler(scope, receive, send)


def _token_in_query(query: str) -> bool:
    keys = {part.partition("=")[0].lower() for part in query.split("&") if part}
    return bool(keys & {"access_token", "token", "auth", "authorization", "bearer"})


def _unauthorized(error: str | None, description: str, metadata: str | None = None) -> Response:
    challenge = 'Bearer realm="toolcrib"'
    if metadata is not None:
        challenge += f', resource_metadata="{metadata}"'
    if error is not None:
        challenge += f', error="{error}", error_description="{description}"'
    body = {"error": error or "unauthorized", "error_description": description}
    return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": challenge})


def _forbidden(scopes: list[str], metadata: str | None) -> Response:
    """RFC 6750's answer to a token without the scopes the endpoint needs: which ones, so a client can ask again."""
    wanted = " ".join(scopes)
    challenge = f'Bearer realm="toolcrib", error="insufficient_scope", scope="{wanted}"'
    if metadata is not None:
        challenge += f', resource_metadata="{metadata}"'
    body = {"error": "insufficient_scope", "error_description": f"the token needs the scopes: {wanted}"}
    return JSONResponse(body, status_code=403, headers={"WWW-Authenticate": challenge})


def check_bind(options: HttpOptions) -> None:
    """Refuse to listen beyond loopback unless the operator said so."""
    if not is_loopback(options.host) and not options.allow_remote:
        raise ServeError(f"refusing to listen on {options.host}: every agent's endpoint would be reachable from the "
                         "network; pass --allow-remote to do it on purpose (tokens are still required; add "
                         "--allowed-host for the name clients use)")


def body_within(receive: Receive, seconds: float) -> Receive:
    """``receive`` with one deadline for the whole request body (not one per read): a body still incomplete after
    ``seconds`` reads as the client gone (``http.disconnect``), so the request ends. Once the body is whole, what
    follows (a stream waiting for the client to leave) has no deadline."""
    deadline: float | None = None
    whole = False

    async def within() -> Message:
        nonlocal deadline, whole
        if whole:
            return await receive()
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + seconds
        # asyncio's own deadline (uvicorn serves on asyncio): 6 us where an anyio cancel scope takes 10, on every
        # request's way
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            log.warning("a request body did not come whole within %g seconds; the request is ended", seconds)
            whole = True
            return {"type": "http.disconnect"}
        if message["type"] != "http.request" or not message.get("more_body", False):
            whole = True
        return message

    return within


async def serve_http(state: ServingState, options: HttpOptions, watch: Path | None = None) -> None:
    """Run the HTTP server until interrupted; with ``watch``, reload the config when it changes."""
    check_bind(options)
    app = HttpApp(state, options)
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning", lifespan="on",
                            server_header=False,
                            # open streams (SSE, subscriptions/listen) never end by themselves: bound the wait for them
                            timeout_graceful_shutdown=math.ceil(state.host.loaded.config.host.shutdown_timeout))
    server = uvicorn.Server(config)
    app.draining = lambda: server.should_exit  # set by uvicorn on SIGTERM and SIGINT: /readyz answers 503

    async def announce() -> None:
        while not server.started:
            await anyio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]  # the one it got, when asked for port 0
        if not options.agents:
            print(f"toolcrib: the operator's console at http://{options.host}:{port}/console/ (no agent is served "
                  "here)", file=sys.stderr, flush=True)
            return
        agents = ", ".join(f"{name} ({len(state.view(name))} tools)" for name in sorted(app.endpoints))
        if not agents:  # why each is not: no token_env, a variable not set, a token two agents share
            unserved = "; ".join(f"{name}: {why}" for name, why in sorted(app.not_served.items()))
            agents = f"none ({unserved or 'no agent has a token'})"
        elif clashes := [f"{name}: {why}" for name, why in sorted(app.not_served.items()) if "same token" in why]:
            agents += f" (not served: {'; '.join(clashes)})"
        extras = ["stateless" if options.stateless else "sessions"]
        if options.openapi:
            extras.append("OpenAPI tool servers at /agents/<name>/openapi.json")
        if state.metrics is not None:
            extras.append("metrics at /metrics")
        if app.console is not None:
            extras.append(f"the operator's console at http://{options.host}:{port}/console/")
        print(f"toolcrib: serving over HTTP at http://{options.host}:{port}/agents/<name>/mcp; agents: "
              f"{agents}; {'; '.join(extras)}; probes at /healthz and /readyz",
              file=sys.stderr, flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        if watch is not None:
            tg.start_soon(state.watch, watch)
        await server.serve()
        tg.cancel_scope.cancel()
