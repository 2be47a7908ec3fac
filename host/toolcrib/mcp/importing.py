"""``toolcrib mcps import``: the ``mcpServers`` JSON that Claude Desktop, Cursor, Claude Code and the Claude SDK
write (or VS Code's ``servers``), as ``[mcps.<namespace>]`` tables."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from toolcrib.names import RESERVED_NAMESPACE, namespace_problem

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class McpImportError(ValueError):
    """A file that is not an mcpServers file, or holds no server toolcrib can connect."""


def namespace_for(name: str, taken: set[str]) -> str:
    """A namespace for a server named ``name`` (``GitHub Server`` -> ``github_server``), not in ``taken``."""
    base = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", name.lower())).strip("_")
    base = re.sub(r"^[^a-z]+", "", base)[:28].rstrip("_") or "server"
    if base == RESERVED_NAMESPACE:
        base = f"{base}_server"
    candidate, n = base, 2
    while candidate in taken or namespace_problem(candidate) is not None:
        candidate = f"{base}_{n}"
        n += 1
    taken.add(candidate)
    return candidate


def import_servers(text: str) -> tuple[str, list[str]]:
    """The TOML of ``[mcps.*]`` tables for an mcpServers JSON document, and notes on what was left out or
    changed. ``McpImportError`` when the document holds no servers."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise McpImportError(f"not JSON: {exc}") from None
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise McpImportError('expected an object with "mcpServers" (or "servers"): {"mcpServers": {"name": '
                           '{"command": ..., "args": [...]}}}')
    tables: list[str] = []
    notes: list[str] = []
    taken: set[str] = set()
    for name, server in servers.items():
        if not isinstance(server, Mapping):
            notes.append(f"{name!r}: not an object; left out")
            continue
        kind = server.get("type", "http" if "url" in server else "stdio")
        if kind == "sse" or (kind not in ("stdio", "http", "streamable-http")):
            notes.append(f"{name!r}: a {kind!r} server; toolcrib connects stdio and streamable-HTTP servers only; "
                         "left out")
            continue
        namespace = namespace_for(str(name), taken)
        if namespace != name:
            notes.append(f"{name!r} is served as namespace {namespace!r}")
        lines = [f"[mcps.{namespace}]"]
        if kind == "stdio":
            if not isinstance(server.get("command"), str):
                notes.append(f"{name!r}: no command; left out")
                taken.discard(namespace)
                continue
            lines.append(f"command = {_string(server['command'], f'mcpServers.{name}.command')}")
            args = server.get("args") or []
            if args:
                words = ", ".join(_string(str(a), f"mcpServers.{name}.args[{i}]") for i, a in enumerate(args))
                lines.append(f"args = [{words}]")
            if isinstance(server.get("env"), Mapping) and server["env"]:
                lines.append(f"env = {_table(server['env'], f'mcpServers.{name}.env')}")
            if isinstance(server.get("cwd"), str):
                lines.append(f"cwd = {_string(server['cwd'], f'mcpServers.{name}.cwd')}")
        else:
            if not isinstance(server.get("url"), str):
                notes.append(f"{name!r}: no url; left out")
                taken.discard(namespace)
                continue
            lines.append(f"url = {_string(server['url'], f'mcpServers.{name}.url')}")
            if isinstance(server.get("headers"), Mapping) and server["headers"]:
                lines.append(f"headers = {_table(server['headers'], f'mcpServers.{name}.headers')}")
        if server.get("disabled") is True:
            lines.append("enabled = false")
        tables.append("\n".join(lines))
    if not tables:
        raise McpImportError("no server in it could be imported" + (": " + "; ".join(notes) if notes else ""))
    out = "\n\n".join(tables) + "\n"
    tomllib.loads(out)  # what is printed always loads (a failure here is a bug in this module, not the file's)
    return out, notes


def _string(value: str, where: str) -> str:
    """``value`` as a TOML basic string: quotes and backslashes escaped, control characters (DEL too) written as
    escapes. A lone surrogate, which no TOML (or UTF-8) text can hold, refuses the import, naming the field."""
    out = ['"']
    for char in value:
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise McpImportError(f"{where}: holds a lone surrogate (U+{code:04X}), which TOML cannot hold; fix the "
                                 "file and import again")
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _table(values: Mapping[str, Any], where: str) -> str:
    items = (f"{k if _BARE_KEY.fullmatch(k) else _string(k, f'{where} key')} = {_string(str(v), f'{where}.{k}')}"
             for k, v in values.items())
    return "{ " + ", ".join(items) + " }"
