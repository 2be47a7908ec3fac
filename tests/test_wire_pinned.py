"""What every agent of one rich config is served, pinned byte for byte: tools/list, resources/list,
resources/templates/list and prompts/list as JSON, against tests/golden/wire.json. A refactoring of the core (the
source seam, the one entry type) must leave this file unchanged; a change meant to alter the wire regenerates it
(TOOLCRIB_REGENERATE_GOLDEN=1) and shows the difference in review."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import toolcrib_fs

from conftest import make_host
from docs_pack import Docs
from packs import FILES, MISC

GOLDEN = Path(__file__).parent / "golden" / "wire.json"

CONFIG = """
[host]
workspace = "."

[skills.pdf]
path = "skills/pdf"

[tools."misc__add"]
description = "Add two numbers (curated)."
[tools."misc__add".arguments.b]
default = 1

[agents.all]
description = "Sees everything."
[agents.all.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { allow = ["*"] }
prompts = { allow = ["*"] }
skills = { allow = ["*"] }
subagents = { allow = ["*"] }

[agents.reader]
mode = "plan"
bare_names = true
[agents.reader.permissions]
plugins = { allow = ["fs", "docs"] }
tools = { deny = ["fs__write*"] }
resources = { deny = ["docs://secret", "docs://pages/internal"] }
prompts = { allow = ["docs__review"] }

[agents.helper]
description = "Adds numbers."
[agents.helper.permissions]
plugins = { allow = ["misc"] }
tools = { allow = ["misc__*"] }
"""


def surfaces(tmp_path: Path) -> dict[str, Any]:
    skill = tmp_path / "skills" / "pdf"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: pdf\ndescription: Fill in and read PDF forms.\n---\n# pdf\n\nSteps.")
    host = make_host(CONFIG, {"fs": toolcrib_fs, "files": FILES, "misc": MISC,
                              "docs": Docs()}, base_dir=tmp_path)
    found = {}
    for agent in host.agents:
        view = host.view(agent)
        found[agent] = {"tools": view.mcp_tools, "resources": view.mcp_resources, "templates": view.mcp_templates,
                        "prompts": view.mcp_prompts}
    host.close()
    return found


def test_what_every_agent_is_served_is_unchanged(tmp_path: Path) -> None:
    text = json.dumps(surfaces(tmp_path), indent=1, ensure_ascii=False).replace(str(tmp_path), "<config folder>")
    if os.environ.get("TOOLCRIB_REGENERATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == GOLDEN.read_text(encoding="utf-8")
