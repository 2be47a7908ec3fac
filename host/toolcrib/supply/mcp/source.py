"""One configured upstream server (or isolated pack) as a ``toolcrib.sources.Source``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolcrib.content import ToolResult
from toolcrib.entries import Entry
from toolcrib.sources import Offer

if TYPE_CHECKING:
    from toolcrib.supply.mcp.connections import UpstreamPool


@dataclass(eq=False)
class UpstreamSource:
    """One configured upstream server as a ``toolcrib.sources.Source``: what it offered when the pool last synced
    (nothing, for a lazy or disabled one), and, for a lazy one, its tools fetched on demand through the pool's
    connection. Its lifecycle is its pool's: the pool opens the connections of every source it syncs at once, and
    closes them when the config no longer names them (or the pool ends)."""

    pool: UpstreamPool
    name: str
    lazy: bool
    _offer: Offer
    dimension: str = "mcps"

    async def open(self) -> None:
        """Opened by its pool's ``sync``, with every other server of the config at once."""

    async def close(self) -> None:
        """Closed by its pool, when the config no longer names it (a connection outlives a host's reload)."""

    def offer(self) -> Offer:
        return self._offer

    async def fetch(self, name: str | None = None) -> list[Entry]:
        entries = await self.pool.load(self.name) if self.lazy else self._offer.entries
        return entries if name is None else [e for e in entries if e.name == name]

    async def read(self, uri: str) -> ToolResult:
        return await self.pool.read(self.name, uri)
