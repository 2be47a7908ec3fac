"""A person's own consent at a source: OAuth 2.1 authorization code with PKCE (``consent`` of ``[mcps.<ns>]`` and
``[openapi.<ns>]``).

A call by a person signed in through ``[oauth]`` goes with the token that person granted toolcrib at the source's
authorization server. The first call of one who has granted none ends with the page to grant it at (a URL
elicitation: the protocol's -32042 where the client can send its user to a page, else an error result with the
address); the server sends their browser back to toolcrib's ``/oauth/callback``, which turns the code into a token
and keeps it. Their next call goes with it, refreshed when it expires.

What is kept, ``Vault``: each person's grant per source, and each authorization under way (ten minutes), sealed
with AES-256-GCM under ``[credentials] key``, the record's own name its associated data (a record moved under
another person's name does not open). In the serving process's memory, or with ``[cluster]`` on Redis, where every
replica (and ``toolcrib credentials``) finds it. A person is an issuer and a subject: the grant is theirs whatever
client or agent they call through.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from anyio import to_thread

from toolcrib.delegation import ConsentNeeded, ExchangeFailed, token_request
from toolcrib.delegation_settings import ConsentConfig
from toolcrib.errors import ToolError
from toolcrib.names import clean

log = logging.getLogger("toolcrib.consent")

PENDING_SECONDS = 600  # an authorization under way: how long its link works
MARGIN = 30.0  # seconds before a grant's expiry it is refreshed
CLOCK = time.time  # when grants expire (the tests move it)
MAX_KEPT = 10_000  # records in memory before authorizations under way are let go, the oldest first


@dataclass(frozen=True)
class Person:
    """Who a grant is for: the issuer and subject of their verified access token."""

    issuer: str
    subject: str

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.issuer, self.subject]).encode()).hexdigest()


def person_of(principal: Any) -> Person | None:
    """The person behind a request's identity (``toolcrib.mcp.oauth.Identity``); None for a static token or none."""
    if getattr(principal, "kind", None) != "oauth":
        return None
    issuer, subject = getattr(principal, "issuer", None), getattr(principal, "subject", None)
    return Person(issuer, subject) if isinstance(issuer, str) and isinstance(subject, str) and subject else None


# -- what is kept ----------------------------------------------------------------------------------------------


class _Memory:
    """The serving process's own: name -> (sealed bytes, when it expires or None)."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[bytes, float | None]] = {}

    def _live(self, name: str) -> bytes | None:
        found = self.items.get(name)
        if found is not None and found[1] is not None and found[1] <= time.monotonic():
            del self.items[name]
            return None
        return found[0] if found is not None else None

    async def get(self, name: str) -> bytes | None:
        return self._live(name)

    async def put(self, name: str, data: bytes, seconds: float | None) -> None:
        self.items[name] = (data, time.monotonic() + seconds if seconds is not None else None)
        if len(self.items) > MAX_KEPT:  # an agent calling on and on makes an authorization each time: the
            now = time.monotonic()      # expired go, then the oldest under way (never a grant)
            self.items = {k: v for k, v in self.items.items() if v[1] is None or v[1] > now}
            under_way = [k for k in self.items if k.startswith("pending:")]
            for stale in under_way[:max(0, len(self.items) - MAX_KEPT)]:
                del self.items[stale]

    async def take(self, name: str) -> bytes | None:
        found = self._live(name)
        self.items.pop(name, None)
        return found

    async def delete(self, name: str) -> None:
        self.items.pop(name, None)

    async def names(self, prefix: str) -> list[str]:
        return sorted(name for name in list(self.items) if name.startswith(prefix) and self._live(name) is not None)


class _Redis:
    """``[cluster]``'s shared store (``toolcrib.cluster.Store``), under its key prefix."""

    def __init__(self, store: Any) -> None:
        self.store = store

    @property
    def _client(self) -> Any:
        if self.store.client is None:
            raise ToolError("the shared store is not open")
        return self.store.client

    async def get(self, name: str) -> bytes | None:
        found: bytes | None = await self._client.get(self.store.key("credentials", name))
        return found

    async def put(self, name: str, data: bytes, seconds: float | None) -> None:
        await self._client.set(self.store.key("credentials", name), data,
                               px=max(1, int(seconds * 1000)) if seconds is not None else None)

    async def take(self, name: str) -> bytes | None:
        found: bytes | None = await self._client.getdel(self.store.key("credentials", name))
        return found

    async def delete(self, name: str) -> None:
        await self._client.delete(self.store.key("credentials", name))

    async def names(self, prefix: str) -> list[str]:
        head = self.store.key("credentials", "")
        found = [key.decode() if isinstance(key, bytes) else key
                 async for key in self._client.scan_iter(match=head + prefix + "*", count=500)]
        return sorted(key[len(head):] for key in found)


