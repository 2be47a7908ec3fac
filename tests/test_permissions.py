"""Permissions and views: exact visible sets per agent, availability, modes, explain, hidden == nonexistent."""

from __future__ import annotations

import json

import anyio
import pytest

from conftest import cli, make_host
from packs import FILES, MEDIA, MISC
from toolcrib.errors import UnknownToolError

CONFIG = """
[models.qwen-vl]
vision = true
[models.text-model]
vision = false

[packs.media]
image_models = ["flux-schnell"]
default_image_model = "flux-schnell"

[agents.vision]
model = "qwen-vl"
[agents.vision.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.text]
model = "text-model"
[agents.text.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.nothing]
model = "qwen-vl"

[agents.planner]
model = "text-model"
mode = "plan"
[agents.planner.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.nofiles]
model = "text-model"
[agents.nofiles.permissions]
plugins = { deny = ["files"] }
tools = { deny = [] }

[agents.picky]
[agents.picky.permissions]
plugins = { allow = ["files"] }
tools = { deny = ["files__rm", "files__w*"] }

[agents.nodim]
[agents.nodim.permissions]
plugins = { allow = ["*"] }
"""

PACKS = {"files": FILES, "media": MEDIA, "misc": MISC}

EXPECTED = {
    "vision": ["files__read", "files__rm", "files__touch", "files__write", "media__generate_image",
               "media__view_image", "misc__add", "misc__slow", "misc__slow_sync"],
    "text": ["files__read", "files__rm", "files__touch", "files__write", "media__generate_image", "misc__add",
             "misc__slow", "misc__slow_sync"],
    "nothing": [],
    "planner": ["files__read", "misc__add"],
    "nofiles": ["media__generate_image", "misc__add", "misc__slow", "misc__slow_sync"],
    "picky": ["files__read", "files__touch"],
    "nodim": [],
}


@pytest.fixture(scope="module")
def host():  # type: ignore[no-untyped-def]
    return make_host(CONFIG, PACKS)


@pytest.mark.parametrize("agent", sorted(EXPECTED))
def test_each_agent_sees_exactly_its_tools(host, agent: str) -> None:  # type: ignore[no-untyped-def]
    assert host.view(agent).names == EXPECTED[agent]


def test_views_are_built_once_and_reused(host) -> None:  # type: ignore[no-untyped-def]
    assert host.view("vision") is host.view("vision")
    assert host.view("vision").mcp_tools is host.view("vision").mcp_tools


def test_generate_image_needs_image_models_configured() -> None:
    host = make_host(CONFIG.replace('image_models = ["flux-schnell"]', "image_models = []"), PACKS)
    assert "media__generate_image" not in host.view("vision").names
    decision = host.explain("vision", "media__generate_image")
    assert decision is not None
    assert decision.reason == ("not available: no image models are configured ([packs.media] image_models and "
                               "default_image_model)")


def test_explain_gives_every_check(host) -> None:  # type: ignore[no-untyped-def]
    decision = host.explain("picky", "files__write")
    assert decision is not None and not decision.visible
    assert [(c.name, c.passed, c.detail) for c in decision.checks] == [
        ("source", True, "pack 'files': allowed by agents.picky.permissions.plugins.allow 'files'"),
        ("tools", False, "denied by agents.picky.permissions.tools.deny 'files__w*'"),
        ("mode", True, "mode 'default' shows every permitted tool"),
        ("available", True, "the tool has no availability check"),
    ]
    assert host.explain("nothing", "files__read").reason == (
        "agent 'nothing' has no [agents.nothing.permissions] table, so it sees nothing")
    assert host.explain("nodim", "files__read").reason == (
        "agents.nodim.permissions.tools is not set, so nothing of 'tools' is allowed")
    assert host.explain("planner", "files__write").reason == (
        "plan mode shows only tools annotated read-only (readOnlyHint), and this one is not")
    assert host.explain("text", "media__view_image").reason == "is_available said no"
    assert host.explain("nofiles", "files__read").reason == (
        "pack 'files': denied by agents.nofiles.permissions.plugins.deny 'files'")
    assert host.explain("vision", "nope__nothing") is None


def test_availability_that_raises_or_answers_badly_hides_only_that_tool(host) -> None:  # type: ignore[no-untyped-def]
    assert host.explain("vision", "misc__fragile").reason == (
        "is_available raised ZeroDivisionError: division by zero (hidden: fail closed)")
    assert host.explain("vision", "misc__vague").reason == (
        "is_available returned None; expected True, False or a reason (hidden: fail closed)")
    assert "misc__add" in host.view("vision").names


def test_hidden_and_nonexistent_calls_fail_identically(host) -> None:  # type: ignore[no-untyped-def]
    without_files = make_host(CONFIG, {"media": MEDIA, "misc": MISC})

    def error(h, agent: str, name: str) -> tuple[type, tuple[object, ...], str]:  # type: ignore[no-untyped-def]
        with pytest.raises(UnknownToolError) as info:
            anyio.run(lambda: h.call(agent, name, {"path": "x"}))
        return type(info.value), info.value.args, str(info.value)

    hidden = error(host, "picky", "files__rm")  # installed, denied to picky
    nonexistent = error(without_files, "picky", "files__rm")  # not installed at all
    assert hidden == nonexistent == (UnknownToolError, ("Unknown tool: files__rm",), "Unknown tool: files__rm")
    assert host.view("picky").lookup("files__rm") is None


