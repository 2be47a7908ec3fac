"""What the core may know of OpenAPI documents as a kind of source (``toolcrib.entries.Kind``)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from toolcrib.entries import Kind

if TYPE_CHECKING:
    from toolcrib.config import LoadedConfig
    from toolcrib.sources import Source


class Documents:
    """The supplier of ``[openapi.*]``: a new source for each document at every sync (reading it again is what a
    reload asks), nothing kept open between calls, so it needs no event loop of its own."""

    changed: Callable[[], Coroutine[Any, Any, Any]] | None = None

    def __init__(self, env: Mapping[str, str] | None) -> None:
        self.env = env

    def sources(self, loaded: LoadedConfig, only: frozenset[str] | None = None) -> list[Source]:
        """A source for each ``[openapi.<namespace>]`` of the config, made with nothing read (``open`` reads its
        document); ``env`` holds the variables its credentials name (the host's environment)."""
        if not loaded.config.openapi:
            return []
        from toolcrib.supply.openapi.source import OpenAPISource

        tables = sorted(loaded.config.openapi.items())
        return [OpenAPISource(ns, config, loaded, self.env, KIND) for ns, config in tables]

    async def aclose(self) -> None:
        pass


KIND = Kind("openapi", "OpenAPI document", "the OpenAPI document", "document", table=lambda config: config.openapi,
            where="an OpenAPI document ([openapi.{ns}])", supplier=lambda tg, env: Documents(env))