_SHARED: list[Any] = []  # the shared store, while a serving state with [cluster] has it open


def share(store: Any) -> None:
    """Keep what is kept on ``store`` (``[cluster]``'s), or in memory again with None."""
    _SHARED[:] = [store] if store is not None else []


class Vault:
    """Grants and authorizations under way, sealed with AES-256-GCM; the record's name is its associated data."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)
        self._memory = _Memory()

    @property
    def _backend(self) -> Any:
        return _Redis(_SHARED[0]) if _SHARED else self._memory

    def _seal(self, name: str, value: Mapping[str, Any]) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, json.dumps(dict(value)).encode(), name.encode())

    def _open(self, name: str, data: bytes | None) -> dict[str, Any] | None:
        from cryptography.exceptions import InvalidTag

        if data is None:
            return None
        try:
            found = json.loads(self._aead.decrypt(data[:12], data[12:], name.encode()))
        except (InvalidTag, ValueError):
            log.warning("a kept credential (%s) does not open under [credentials] key; it is ignored", name[:40])
            return None
        return found if isinstance(found, dict) else None

    async def grant(self, person: Person, source: str) -> dict[str, Any] | None:
        name = f"grant:{person.key}:{source}"
        return self._open(name, await self._backend.get(name))

    async def keep(self, person: Person, source: str, grant: Mapping[str, Any]) -> None:
        name = f"grant:{person.key}:{source}"
        await self._backend.put(name, self._seal(name, {**grant, "issuer": person.issuer,
                                                        "subject": person.subject, "source": source}), None)

    async def drop(self, person: Person, source: str) -> None:
        await self._backend.delete(f"grant:{person.key}:{source}")

    async def grants(self) -> list[dict[str, Any]]:
        """Every grant kept: whose (issuer, subject), for which source, until when (never its tokens)."""
        found = []
        for name in await self._backend.names("grant:"):
            grant = self._open(name, await self._backend.get(name))
            if grant is not None:
                found.append({"issuer": grant["issuer"], "subject": grant["subject"], "source": grant["source"],
                              "expires": grant.get("expires"), "granted": grant.get("granted")})
        return sorted(found, key=lambda g: (g["subject"], g["issuer"], g["source"]))

    async def forget(self, subject: str | None = None, source: str | None = None) -> list[dict[str, Any]]:
        """Revoke the grants of ``subject`` (any issuer) at ``source`` (None: every one); the grants revoked."""
        gone = []
        for name in await self._backend.names("grant:"):
            grant = self._open(name, await self._backend.get(name))
            if grant is not None and subject in (None, grant["subject"]) and source in (None, grant["source"]):
                await self._backend.delete(name)
                gone.append({"issuer": grant["issuer"], "subject": grant["subject"], "source": grant["source"]})
        return gone

    async def hold(self, state: str, pending: Mapping[str, Any]) -> None:
        name = f"pending:{hashlib.sha256(state.encode()).hexdigest()}"
        await self._backend.put(name, self._seal(name, pending), PENDING_SECONDS)

    async def take(self, state: str) -> dict[str, Any] | None:
        """The authorization under way that ``state`` names, once (a second use finds nothing)."""
        name = f"pending:{hashlib.sha256(state.encode()).hexdigest()}"
        return self._open(name, await self._backend.take(name))


_VAULTS: dict[str, Vault] = {}
_CURRENT: list[Vault] = []  # the vault of the config loaded last: where a browser coming back finds its state


def vault_for(key: str, where: str) -> Vault:
    """The vault of ``[credentials] key`` (base64 of 32 bytes), one per key in the process (the config loaded last
    makes its own the current one)."""
    try:
        raw = base64.b64decode(key, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise ToolError(f"{where} is not 32 bytes in base64 (make one with: python -c \"import os, base64; "
                        "print(base64.b64encode(os.urandom(32)).decode())\")")
    digest = hashlib.sha256(raw).hexdigest()
    if digest not in _VAULTS:
        _VAULTS[digest] = Vault(raw)
    _CURRENT[:] = [_VAULTS[digest]]
    return _VAULTS[digest]


# -- asking and keeping --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consenting:
    """How one source is called with each person's own grant: its ``consent`` table, its client secret (expanded),
    the vault, the source as messages name it and as grants are kept under (``mcps.github``)."""

    consent: ConsentConfig
    secret: str | None
    vault: Vault
    what: str
    source: str

    def __post_init__(self) -> None:
        _CONSENTING[self.source] = self  # the newest of each source is the one its people come back to

    async def bearer(self, principal: Any, chain: tuple[str, ...] = ()) -> str | None:
        """The person's token for the source: kept, refreshed, or (none yet) ``ConsentNeeded`` with the page to
        grant it at. None for the source's own credential, for a call by no person where ``fallback`` allows.
        (``chain``, the agents the call is made by, changes nothing: the grant is the person's.)"""
        person = person_of(principal)
        if person is None:
            if self.consent.fallback:
                return None
            raise ToolError(f"{self.what} is called with each person's own grant, and this call is by no person "
                            "signed in through [oauth]")
        grant = await self.vault.grant(person, self.source)
        now = CLOCK()
        if grant is not None and (grant.get("expires") is None or grant["expires"] - MARGIN > now):
            return str(grant["access"])
        if grant is not None and grant.get("refresh"):
            try:
                renewed = await self._token({"grant_type": "refresh_token", "refresh_token": grant["refresh"]})
            except ExchangeFailed as exc:
                log.info("%s: %s's grant could not be refreshed (%s); they are asked again", self.what,
                         person.subject, exc)
                await self.vault.drop(person, self.source)
            else:
                await self.vault.keep(person, self.source, {**renewed, "refresh": renewed["refresh"] or
                                                            grant["refresh"], "granted": grant.get("granted")})
                return str(renewed["access"])
        raise ConsentNeeded(f"{self.what} needs you to sign in and grant toolcrib access",
                            await self.authorization_url(person))

    async def authorization_url(self, person: Person) -> str:
        """A page for ``person`` to grant access at, its state and PKCE verifier held ten minutes."""
        state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        await self.vault.hold(state, {"issuer": person.issuer, "subject": person.subject, "source": self.source,
                                      "verifier": verifier})
        query = {"response_type": "code", "client_id": self.consent.client_id,
                 "redirect_uri": self.consent.redirect_uri, "state": state, "code_challenge": challenge,
                 "code_challenge_method": "S256"}
        if self.consent.scopes:
            query["scope"] = " ".join(self.consent.scopes)
        if self.consent.resource is not None:
            query["resource"] = self.consent.resource
        separator = "&" if "?" in self.consent.authorization_endpoint else "?"
        return self.consent.authorization_endpoint + separator + urlencode(query)

    async def complete(self, pending: Mapping[str, Any], code: str) -> Person:
        """The code the person's browser brought back, turned into their grant and kept."""
        person = Person(pending["issuer"], pending["subject"])
        token = await self._token({"grant_type": "authorization_code", "code": code,
                                   "redirect_uri": self.consent.redirect_uri, "code_verifier": pending["verifier"]})
        await self.vault.keep(person, self.source, {**token, "granted": CLOCK()})
        return person

    async def _token(self, form: dict[str, str]) -> dict[str, Any]:
        if self.consent.resource is not None:
            form["resource"] = self.consent.resource
        access, life, found = await to_thread.run_sync(token_request, self.consent.token_endpoint, form,
                                                       self.consent.client_id, self.secret)
        refresh = found.get("refresh_token")
        return {"access": access, "refresh": refresh if isinstance(refresh, str) and refresh else None,
                "expires": CLOCK() + life if life is not None else None}


_CONSENTING: dict[str, Consenting] = {}


def current() -> Vault | None:
    """The vault of the config loaded last, if it has ``[credentials]``."""
    return _CURRENT[0] if _CURRENT else None


async def finish(query: Mapping[str, str], configured: Callable[[str], bool]) -> tuple[int, str]:
    """A person's browser back from a source's authorization server with ``query`` (its ``state``, and its
    ``code`` or ``error``): their grant kept, once. ``configured(source)``: whether the config still calls that
    source with each person's grant. The status and a sentence for the person (never a token)."""
    state = query.get("state") or ""
    pending = await _CURRENT[0].take(state) if _CURRENT and state else None
    if pending is None:
        return 400, ("This sign-in link is unknown, already used or expired (each works once, for ten minutes). "
                     "Make the call again for a new one.")
    consenting = _CONSENTING.get(pending["source"])
    if consenting is None or not configured(pending["source"]):
        return 400, "The source this sign-in was for is no longer called with each person's grant."
    if "error" in query or not query.get("code"):
        said = clean(query.get("error_description") or query.get("error") or "no code")[:200]
        return 400, f"The sign-in at {consenting.what} was not completed ({said}). Make the call again to retry."
    try:
        person = await consenting.complete(pending, query["code"])
    except ExchangeFailed as exc:
        return 502, f"The sign-in at {consenting.what} could not be completed: {exc}."
    return 200, (f"Signed in: calls of {consenting.what} by {person.subject} (of {person.issuer}) now go with the "
                 "access you granted. You can close this page and make the call again.")


__all__ = ["Consenting", "Person", "Vault", "current", "finish", "person_of", "share", "vault_for"]
