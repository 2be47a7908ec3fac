"""``exchange`` and ``consent`` of a source's table (``[mcps.<ns>]``, ``[openapi.<ns>]``): what configures calling it
as the caller (``toolcrib.delegation``, ``toolcrib.consent``). A leaf, as each kind's settings are: the config is
read into it."""

from __future__ import annotations

from pydantic import Field

from toolcrib.strict import Strict


class ExchangeConfig(Strict):
    """``exchange`` of ``[mcps.<ns>]`` (url servers) and ``[openapi.<ns>]``: call the source as the caller."""

    audience: str = Field(description="the audience of the token asked for: the upstream, as the issuer names it "
                          "(RFC 8693 `audience`)")
    scopes: list[str] = Field(default_factory=list, description="scopes to ask for (none: the issuer's default)")
    resource: str | None = Field(None, description="the upstream's URL as a resource (RFC 8707), where the issuer "
                                 "wants one")
    fallback: bool = Field(False, description="a call with no access token to exchange, or whose exchange fails, "
                           "goes with the source's own credential (headers, bearer, api_key) instead of failing")



class ConsentConfig(Strict):
    """``consent`` of ``[mcps.<ns>]`` (url servers) and ``[openapi.<ns>]``: call the source with each person's own
    token, which they grant toolcrib at the source's authorization server (OAuth authorization code with PKCE)."""

    authorization_endpoint: str = Field(description="where a person signs in and consents (the source's "
                                        "authorization server)")
    token_endpoint: str = Field(description="where toolcrib turns the code into a token, and refreshes it")
    client_id: str = Field(description="toolcrib's client id at that server")
    client_secret: str | None = Field(None, description="its secret, usually ${A_VARIABLE} (none: a public client, "
                                      "PKCE alone)")
    scopes: list[str] = Field(default_factory=list, description="scopes to ask each person for")
    resource: str | None = Field(None, description="the source as a resource (RFC 8707), where the server wants one")
    redirect_uri: str = Field(description="toolcrib's /oauth/callback at the URL people's browsers reach it by, as "
                              "registered with that server")
    fallback: bool = Field(False, description="a call by no signed-in person (a static agent token, stdio, the CLI) "
                           "goes with the source's own credential instead of failing")


__all__ = ["ConsentConfig", "ExchangeConfig"]
