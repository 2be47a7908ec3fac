"""``[openapi.<namespace>]``: what configures an OpenAPI document as a source (read by ``toolcrib.config``), and the
checks its schema cannot say."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from toolcrib.delegation_settings import ConsentConfig, ExchangeConfig
from toolcrib.governing import Governs
from toolcrib.strict import Strict


class ApiKeyConfig(Strict):
    """``api_key`` of ``[openapi.<namespace>]``: a key sent with every call, in a header or the query."""

    name: str = Field(description="the header's or query parameter's name")
    value: str = Field(description="the key, usually ${A_VARIABLE} (never logged)")
    # ``in`` is a Python keyword: the table says ``in = "header"``
    where: Literal["header", "query"] = Field("header", alias="in", description="header | query")


class OpenAPIConfig(Strict):
    """``[openapi.<namespace>]``: the operations of an OpenAPI 3.0 or 3.1 document (JSON or YAML), each served as
    a tool ``<namespace>__<operationId>`` and called over HTTP through ``toolcrib.net``."""

    document: Annotated[str | None, Governs("the OpenAPI document of [openapi.{key}]")] = Field(
        None, description="the document's file, relative to the config file")
    document_url: str | None = Field(None, description="the document's http(s) URL, instead of document")
    base_url: str | None = Field(None, description="where its operations are called (default: the document's "
                                 "first server, when that is an absolute URL)")
    operations: list[str] = Field(default_factory=lambda: ["*"], description="which operations to serve: "
                                  "operationId globs, 'tag:<tag>', or '<METHOD> <path glob>' ('GET /pets/*')")
    exclude: list[str] = Field(default_factory=list, description="operations not to serve, in the same forms")
    headers: dict[str, str] = Field(default_factory=dict, description="headers sent with every call (values may "
                                    "be ${VARIABLES})")
    bearer: str | None = Field(None, description="a bearer token sent with every call, usually ${A_VARIABLE}")
    api_key: ApiKeyConfig | None = Field(None, description="an API key sent with every call")
    exchange: ExchangeConfig | None = Field(None, description="call it as the caller: each call with a token "
                                            "[oauth.client] exchanges the caller's access token for (RFC 8693), "
                                            "sent as its bearer")
    consent: ConsentConfig | None = Field(None, description="call it with each person's own grant: OAuth "
                                          "authorization code with PKCE, asked of a person at their first call, "
                                          "kept under [credentials]")
    trusted: bool = Field(False, description="serve its redefined operations without a lock (by default what "
                          "toolcrib first saw is served until toolcrib lock accepts a change)")
    follow_changes: bool = Field(False, description="without a toolcrib.lock, serve an operation the document "
                                 "redefines at once")
    timeout: PositiveFloat = Field(30.0, description="seconds one call (or fetching the document) may take")
    max_bytes: PositiveInt = Field(10_000_000, description="most bytes of one answer (or of the document)")
    enabled: bool = Field(True, description="false: not served")

    @model_validator(mode="after")
    def _one_document(self) -> OpenAPIConfig:
        if (self.document is None) == (self.document_url is None):
            raise ValueError("needs exactly one of document (a file) or document_url")
        return self


def problems(api: OpenAPIConfig) -> list[tuple[tuple[str, ...], str]]:
    """What is wrong with ``api`` beyond its schema: (key path within its table, message)."""
    return [((key,), f"expected an http:// or https:// URL, got {url!r}")
            for key, url in (("document_url", api.document_url), ("base_url", api.base_url))
            if url is not None and not url.startswith(("http://", "https://"))]


__all__ = ["ApiKeyConfig", "OpenAPIConfig", "problems"]
