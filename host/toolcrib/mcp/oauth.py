"""``serve --http`` as an OAuth 2.1 resource server (``[oauth]``): JWT access tokens verified, mapped to agents.

A token is accepted when its signature verifies with a key of the issuer's JWKS (fetched from the issuer's
metadata or ``jwks_url``, or read from ``jwks_file``; kept ``jwks_refresh`` seconds, fetched again at once for a
key id it does not know, at most every ``MIN_REFETCH`` seconds), its ``alg`` is one of ``algorithms`` (asymmetric
only: ``none`` and shared-secret algorithms never verify, so a public key cannot be used as an HMAC secret), and
its ``iss``, ``aud``, ``exp`` (required) and ``nbf`` hold, with ``leeway`` seconds of clock skew. PyJWT does the
cryptography (the mcp SDK depends on it already); nothing here signs or checks a signature by hand.

Then ``[agents.<name>.identity]`` decides which agent it acts as: every claim named must match one of its globs.
Why a token was refused is logged (at info, on ``toolcrib.serve``); the token never is.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
import types
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from toolcrib.config import IdentityConfig, LoadedConfig, OAuthConfig

if TYPE_CHECKING:
    import jwt  # imported where a key is read or a token verified: PyJWT brings cryptography, ~40 ms of a start

log = logging.getLogger("toolcrib.serve")

IDENTITY = "toolcrib.identity"  # the ASGI scope key the request's Identity is kept under (the adapter reads it)
MIN_REFETCH = 30.0  # seconds: a token naming an unknown key fetches the keys again at most this often
FETCH_TIMEOUT = 10.0
MAX_JWKS_BYTES = 1024 * 1024
MAX_VERIFIED = 4096  # access tokens remembered as verified


@dataclass(frozen=True)
class Identity:
    """Who a request acts for. ``kind`` "token": a static token (``credential``: the variable that holds it);
    "oauth": a verified access token, its subject, client, issuer and scopes. ``lacking``: the scopes of the agent's
    ``identity.needs_scope`` that the token does not carry. ``claims``: the verified token's claims, for policies
    (``toolcrib_policy``); never in the audit log."""

    kind: str
    credential: str | None = None
    subject: str | None = None
    client: str | None = None
    issuer: str | None = None
    scopes: frozenset[str] = frozenset()
    lacking: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False, hash=False)
    # the verified access token itself: only ever the subject of a token exchange (toolcrib.delegation), never
    # recorded, logged, shown to a policy or sent anywhere else
    token: str | None = field(default=None, compare=False, repr=False, hash=False)

    def record(self) -> dict[str, str]:
        """What the audit log and ``explain`` show: never the token."""
        found = {"kind": self.kind, "credential": self.credential, "subject": self.subject, "client": self.client,
                 "issuer": self.issuer}
        return {key: value for key, value in found.items() if value is not None}


# -- claims ----------------------------------------------------------------------------------------------------


def claim_values(claims: dict[str, Any], path: str) -> list[str]:
    """The values of a claim, as strings (a dotted path reaches into objects: ``realm_access.roles``); ``client_id``
    falls back to OIDC's ``azp``."""
    value: Any = claims
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None and path == "client_id":
        value = claims.get("azp")
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, str | int) and not isinstance(v, bool)]
    if isinstance(value, str | int) and not isinstance(value, bool):
        return [str(value)]
    return []


