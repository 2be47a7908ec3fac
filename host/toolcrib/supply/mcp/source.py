"""One configured upstream server (or isolated pack) as a ``toolcrib.sources.Source``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolcrib.content import ToolResult
from toolcrib.entries import Entry
from toolcrib.sources import Offer

if TYPE_CHECKING:
    from toolcrib.supply.mcp.connections import Connection, UpstreamPool
    from toolcrib.supply.mcp.settings import McpConfig


@dataclass(eq=False)
class UpstreamSource:
    """One configured upstream server (or isolated pack) as a ``toolcrib.sources.Source``. ``open`` connects it
    (through its pool, whose task group the connection lives in) and offers what it lists, or, while it is
    connected already (the same source, given again by a reload that left its config unchanged), lists again what
    it said changed; a lazy one is connected when an agent loads it (``fetch``). ``close`` ends its connection."""

    pool: UpstreamPool
    name: str
    config: McpConfig
    key: str  # its config, as the pool compares it across reloads
    _offer: Offer
    dimension: str = "mcps"
    connection: Connection | None = None  # once opened (a lazy one's: once an agent loaded it)

    @property
    def lazy(self) -> bool:
        return self.config.enabled and self.config.lazy

    @property
    def alive(self) -> bool:
        """Whether it may serve on: not one whose connection failed or ended (a server that died, or did not
        answer, is started again as a new source)."""
        return self.connection is None or self.connection.client is not None

    async def open(self) -> None:
        await self.pool.open(self)

    async def close(self) -> None:
        self.pool.close(self)

    def offer(self) -> Offer:
        return self._offer

    async def fetch(self, name: str | None = None) -> list[Entry]:
        entries = await self.pool.load(self.name) if self.lazy else self._offer.entries
        return entries if name is None else [e for e in entries if e.name == name]

    async def read(self, uri: str) -> ToolResult:
        return await self.pool.read(self.name, uri)
