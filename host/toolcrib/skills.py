"""Skills: folders holding a ``SKILL.md``, named in config (``[skills.<name>]``) or shipped by packs (the
``toolcrib_skills`` hook), loaded through one built-in tool, ``toolcrib__load_skill``, and filtered by the ``skills``
permission dimension.

The tool is visible to an agent when the agent may load at least one skill; its description lists exactly those
skills, and asking for any other name (hidden or nonexistent alike) gets the same "Unknown skill" answer.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from toolcrib.catalog import Entry
from toolcrib.config import LoadedConfig
from toolcrib.context import Context
from toolcrib.errors import Problem, ToolError, contained
from toolcrib.plugins import PluginManager, PluginRecord, call_impl, impls_by_plugin
from toolcrib.tool import get_tool, tool
from toolcrib.workspace import PathError, Root, parts_of

NAMESPACE = "toolcrib"  # reserved for the host's own tools
SKILL_FILE = "SKILL.md"
MAX_BYTES = 256 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    origin: str  # "config" or "pack '<namespace>'"


def frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the leading ``---`` fences of a SKILL.md (the simple subset skills use)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    found: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return found
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            found[key.strip()] = value.strip().strip("\"'")
    return {}


def _read(folder: Path, origin: str, default_name: str, problems: list[Problem]) -> Skill | None:
    where = f"skill at {folder}"
    try:
        text = (folder / SKILL_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem("error", where, f"cannot read {SKILL_FILE} ({origin}): {exc}"))
        return None
    meta = frontmatter(text)
    name = meta.get("name") or default_name
    if _NAME.fullmatch(name) is None:
        problems.append(Problem("error", where, f"skill name {name!r} ({origin}): use letters, digits, '_' and '-'"))
        return None
    description = meta.get("description") or next(
        (line.strip("# ").strip() for line in text.splitlines() if line.strip() and line.strip() != "---"), name)
    return Skill(name=name, description=description, path=folder, origin=origin)


def discover(loaded: LoadedConfig, pm: PluginManager, records: list[PluginRecord]) -> tuple[dict[str, Skill],
                                                                                              list[Problem]]:
    """Every skill: from the config, then from each loaded pack. A name two sources claim is served by neither."""
    problems: list[Problem] = []
    found: list[Skill] = []
    for name, config in sorted(loaded.config.skills.items()):
        skill = _read(loaded.resolve(config.path), "config", name, problems)
        if skill is not None:
            found.append(skill)
    skill_impls = impls_by_plugin(pm, "toolcrib_skills")
    for record in records:
        if record.state != "loaded" or record.kind != "pack":
            continue
        for impl in skill_impls.get(record.name, []):
            try:
                paths = call_impl(impl, {}) or []
            except BaseException as exc:
                if not contained(exc):
                    raise
                problems.append(Problem("error", f"pack {record.name!r}",
                                        f"toolcrib_skills raised {type(exc).__name__}: {exc}"))
                record.traceback = traceback.format_exc()
                continue
            for path in paths:
                skill = _read(Path(path), f"pack {record.name!r}", Path(path).name, problems)
                if skill is not None:
                    found.append(skill)
    by_name: dict[str, list[Skill]] = {}
    for skill in found:
        by_name.setdefault(skill.name, []).append(skill)
    skills = {}
    for name, claims in sorted(by_name.items()):
        if len(claims) > 1:
            origins = ", ".join(s.origin for s in claims)
            problems.append(Problem("error", f"skill {name!r}", f"offered by more than one source ({origins}); "
                                    "neither is served"))
            continue
        skills[name] = claims[0]
    return skills, problems


class SkillSet:
    """The skills of one host, and the ``toolcrib__load_skill`` tool over them."""

    def __init__(self, skills: Mapping[str, Skill]) -> None:
        self.skills = dict(skills)
        self.permits: Any = None  # set by the host: (agent, skill name) -> bool, from the agent's compiled rules

    def visible(self, rules: Any) -> list[Skill]:
        return [s for name, s in self.skills.items() if rules.source_permits("skills", name)[0]]

    def describe(self, rules: Any) -> str:
        lines = [LOAD_SKILL_DESCRIPTION, "", "Skills you can load:"]
        lines += [f"- {s.name}: {s.description}" for s in self.visible(rules)]
        return "\n".join(lines)

    def entry(self) -> Entry:
        skills = self

        @tool(name="load_skill", description=LOAD_SKILL_DESCRIPTION,
              annotations={"readOnlyHint": True, "openWorldHint": False, "idempotentHint": True},
              rule_subject="name")
        def load_skill(
            name: Annotated[str, Field(max_length=64, description="The skill's name, from the list")],
            ctx: Context,
            file: Annotated[str | None, Field(max_length=4096, description="Another file of the skill, by its "
                                                                           "path inside the skill folder")] = None,
        ) -> str:
            skill = skills.skills.get(name)
            if skill is None or skills.permits is None or not skills.permits(ctx.agent, name):
                raise ToolError(f"Unknown skill: {name}")  # hidden and nonexistent alike
            root = Root(skill.path)
            target = parts_of(file if file else SKILL_FILE, allow_root=False)
            try:
                data, size = root.read_bytes(target, MAX_BYTES + 1)
            except PathError as exc:
                raise ToolError(f"skill {name!r}: {exc}") from None
            text = data[:MAX_BYTES].decode("utf-8", errors="replace")
            if size > MAX_BYTES:
                text += f"\n[... truncated: the file has {size} bytes]"
            if file is None:
                others = sorted(str(p.relative_to(skill.path)) for p in skill.path.rglob("*")
                                if p.is_file() and not p.is_symlink() and p.name != SKILL_FILE)[:100]
                if others:
                    text += "\n\n[Other files of this skill (load one with file=...): " + ", ".join(others) + "]"
            return text

        return Entry(name=f"{NAMESPACE}__load_skill", namespace=NAMESPACE, kind="builtin", dimension="skills",
                     source="*", tool=get_tool(load_skill), sources=tuple(self.skills),  # type: ignore[arg-type]
                     describe_for=self.describe)


LOAD_SKILL_DESCRIPTION = ("Load a skill: expert instructions for a kind of task (its SKILL.md), or one of its other "
                          "files. Load the skill before starting a task it covers.")
