"""Operator curation ([tools."<namespace>__<tool>"]): a tool of any source served under another name, with other
texts, annotations the operator vouches for, and arguments fixed or given defaults; every mistake named by check."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolcrib
from conftest import cli, make_host
from packs import FILES, MISC

AGENTS = """
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.planner]
mode = "plan"
[agents.planner.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["files__peek", "misc__add"] }
"""

CURATED = AGENTS + """
[tools.files__read]
name = "peek"
title = "Peek"
description = "Peek into a file of the project."
[tools.files__read.arguments.path]
default = "README.md"
description = "The file, relative to the project"

[tools.misc__add]
annotations = { readOnlyHint = true }
[tools.misc__add.arguments.b]
value = 100
"""


def call(host: Any, tool: str, arguments: dict[str, Any], agent: str = "a") -> Any:
    return anyio.run(lambda: host.call(agent, tool, arguments))


def test_a_curated_tool_is_served_as_the_operator_says() -> None:
    host = make_host(CURATED, {"files": FILES, "misc": MISC})
    tools = {t["name"]: t for t in host.view("a").mcp_tools}
    assert "files__read" not in tools  # served under its new name only
    assert tools["files__peek"] == {
        "name": "files__peek", "title": "Peek", "description": "Peek into a file of the project.",
        "inputSchema": {"additionalProperties": False, "type": "object", "properties": {"path": {
            "type": "string", "description": "The file, relative to the project", "default": "README.md"}}},
        "annotations": {"readOnlyHint": True},
    }
    assert tools["misc__add"]["inputSchema"] == {"additionalProperties": False, "type": "object",
                                                 "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert tools["misc__add"]["annotations"] == {"readOnlyHint": True}
    # defaults fill in, given values stay; a fixed argument is always its value, and giving it is refused
    assert call(host, "files__peek", {}).text == "contents of README.md"
    assert call(host, "files__peek", {"path": "x.txt"}).text == "contents of x.txt"
    assert call(host, "misc__add", {"a": 1}).text == "101"
    refused = call(host, "misc__add", {"a": 1, "b": 2})
    assert (refused.is_error, refused.text) == (True, "Invalid arguments for misc__add:\n- b: unknown argument "
                                                      "(fixed by the operator)")
    # rules use the served name, and annotations the operator set count in plan mode
    assert host.view("planner").names == ["files__peek", "misc__add"]
    with pytest.raises(toolcrib.UnknownToolError, match=r"^Unknown tool: files__read$"):
        call(host, "files__read", {"path": "x"})
    assert host.problems() == []


def test_explain_and_the_audit_log_show_the_served_name_and_the_changes(cli_config: Any, tmp_path: Path) -> None:
    config = cli_config('[host]\naudit_log = "audit.jsonl"\n' + CURATED, "files=packs:FILES,misc=packs:MISC")
    code, out, _ = cli("explain", "--config", config, "--agent", "a", "files__peek")
    assert code == 0
    assert out.splitlines()[:6] == [
        "files__peek is visible to agent 'a' (mode 'default').",
        "  curated: served as files__peek (its source serves it as files__read)",
        "  curated: description replaced",
        "  curated: title replaced",
        "  curated: argument path defaults to \"README.md\"",
        "  curated: argument path described anew",
    ]
    code, out, _ = cli("explain", "--config", config, "--agent", "a", "misc__add", "--json")
    assert json.loads(out)["curation"] == {"original": "misc__add", "changes": [
        "annotations set: readOnlyHint=true", "argument b fixed to 100"]}
    assert cli("call", "--config", config, "--agent", "a", "misc__add", "--args", '{"a": 2}')[:2] == (0, "102\n")
    record = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert (record["tool"], record["decision"]) == ("misc__add", "allowed")


def test_a_fixed_argument_still_meets_the_argument_rules() -> None:
    text = AGENTS.replace('tools = { allow = ["*"] }', 'tools = { deny = ["files__read(secrets/*)"] }', 1) + """
[tools.files__read.arguments.path]
value = "secrets/key"
"""
    host = make_host(text, {"files": FILES})
    denied = call(host, "files__read", {})
    assert denied.text == ("Permission denied: files__read with path='secrets/key' is denied by the agent's "
                           "permissions (rule 'files__read(secrets/*)').")


@pytest.mark.parametrize(("table", "problem"), [
    ('[tools.files__nope]\ndescription = "x"',
     'error: toolcrib.toml: tools.files__nope: no installed source offers a tool named \'files__nope\' (the name to '
     'give is the one its source serves it under)'),
    ('[tools.files__read.arguments.bogus]\ndefault = "x"',
     "error: toolcrib.toml: tools.files__read.arguments.bogus: files__read takes no argument 'bogus' (it takes: "
     "path)"),
    ('[tools.misc__add.arguments.b]\nvalue = "many"',
     "error: toolcrib.toml: tools.misc__add.arguments.b.value: 'many' is not a value the tool takes: 'many' is "
     "not of type 'integer'"),
    ('[tools.files__read]\nname = "write"',
     "error: toolcrib.toml: tools: files__read, files__write would all be served as 'files__write'; none of them is "
     "served: rename one"),
])
def test_every_curation_mistake_is_an_error_check_names(table: str, problem: str) -> None:
    host = make_host(AGENTS + table, {"files": FILES, "misc": MISC})
    assert [str(p) for p in host.problems() if p.severity == "error"] == [problem]
    if "would all be served" in problem:
        assert "files__write" not in host.view("a").names and "files__read" not in host.view("a").names


@pytest.mark.parametrize(("table", "problem"), [
    ('[tools.read]\ndescription = "x"', 'tools.read: expected the full name of a tool, <namespace>__<tool>, as '
                                        "its source serves it"),
    ('[tools.files__read]\nname = "files__peek"', "tools.files__read.name: 'files__peek': tool names are 1-64 "
     "characters: a letter first, then letters, digits and single underscores ('__' is reserved) (the namespace "
     'stays: name = "calc" serves it as files__calc)'),
    ('[tools.files__read]\nannotations = { readonly = true }', 'tools.files__read.annotations.readonly: not an MCP '
     "tool annotation; they are title, readOnlyHint, destructiveHint, idempotentHint, openWorldHint"),
    ('[tools.files__read]\nannotations = { readOnlyHint = "yes" }', 'tools.files__read.annotations.readOnlyHint: '
     "expected bool, got 'yes'"),
    ('[tools.files__read.arguments.path]\nvalue = "a"\ndefault = "b"', 'tools.files__read.arguments.path: a fixed '
     "value leaves the schema, so it takes no default or description"),
])
def test_a_curation_table_that_cannot_be_right_is_a_config_error(table: str, problem: str,
                                                                 cli_config: Any) -> None:
    config = cli_config(AGENTS + table, "files=packs:FILES")
    code, _, err = cli("check", "--config", config)
    assert code == 2
    lines = err.splitlines()  # the CLI adds the line the key is on: toolcrib.toml:12
    assert len(lines) == 1 and re.fullmatch(rf"error: {re.escape(str(config))}:\d+: {re.escape(problem)}", lines[0])
