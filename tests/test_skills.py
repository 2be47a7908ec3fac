"""Skills from the config and from packs, loaded through toolcrib__load_skill and filtered by `skills` rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import toolcrib
from conftest import make_host
from packs import Pack


def skill(folder: Path, name: str | None, description: str, body: str = "Do the thing.\n") -> Path:
    folder.mkdir(parents=True)
    meta = (f"name: {name}\n" if name else "") + f"description: {description}\n"
    (folder / "SKILL.md").write_text(f"---\n{meta}---\n# {name or folder.name}\n\n{body}")
    return folder


class SkillPack(Pack):
    def __init__(self, *paths: Path) -> None:
        super().__init__()
        self.paths = list(paths)

    @toolcrib.hookimpl
    def toolcrib_skills(self) -> list[Path]:
        return self.paths


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    pdf = skill(tmp_path / "skills" / "pdf", "pdf", "Fill in and read PDF forms.")
    (pdf / "reference.md").write_text("Use pdftk.\n")
    (pdf / "escape").symlink_to(tmp_path)
    return {
        "pdf": pdf,
        "refunds": skill(tmp_path / "pack-skills" / "refunds", None, "How to handle a refund request."),
        "secret": skill(tmp_path / "pack-skills" / "secret", "secret", "Internal only."),
    }


def config(rules: str) -> str:
    return f"""
[skills.pdf]
path = "skills/pdf"

[agents.a]
[agents.a.permissions]
plugins = {{ allow = ["*"] }}
tools = {{ allow = ["*"] }}
skills = {rules}

