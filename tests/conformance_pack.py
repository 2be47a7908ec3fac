"""The tools, resources and prompts the official MCP conformance suite (@modelcontextprotocol/conformance) asks a
server for, written as an ordinary toolcrib pack: each does exactly what the suite's scenario text says."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Annotated, Any

from pydantic import Field

import toolcrib
from toolcrib import Context, EmbeddedResource, Form, Image, Message, Roots, Sample, Text, ToolError

# a 1x1 red pixel
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJ"
                       "RU5ErkJggg==")
# a tenth of a second of 8 kHz, 8-bit mono silence
WAV = (b"RIFF" + struct.pack("<I", 36 + 800) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 8000, 8000, 1, 8)
       + b"data" + struct.pack("<I", 800) + b"\x80" * 800)


@toolcrib.tool
def test_simple_text() -> str:
    """Return a simple text."""
    return "This is a simple text response for testing."


@toolcrib.tool
def test_image_content() -> Image:
    """Return an image."""
    return Image(PNG, "image/png")


@toolcrib.tool
def test_audio_content() -> toolcrib.Audio:
    """Return a sound."""
    return toolcrib.Audio(WAV, "audio/wav")


@toolcrib.tool
def test_embedded_resource() -> EmbeddedResource:
    """Return an embedded resource."""
    return EmbeddedResource("test://embedded-resource", text="This is an embedded resource content.",
                            mime_type="text/plain")


@toolcrib.tool
def test_multiple_content_types() -> list[Any]:
    """Return text, an image and a resource."""
    return [Text("Multiple content types test:"), Image(PNG, "image/png"),
            EmbeddedResource("test://mixed-content-resource", text=json.dumps({"test": "data", "value": 123}),
                             mime_type="application/json")]


@toolcrib.tool
async def test_tool_with_logging(ctx: Context) -> str:
    """Log three messages while it runs."""
    await ctx.info("Tool execution started")
    await asyncio.sleep(0.05)
    await ctx.info("Tool processing data")
    await asyncio.sleep(0.05)
    await ctx.info("Tool execution completed")
    return "Logged three messages."


@toolcrib.tool
def test_error_handling() -> str:
    """Fail, always."""
    raise ToolError("This tool intentionally returns an error for testing")


@toolcrib.tool
async def test_tool_with_progress(ctx: Context) -> str:
    """Report progress 0, 50 and 100 of 100."""
    await ctx.report_progress(0, 100)
    await asyncio.sleep(0.05)
    await ctx.report_progress(50, 100)
    await asyncio.sleep(0.05)
    await ctx.report_progress(100, 100)
    return "Reported progress."


@toolcrib.tool
async def test_reconnection() -> str:
    """Run longer than the config's http_stream_seconds: the stream closes mid-call, the client resumes it."""
    await asyncio.sleep(1.0)
    return "Reconnected."


@toolcrib.tool
async def test_sampling(prompt: Annotated[str, Field(description="The prompt to send to the LLM")],
                        ctx: Context) -> str:
    """Ask the client's model."""
    reply = await ctx.sample([{"role": "user", "content": {"type": "text", "text": prompt}}], max_tokens=100)
    content = reply.get("content")
    text = content.get("text", "") if isinstance(content, dict) else ""
    return f"LLM response: {text}"


@toolcrib.tool
async def test_elicitation(message: Annotated[str, Field(description="The message to show the user")],
                           ctx: Context) -> str:
    """Ask the user for a name and an email address."""
    answer = await ctx.elicit(message, {
        "type": "object",
        "properties": {"username": {"type": "string", "description": "User's response"},
                       "email": {"type": "string", "description": "User's email address"}},
        "required": ["username", "email"],
    })
    return f"User response: action={answer.action}, content={json.dumps(answer.content)}"


@toolcrib.tool
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Ask with a default for every primitive type."""
    answer = await ctx.elicit("Please review your details", {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    })
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content)}"


@toolcrib.tool
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Ask with each kind of enum."""
    answer = await ctx.elicit("Please choose", {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [{"const": "value1", "title": "First Option"},
                                                         {"const": "value2", "title": "Second Option"},
                                                         {"const": "value3", "title": "Third Option"}]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                           "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                                 {"const": "value2", "title": "Second Choice"},
                                                                 {"const": "value3", "title": "Third Choice"}]}},
        },
    })
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content)}"


json_schema_2020_12_tool = toolcrib.tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                   "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                   "phone": {"type": "string"}, "email": {"type": "string"}},
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}, lambda args: f"Hello {args.get('name', 'nobody')}")


# -- MCP 2026-07-28's fixtures: questions under the suite's keys (SEP-2322), capabilities (SEP-2575), headers -------


def form(message: str, field: str, kind: str = "string") -> Form:
    return Form(message, {"type": "object", "properties": {field: {"type": kind}}, "required": [field]})


def said(message: str) -> Sample:
    return Sample([{"role": "user", "content": {"type": "text", "text": message}}], max_tokens=100)


@toolcrib.tool
async def test_input_required_result_elicitation(ctx: Context) -> str:
    """Ask for the user's name."""
    answers = await ctx.ask({"user_name": form("What is your name?", "name")})
    return f"Hello, {(answers['user_name'].content or {}).get('name')}!"


