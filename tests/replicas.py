"""Replicas of toolcrib serve --http behind one address, sharing state on a real redis-server: a helper module for the
cluster and approval tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any


@asynccontextmanager
async def http_replicas(paths: list[Path], env: dict[str, str]) -> AsyncIterator[list[Any]]:
    """One HTTP app per config file (a replica each: its own serving state, store and Redis connection), served
    in process, with an httpx client on each."""
    import httpx2

    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import serving_state

    async with AsyncExitStack() as stack:
        clients = []
        for path in paths:
            state = await stack.enter_async_context(serving_state(path))
            app = HttpApp(state, HttpOptions(), env=env)
            await stack.enter_async_context(app.app.router.lifespan_context(app.app))
            clients.append(await stack.enter_async_context(httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000", timeout=30)))
        yield clients
