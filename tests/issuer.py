"""A real, small OAuth 2.1 / OpenID Connect issuer for the tests, served over loopback HTTP in a thread.

It makes its own RSA keys (``cryptography``), publishes them as a JWKS, answers OpenID Connect and RFC 8414
discovery, and grants client_credentials tokens (client_secret_basic) whose ``aud`` is the RFC 8707 ``resource``
asked for, and token exchanges (RFC 8693): a token it signed, still valid, for one whose ``aud`` is the
``audience`` asked for, its ``sub`` the subject token's, its ``act`` the exchanging client (with the subject
token's own ``act`` nested, as RFC 8693 4.1 chains them), or, given an actor token signed by a key it trusts
(``trusted_actors``), that token's subject and chain. Tests also sign tokens with it directly (``sign``), good
or deliberately bad. Used by tests/test_identity.py, tests/test_delegation.py and benchmarks/oauth.py.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


class Issuer:
    """``url`` is the issuer; ``clients`` maps client id -> (secret, extra claims of its tokens)."""

    def __init__(self, *, oidc: bool = True, metadata_issuer: str | None = None, jwks_uri: bool = True,
                 path: str = "") -> None:
        self.publish_jwks_uri = jwks_uri  # the metadata names its JWKS (else it lacks jwks_uri)
        self.oidc = oidc  # serve OpenID Connect discovery (else only RFC 8414's)
        self.metadata_issuer = metadata_issuer  # what the metadata claims the issuer is (default: its own URL)
        self.keys: list[tuple[str, rsa.RSAPrivateKey]] = []
        self.clients: dict[str, tuple[str, dict[str, Any]]] = {}
        self.fetches = 0  # how often the JWKS was fetched
        self.granted: list[dict[str, str]] = []  # the token requests granted (form fields, secret left out)
        self.refused_subjects: set[str] = set()  # subjects whose tokens it will not exchange (invalid_grant)
        self.trusted_actors: dict[str, Any] = {}  # iss -> the public key its actor tokens verify with
        self.browser_user = "nobody"  # who is signed in at its authorization endpoint (its consent is automatic)
        self.codes: dict[str, dict[str, Any]] = {}  # authorization codes given, not yet used
        self.refresh_tokens: dict[str, dict[str, Any]] = {}  # refresh token -> the grant it renews
        self.code_token_life = 300  # expires_in of tokens granted by code or refresh
        self.rotate()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.root = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.path = path  # an issuer with a path (``/realms/main``) is discovered below it, as RFC 8414 says
        self.url = self.root + path
        self.requests: list[str] = []  # the paths asked for, in order
        self.accepts: list[str | None] = []  # and the Accept header of each
        self.jwks_text: str | None = None  # served at /jwks instead of the JWKS, when set
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Issuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    # -- keys and tokens ----------------------------------------------------------------------------------------

    def rotate(self, keep_old: bool = False) -> str:
        """A new signing key (published first); the old ones stay published only with ``keep_old``."""
        kid = f"key-{uuid.uuid4().hex[:8]}"
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys = [(kid, key), *(self.keys if keep_old else [])]
        return kid

    def jwks(self) -> dict[str, Any]:
        found = []
        for kid, key in self.keys:
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            found.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": found}

    def sign(self, claims: dict[str, Any], *, kid: str | None = None, algorithm: str = "RS256",
             key: Any = None, lifetime: float = 300) -> str:
        """A token with ``iss``, ``iat`` and ``exp`` filled in (unless given), signed with the newest key."""
        now = int(time.time())
        body = {"iss": self.url, "iat": now, "exp": now + int(lifetime), **claims}
        current_kid, current = self.keys[0]
        headers = {"kid": kid or current_kid}
        return jwt.encode(body, current if key is None else key, algorithm=algorithm, headers=headers)

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.keys[0][1].public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo)

    # -- HTTP ------------------------------------------------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        found = self._all_metadata()
        if not self.publish_jwks_uri:
            del found["jwks_uri"]
        return found

    def _all_metadata(self) -> dict[str, Any]:
        return {"issuer": self.metadata_issuer or self.url, "jwks_uri": f"{self.root}/jwks",
                "token_endpoint": f"{self.url}/token",
                "authorization_endpoint": f"{self.url}/authorize", "response_types_supported": ["code"],
                "grant_types_supported": ["client_credentials", TOKEN_EXCHANGE],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"]}

    def _grant(self, headers: Any, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        scheme, _, encoded = (headers.get("Authorization") or "").partition(" ")
        client_id, _, secret = base64.b64decode(encoded or "").decode().partition(":") if scheme == "Basic" \
            else ("", "", "")
        client_id, secret = urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)
        if form.get("grant_type") not in ("client_credentials", TOKEN_EXCHANGE, "authorization_code",
                                          "refresh_token"):
            return 400, {"error": "unsupported_grant_type"}
        if not client_id and form.get("client_id") in self.clients and not self.clients[form["client_id"]][0]:
            client_id = form["client_id"]  # a public client: PKCE alone
        elif client_id not in self.clients or self.clients[client_id][0] != secret:
            return 401, {"error": "invalid_client"}
        if form["grant_type"] in ("authorization_code", "refresh_token"):
            return self._by_code(client_id, form)
        if form["grant_type"] == TOKEN_EXCHANGE:
            return self._exchange(client_id, form)
        self.granted.append(form)
        extra = self.clients[client_id][1]
        claims: dict[str, Any] = {"sub": client_id, "client_id": client_id, **extra}
        if "resource" in form:
            claims["aud"] = form["resource"]
        if "scope" in form:
            claims["scope"] = form["scope"]
        return 200, {"access_token": self.sign(claims), "token_type": "Bearer", "expires_in": 300,
                     **({"scope": form["scope"]} if "scope" in form else {})}

    def _exchange(self, client_id: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """RFC 8693: the subject token verified (its signature and expiry; its audience is whatever it was issued
        for), then a token for the audience asked for, acted by the exchanging client."""
        if form.get("subject_token_type") != "urn:ietf:params:oauth:token-type:access_token" or \
                not form.get("audience"):
            return 400, {"error": "invalid_request", "error_description": "subject_token_type or audience"}
        try:
            subject = jwt.decode(form.get("subject_token", ""), self.keys[0][1].public_key(), algorithms=["RS256"],
                                 options={"verify_aud": False})
        except jwt.PyJWTError as exc:
            return 400, {"error": "invalid_grant", "error_description": f"subject_token: {exc}"}
        if subject.get("sub") in self.refused_subjects:
            return 400, {"error": "invalid_grant", "error_description": "this subject may not be delegated"}
        act: dict[str, Any] = {"sub": client_id, **({"act": subject["act"]} if "act" in subject else {})}
        if "actor_token" in form:  # who acts: the actor token's subject, and its own act chain (RFC 8693 4.1)
            try:
                unverified = jwt.decode(form["actor_token"], options={"verify_signature": False})
                key = self.trusted_actors[unverified.get("iss")]
                actor = jwt.decode(form["actor_token"], key, algorithms=["RS256", "ES256"],
                                   audience=f"{self.url}/token")
            except (KeyError, jwt.PyJWTError) as exc:
                return 400, {"error": "invalid_request", "error_description": f"actor_token: {exc}"}
            act = {"sub": actor["sub"], **({"act": actor["act"]} if "act" in actor else {})}
        self.granted.append({k: v for k, v in form.items() if k not in ("subject_token", "actor_token")})
        claims = {"sub": subject.get("sub"), "aud": form["audience"], "act": act,
                  "client_id": subject.get("client_id"),
                  "scope": form.get("scope", subject.get("scope", ""))}
        return 200, {"access_token": self.sign(claims, lifetime=300),
                     "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                     "token_type": "Bearer", "expires_in": 300}

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, Any] | str]:
        """The authorization endpoint (OAuth 2.1, PKCE with S256 required): the signed-in ``browser_user``
        consents at once, and is sent back to the client's redirect_uri with a code."""
        client = query.get("client_id", "")
        if client not in self.clients or query.get("response_type") != "code" or \
                query.get("code_challenge_method") != "S256" or not query.get("code_challenge") or \
                not query.get("redirect_uri"):
            return 400, {"error": "invalid_request"}
        code = uuid.uuid4().hex
        self.codes[code] = {"client": client, "redirect_uri": query["redirect_uri"], "sub": self.browser_user,
                            "challenge": query["code_challenge"], "scope": query.get("scope", ""),
                            "aud": query.get("resource", client)}
        back = {"code": code, **({"state": query["state"]} if "state" in query else {})}
        return 302, query["redirect_uri"] + "?" + urllib.parse.urlencode(back)

    def _by_code(self, client_id: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """A code (its redirect_uri and PKCE verifier checked, used once) or a refresh token (rotated), for a
        token of the person who consented."""
        import hashlib

        if form["grant_type"] == "refresh_token":
            grant = self.refresh_tokens.pop(form.get("refresh_token", ""), None)
            if grant is None or grant["client"] != client_id:
                return 400, {"error": "invalid_grant", "error_description": "unknown refresh token"}
        else:
            grant = self.codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if grant is None or grant["client"] != client_id or grant["redirect_uri"] != form.get("redirect_uri") \
                    or grant["challenge"] != challenge:
                return 400, {"error": "invalid_grant", "error_description": "code, redirect_uri or verifier"}
        self.granted.append({k: v for k, v in form.items() if k not in ("code", "refresh_token", "code_verifier")})
        refresh = uuid.uuid4().hex
        self.refresh_tokens[refresh] = grant
        claims = {"sub": grant["sub"], "aud": grant["aud"], "scope": grant["scope"], "client_id": client_id,
                  "jti": uuid.uuid4().hex}
        return 200, {"access_token": self.sign(claims, lifetime=self.code_token_life), "token_type": "Bearer",
                     "expires_in": self.code_token_life, "refresh_token": refresh}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                issuer.requests.append(self.path)
                issuer.accepts.append(self.headers.get("Accept"))
                if self.path == f"/.well-known/oauth-authorization-server{issuer.path}" or (
                        self.path == f"{issuer.path}/.well-known/openid-configuration" and issuer.oidc):
                    self._answer(200, issuer._metadata())
                elif self.path == "/jwks" and issuer.jwks_text is not None:
                    issuer.fetches += 1
                    data = issuer.jwks_text.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/jwks":
                    issuer.fetches += 1
                    self._answer(200, issuer.jwks())
                elif self.path.startswith(f"{issuer.path}/authorize?"):
                    status, answer = issuer.authorize(dict(urllib.parse.parse_qsl(self.path.partition("?")[2])))
                    if isinstance(answer, str):
                        self.send_response(status)
                        self.send_header("Location", answer)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                    else:
                        self._answer(status, answer)
                elif self.path == "/jwks-moved":  # a redirect to the real JWKS
                    self.send_response(302)
                    self.send_header("Location", "/jwks")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if self.path not in ("/token", f"{issuer.path}/token"):
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(*issuer._grant(self.headers, form))

        return Handler