@toolcrib.tool
async def test_input_required_result_sampling(ctx: Context) -> str:
    """Ask the client's model a question."""
    answers = await ctx.ask({"capital_question": said("What is the capital of France?")})
    return f"Sampling response: {answers['capital_question']['content'].get('text')}"


@toolcrib.tool
async def test_input_required_result_list_roots(ctx: Context) -> str:
    """Ask for the client's roots."""
    roots = (await ctx.ask({"client_roots": Roots()}))["client_roots"]
    return f"Client exposed {len(roots)} root(s): {', '.join(root['uri'] for root in roots)}"


@toolcrib.tool
async def test_input_required_result_request_state(ctx: Context) -> str:
    """Ask for a confirmation (the round's state is toolcrib's sealed one, verified when it comes back)."""
    await ctx.ask({"confirm": form("Please confirm", "ok", "boolean")})
    return "state-ok: requestState verified and confirmation received"


@toolcrib.tool
async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
    """Ask three questions at once."""
    answers = await ctx.ask({"user_name": form("What is your name?", "name"),
                             "greeting": Sample([{"role": "user", "content": {"type": "text",
                                                                              "text": "Generate a greeting"}}],
                                                max_tokens=50),
                             "client_roots": Roots()})
    return (f"{answers['greeting']['content'].get('text')} {(answers['user_name'].content or {}).get('name')}, "
            f"{len(answers['client_roots'])} root(s) visible")


@toolcrib.tool
async def test_input_required_result_multi_round(ctx: Context) -> str:
    """Ask one question, then another."""
    name = (await ctx.ask({"step1": form("Step 1: What is your name?", "name")}))["step1"]
    color = (await ctx.ask({"step2": form("Step 2: What is your favorite color?", "color")}))["step2"]
    return f"Multi-round complete: {(name.content or {}).get('name')} likes {(color.content or {}).get('color')}"


@toolcrib.tool
async def test_input_required_result_tampered_state(ctx: Context) -> str:
    """Ask for a confirmation; a state changed on the way back is refused before this runs again."""
    await ctx.ask({"confirm": form("Please confirm", "ok", "boolean")})
    return "integrity-ok: requestState verified"


@toolcrib.tool
async def test_input_required_result_capabilities(ctx: Context) -> str:
    """Ask only what the client declared it can answer."""
    wanted = {"greeting": said("Generate a short greeting"), "user_name": form("What is your name?", "name"),
              "client_roots": Roots()}
    questions = {key: question for key, question in wanted.items() if ctx.can_ask(question)}
    if not questions:
        return "No declared client capability supports an in-band input request"
    await ctx.ask(questions)
    return "Capability-aware input requests fulfilled"


@toolcrib.tool
async def test_missing_capability(ctx: Context) -> str:
    """Needs the client's model: a client that did not declare sampling gets the missing-capability error."""
    await ctx.ask({"capability_sample": said("Need sampling to continue")})
    return "Success"


@toolcrib.tool
async def test_streaming_elicitation(ctx: Context) -> str:
    """Ask the user (on 2026-07-28 an input-required result, never a request on the response's stream)."""
    answers = await ctx.ask({"user_name": form("What is your name?", "name")})
    return f"Hello, {(answers['user_name'].content or {}).get('name')}!"


@toolcrib.tool
async def test_logging_tool(ctx: Context) -> str:
    """Log a line (sent only to a client that asked for log messages)."""
    await ctx.info("Per-request log line")
    return "Logging tool complete"


ADDED: set[str] = set()  # what the triggers below have added (each call of one adds its item, or takes it away)


@toolcrib.tool
def test_trigger_tool_change() -> str:
    """Add test_added_tool to the tool list, or take it away: the host loads again and listeners hear of it."""
    ADDED.symmetric_difference_update({"tool"})
    toolcrib.catalog_changed()
    return "test_added_tool"


@toolcrib.tool
def test_trigger_prompt_change() -> str:
    """Add test_added_prompt to the prompt list, or take it away."""
    ADDED.symmetric_difference_update({"prompt"})
    toolcrib.catalog_changed()
    return "test_added_prompt"


@toolcrib.tool
def test_added_tool() -> str:
    """Added by test_trigger_tool_change."""
    return "test_added_tool"


@toolcrib.prompt
def test_added_prompt() -> str:
    """Added by test_trigger_prompt_change."""
    return "test_added_prompt"


test_x_mcp_header = toolcrib.tool("test_x_mcp_header", "A tool whose region argument is mirrored into a header", {
    "type": "object",
    "properties": {"region": {"type": "string", "description": "mirrored into Mcp-Param-Region",
                              "x-mcp-header": "Region"},
                   "level": {"type": "integer", "description": "not mirrored"}},
}, lambda args: f"region={args.get('region', '<none>')}")


@toolcrib.prompt
async def test_input_required_result_prompt(ctx: Context) -> str:
    """A prompt that asks the user for its context first."""
    answers = await ctx.ask({"user_context": form("What context should the prompt use?", "context")})
    return f"Prompt with context: {(answers['user_context'].content or {}).get('context')}"


