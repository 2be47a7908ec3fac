"""Upstream MCP servers (``[mcps.<namespace>]``): sources whose tools appear as ``<namespace>__<tool>``.

Each server is connected by a task of its own (the SDK's client holds a task group for the life of the
connection), listed once, and kept open; its tools become catalog entries like a pack's, filtered by the ``mcps``
and ``tools`` rules. Their annotations are untrusted unless the operator marks the server ``trusted = true``.
A server that cannot be started or does not answer within its ``timeout`` is reported as failed; the others are
unaffected. ``UpstreamPool.sync`` keeps connections whose config did not change across reloads.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, create_model

from toolcrib.catalog import Entry
from toolcrib.config import LoadedConfig, McpConfig
from toolcrib.content import ToolResult
from toolcrib.errors import ToolError
from toolcrib.names import full_name, tool_name_problem
from toolcrib.plugins import PluginRecord
from toolcrib.tool import ANNOTATION_KEYS, Tool

log = logging.getLogger("toolcrib.upstream")

# Upstream text is not trusted: control, zero-width, direction and tag characters are dropped from descriptions.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
                     "\U000e0000-\U000e007f]")
# Arguments go to the upstream server as they are (after the pipeline's size and shape checks); it validates them.
_ANY_ARGUMENTS: type[BaseModel] = create_model("upstream_arguments", __config__=ConfigDict(extra="allow"))


@dataclass
class _Connection:
    namespace: str
    config: McpConfig
    key: str
    client: Any = None
    tools: list[Any] = field(default_factory=list)
    error: str | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


def _key(config: McpConfig) -> str:
    return json.dumps(config.model_dump(), sort_keys=True)


def _target(loaded: LoadedConfig, config: McpConfig) -> Any:
    if config.url is not None:
        return config.url
    from mcp import StdioServerParameters

    cwd = str(loaded.resolve(config.cwd)) if config.cwd else None
    return StdioServerParameters(command=config.command or "", args=config.args, env=config.env or None, cwd=cwd)


class UpstreamPool:
    """The open upstream connections of one serving process (or one CLI command)."""

    def __init__(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._connections: dict[str, _Connection] = {}

    async def sync(self, loaded: LoadedConfig) -> tuple[list[PluginRecord], list[Entry]]:
        """Connect what the config names (reusing unchanged connections, closing the rest); return a record per
        server and the catalog entries of their tools."""
        wanted = {ns: c for ns, c in loaded.config.mcps.items() if c.enabled and not c.lazy}
        for ns in list(self._connections):
            if ns not in wanted or self._connections[ns].key != _key(wanted[ns]):
                self._connections.pop(ns).scope.cancel()
        starting = []
        for ns, config in sorted(wanted.items()):
            if ns not in self._connections:
                connection = _Connection(ns, config, _key(config))
                self._connections[ns] = connection
                self._tg.start_soon(self._run, connection, _target(loaded, config), loaded.config.host.call_timeout)
                starting.append(connection)
        for connection in starting:
            with anyio.move_on_after(connection.config.timeout):
                await connection.ready.wait()
            if not connection.ready.is_set():
                connection.error = f"did not answer within {connection.config.timeout:g} seconds"
                connection.scope.cancel()
        records, entries = [], []
        for ns, config in sorted(loaded.config.mcps.items()):
            record = PluginRecord(name=ns, kind="mcp", state="loaded", entry_point=config.command or config.url)
            records.append(record)
            if not config.enabled:
                record.state = "disabled"
                continue
            if config.lazy:
                record.fail("lazy = true is not supported yet; remove it to connect the server at start-up")
                continue
            connection = self._connections[ns]
            if connection.error is not None or connection.client is None:
                record.fail(f"cannot connect: {connection.error}")
                self._connections.pop(ns).scope.cancel()
                continue
            problems: list[str] = []
            for tool in connection.tools:
                entry = _entry(connection, tool, problems)
                if entry is not None:
                    entries.append(entry)
            record.tool_count = sum(1 for e in entries if e.namespace == ns)
            if problems:
                record.error = "; ".join(problems)
        return records, entries

    async def _run(self, connection: _Connection, target: Any, read_timeout: float) -> None:
        from mcp import Client

        with connection.scope:
            try:
                async with Client(target, mode="auto", cache=None, read_timeout_seconds=read_timeout) as client:
                    listing = await client.list_tools()
                    connection.tools = list(listing.tools)
                    connection.client = client
                    connection.ready.set()
                    await anyio.sleep_forever()
            except Exception as exc:  # a server that cannot start, answers garbage, or dies
                log.warning("upstream server %r: %s", connection.namespace, exc)
                connection.error = _describe(exc)
                connection.client = None
                connection.ready.set()

    async def aclose(self) -> None:
        for connection in self._connections.values():
            connection.scope.cancel()
        self._connections.clear()


@asynccontextmanager
async def upstream_pool() -> AsyncIterator[UpstreamPool]:
    async with anyio.create_task_group() as tg:
        pool = UpstreamPool(tg)
        try:
            yield pool
        finally:
            await pool.aclose()
            tg.cancel_scope.cancel()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _entry(connection: _Connection, tool: Any, problems: list[str]) -> Entry | None:
    name = tool.name
    problem = tool_name_problem(name)
    if problem is not None:
        problems.append(f"tool {name!r} is not served: {problem}")
        return None
    annotations: dict[str, Any] = {}
    if tool.annotations is not None:
        for key, value in tool.annotations.model_dump(by_alias=True, exclude_none=True).items():
            if key in ANNOTATION_KEYS and isinstance(value, ANNOTATION_KEYS[key]):
                annotations[key] = value
    description = _HIDDEN.sub("", tool.description or "") or f"Tool {name} of the upstream server."
    client = connection.client
    namespace = connection.namespace

    async def handler(arguments: BaseModel) -> ToolResult:
        from mcp.shared.exceptions import MCPError

        try:
            result = await client.call_tool(name, dict(arguments.__pydantic_extra__ or {}))
        except MCPError as exc:
            raise ToolError(f"upstream server {namespace!r} refused the call: {exc.error.message}") from None
        return ToolResult(
            content=tuple(block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content),
            structured_content=result.structured_content,
            is_error=bool(result.is_error),
        )

    spec = Tool(
        name=name,
        description=description,
        handler=handler,
        annotations=annotations,
        arguments=tuple((tool.input_schema or {}).get("properties", {})),
        title=getattr(tool, "title", None) or annotations.get("title"),
        takes_model=True,
        is_async=True,
        make_input=lambda: _ANY_ARGUMENTS,
        given_input_schema=_mapping(tool.input_schema) or {"type": "object"},
        given_output_schema=_mapping(tool.output_schema),
    )
    return Entry(name=full_name(namespace, name), namespace=namespace, kind="mcp", dimension="mcps",
                 source=namespace, tool=spec, trusted=connection.config.trusted)


def _mapping(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return json.loads(json.dumps(value)) if value else None
