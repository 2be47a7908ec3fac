"""``exchange`` of a source's table (``[mcps.<ns>]``, ``[openapi.<ns>]``): what configures calling it as the caller
(``toolcrib.delegation``). A leaf, as each kind's settings are: the config is read into it."""

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


__all__ = ["ExchangeConfig"]
