"""Small packs used across the tests, registered inline (``Host(..., plugins={"files": FILES})``)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from pydantic import BaseModel, Field

import toolcrib
from toolcrib import Context, Deny, PolicyRequest


class Pack:
    """A pack as an object: tools, an optional settings model, optional policy hooks."""

    def __init__(self, *tools: Any, settings: type[BaseModel] | None = None) -> None:
        self.tools = list(tools)
        self.settings_model = settings

    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return self.tools

    @toolcrib.hookimpl
    def toolcrib_settings_model(self) -> type[BaseModel] | None:
        return self.settings_model


@toolcrib.tool(annotations={"readOnlyHint": True}, rule_subject="path")
def read(path: Annotated[str, Field(description="File to read")]) -> str:
    """Read a file."""
    return f"contents of {path}"


@toolcrib.tool(annotations={"destructiveHint": True}, rule_subject="path")
def write(path: str, text: str) -> str:
    """Write a file."""
    return f"wrote {len(text)} characters to {path}"


@toolcrib.tool(annotations={"destructiveHint": False}, rule_subject="path")
def touch(path: str) -> str:
    """Create an empty file (never destroys anything)."""
    return f"touched {path}"


@toolcrib.tool(annotations={"destructiveHint": True})
def rm(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


FILES = Pack(read, write, touch, rm)


class Policy:
    """Keeps ``files__rm`` from agent a, and every call that names a path under secret/ from everyone."""

    def __init__(self) -> None:
        self.asked: list[PolicyRequest] = []

    @toolcrib.hookimpl
    def toolcrib_policy(self, request: PolicyRequest) -> Deny | None:
        self.asked.append(request)
        if request.action == "list" and request.agent == "a" and request.name == "files__rm":
            return Deny("agent a removes nothing")
        if request.action == "call" and str(request.arguments.get("path", "")).startswith("secret/"):
            return Deny("secret/ is nobody's")
        return toolcrib.Allow() if request.name == "files__touch" else None


FILES_POLICY = Policy()


class MediaSettings(BaseModel):
    image_models: list[str] = []
    default_image_model: str | None = None


@toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: "vision" in ctx.capabilities)
def view_image(path: str) -> str:
    """Look at an image."""
    return f"an image at {path}"


def _image_models_configured(ctx: toolcrib.AvailabilityContext) -> bool | str:
    settings = ctx.settings
    if settings is None or not settings.image_models or settings.default_image_model is None:
        return "no image models are configured ([packs.media] image_models and default_image_model)"
    return True


@toolcrib.tool(annotations={"openWorldHint": True}, is_available=_image_models_configured)
def generate_image(prompt: str, ctx: Context) -> dict[str, Any]:
    """Generate an image from a prompt."""
    return {"model": ctx.settings.default_image_model, "prompt": prompt}


MEDIA = Pack(view_image, generate_image, settings=MediaSettings)


@toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: 1 / 0)
def fragile() -> str:
    """A tool whose availability check raises."""
    return "never"


@toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: None)
def vague() -> str:
    """A tool whose availability check returns neither a bool nor a reason."""
    return "never"


@toolcrib.tool(annotations={"readOnlyHint": True})
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@toolcrib.tool
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@toolcrib.tool
def slow_sync(seconds: float) -> str:
    """Sleep in a worker thread, then answer."""
    time.sleep(seconds)
    return "done"


MISC = Pack(fragile, vague, add, slow, slow_sync)


@toolcrib.tool(annotations={"readOnlyHint": True})
async def chatty(ctx: Context, steps: int = 3) -> str:
    """Report progress and log to the client while working."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    await ctx.info("halfway there")
    return "done"


@toolcrib.tool(annotations={"readOnlyHint": True})
def noisy() -> str:
    """Print to stdout, and have a child process print too: neither may reach the wire."""
    import os
    import sys

    print("stray output from a handler")
    sys.stdout.flush()
    os.system("echo stray output from a child")
    return "quiet on the wire"


TALK = Pack(chatty, noisy)


@toolcrib.resource("notes://today", name="today", mime_type="text/plain")
def today() -> str:
    return "today's notes"


@toolcrib.tool
def touch_note() -> str:
    """Say that today's notes changed (their subscribers hear of it)."""
    toolcrib.resource_updated("notes://today")
    return "updated"


class NotesPack(Pack):
    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return [today]


NOTES = NotesPack(touch_note)


ADDRESS_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]}},
    "properties": {"name": {"type": "string", "minLength": 1}, "address": {"$ref": "#/$defs/address"}},
    "required": ["name"],
    "additionalProperties": False,
}


ADDRESS = {"properties": {"street": {"type": "string"}, "city": {"type": ["string", "null"], "default": None}},
           "required": ["street"], "title": "Address", "type": "object"}
ORDER = {"additionalProperties": False, "properties": {
    "color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
    "address": ADDRESS,
    "size": {"enum": ["s", "m", None], "type": ["string", "null"], "default": None},
    "notes": {"additionalProperties": {"type": "string"}, "type": ["object", "null"], "default": None}},
    "required": ["color", "address"], "type": "object"}


# -- jobs: tools that may run as MCP tasks (tests/test_tasks.py) ---------------------------------------------

GATES: dict[str, asyncio.Event] = {}
RAN: list[str] = []


@toolcrib.tool(task="optional")
async def hold(label: str, ctx: Context) -> str:
    """Wait until the test lets it go."""
    RAN.append(label)
    await ctx.report_progress(1, 2, f"holding {label}")
    await GATES[label].wait()
    return f"held {label}"


@toolcrib.tool
def greet(name: str) -> str:
    """Greet someone."""
    return f"Hello, {name}!"


@toolcrib.tool(task="required")
def only(x: int) -> str:
    """Runs only as a task."""
    return f"only {x}"


@toolcrib.tool(task="optional")
async def ask(ctx: Context) -> str:
    """Ask the user's name."""
    first = await ctx.elicit("Your name?", {"type": "object", "properties": {"name": {"type": "string"}}})
    second = await ctx.elicit("Your town?", {"type": "object", "properties": {"town": {"type": "string"}}})
    return f"{(first.content or {}).get('name')} of {(second.content or {}).get('town')} ({second.action})"


@toolcrib.tool(task="optional")
def fails() -> str:
    """Always fails as a tool."""
    raise toolcrib.ToolError("it did not work")


@toolcrib.tool(task="optional")
def write(text: str) -> str:
    """Write, with approval."""
    return f"wrote {text}"


@toolcrib.tool(task="optional")
async def sign_in(ctx: Context) -> str:
    """Send the user to sign in."""
    return (await ctx.elicit_url("Sign in.", "https://example.com/auth", "s-1")).action


JOBS = Pack(hold, greet, only, ask, fails, write, sign_in)