[agents.none]
[agents.none.permissions]
plugins = {{ allow = ["*"] }}
tools = {{ allow = ["*"] }}
"""


def host_for(tmp_path: Path, folders: dict[str, Path], rules: str) -> toolcrib.Host:
    return make_host(config(rules), {"kb": SkillPack(folders["refunds"], folders["secret"])}, base_dir=tmp_path)


def call(host: toolcrib.Host, agent: str = "a", **args: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call(agent, "toolcrib__load_skill", args))


def test_the_tool_lists_exactly_the_skills_the_agent_may_load(tmp_path: Path, folders: dict[str, Path]) -> None:
    host = host_for(tmp_path, folders, '{ deny = ["secret"] }')
    tools = {t["name"]: t for t in host.view("a").mcp_tools}
    assert tools["toolcrib__load_skill"]["description"] == (
        "Load a skill: expert instructions for a kind of task (its SKILL.md), or one of its other files. Load the "
        "skill before starting a task it covers.\n\nSkills you can load:\n- pdf: Fill in and read PDF forms.\n"
        "- refunds: How to handle a refund request.")
    assert "toolcrib__load_skill" not in host.view("none").names  # no skills rule: no skills
    assert host.explain("none", "toolcrib__load_skill").reason == (
        "not available: none of its skills is permitted by agents.none.permissions.skills")


def test_loading_and_hidden_equals_unknown(tmp_path: Path, folders: dict[str, Path]) -> None:
    host = host_for(tmp_path, folders, '{ deny = ["secret"] }')
    assert call(host, name="pdf").text == (
        "---\nname: pdf\ndescription: Fill in and read PDF forms.\n---\n# pdf\n\nDo the thing.\n\n\n"
        "[Other files of this skill (load one with file=...): reference.md]")
    assert call(host, name="pdf", file="reference.md").text == "Use pdftk.\n"
    assert call(host, name="refunds").text.startswith("---\ndescription: How to handle a refund request.")
    hidden, missing = call(host, name="secret"), call(host, name="nonexistent")
    assert (hidden.is_error, hidden.text) == (True, "Unknown skill: secret")
    assert (missing.is_error, missing.text) == (True, "Unknown skill: nonexistent")


def test_skill_files_stay_inside_the_skill(tmp_path: Path, folders: dict[str, Path]) -> None:
    host = host_for(tmp_path, folders, '{ allow = ["*"] }')
    assert call(host, name="pdf", file="../../outside").text == (
        "'../../outside': '..' is not allowed; paths stay inside the workspace")
    assert call(host, name="pdf", file="escape/skills/pdf/SKILL.md").text == (
        "skill 'pdf': escape: goes through a symbolic link, which file tools do not follow")


def test_a_name_two_sources_claim_is_served_by_neither(tmp_path: Path, folders: dict[str, Path]) -> None:
    twin = skill(tmp_path / "other" / "pdf", "pdf", "Another pdf skill.")
    host = make_host(config('{ allow = ["*"] }'), {"kb": SkillPack(twin)}, base_dir=tmp_path)
    assert [str(p) for p in host.catalog.problems if "skill" in p.where] == [
        "error: skill 'pdf': offered by more than one source (config, pack 'kb'); neither is served"]
    assert "toolcrib__load_skill" not in host.view("a").names


def test_no_skills_no_tool(tmp_path: Path) -> None:
    host = make_host(config('{ allow = ["*"] }').replace('[skills.pdf]\npath = "skills/pdf"\n', ""), {},
                     base_dir=tmp_path)
    assert "toolcrib__load_skill" not in host.catalog.entries


def test_the_toolcrib_namespace_is_reserved_for_the_host() -> None:
    host = make_host(config('{ allow = ["*"] }').replace('[skills.pdf]\npath = "skills/pdf"\n', ""),
                     {"toolcrib": Pack()})
    record = next(r for r in host.records if r.name == "toolcrib" and r.kind == "pack")
    assert record.error == (
        "invalid namespace 'toolcrib': 'toolcrib' is reserved for the host's own tools")


def test_each_skill_the_agent_may_load_is_also_a_prompt(tmp_path: Path, folders: dict[str, Path]) -> None:
    text = config('{ deny = ["secret"] }').replace('skills = { deny = ["secret"] }',
                                                    'skills = { deny = ["secret"] }\nprompts = { allow = ["*"] }')
    text += '\n[agents.b]\n[agents.b.permissions]\nskills = { allow = ["*"] }\nprompts = { allow = ["*"] }\n'
    text += '\n[agents.c]\n[agents.c.permissions]\nskills = { allow = ["*"] }\n'
    extra = skill(tmp_path / "pack-skills" / "tax-forms", "tax-forms", "Fill in tax forms.")
    host = make_host(text, {"kb": SkillPack(folders["refunds"], folders["secret"], extra)}, base_dir=tmp_path)
    view = host.view("a")
    assert view.mcp_prompts == [
        {"name": "toolcrib__pdf", "title": "Skill: pdf", "description": "Fill in and read PDF forms.", "arguments": []},
        {"name": "toolcrib__refunds", "title": "Skill: refunds", "description": "How to handle a refund request.",
         "arguments": []},
        {"name": "toolcrib__tax_forms", "title": "Skill: tax-forms", "description": "Fill in tax forms.",
         "arguments": []},
    ]  # not the skill the skills rule denies
    got = anyio.run(lambda: view.get_prompt("toolcrib__pdf"))
    assert got["messages"] == [{"role": "user", "content": {"type": "text", "text": call(host, name="pdf").text}}]
    with pytest.raises(toolcrib.UnknownPromptError, match=r"^Unknown prompt: toolcrib__secret$"):
        anyio.run(lambda: view.get_prompt("toolcrib__secret"))
    assert [p["name"] for p in host.view("b").mcp_prompts] == [
        "toolcrib__pdf", "toolcrib__refunds", "toolcrib__secret", "toolcrib__tax_forms"]
    assert host.view("c").mcp_prompts == []  # the skills rule alone does not serve prompts: no prompts rule


# -- skill sub-agents (seed 002's call_skill_sub_agent) --------------------------------------------------------


SUB = """
[skills.review]
path = "skills/review"
[skills.pdf]
path = "skills/pdf"

