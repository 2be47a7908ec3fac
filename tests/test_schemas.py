"""Served schemas every agent framework reads: self-contained (no ``$defs``/``$ref`` but a recursive model's),
nullables as type lists, the same on the wire and in every export; and OpenAI's strict mode, or why not."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import toolcrib
from conftest import cli, make_host
from framework_pack import Address, Color
from packs import ORDER
from toolcrib.schemas import NotStrict, recursive, self_contained, strict


class Node(BaseModel):
    name: str
    children: list[Node] = []


@toolcrib.tool
def order(color: Color, address: Address, size: Literal["s", "m"] | None = None,
          notes: dict[str, str] | None = None) -> str:
    """Order something."""
    return f"{color.value} to {address.street}"


@toolcrib.tool
def tree(root: Node) -> str:
    """Walk a tree."""
    return root.name


@toolcrib.tool
def plain(text: str, count: int = 1) -> str:
    """Plain arguments, repeated count times and joined."""
    return text * count


@toolcrib.resource("notes://today", name="today", description="Today's notes.")
def today() -> str:
    return "notes"


@toolcrib.resource("notes://archive/{year}", name="archive_by_year", description="A year's notes.")
def archive(year: str) -> str:
    return year


class Pack:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [order, tree, plain]

    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return [today, archive]


PACK = Pack()  # for the CLI (TOOLCRIB_PLUGINS names it)


CONFIG = ('[agents.a.permissions]\nplugins = { allow = ["kit"] }\ntools = { allow = ["*"] }\n'
          'resources = { allow = ["*"] }\n')
NODE = {"properties": {"name": {"type": "string"}, "children": {
    "default": [], "items": {"$ref": "#/$defs/Node"}, "type": "array"}}, "required": ["name"], "title": "Node",
    "type": "object"}


def test_a_pack_tool_s_served_schema_is_self_contained_with_nullables_as_type_lists() -> None:
    host = make_host(CONFIG, {"kit": Pack()})
    served = {t["name"]: t["inputSchema"] for t in host.view("a").mcp_tools}
    assert served["kit__order"] == ORDER
    # a recursive model cannot be inlined: its $ref and the one definition it needs stay
    assert served["kit__tree"] == {"additionalProperties": False, "properties": {"root": NODE}, "required": ["root"],
                                   "type": "object", "$defs": {"Node": NODE}}
    # what the tool declared is as pydantic wrote it (the lock's, validation's)
    assert "$defs" in host.catalog.entries["kit__order"].tool.input_schema
    # every export serves the same
    openai = {t["function"]["name"]: t["function"]["parameters"] for t in host.view("a").export("openai")}
    anthropic = {t["name"]: t["input_schema"] for t in host.view("a").export("anthropic")}
    assert openai == anthropic == served
    # and a call shaped like the served schema is the one the tool takes
    result = host.call_sync("a", "kit__order", {"color": "red", "address": {"street": "Main St", "city": None},
                                                "size": None})
    assert (result.is_error, result.text) == (False, "red to Main St")


def test_check_names_a_tool_with_a_recursive_model() -> None:
    host = make_host(CONFIG, {"kit": Pack()})
    assert [(p.severity, p.where, p.message) for p in host.problems(env={}) if "recursive" in p.message] == [
        ("warning", "pack 'kit'", "kit__tree: its input schema holds a recursive model (Node), served with $ref and "
         "$defs: some agent frameworks do not follow them (openai-agents' strict mode, llama-index)")]


def test_self_contained_inlines_draft_7_definitions_keeps_siblings_and_changes_nothing_it_need_not() -> None:
    given = {"type": "object", "definitions": {"Unit": {"type": "string", "enum": ["c", "f"]}},
             "properties": {"unit": {"$ref": "#/definitions/Unit", "description": "Which scale"},
                            "$ref": {"type": "integer"},  # a property of that name is a property, not a reference
                            "at": {"anyOf": [{"const": "now", "type": "string"}, {"type": "null"}]}}}
    assert self_contained(given) == {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["c", "f"], "description": "Which scale"},
        "$ref": {"type": "integer"},
        "at": {"type": ["string", "null"], "enum": ["now", None]}}}
    declared = {"$schema": "http://json-schema.org/draft-07/schema#", **given}  # a document naming its dialect
    assert self_contained(declared) == {"$schema": "http://json-schema.org/draft-07/schema#", **self_contained(given),
                                        "definitions": given["definitions"]}  # keeps its definitions (SEP-1613)
    plain_schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert self_contained(plain_schema) is plain_schema  # nothing to change: no copy
    kept = {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]}
    assert self_contained(kept) is kept  # only a plain member becomes a type list
    dangling = {"properties": {"x": {"$ref": "#/$defs/Missing"}}}
    assert self_contained(dangling) is dangling
    assert recursive({"$defs": {"A": {"properties": {"b": {"$ref": "#/$defs/B"}}},
                                "B": {"properties": {"a": {"$ref": "#/$defs/A"}}}},
                      "properties": {"a": {"$ref": "#/$defs/A"}}}) == ["A"]


def test_strict_closes_every_object_and_requires_every_argument_keeping_defaults_as_hints() -> None:
    # as openai-agents' own conversion does: the model gives every argument (null would not be a valid count)
    assert strict({"type": "object", "properties": {"text": {"type": "string"}, "count": {
        "type": "integer", "default": 1}}, "required": ["text"]}) == {
        "type": "object", "properties": {"text": {"type": "string"}, "count": {"type": "integer", "default": 1}},
        "required": ["text", "count"], "additionalProperties": False}
    host = make_host(CONFIG, {"kit": Pack()})
    with pytest.raises(NotStrict) as refused:
        strict(host.view("a").mcp_tools[0]["inputSchema"])
    assert (refused.value.argument, refused.value.why) == (
        "notes", "a mapping of free-form keys (a dict), which strict mode cannot describe")
    with pytest.raises(NotStrict) as refused:
        strict({"type": "object", "properties": {"when": {"type": "string", "oneOf": []}}})
    assert str(refused.value) == "when: strict mode does not take 'oneOf'"


def test_schema_strict_exports_strict_tools_and_names_each_that_cannot_be(cli_config: Any) -> None:
    config = cli_config(CONFIG, "kit=test_schemas:PACK")
    code, out, err = cli("schema", "--config", config, "--agent", "a", "--format", "openai", "--strict")
    assert code == 0
    tools = {t["function"]["name"]: t["function"] for t in json.loads(out)}
    assert {name: tool["strict"] for name, tool in tools.items()} == {
        "kit__order": False, "kit__tree": False, "kit__plain": True}
    assert tools["kit__plain"]["parameters"] == {"additionalProperties": False, "properties": {
        "text": {"type": "string"}, "count": {"default": 1, "type": "integer"}}, "required": ["text", "count"],
        "type": "object"}
    assert err.splitlines() == [
        "toolcrib: kit__order is not strict: notes: a mapping of free-form keys (a dict), which strict mode cannot "
        "describe",
        "toolcrib: kit__tree is not strict: a recursive model (Node)"]
    code, _, err = cli("schema", "--config", config, "--agent", "a", "--format", "anthropic", "--strict")
    assert code == 2 and "--strict is OpenAI's: use it with --format openai or openai-responses" in err


def test_tools_shows_real_types_in_one_quoting_style_within_the_terminal_s_width(
        cli_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = cli_config(CONFIG, "kit=test_schemas:PACK")
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = cli("tools", "--config", config, "--agent", "a")
    assert (code, out.splitlines()) == (0, [
        "kit__order(color: Color('red' | 'green'), address: Address, size: 's' | 'm' | None = None, notes: "
        "dict[str, str] | None = None)",
        "    Order something.",
        "kit__plain(text: str, count: int = 1)  Plain arguments, repeated count times and joined.",
        "kit__tree(root: Node)                  Walk a tree."])
    monkeypatch.setenv("COLUMNS", "60")  # under 40 characters left for descriptions: each on its own line
    code, out, _ = cli("tools", "--config", config, "--agent", "a")
    assert out.splitlines()[2:] == ["kit__plain(text: str, count: int = 1)",
                                    "    Plain arguments, repeated count times and joined.",
                                    "kit__tree(root: Node)", "    Walk a tree."]
    monkeypatch.setenv("COLUMNS", "40")  # and cut to the terminal's width
    code, out, _ = cli("tools", "--config", config, "--agent", "a")
    assert out.splitlines()[3] == "    Plain arguments, repeated count t..."


def test_resources_lines_up_its_columns(cli_config: Any) -> None:
    code, out, _ = cli("resources", "--config", cli_config(CONFIG, "kit=test_schemas:PACK"), "--agent", "a")
    assert (code, out.splitlines()) == (0, [
        "notes://today           kit__today            Today's notes.",
        "notes://archive/{year}  kit__archive_by_year  A year's notes."])


def test_check_hints_once_when_an_agent_sees_a_pack_s_tools_but_no_rule_gives_its_resources_or_prompts() -> None:
    @toolcrib.prompt
    def greet(name: str) -> str:
        """Greet someone."""
        return f"Hello {name}"

    class WithPrompt(Pack):
        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [greet]

    text = ('[agents.a.permissions]\nplugins = { allow = ["kit"] }\ntools = { allow = ["*"] }\n'
            '[agents.b.permissions]\nplugins = { allow = ["kit"] }\ntools = { allow = ["*"] }\n'
            'resources = { allow = ["*"] }\n')
    host = make_host(text, {"kit": WithPrompt()})
    hints = [(p.where, p.message) for p in host.problems(env={}) if "no rule permits" in p.message]
    assert hints == [
        ("toolcrib.toml: agents.a.permissions", "agent 'a' sees 'kit''s tools but none of its 2 resources and 1 prompt:"
         ' no rule permits them (add resources = { allow = ["kit__*"] } and prompts = { allow = ["kit__*"] } if it '
         "should have them)"),
        ("toolcrib.toml: agents.b.permissions", "agent 'b' sees 'kit''s tools but none of its 1 prompt: no rule "
         'permits them (add prompts = { allow = ["kit__*"] } if it should have them)')]


def test_clean_schema_copies_only_what_it_cleans_and_names_every_hidden_place() -> None:
    from toolcrib.names import clean_schema

    plain = {"type": "object", "properties": {"a": {"type": "integer", "title": "A"}}, "required": ["a"]}
    assert clean_schema(plain) is plain and clean_schema(plain, []) is plain  # nothing to clean: no copy
    prose = {"type": "object", "title": "Q\u200b",
             "properties": {"a": {"description": "an \x1b[31ma\x1b[0m\u202e", "enum": ["x"]}, "b": {"type": "string"}},
             "examples": [{"a": "x\u200b"}]}
    cleaned = clean_schema(prose)
    assert cleaned == {"type": "object", "title": "Q",
                       "properties": {"a": {"description": "an a", "enum": ["x"]}, "b": {"type": "string"}},
                       "examples": [{"a": "x"}]}
    assert list(cleaned) == list(prose) and list(cleaned["properties"]) == ["a", "b"]  # the order kept
    assert cleaned["properties"]["b"] is prose["properties"]["b"]  # what needed nothing is shared, not copied
    assert prose["title"] == "Q\u200b"  # the schema given is never changed
    either = {"anyOf": [{"type": "string", "description": "s\u200b"}, {"type": "null"}], "default": None}
    assert clean_schema(either) == {"anyOf": [{"type": "string", "description": "s"}, {"type": "null"}],
                                    "default": None}  # prose in a list of schemas, among plain values
    hidden: list[str] = []
    meaning = {"properties": {"mo\u200bde": {"enum": ["on", "o\u202eff"]}}, "required": ["mo\u200bde"]}
    assert clean_schema(meaning, hidden, "inputSchema") is meaning  # meaning cannot be cleaned: only reported
    assert hidden == ["inputSchema.properties.mo\u200bde", "inputSchema.properties.mo\u200bde.enum[1]",
                      "inputSchema.required[0]"]
