"""toolcrib's HTTP app in process (its lifespan run, an httpx client over ASGI) with the reader, writer and silent
agents' config: a helper module for the HTTP tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2

from conftest import make_host
from packs import FILES
from toolcrib.mcp.http import HttpApp, HttpOptions
from toolcrib.mcp.state import ServingState

CONFIG = """
[agents.reader]
token_env = "TOK_READER"
[agents.reader.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["files__read"] }

[agents.writer]
token_env = "TOK_WRITER"
[agents.writer.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["*"] }

[agents.twin]
token_env = "TOK_TWIN"
[agents.twin.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["*"] }

[agents.silent]
[agents.nokey]
token_env = "TOK_UNSET"
"""

TOKENS = {"TOK_READER": "r" * 32, "TOK_WRITER": "w" * 32, "TOK_TWIN": "w" * 32}


@asynccontextmanager
async def serving(env: dict[str, str] | None = None, config: str = CONFIG, metrics: bool = False,
                  packs: dict[str, Any] | None = None,
                  **options: Any) -> AsyncIterator[tuple[HttpApp, httpx2.AsyncClient]]:
    state = ServingState(make_host(config, {"files": FILES} if packs is None else packs))
    if metrics:
        from toolcrib.observe import Metrics

        state.metrics = Metrics()
    app = HttpApp(state, HttpOptions(**options), env=TOKENS if env is None else env)
    async with app.app.router.lifespan_context(app.app):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000", timeout=30) as client:
            yield app, client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
