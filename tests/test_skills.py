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
