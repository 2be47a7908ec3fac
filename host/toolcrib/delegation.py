"""Calls made upstream as the caller: OAuth 2.0 Token Exchange (RFC 8693).

A source whose table has ``exchange`` (``[mcps.<ns>.exchange]``, ``[openapi.<ns>.exchange]``) is called with a token
that ``[oauth.client]``'s token endpoint gives toolcrib for the caller's own access token: its audience that
source's, its scopes those the operator names. The caller's token itself never leaves toolcrib: it is only the
``subject_token`` of the exchange. A call whose caller has no access token (a static agent token, stdio, the CLI),
or whose exchange fails, is an error naming the source, unless the table says ``fallback = true``: then it goes
with the source's own credential, as every call did before.

Exchanged tokens are kept per caller's token (by its SHA-256, never the token), audience and scopes, until shortly
before they expire: one caller can never be given another's, since the key is what only that caller holds.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from anyio import to_thread

from toolcrib.delegation_settings import ExchangeConfig
from toolcrib.errors import ToolError

log = logging.getLogger("toolcrib.delegation")

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
MAX_KEPT = 10_000  # exchanged tokens kept at once, oldest out first
MARGIN = 30.0  # seconds before its expiry a kept token is exchanged again (or a tenth of its life, if shorter)
UNSTATED_LIFE = 60.0  # seconds a token is kept whose answer does not say when it expires
TIMEOUT = 10.0  # seconds one exchange may take
MAX_ANSWER = 100_000  # bytes of the token endpoint's answer


class ExchangeFailed(Exception):
    """The token endpoint gave no token: why, in its words (never a token)."""


class ConsentNeeded(Exception):
    """The person is to grant toolcrib access at ``url`` (``toolcrib.consent``), then call again."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.message = message
        self.url = url


def agents_of(call: Any) -> tuple[str, ...]:
    """The agents a call is made by: the agents of the sub-agent run it is in (``toolcrib.context.CHAIN``, ending
    with the one that calls), or its own agent alone."""
    from toolcrib.context import CHAIN

    chain = CHAIN.get()
    return chain if chain else (call.agent,) if call is not None else ()


def ask_consent(call: Any, needed: ConsentNeeded) -> Exception:
    """What a call that needs its person's consent ends with: the protocol's -32042 with the page (raised here,
    where the agent's client can send its user to pages: ``pages_first``), else an error result with the address
    (returned, to be raised)."""
    channel = getattr(call, "channel", None)
    passing = getattr(channel, "pages_first", None) if channel is not None else None
    if passing is not None:
        elicitation = hashlib.sha256(needed.url.encode()).hexdigest()[:16]
        passing(needed.message, [{"mode": "url", "message": needed.message, "url": needed.url,
                                  "elicitationId": f"consent:{elicitation}"}])
    return ToolError(f"{needed.message}: open {needed.url} in a browser, then make the call again")


@dataclass(frozen=True)
class ActorSigner:
    """Actor tokens (RFC 8693 ``actor_token``): JWTs toolcrib signs with ``[oauth.client] actor_key`` naming
    the agent that calls (``sub``: ``agent:<name>``) and, nested in ``act``, the agents whose run it is in, the
    nearest first. The issuer, trusting the key's public half, makes them the exchanged token's ``act``."""

    key: Any = field(repr=False)  # a cryptography private key (RSA or EC)
    issuer: str
    audience: str  # the token endpoint: an actor token is for it alone
    life: int = 60

    @classmethod
    def of(cls, pem: bytes, issuer: str, audience: str) -> ActorSigner:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            key = load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ToolError(f"oauth.client.actor_key is not a PEM private key without a password ({exc})") \
                from None
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
            raise ToolError("oauth.client.actor_key is neither an RSA nor an EC key")
        return cls(key, issuer, audience)

    def sign(self, chain: tuple[str, ...]) -> str:
        import uuid

        import jwt
        from cryptography.hazmat.primitives.asymmetric import ec

        now = int(time.time())
        claims: dict[str, Any] = {"iss": self.issuer, "aud": self.audience, "iat": now, "exp": now + self.life,
                                  "jti": uuid.uuid4().hex, "sub": f"agent:{chain[-1]}"}
        nested: dict[str, Any] | None = None
        for agent in chain[:-1]:  # the outermost caller deepest
            nested = {"sub": f"agent:{agent}", **({"act": nested} if nested is not None else {})}
        if nested is not None:
            claims["act"] = nested
        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            curve = {256: "ES256", 384: "ES384", 521: "ES512"}.get(self.key.curve.key_size, "ES256")
            return jwt.encode(claims, self.key, algorithm=curve)
        return jwt.encode(claims, self.key, algorithm="RS256")


