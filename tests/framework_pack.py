"""The pack the framework matrix serves (tests/test_frameworks.py): arguments of the shapes frameworks misread (an
Enum, a nested model, a nullable Literal, a mapping), a plain tool, one whose call is an error result, one the agent
may not see, a resource and a prompt."""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel

import toolcrib

# name -> what its environment installs, pinned (smolagents needs mcp 1.x: its MCP support does not import with 2.x);
# docs/frameworks.md's install table says the same (tests/test_docs.py)
FRAMEWORKS = {
    "openai_agents": ["openai-agents==0.24.0"],
    "pydantic_ai": ["pydantic-ai-slim[mcp]==2.68.0"],
    "langchain": ["langchain-mcp-adapters==0.3.2"],
    "fastmcp": ["fastmcp==4.2.3"],
    "llama_index": ["llama-index-tools-mcp==0.6.0"],
    "smolagents": ["smolagents[mcp]==1.26.0", "mcp<2"],
    # FastMCP's client half of the tasks extension: fastmcp-tasks, whose last release pins FastMCP 4.1.4
    "fastmcp_tasks": ["fastmcp==4.1.4", "fastmcp-tasks==4.1.4"],
}


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str
    city: str | None = None


@toolcrib.tool
def order(color: Color, address: Address, size: Literal["s", "m"] | None = None,
          notes: dict[str, str] | None = None) -> str:
    """Order something in a color, to an address."""
    return f"{color.value} {size or 'any size'} to {address.street}{', ' + address.city if address.city else ''}"


@toolcrib.tool(annotations={"readOnlyHint": True})
def plain(text: str, count: int = 1) -> str:
    """Repeat a text."""
    return " ".join([text] * count)


@toolcrib.tool
def fail(reason: str) -> str:
    """Always refuse, saying why."""
    raise toolcrib.ToolError(f"refused: {reason}")


@toolcrib.tool
def secret() -> str:
    """A tool the agent is not given."""
    return "you should not see this"


@toolcrib.resource("notes://today", name="today", mime_type="text/plain")
def today() -> str:
    """Today's notes."""
    return "buy milk"


@toolcrib.prompt
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Say hello to {name}."


class Pack:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [order, plain, fail, secret]

    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return [today]

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [greet]


PACK = Pack()
