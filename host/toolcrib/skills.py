"""Skills: folders holding a ``SKILL.md``, named in config (``[skills.<name>]``) or shipped by packs (the
``toolcrib_skills`` hook). Agents load them through ``toolcrib__load_skill`` (the host's own pack), filtered by the
``skills`` permission dimension.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from pathlib import Path

from toolcrib.config import LoadedConfig
from toolcrib.errors import Problem, ToolError
from toolcrib.plugins import PluginManager, PluginRecord, hooks_by_plugin
from toolcrib.workspace import PathError, Root, parts_of

SKILL_FILE = "SKILL.md"
MAX_BYTES = 256 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    origin: str  # "config" or "pack '<namespace>'"
    sub_agent: bool = False  # frontmatter "sub-agent: true": it can run as a temporary sub-agent of its caller


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
    sub_agent = meta.get("sub-agent", "").lower() in ("true", "yes")
    return Skill(name=name, description=description, path=folder, origin=origin, sub_agent=sub_agent)


def discover(loaded: LoadedConfig, pm: PluginManager, records: list[PluginRecord]) -> tuple[dict[str, Skill],
                                                                                              list[Problem]]:
    """Every skill: from the config, then from each loaded pack. A name two sources claim is served by neither."""
    problems: list[Problem] = []
    found: list[Skill] = []
    for name, config in sorted(loaded.config.skills.items()):
        skill = _read(loaded.resolve(config.path), "config", name, problems)
        if skill is not None:
            found.append(skill)
    skill_hooks = hooks_by_plugin(pm, "toolcrib_skills")
    for record in records:
        hook = skill_hooks.get(record.name)
        if record.state != "loaded" or record.kind != "pack" or hook is None:
            continue
        answer, raised = hook.heard({})
        if raised is not None:
            problems.append(Problem("error", f"pack {record.name!r}",
                                    f"toolcrib_skills raised {type(raised).__name__}: {raised}"))
            record.traceback = "".join(traceback.format_exception(raised))
            continue
        for path in answer or []:
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


def read(skill: Skill, file: str | None) -> str:
    """A skill's ``SKILL.md`` (with the list of its other files), or one of its other files, capped at
    ``MAX_BYTES``. Files stay inside the skill's folder (``toolcrib.workspace.Root``); ``ToolError`` says why not."""
    root = Root(skill.path)
    target = parts_of(file if file else SKILL_FILE, allow_root=False)
    try:
        data, size = root.read_bytes(target, MAX_BYTES + 1)
    except PathError as exc:
        raise ToolError(f"skill {skill.name!r}: {exc}") from None
    text = data[:MAX_BYTES].decode("utf-8", errors="replace")
    if size > MAX_BYTES:
        text += f"\n[... truncated: the file has {size} bytes]"
    if file is None:
        others = sorted(str(p.relative_to(skill.path)) for p in skill.path.rglob("*")
                        if p.is_file() and not p.is_symlink() and p.name != SKILL_FILE)[:100]
        if others:
            text += "\n\n[Other files of this skill (load one with file=...): " + ", ".join(others) + "]"
    return text