JWT = "urn:ietf:params:oauth:token-type:jwt"


@dataclass
class Exchanger:
    """toolcrib as an OAuth client of ``[oauth.client]``'s token endpoint (client_secret_basic). Thread-safe: a
    sync source calls it on a worker thread, an async one through ``anyio.to_thread``."""

    token_endpoint: str
    client_id: str
    client_secret: str = field(repr=False)
    actor: ActorSigner | None = None  # each exchange carries an actor token naming the agents, where set
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _kept: OrderedDict[tuple[Any, ...], tuple[str, float]] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def token(self, subject_token: str, exchange: ExchangeConfig, scopes: tuple[str, ...] | None = None,
              chain: tuple[str, ...] = ()) -> str:
        """A token for ``exchange``'s audience standing for the holder of ``subject_token``, with ``scopes`` (None:
        the table's), for a call by the last agent of ``chain`` in the runs of those before it: a kept one while
        it has more than its margin to live, else a new exchange."""
        scopes = tuple(exchange.scopes) if scopes is None else scopes
        chain = chain if self.actor is not None else ()  # (without actor tokens, the agents change nothing)
        key = (hashlib.sha256(subject_token.encode()).hexdigest(), exchange.audience, scopes, exchange.resource,
               chain)
        now = self.clock()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and kept[1] > now:
                self._kept.move_to_end(key)
                return kept[0]
        token, life = self._exchange(subject_token, exchange, scopes, chain)
        with self._lock:
            self._kept[key] = (token, now + life - min(MARGIN, life / 10))
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return token

    def _exchange(self, subject_token: str, exchange: ExchangeConfig, scopes: tuple[str, ...],
                  chain: tuple[str, ...]) -> tuple[str, float]:
        form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject_token, "subject_token_type": ACCESS_TOKEN,
                "requested_token_type": ACCESS_TOKEN, "audience": exchange.audience}
        if scopes:
            form["scope"] = " ".join(scopes)
        if exchange.resource is not None:
            form["resource"] = exchange.resource
        if self.actor is not None and chain:
            form |= {"actor_token": self.actor.sign(chain), "actor_token_type": JWT}
        token, life, _ = token_request(self.token_endpoint, form, self.client_id, self.client_secret)
        return token, life if life is not None else UNSTATED_LIFE


def token_request(endpoint: str, form: dict[str, str], client_id: str,
                  secret: str | None) -> tuple[str, float | None, Mapping[str, Any]]:
    """POST ``form`` to a token endpoint as client ``client_id`` (``client_secret_basic``, the id and secret
    form-encoded as RFC 6749 2.3.1 says; without a secret, a public client naming itself in the form), never
    following a redirect: ``granted``'s reading of the answer. Blocks: a worker thread's."""
    import base64

    import httpx2

    headers = {"Accept": "application/json"}
    if secret is not None:
        pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form = {**form, "client_id": client_id}
    try:
        with httpx2.Client(timeout=TIMEOUT, follow_redirects=False) as client:
            answer = client.post(endpoint, data=form, headers=headers)
    except httpx2.HTTPError as exc:
        raise ExchangeFailed(f"the token endpoint could not be reached ({type(exc).__name__}: {exc})") from None
    return granted(answer.status_code, answer.content)


def granted(status: int, body: bytes) -> tuple[str, float | None, Mapping[str, Any]]:
    """The token, how many seconds it lives (None: not said) and the whole answer, from a token endpoint's answer;
    else why not (RFC 6749 5.1 and 5.2)."""
    import json

    try:
        found = json.loads(body) if len(body) <= MAX_ANSWER else None
    except ValueError:
        found = None
    if not isinstance(found, Mapping):
        raise ExchangeFailed(f"the token endpoint answered {status} with no JSON object")
    if status != 200:
        error, why = found.get("error"), found.get("error_description")
        said = f"{error}" + (f": {why}" if isinstance(why, str) and why else "") if isinstance(error, str) else \
            "no error code"
        raise ExchangeFailed(f"the token endpoint refused ({status}, {_clean(said)})")
    token, kind, life = found.get("access_token"), found.get("token_type"), found.get("expires_in")
    if not isinstance(token, str) or not token or any(c.isspace() for c in token):
        raise ExchangeFailed("the token endpoint's answer has no access_token")
    if not isinstance(kind, str) or kind.lower() not in ("bearer", "n_a"):
        raise ExchangeFailed(f"the token endpoint gave a token of type {_clean(str(kind))!r}, not Bearer")
    if life is None:
        return token, None, found
    if not isinstance(life, int | float) or isinstance(life, bool) or life <= 0:
        raise ExchangeFailed(f"the token endpoint's expires_in is {_clean(repr(life))}, not a number of seconds")
    return token, float(life), found


