"""A host with an OpenAPI source and the rules its agents get, and a call through it: a helper module for the OpenAPI
tests."""

from __future__ import annotations

from typing import Any

import anyio

from toolcrib.host import Host

RULES = """
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.planner]
mode = "plan"
[agents.planner.permissions]
plugins = { allow = ["pets"] }
tools = { allow = ["*"] }
"""


def call(host: Host, tool: str, arguments: dict[str, Any], agent: str = "a") -> dict[str, Any]:
    return anyio.run(lambda: host.call(agent, tool, arguments)).to_wire()