def test_names_are_exact_and_case_sensitive(host) -> None:  # type: ignore[no-untyped-def]
    view = host.view("vision")
    for variant in ["FILES__read", "files__Read", "files__read ", "files.read", "files__read\u200b", "ｆiles__read"]:  # noqa: RUF001
        assert view.lookup(variant) is None
    assert view.lookup("files__read") is not None
    exact = make_host(CONFIG.replace('tools = { deny = ["files__rm", "files__w*"] }',
                                     'tools = { allow = ["FILES__read", "Files__*"] }'), PACKS)
    assert exact.view("picky").names == []


# -- CLI -------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli_env(cli_config):  # type: ignore[no-untyped-def]
    return cli_config(CONFIG, "files=packs:FILES,media=packs:MEDIA,misc=packs:MISC")


run = cli


def test_cli_tools_json_is_the_mcp_list(cli_env: str) -> None:
    code, out, _ = run("tools", "--config", cli_env, "--agent", "planner", "--json")
    assert code == 0
    assert json.loads(out) == [
        {
            "name": "files__read",
            "description": "Read a file.",
            "inputSchema": {
                "additionalProperties": False,
                "properties": {"path": {"description": "File to read", "type": "string"}},
                "required": ["path"],
                "type": "object",
            },
            "annotations": {"readOnlyHint": True},
        },
        {
            "name": "misc__add",
            "description": "Add two integers.",
            "inputSchema": {
                "additionalProperties": False,
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "type": "object",
            },
            "annotations": {"readOnlyHint": True},
        },
    ]


def test_cli_tools_text_and_all(cli_env: str) -> None:
    assert run("tools", "--config", cli_env, "--agent", "picky") == (
        0, "files__read(path: str)   Read a file.\nfiles__touch(path: str)  Create an empty file (never destroys "
           "anything).\n", "")
    code, out, _ = run("tools", "--config", cli_env, "--agent", "picky", "--all")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "visible  files__read"
    assert "hidden   files__rm  (denied by agents.picky.permissions.tools.deny 'files__rm')" in lines
    assert "hidden   media__view_image  (pack 'media': not matched by any pattern of " \
           "agents.picky.permissions.plugins.allow)" in lines
    code, out, _ = run("tools", "--config", cli_env, "--agent", "picky", "--all", "--json")
    items = {item["name"]: item for item in json.loads(out)}
    assert items["files__read"]["visible"] is True
    assert items["files__rm"]["hidden_because"] == "denied by agents.picky.permissions.tools.deny 'files__rm'"


def test_cli_explain(cli_env: str) -> None:
    code, out, _ = run("explain", "--config", cli_env, "--agent", "text", "media__view_image")
    assert code == 1  # hidden (0: visible), as grep says found or not
    assert out == (
        "media__view_image is hidden from agent 'text' (mode 'default').\n"
        "  source      ok    pack 'media': allowed by agents.text.permissions.plugins.allow '*'\n"
        "  tools       ok    allowed by agents.text.permissions.tools.allow '*'\n"
        "  mode        ok    mode 'default' shows every permitted tool\n"
        "  available   FAIL  is_available said no\n"
    )
    code, out, err = run("explain", "--config", cli_env, "--agent", "text", "media__view_imag")
    assert code == 2
    assert err == ("error: no installed source offers a tool, prompt or resource named 'media__view_imag'; did you "
                   "mean media__view_image? (toolcrib plugins lists the sources)\n")


def test_cli_unknown_agent(cli_env: str) -> None:
    code, _, err = run("tools", "--config", cli_env, "--agent", "ghost")
    assert code == 2
    assert err == ("error: unknown agent 'ghost' (configured agents: nodim, nofiles, nothing, picky, planner, text, "
                   "vision)\n")


def test_cli_call_hidden_equals_nonexistent(cli_env: str) -> None:
    hidden = run("call", "--config", cli_env, "--agent", "picky", "files__rm", "--args", '{"path": "x"}')
    missing = run("call", "--config", cli_env, "--agent", "picky", "files__rn", "--args", '{"path": "x"}')
    assert hidden == (2, "", "error: Unknown tool: files__rm\n")
    assert missing == (2, "", "error: Unknown tool: files__rn\n")


def test_cli_check_warns_about_rules_matching_nothing_and_empty_agents(cli_env: str) -> None:
    code, out, err = run("check", "--config", cli_env)
    assert code == 0
    assert err.splitlines() == [
        f"warning: {cli_env}: agents.nodim: the agent sees no tools (see `toolcrib tools --agent nodim --all` for why "
        "each tool is hidden)",
        f"warning: {cli_env}: agents.nothing: the agent sees no tools (it has no permissions table)",
    ]
    assert out == f"{cli_env}: 7 agent(s), 11 tool(s), 0 error(s), 2 warning(s)\n"
    code, _, _ = run("check", "--config", cli_env, "--strict")
    assert code == 1


def test_check_warns_about_specifiers_without_a_subject_and_subagent_rules_matching_no_other_agent() -> None:
    host = make_host("""
[agents.a]
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { deny = ["misc__add(1*)", "nope__x"] }
subagents = { allow = ["b", "a", "c*"] }

[agents.c1]
""", PACKS)
    warnings = [str(p) for p in host.problems() if p.severity == "warning"]
    assert warnings == [
        "warning: toolcrib.toml: agents.a.permissions.tools.deny[0]: 'misc__add(1*)': misc__add names no rule "
        "subject, so the specifier cannot be checked (a deny blocks every call, an allow permits none)",
        "warning: toolcrib.toml: agents.a.permissions.tools.deny[1]: 'nope__x' matches no installed tool",
        "warning: toolcrib.toml: agents.a.permissions.subagents.allow[0]: 'b' matches no other agent",
        "warning: toolcrib.toml: agents.a.permissions.subagents.allow[1]: 'a' matches no other agent",
        "warning: toolcrib.toml: agents.c1: the agent sees no tools (it has no permissions table)",
    ]
