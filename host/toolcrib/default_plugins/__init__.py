"""Built-in behaviour, written as plugins and registered exactly like third-party packs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolcrib.config import LoadedConfig


OFF = {  # why a built-in is off, as `toolcrib plugins` says it
    "toolcrib.audit": "off: the config sets no [host] audit_log (a file that records every call's decision)",
    "toolcrib.hooks": "off: the config has no [hooks] (programs that decide or check calls: docs/hooks.md)",
}


def create(loaded: LoadedConfig) -> list[tuple[str, Any]]:
    """The built-in plugins for one config, as (name, plugin object) pairs; None marks one switched off (``OFF``
    says why)."""
    from toolcrib.default_plugins.audit import AuditLog

    audit_log = loaded.config.host.audit_log
    hooks = None
    if loaded.config.hooks.pre_tool_use or loaded.config.hooks.post_tool_use:  # imported only when configured
        from toolcrib.default_plugins.hooks import CommandHooks, CommandHooksWithPost

        hooks = CommandHooksWithPost(loaded) if loaded.config.hooks.post_tool_use else CommandHooks(loaded)
    return [("toolcrib.audit", AuditLog(loaded.resolve(audit_log)) if audit_log is not None else None),
            ("toolcrib.hooks", hooks)]