def _clean(text: str) -> str:
    from toolcrib.names import clean

    return clean(text)[:300]


@dataclass(frozen=True)
class Acting:
    """How one source is called as its caller: its ``exchange`` table, the exchanger, the source as messages name it
    (``upstream server 'github'``) and its namespace, and each agent's ``upstream_scopes`` (agent -> namespace ->
    the most scopes its calls there may carry)."""

    exchange: ExchangeConfig
    exchanger: Exchanger
    what: str
    namespace: str = ""
    narrowing: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)

    async def bearer(self, principal: Any, chain: tuple[str, ...] = ()) -> str | None:
        """The token a call by ``principal`` (``toolcrib.mcp.oauth.Identity`` or None) goes with, made by the last
        agent of ``chain`` in the runs of those before it: None for the source's own credential, where
        ``fallback`` allows it; else a ``ToolError`` naming the source. An exchange (an HTTP request) runs on a
        worker thread."""
        subject = getattr(principal, "token", None)
        if subject is None:
            if self.exchange.fallback:
                return None
            raise ToolError(f"{self.what} is called as its caller (token exchange), and this call carries no OAuth "
                            "access token to exchange: only a client signed in through [oauth] can call it")
        scopes = self.scopes(chain)
        try:
            return await to_thread.run_sync(self.exchanger.token, subject, self.exchange, scopes, chain)
        except ExchangeFailed as exc:
            if self.exchange.fallback:
                log.warning("%s: the token exchange failed (%s); the call goes with its own credential (fallback)",
                            self.what, exc)
                return None
            raise ToolError(f"{self.what} could not be called as its caller: {exc}") from None

    def scopes(self, chain: tuple[str, ...]) -> tuple[str, ...]:
        """The scopes to ask for a call made in ``chain``: the table's, narrowed by each agent of the chain that
        has ``upstream_scopes`` for this source (one that has none narrows nothing). Narrowed to nothing where
        something was asked: a ``ToolError`` naming the agent."""
        scopes: list[str] | None = list(self.exchange.scopes) or None  # None: the issuer's default, so far
        for agent in chain:
            allowed = self.narrowing.get(agent, {}).get(self.namespace)
            if allowed is None:
                continue
            narrowed = [s for s in scopes if s in allowed] if scopes is not None else list(allowed)
            if not narrowed:
                raise ToolError(f"{self.what} cannot be called by agent {agent!r}: none of the scopes asked "
                                f"({' '.join(scopes or ()) or 'none'}) is in its upstream_scopes for it")
            scopes = narrowed
        return tuple(scopes or ())


_EXCHANGERS: dict[tuple[Any, ...], Exchanger] = {}


def exchanger_for(token_endpoint: str, client_id: str, client_secret: str,
                  actor: tuple[bytes, str] | None = None) -> Exchanger:
    """One exchanger per client at one endpoint (and actor key: its PEM and the actor tokens' issuer), kept across
    reloads (what it keeps is still good). A ``ToolError`` for an actor key that is none."""
    key = (token_endpoint, client_id, hashlib.sha256(client_secret.encode()).hexdigest(),
           hashlib.sha256(actor[0]).hexdigest() if actor is not None else None, actor[1] if actor else None)
    found = _EXCHANGERS.get(key)
    if found is None:
        signer = ActorSigner.of(actor[0], actor[1], token_endpoint) if actor is not None else None
        found = _EXCHANGERS[key] = Exchanger(token_endpoint, client_id, client_secret, signer)
    return found


# The token a request to an upstream MCP server goes with while a call is made, and that server's namespace: set
# around the call (the SDK sends each request in the context of the task that asked for it), read by ``CallerAuth``.
UPSTREAM_BEARER: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("upstream_bearer",
                                                                                         default=None)


def caller_auth(namespace: str) -> Any:
    """An ``httpx2.Auth`` for the connection to upstream server ``namespace``: a request made during a call whose
    token was exchanged goes with that token in place of the server's own ``Authorization``; any other (the
    listing, the listen stream) with the server's ``headers``, as configured."""
    import httpx2

    class CallerAuth(httpx2.Auth):
        def auth_flow(self, request: Any) -> Generator[Any, Any, None]:
            found = UPSTREAM_BEARER.get()
            if found is not None and found[0] == namespace:
                request.headers["Authorization"] = f"Bearer {found[1]}"
            yield request

    return CallerAuth()


__all__ = ["ACCESS_TOKEN", "TOKEN_EXCHANGE", "UPSTREAM_BEARER", "Acting", "ActorSigner", "ConsentNeeded",
           "ExchangeConfig", "ExchangeFailed", "Exchanger", "agents_of", "ask_consent", "caller_auth", "exchanger_for",
           "granted", "token_request"]
