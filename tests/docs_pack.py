"""A docs pack with resources, resource templates and prompts with completions, and the config that serves it: a helper
module for the surface, docs, wire and attack tests."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

import toolcrib
from toolcrib import Context, Message

PNG = b"\x89PNG\r\n\x1a\n"
PAGES = {"intro": "Welcome.", "install": "pip install it.", "internal": "Staff only."}


@toolcrib.resource("docs://readme", mime_type="text/markdown")
def readme() -> str:
    """The project's readme."""
    return "# Readme"


@toolcrib.resource("docs://logo", mime_type="image/png", title="Logo")
def logo() -> bytes:
    """The logo."""
    return PNG


@toolcrib.resource("docs://secret")
def secret() -> str:
    """Kept from agent b."""
    return "s3cret"


@toolcrib.resource("docs://pages/{slug}", mime_type="text/plain",
                   complete={"slug": lambda value: [s for s in PAGES if s.startswith(value)]})
def page(slug: str) -> str:
    """A page of the docs, by its slug."""
    if slug not in PAGES:
        raise toolcrib.ToolError(f"There is no page {slug!r}.")
    return PAGES[slug]


@toolcrib.prompt(complete={"topic": lambda value, context: [t for t in ("tests", "types", "docs")
                                                             if t.startswith(value)]})
def review(topic: Annotated[str, Field(description="What to look at")], strict: bool = False) -> str:
    """Ask for a review."""
    return f"Review the {topic}{' strictly' if strict else ''}."


@toolcrib.prompt(complete={"name": lambda value: (f"n{i}" for i in range(10**9)),
                           "other": lambda value: "not a list", "broken": lambda value: 1 / 0})
def many(name: str, other: str = "", broken: str = "") -> str:
    """A prompt whose completions misbehave."""
    return name


@toolcrib.prompt(title="Show the logo")
def show_logo() -> list[Message]:
    """A prompt with an image."""
    return [Message("user", toolcrib.Image(PNG, "image/png")), Message("assistant", "A fine logo.")]


@toolcrib.tool
async def chatty(ctx: Context) -> str:
    """Log at three levels."""
    await ctx.debug("a detail")
    await ctx.info("some news")
    await ctx.warning("a concern")
    return "done"


@toolcrib.tool
async def ask_name(ctx: Context) -> str:
    """Ask the user for a name."""
    answer = await ctx.elicit("Who are you?", {"type": "object", "properties": {
        "name": {"type": "string", "default": "Ada"}}, "required": ["name"]})
    return f"{answer.action} {answer.content}"


class Docs:
    """The pack every test here serves (``test_surface:DOCS`` for the CLI)."""

    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [chatty, ask_name]

    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return [readme, logo, secret, page]

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [review, show_logo, many]


CONFIG = """
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { allow = ["*"] }
prompts = { deny = ["docs__many"] }

[agents.b.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { deny = ["docs://secret", "docs://pages/internal"] }
prompts = { allow = ["docs__review"] }

[agents.bare]
bare_names = true
[agents.bare.permissions]
plugins = { allow = ["*"] }
prompts = { allow = ["*"] }

[agents.none.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
"""
