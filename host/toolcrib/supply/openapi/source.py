"""``[openapi.<namespace>]`` as a source: the document is read when the source is opened (``open``, off the event
loop), never when it is made; what cannot be served is in its record's error, and a document that cannot be read
fails this source alone."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio

from toolcrib.config import LoadedConfig, MissingVariable
from toolcrib.consent import Consenting
from toolcrib.content import ToolResult
from toolcrib.credentials import Credentials
from toolcrib.delegation import Acting
from toolcrib.entries import Entry, Kind, Provenance
from toolcrib.errors import ToolDeclarationError, ToolError
from toolcrib.inference import json_schema_model
from toolcrib.names import clean, clean_schema, full_name, serving_names
from toolcrib.net import WebLimits
from toolcrib.plugins import PluginRecord
from toolcrib.sources import Offer
from toolcrib.supply.openapi.document import DocumentError, Operation, host_port, operations, read_document, selected
from toolcrib.supply.openapi.operations import ANNOTATIONS, OperationTool, operation_tool
from toolcrib.supply.openapi.requests import OperationRunner, credentials
from toolcrib.supply.openapi.settings import OpenAPIConfig
from toolcrib.tool import Tool


class OpenAPISource:
    """``[openapi.<namespace>]`` as a ``toolcrib.sources.Source``. OperationTool with nothing read; ``open`` reads the
    document (a file, or a fetch) on a worker thread and makes its entries. Until then, and when it cannot be read,
    it offers nothing: its record says why."""

    dimension = "plugins"
    lazy = False

    def __init__(self, namespace: str, config: OpenAPIConfig, loaded: LoadedConfig,
                 env: Mapping[str, str] | None, kind: Kind) -> None:
        self.name = namespace
        self.config = config
        self._loaded = loaded
        self._env = env
        where = config.document or config.document_url
        self.record = PluginRecord(name=namespace, kind="openapi", state="loaded", entry_point=where,
                                   pinned=not config.trusted and not config.follow_changes)
        self.provenance = Provenance(namespace, kind, self.dimension, where=f"[openapi.{namespace}]")
        self._good: set[str] = set()  # components checked against JSON Schema 2020-12 (``_checked``)
        self._acting: Acting | Consenting | None = None  # how its calls are made as its caller, once opened
        self._offer = Offer(self.record)
        if not config.enabled:
            self.record.state = "disabled"
        else:
            self.record.fail("not opened: its document is read when the source is opened")

    def _entries(self) -> list[Entry]:
        document, where = read_document(self.config, self._loaded)
        base_url = self._base_url(document, where)
        secrets = credentials(self.config, f"openapi.{self.name}", self._env)
        self._acting = self._loaded.acting(self.config, f"OpenAPI source {self.name!r}", f"openapi.{self.name}",
                                           self._env)
        named = host_port(urlsplit(base_url))
        if self.config.base_url is None and self.config.document_url is not None:
            # a fetched document's server may be anywhere public; a private one only where the operator named it
            exempt = (named,) if named == host_port(urlsplit(self.config.document_url)) else ()
        else:
            exempt = (named,)  # the operator's base URL, or a server named by a document the operator keeps
        limits = WebLimits(max_bytes=self.config.max_bytes, timeout=self.config.timeout, verb="call",
                           where=f"[openapi.{self.name}]", allowed_private_hosts=exempt, max_redirects=5)
        problems: list[str] = []
        chosen = [op for op in operations(document)
                  if selected(op, self.config.operations) and not selected(op, self.config.exclude)]
        names = serving_names("operation", [op.name for op in chosen], problems, "the document has")
        entries = []
        for op in chosen:
            if op.name not in names:
                continue
            try:
                entries.append(self._entry(document, op, names[op.name], base_url, limits, secrets))
            except ToolDeclarationError as exc:
                problems.append(f"operation {op.name!r} ({op.method.upper()} {op.path}) is not served: {exc}")
        if problems:
            self.record.error = "; ".join(problems)
        self.record.tool_count = len(entries)
        return entries

    def _base_url(self, document: Mapping[str, Any], where: str) -> str:
        if self.config.base_url is not None:
            return self.config.base_url
        servers = document.get("servers")
        first = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], Mapping) else {}
        url = first.get("url")
        if isinstance(url, str):
            for name, variable in (first.get("variables") or {}).items():  # a server variable's default
                if isinstance(variable, Mapping) and isinstance(variable.get("default"), str):
                    url = url.replace("{" + str(name) + "}", variable["default"])
        if isinstance(url, str) and url.startswith(("http://", "https://")) and "{" not in url:
            return url
        raise DocumentError(f"{where} names no absolute server URL to call (its first server: {url!r}); set "
                            f"base_url in [openapi.{self.name}]")

    def _entry(self, document: Mapping[str, Any], op: Operation, served: str, base_url: str, limits: WebLimits,
               secrets: Credentials) -> Entry:
        made = operation_tool(document, op, secrets.provided)
        hidden: list[str] = []
        input_schema = clean_schema(made.input_schema, hidden, "its parameters")
        output_schema = clean_schema(made.output_schema, hidden, "its response")
        if hidden:
            raise ToolDeclarationError(f"hidden characters in {', '.join(clean(h) for h in hidden[:3])}")
        checked = self._checked(served, input_schema)
        made = OperationTool(checked, output_schema, made.wrapped, made.parameters, made.media, made.description,
                             made.title)
        runner = OperationRunner(self.name, base_url, op, made, limits, secrets, acting=self._acting)
        tool = Tool(name=served, description=clean(made.description), runner=runner,
                    annotations=dict(ANNOTATIONS[op.method]), arguments=tuple(checked["properties"]),
                    title=clean(made.title) if made.title else None, make_input=json_schema_model(served, checked),
                    given_input_schema=checked, given_output_schema=output_schema,
                    source_name=op.name if served != op.name else None,
                    keywords=tuple(dict.fromkeys((op.method, *op.tags))))
        return Entry(name=full_name(self.name, served), provenance=self.provenance, definition=tool)

    def _checked(self, served: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The input schema, checked against JSON Schema 2020-12 part by part: each argument's schema and each
        component in ``$defs`` once for the whole document (operations share most of them, and checking a schema
        against 2020-12 costs milliseconds: a big document's start would be mostly that)."""
        from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # no stubs
        from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

        parts = [(f"argument {k!r}", v) for k, v in schema["properties"].items()]
        parts += [(f"component {k!r}", v) for k, v in schema.get("$defs", {}).items()]
        for what, part in parts:
            key = json.dumps(part, sort_keys=True)
            if key in self._good:
                continue
            try:
                Draft202012Validator.check_schema(part)
            except SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
                raise ToolDeclarationError(f"invalid JSON Schema in {what} at {where}: {exc.message}") from None
            self._good.add(key)
        try:  # the rest is written by operation_tool(): an object of those parts
            return dict(json.loads(json.dumps(schema, allow_nan=False)))
        except ValueError:
            raise ToolDeclarationError("its schemas hold NaN or Infinity, which JSON does not") from None

    async def open(self) -> None:
        """Read the document and make its entries (on a worker thread: reading a file or fetching a URL blocks).
        Every call then makes its own connection (``toolcrib.net``)."""
        if self.config.enabled:
            await anyio.to_thread.run_sync(self._read)

    def _read(self) -> None:
        self.record.state, self.record.error = "loaded", None
        try:
            self._offer.entries = self._entries()
        except (DocumentError, MissingVariable, ToolDeclarationError, ToolError) as exc:
            self.record.fail(str(exc))
        except Exception as exc:  # a document that breaks the reader in a way not foreseen fails this source alone
            self.record.fail(f"cannot be served: {type(exc).__name__}: {exc}")

    async def close(self) -> None:
        """Nothing is kept open between calls; its entries stay with any host still finishing a call."""

    def offer(self) -> Offer:
        return self._offer

    async def fetch(self, name: str | None = None) -> list[Entry]:
        entries = self._offer.entries
        return entries if name is None else [e for e in entries if e.name == name]

    async def read(self, uri: str) -> ToolResult:
        raise ToolError(f"OpenAPI document {self.name!r} serves no resources")


__all__ = ["OpenAPISource"]