def scopes_of(claims: dict[str, Any]) -> frozenset[str]:
    """A token's scopes: ``scope`` (space-separated, RFC 9068) or ``scp`` (a list or a string)."""
    for key in ("scope", "scp"):
        value = claims.get(key)
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list):
            return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def bearer_token(value: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header's value, or None."""
    scheme, _, token = value.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def claims_match(identity: IdentityConfig, claims: dict[str, Any]) -> bool:
    """Every claim the identity names has a value matching one of its globs (case-sensitive)."""
    for path, globs in identity.claims.items():
        patterns = [globs] if isinstance(globs, str) else globs
        values = claim_values(claims, path)
        if not any(claim_glob_matches(glob, value) for value in values for glob in patterns):
            return False
    return True


@functools.lru_cache(maxsize=1024)
def _claim_pieces(glob: str) -> tuple[tuple[re.Pattern[str], int], ...]:
    """The pieces of a claim glob between its stars, each a pattern of fixed length (``?`` is any one character;
    every other character, ``[`` included, is itself) and that length."""
    return tuple((re.compile("".join("." if c == "?" else re.escape(c) for c in piece), re.S), len(piece))
                 for piece in glob.split("*"))


def claim_glob_matches(glob: str, value: str) -> bool:
    """Whether ``value`` matches a claim glob: ``*`` is any run of characters, ``?`` any one, and nothing else is
    special (as the docs say; ``deploy[prod]`` is those twelve characters). Linear in the value's length for
    each piece: each is placed at its leftmost fit, which is right when the only variable-length wildcard is
    ``*``, and never backtracks."""
    pieces = _claim_pieces(glob)
    if len(pieces) == 1:
        return pieces[0][0].fullmatch(value) is not None
    (first, first_len), *middle, (last, last_len) = pieces
    end = len(value) - last_len
    if end < first_len or first.match(value) is None or last.fullmatch(value, end) is None:
        return False
    position = first_len
    for piece, length in middle:
        if length:
            found = piece.search(value, position, end)
            if found is None:
                return False
            position = found.end()
    return True


def identity_of(claims: dict[str, Any], identity: IdentityConfig, token: str | None = None) -> Identity:
    """Who verified ``claims`` say a request is, under ``identity``; ``token``: the access token they came from
    (an agent's request keeps it, for token exchange; the operator's does not)."""
    scopes = scopes_of(claims)
    client = claim_values(claims, "client_id")
    subject = claims.get("sub")
    return Identity(kind="oauth", subject=subject if isinstance(subject, str) else None,
                    client=client[0] if client else None, issuer=str(claims.get("iss")), scopes=scopes,
                    lacking=frozenset(scope for scope in identity.needs_scope if scope not in scopes),
                    claims=types.MappingProxyType(dict(claims)), token=token)


# -- keys ------------------------------------------------------------------------------------------------------


@dataclass
class Keys:
    """The issuer's signing keys, by key id."""

    oauth: OAuthConfig
    file: Path | None = None
    by_id: dict[str | None, tuple[jwt.PyJWK, str | None]] = field(default_factory=dict)  # the key, its "alg"
    fetched: float = -1e9  # monotonic time of the last fetch (or read), successful or not
    file_stamp: tuple[float, int] | None = None
    generation: int = 0  # counts the changes of the published keys
    _published: list[dict[str, Any]] = field(default_factory=list)
    _lock: anyio.Lock | None = None
    _background: asyncio.Task[None] | None = None  # a refresh under way while known keys serve

    def current(self) -> bool:
        """The keys need no fetch (or read) now."""
        return time.monotonic() - self.fetched <= self.oauth.jwks_refresh and not self._file_changed()

    async def get(self, kid: str | None) -> tuple[jwt.PyJWK, str | None] | None:
        """The key a token names (or the only key, for a token that names none), and the algorithm its JWK
        declares (None: it declares none)."""
        now = time.monotonic()
        stale = now - self.fetched > self.oauth.jwks_refresh or self._file_changed()
        known = self._pick(kid)
        unknown = known is None and now - self.fetched > MIN_REFETCH
        if stale and known is not None and self.file is None and self._refresh_soon(now):
            return known  # the key it names serves on while the keys are fetched again, however slow the issuer
        if stale or unknown:
            if self._lock is None:
                self._lock = anyio.Lock()
            async with self._lock:
                if self.fetched < now:  # nobody fetched while this request waited
                    await self._refresh()
        return self._pick(kid)

    def _refresh_soon(self, now: float) -> bool:
        """Fetch the keys again in the background (asyncio only: True when it does, or already is)."""
        if self._background is not None and not self._background.done():
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False

        async def refresh() -> None:
            if self._lock is None:
                self._lock = anyio.Lock()
            async with self._lock:
                if self.fetched < now:
                    await self._refresh()

        self._background = loop.create_task(refresh())
        return True

    def _pick(self, kid: str | None) -> tuple[jwt.PyJWK, str | None] | None:
        if kid is not None:
            return self.by_id.get(kid)
        return next(iter(self.by_id.values())) if len(self.by_id) == 1 else None

    def _file_changed(self) -> bool:
        if self.file is None:
            return False
        try:
            stat = self.file.stat()
        except OSError:
            return False
        return (stat.st_mtime, stat.st_size) != self.file_stamp

    async def _refresh(self) -> None:
        self.fetched = time.monotonic()
        try:
            with anyio.fail_after(FETCH_TIMEOUT):  # one deadline for the whole refresh: discovery, then the keys
                document = await self._document()
        except TimeoutError:
            log.error("the OAuth issuer's keys could not be %s: no whole answer within %g seconds",
                      "read" if self.file else "fetched", FETCH_TIMEOUT)
            return
        except Exception as exc:  # an unreachable issuer, a slow one or a bad document: keep the keys known so far
            log.error("the OAuth issuer's keys could not be %s: %s", "read" if self.file else "fetched", exc)
            return
        import jwt

        found: dict[str | None, tuple[jwt.PyJWK, str | None]] = {}
        for data in document.get("keys") or []:
            if not isinstance(data, dict) or data.get("use") not in (None, "sig") or "d" in data:
                continue  # not a signing key (or a private one, which no issuer publishes)
            try:
                key = jwt.PyJWK(data)
            except jwt.PyJWTError as exc:
                log.warning("the OAuth issuer's key %r is not usable: %s", data.get("kid"), exc)
                continue
            found[key.key_id] = (key, data.get("alg"))  # a string, or absent: PyJWK refuses any other "alg"
        if not found:
            log.error("the OAuth issuer publishes no usable signing key")
        published = [data for data in document.get("keys") or [] if isinstance(data, dict)]
        if published != self._published:
            self.generation += 1  # tokens verified with the keys before are verified again
            self._published = published
        self.by_id = found

    async def _document(self) -> dict[str, Any]:
        if self.file is not None:  # read in a worker thread, so that the refresh's deadline holds for it too
            stat = self.file.stat()
            self.file_stamp = (stat.st_mtime, stat.st_size)
            data: Any = json.loads(await anyio.to_thread.run_sync(_read_capped, self.file, abandon_on_cancel=True))
        else:
            url = self.oauth.jwks_url or await self._discover()
            data = await _get_json(url)
        if not isinstance(data, dict):
            raise ValueError("a JWKS is a JSON object with \"keys\"")
        return data

    async def _discover(self) -> str:
        """The ``jwks_uri`` of the issuer's metadata (OpenID Connect discovery, then RFC 8414)."""
        issuer = self.oauth.issuer.rstrip("/")
        parts = urlsplit(issuer)
        candidates = [f"{issuer}/.well-known/openid-configuration",
                      f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{parts.path}"]
        problems = []
        for url in candidates:
            try:
                metadata = await _get_json(url)
            except Exception as exc:
                problems.append(f"{url}: {exc}")
                continue
            if isinstance(metadata, dict) and isinstance(metadata.get("jwks_uri"), str):
                if metadata.get("issuer") not in (None, self.oauth.issuer, issuer):
                    problems.append(f"{url}: names issuer {metadata.get('issuer')!r}, not {self.oauth.issuer!r}")
                    continue
                return str(metadata["jwks_uri"])
            problems.append(f"{url}: no jwks_uri")
        raise ValueError("no jwks_uri in the issuer's metadata (" + "; ".join(problems) + "); set jwks_url")


def _read_capped(path: Path) -> bytes:
    """A JWKS file's bytes, up to ``MAX_JWKS_BYTES`` (a file that is not a regular one may never end)."""
    with path.open("rb") as file:
        data = file.read(MAX_JWKS_BYTES + 1)
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError(f"the file is larger than {MAX_JWKS_BYTES} bytes")
    return data


async def _get_json(url: str) -> Any:
    """The JSON at ``url``, read as it streams in: more than ``MAX_JWKS_BYTES`` ends the read there (the caller's
    deadline ends one that drips)."""
    import httpx2

    async with httpx2.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=False) as client, \
            client.stream("GET", url, headers={"Accept": "application/json"}) as response:
        response.raise_for_status()
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError(f"the answer is larger than {MAX_JWKS_BYTES} bytes")
        try:
            return json.loads(body)
        except RecursionError:
            raise ValueError("the answer is nested too deeply to be read") from None


# -- verifying -------------------------------------------------------------------------------------------------


class Verifier:
    """Checks access tokens against ``[oauth]``; one per served config (a reload makes a new one)."""

    def __init__(self, loaded: LoadedConfig) -> None:
        oauth = loaded.config.oauth
        assert oauth is not None
        self.oauth = oauth
        self.keys = Keys(oauth, loaded.resolve(oauth.jwks_file) if oauth.jwks_file is not None else None)
        # token -> (the keys' generation, its claims, the id of the key that verified it and that key as known):
        # a client sends the same token with every request until it expires, and a signature check is most of what
        # a request costs; bounded, oldest out first. A remembered token never outlives its key.
        self._verified: OrderedDict[str, tuple[int, dict[str, Any], str | None, Any]] = OrderedDict()

    async def claims(self, token: str) -> dict[str, Any] | None:
        """The token's claims when it verifies; None (and why, logged) when it does not. A token verified before
        with the same keys is not verified again, but its expiry is checked on every use."""
        hit = self._verified.get(token)
        if hit is not None and hit[0] == self.keys.generation and self.keys.current() and \
                self.keys.by_id.get(hit[2]) is hit[3]:  # its key still published, the very one that verified it
            claims = hit[1]
            now = time.time()
            if now > claims["exp"] + self.oauth.leeway:  # (its nbf had passed when it verified)
                del self._verified[token]
                log.info("access token refused: Signature has expired")
                return None
            return claims
        found, key = await self._verify(token)
        if found is not None and isinstance(found.get("exp"), int | float):
            self._verified[token] = (self.keys.generation, found, key.key_id, self.keys.by_id.get(key.key_id))
            if len(self._verified) > MAX_VERIFIED:
                self._verified.popitem(last=False)
        return found

    async def _verify(self, token: str) -> tuple[dict[str, Any] | None, Any]:
        """The token's claims when it verifies, and the key (a ``PyJWK``) that verified it."""
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None, None  # not a JWT at all: a static token that matched no agent, most likely
        algorithm = header.get("alg")
        if algorithm not in self.oauth.algorithms:
            log.info("access token refused: algorithm %r is not accepted", algorithm)
            return None, None
        kid = header.get("kid")  # a string or absent: PyJWT refuses a header whose "kid" is anything else
        found = await self.keys.get(kid)
        if found is None:
            log.info("access token refused: no key of the issuer has id %r", kid)
            return None, None
        key, declared = found
        if declared is not None and declared != algorithm:
            log.info("access token refused: key %r is for %s, the token says %s", kid, declared, algorithm)
            return None, None
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[algorithm], audience=self.oauth.audience, issuer=self.oauth.issuer,
                leeway=self.oauth.leeway, options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            log.info("access token refused: %s", exc)
            return None, None
        return claims, key


__all__ = ["IDENTITY", "Identity", "Keys", "Verifier", "claim_values", "claims_match", "identity_of", "scopes_of"]