[agents.a]
[agents.a.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["files__read", "toolcrib__*"] }}
skills = {rules}
"""


def test_a_sub_agent_skill_runs_as_its_caller_with_the_skills_instructions(tmp_path: Path) -> None:
    from models import ScriptedModel, text, use
    from packs import FILES

    review = skill(tmp_path / "skills" / "review", "review", "Review a change for risky edits.",
                   "Read each file named in the task; list risky lines.\n")
    marked = (review / "SKILL.md").read_text().replace("---\nname", "---\nsub-agent: true\nname")
    (review / "SKILL.md").write_text(marked)
    skill(tmp_path / "skills" / "pdf", "pdf", "Fill in PDF forms.")
    host = make_host(SUB.format(rules='{ allow = ["*"] }'), {"files": FILES}, base_dir=tmp_path)
    tools = {t["name"]: t for t in host.view("a").mcp_tools}
    assert sorted(tools) == ["files__read", "toolcrib__call_skill_sub_agent", "toolcrib__load_skill"]
    assert tools["toolcrib__call_skill_sub_agent"]["description"].endswith(
        "Skills that run as sub-agents:\n- review: Review a change for risky edits.")
    model = ScriptedModel(
        {"role": "assistant", "model": "scripted", "content": [
            use("files__read", {"path": "a.py"}), use("files__write", {"path": "a.py", "text": "x"}, id="u2"),
            use("toolcrib__call_skill_sub_agent", {"skill": "review", "task": "again"}, id="u3")]},
        text("a.py: line 3 is risky."),
    )

    async def main() -> toolcrib.ToolResult:
        return await host.view("a").call("toolcrib__call_skill_sub_agent", {"skill": "review", "task": "Review a.py"},
                                         channel=model)

    result = anyio.run(main)
    assert (result.is_error, result.text) == (False, "a.py: line 3 is risky.")
    first, second = model.requests
    assert first["systemPrompt"].startswith("You are a temporary sub-agent of a, following the skill 'review' below")
    assert first["systemPrompt"].endswith("# review\n\nRead each file named in the task; list risky lines.\n")
    # the caller's own tools, without this one: never wider than the caller
    assert [t["name"] for t in first["tools"]] == ["files__read", "toolcrib__load_skill"]
    assert [block["content"][0]["text"] for block in second["messages"][2]["content"]] == [
        "contents of a.py", "Unknown tool: files__write", "Unknown tool: toolcrib__call_skill_sub_agent"]


@pytest.mark.parametrize(("rules", "name", "answer"), [
    ('{ deny = ["review"] }', "review", "Unknown skill: review"),  # hidden
    ('{ allow = ["*"] }', "pdf", "Unknown skill: pdf"),  # not a sub-agent skill
    ('{ allow = ["*"] }', "ghost", "Unknown skill: ghost"),
])
def test_a_skill_that_cannot_run_as_a_sub_agent_answers_like_one_that_does_not_exist(
        tmp_path: Path, rules: str, name: str, answer: str) -> None:
    from packs import FILES

    skill(tmp_path / "skills" / "review", "review", "Review.").joinpath("SKILL.md").write_text(
        "---\nname: review\nsub-agent: true\ndescription: Review.\n---\nBody\n")
    skill(tmp_path / "skills" / "pdf", "pdf", "Fill in PDF forms.")
    host = make_host(SUB.format(rules=rules), {"files": FILES}, base_dir=tmp_path)
    if rules.startswith("{ deny"):  # no sub-agent skill permitted: the tool is not there at all
        assert "toolcrib__call_skill_sub_agent" not in host.view("a").names
        return
    result = anyio.run(lambda: host.call("a", "toolcrib__call_skill_sub_agent", {"skill": name, "task": "t"}))
    assert (result.is_error, result.text) == (True, answer)


ALREADY = ("The skill 'pdf' is already loaded in this conversation (see above); call again with reload=true to load "
           "it again.")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_load_skill_is_idempotent_within_a_conversation(tmp_path: Path, folders: dict[str, Path], mode: str) -> None:
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    host = host_for(tmp_path, folders, '{ allow = ["*"] }')
    body = ("---\nname: pdf\ndescription: Fill in and read PDF forms.\n---\n# pdf\n\nDo the thing.\n\n\n"
            "[Other files of this skill (load one with file=...): reference.md]")

    async def main() -> list[str]:
        async with Client(build_server(ServingState(host), "a"), mode=mode, cache=None) as client:
            answers = []
            for arguments in ({"name": "pdf"}, {"name": "pdf"}, {"name": "pdf", "reload": True},
                              {"name": "pdf", "file": "reference.md"}):
                result = await client.call_tool("toolcrib__load_skill", arguments)
                answers.append(result.content[0].text)
            return answers

    answers = anyio.run(main)
    if mode == "legacy":  # a 2025-11-25 session lasts: it is one conversation
        assert answers == [body, ALREADY, body, "Use pdftk.\n"]
    else:  # 2026-07-28 requests stand alone: nothing says two calls are one conversation, so each one loads
        assert answers == [body, body, body, "Use pdftk.\n"]
    # the Python API has no conversation either
    assert call(host, name="pdf").text == call(host, name="pdf").text == body


def test_a_search_finds_the_skill_tool_by_what_a_skill_the_agent_may_load_is_for(
        tmp_path: Path, folders: dict[str, Path]) -> None:
    """Tool search covers skills: toolcrib__load_skill's description, written for each agent, holds the skills it
    may load, so a search by a skill's subject finds that tool; never by a skill the agent may not load."""
    host = host_for(tmp_path, folders, '{ allow = ["pdf", "refunds"] }')
    found = [tool["name"] for tool in host.view("a").search("refund request", 3)]
    assert found[0] == "toolcrib__load_skill"
    hidden = [tool["name"] for tool in host.view("a").search("internal only", 3)]
    assert "toolcrib__load_skill" not in hidden  # the skill "secret" is not the agent's