@toolcrib.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@toolcrib.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource."""
    return PNG


@toolcrib.resource("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> dict[str, Any]:
    """Data for an ID."""
    return {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}


@toolcrib.resource("test://watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients may subscribe to."""
    return "Watched resource content."


@toolcrib.prompt
def test_simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


CITIES = ["paris", "park", "party", "test", "testing"]


@toolcrib.prompt(complete={"arg1": lambda value: [c for c in CITIES if c.startswith(value)]})
def test_prompt_with_arguments(arg1: Annotated[str, Field(description="First test argument")],
                               arg2: Annotated[str, Field(description="Second test argument")]) -> str:
    """A prompt with two arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@toolcrib.prompt
def test_prompt_with_embedded_resource(
    resourceUri: Annotated[str, Field(description="URI of the resource to embed")],
) -> list[Message]:
    """A prompt that embeds a resource."""
    return [Message("user", EmbeddedResource(resourceUri, text="Embedded resource content for testing.",
                                             mime_type="text/plain")),
            Message("user", "Please process the embedded resource above.")]


@toolcrib.prompt
def test_prompt_with_image() -> list[Message]:
    """A prompt with an image."""
    return [Message("user", Image(PNG, "image/png")), Message("user", "Please analyze the image above.")]


# -- the fixtures of the suite's tasks scenarios (io.modelcontextprotocol/tasks, SEP-2663; 0.2.x) --------------


@toolcrib.tool(name="greet")
def greet(name: str) -> str:
    """Greet someone (never a task)."""
    return f"Hello, {name}!"


@toolcrib.tool(task="optional")
async def slow_compute(seconds: Annotated[float, Field(ge=0)], label: str = "") -> str:
    """Compute for a while: sleep the given seconds, then answer."""
    await asyncio.sleep(seconds)
    return f"computed {label} after {seconds:g} s"


@toolcrib.tool(task="required")
async def failing_job() -> str:
    """A job that fails as a tool, after about a second (runs only as a task)."""
    await asyncio.sleep(1)
    raise ToolError("the job failed")


@toolcrib.tool(task="optional")
async def protocol_error_job() -> str:
    """Meant to fail at the protocol level; a toolcrib pack cannot (every failure of a handler is an error result)."""
    raise ToolError("a pack's failure is a tool's error result, never a protocol error")


@toolcrib.tool(task="optional")
async def confirm_delete(filename: str, ctx: Context) -> str:
    """Ask before deleting a file."""
    answer = await ctx.elicit(f"Delete {filename}?", {"type": "object", "properties": {
        "confirm": {"type": "boolean"}}})
    return f"{filename}: {answer.action}"


@toolcrib.tool(task="optional")
async def multi_input(ctx: Context) -> str:
    """Ask two questions at once."""
    first, second = await asyncio.gather(
        ctx.elicit("First?", {"type": "object", "properties": {"a": {"type": "string"}}}),
        ctx.elicit("Second?", {"type": "object", "properties": {"b": {"type": "string"}}}))
    return f"{first.action} and {second.action}"


TASK_TOOLS = [greet, slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input]


MODERN_TOOLS = [test_input_required_result_elicitation, test_input_required_result_sampling,
                test_input_required_result_list_roots, test_input_required_result_request_state,
                test_input_required_result_multiple_inputs, test_input_required_result_multi_round,
                test_input_required_result_tampered_state, test_input_required_result_capabilities,
                test_missing_capability, test_streaming_elicitation, test_logging_tool, test_x_mcp_header,
                test_trigger_tool_change, test_trigger_prompt_change]


class ConformancePack:
    """The fixtures of the 2025-11-25 scenarios and of 2026-07-28's; with ``tasks``, the tasks extension's too."""

    def __init__(self, tasks: bool = False) -> None:
        self.tasks = tasks

    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [*(TASK_TOOLS if self.tasks else []), test_simple_text, test_image_content, test_audio_content,
                test_embedded_resource, test_multiple_content_types, test_tool_with_logging, test_error_handling,
                test_tool_with_progress, test_reconnection, test_sampling, test_elicitation,
                test_elicitation_sep1034_defaults, test_elicitation_sep1330_enums, json_schema_2020_12_tool,
                *MODERN_TOOLS, *([test_added_tool] if "tool" in ADDED else [])]

    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return [static_text, static_binary, template_data, watched_resource]

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [test_simple_prompt, test_prompt_with_arguments, test_prompt_with_embedded_resource,
                test_prompt_with_image, test_input_required_result_prompt,
                *([test_added_prompt] if "prompt" in ADDED else [])]


PACK = ConformancePack()
ALL = ConformancePack(tasks=True)


TOKEN = "conformance-token-0123456789"

CONFIG = """
[host]
http_stream_seconds = 0.3

[agents.judge]
token_env = "TOK_JUDGE"
bare_names = true
[agents.judge.permissions]
plugins = { allow = ["conformance"] }
tools = { allow = ["*"] }
resources = { allow = ["*"] }
prompts = { allow = ["*"] }

[agents.silent]
"""
