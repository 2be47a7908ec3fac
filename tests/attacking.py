"""What the attack tests share: a host from a config on disk, a call through it, an approver that says yes, and the
message a protected file answers with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

import toolcrib
from toolcrib.host import Host

TESTS = Path(__file__).parent


def host_at(config: Path, **packs: Any) -> Host:
    """A host from a config file on disk (so that what governs it has real paths), with just these packs."""
    return Host.from_config(config, plugins=packs, autoload=False, env={})


def call(host: Host, agent: str, tool: str, approver: Any = None, **arguments: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call(agent, tool, arguments, approver=approver))


async def yes(*args: Any) -> bool:
    return True


def protected_message(path: str, what: str, there: bool = True) -> str:
    return (f"{path}: is protected: changing it would change how the host governs its agents ({what} is "
            f"{'there' if there else 'in the way'}); no tool may change it")
