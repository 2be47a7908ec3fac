"""MCP clients' config files, for ``toolcrib install``: where each client keeps its servers, an entry that names no
path of this machine for a project's shared file, and adding one server while keeping the others."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

CLIENTS = ("claude-desktop", "cursor", "claude-code", "mcp-json")


def client_file(client: str) -> Path:
    """Where the client keeps its MCP servers: the paths its documentation gives (Claude Desktop documents macOS
    and Windows; on Linux, where it is not released, community builds read $XDG_CONFIG_HOME/Claude)."""
    home = Path.home()
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "claude-code":
        return Path(".mcp.json")
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", home)) / "Claude" / "claude_desktop_config.json"
    return Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude" / "claude_desktop_config.json"


def portable_entry(agent: str, config: Path | None, file: Path) -> dict[str, Any] | None:
    """A project's ``.mcp.json`` entry that names no path of this machine: ``toolcrib`` from PATH (when the one on
    PATH is this installation's) and the config relative to the project (Claude Code starts a project's servers
    there); None when toolcrib is not on PATH."""
    found = shutil.which("toolcrib")
    if found is None or Path(found).parent != Path(sys.executable).parent:
        return None
    args = ["serve", "--agent", agent]
    if config is not None:
        project = file.resolve().parent
        where = config.resolve()
        args += ["--config", str(where.relative_to(project)) if where.is_relative_to(project) else str(where)]
    return {"command": "toolcrib", "args": args}


def add_server(file: Path, server: str, entry: dict[str, Any]) -> bool:
    """Put ``entry`` under ``mcpServers.<server>`` of ``file`` (made if missing), keeping everything else there;
    whether the server was there already. ``ValueError``, with nothing changed, when the file is not such JSON."""
    try:
        document = json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{file}: cannot read it as JSON ({exc}); nothing was changed") from None
    servers = document.get("mcpServers", {}) if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f"{file}: expected a JSON object with an \"mcpServers\" object; nothing was changed")
    existed = server in servers
    servers[server] = entry
    document["mcpServers"] = servers
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return existed


__all__ = ["CLIENTS", "add_server", "client_file", "portable_entry"]
