"""Tool folders ([host] tool_dirs, seed 002's user tools): Python files whose @toolcrib.tool functions become a pack
named after their folder, with the same naming, permissions, isolation and protection as any pack."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import anyio
import pytest
import toolcrib_fs

from conftest import cli, config_from, problems
from toolcrib.config import load_config
from toolcrib.host import Host

GREET = '''
from typing import Annotated
from pydantic import BaseModel, Field
import toolcrib
from helpers_elsewhere import shout


class Greeting(BaseModel):
    text: str


@toolcrib.tool(annotations={"readOnlyHint": True})
def hello(name: Annotated[str, Field(description="Who to greet")], ctx: toolcrib.Context) -> Greeting:
    """Say hello to someone."""
    return Greeting(text=f"hello {name} from {ctx.agent}")
'''

ELSEWHERE = '''
import toolcrib


@toolcrib.tool
def shout(text: str) -> str:
    """Not this folder's: imported by greet.py, so not one of its tools."""
    return text.upper()
'''

CONFIG = """
[host]
workspace = "."
tool_dirs = ["team_tools", "broken"]

[agents.a]
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.b]
[agents.b.permissions]
plugins = { deny = ["team_tools"] }
tools = { allow = ["*"] }
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "team_tools").mkdir()
    (tmp_path / "team_tools" / "greet.py").write_text(GREET)
    (tmp_path / "team_tools" / "_private.py").write_text("raise RuntimeError('files starting with _ are skipped')\n")
    (tmp_path / "team_tools" / "notes.txt").write_text("not Python")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helpers_elsewhere.py").write_text(ELSEWHERE)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "ok.py").write_text("import toolcrib\n\n@toolcrib.tool\ndef fine() -> str:\n"
                                               "    '''Fine.'''\n    return 'fine'\n")
    (tmp_path / "broken" / "zz_bad.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "toolcrib.toml").write_text(CONFIG)
    return tmp_path


def host(folder: Path) -> Host:
    return Host(load_config(folder / "toolcrib.toml"), plugins={"fs": toolcrib_fs}, autoload=False, env={})


def test_a_folders_tools_are_a_pack_named_after_it(folder: Path) -> None:
    h = host(folder)
    assert [name for name in h.view("a").names if not name.startswith("fs__")] == ["team_tools__hello"]
    tool = {t["name"]: t for t in h.view("a").mcp_tools}["team_tools__hello"]
    assert tool["description"] == "Say hello to someone."
    assert tool["inputSchema"]["properties"] == {"name": {"description": "Who to greet", "type": "string"}}
    result = anyio.run(lambda: h.call("a", "team_tools__hello", {"name": "Ana"}))
    assert result.structured_content == {"text": "hello Ana from a"}
    assert "team_tools__hello" not in h.view("b").names  # permissions by namespace, as for any pack
    assert not any(name.endswith("__shout") for name in h.view("a").names)


def test_a_file_that_fails_fails_its_folder_only_and_says_which(folder: Path) -> None:
    h = host(folder)
    records = {r.name: r for r in h.records}
    assert (records["broken"].state, records["broken"].error) == (
        "failed", "import failed: zz_bad.py: SystemExit: 3")
    assert (records["team_tools"].state, records["team_tools"].tool_count) == ("loaded", 1)
    assert records["team_tools"].entry_point == str(folder / "team_tools")
    assert not any(name.startswith("broken__") for name in h.view("a").names)
    assert "fs__read_file" in h.view("a").names


def test_plugins_lists_folders_and_a_pack_table_can_disable_one(folder: Path) -> None:
    code, out, _ = cli("plugins", "--json", "--config", str(folder / "toolcrib.toml"))
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert (rows["team_tools"]["state"], rows["team_tools"]["distribution"]) == ("loaded", "(tool folder)")
    (folder / "toolcrib.toml").write_text(CONFIG + '\n[packs.team_tools]\nenabled = false\n')
    assert "team_tools__hello" not in host(folder).view("a").names


def test_no_tool_may_write_in_a_tool_folder(folder: Path) -> None:
    h = host(folder)
    result = anyio.run(lambda: h.call("a", "fs__write_file", {"path": "team_tools/evil.py", "content": "x = 1"}))
    assert result.is_error
    assert result.text == ("team_tools/evil.py: is protected: changing it would change how the host governs its "
                           "agents (the tool folder 'team_tools' is in the way); no tool may change it")
    assert not (folder / "team_tools" / "evil.py").exists()


def test_tool_folder_mistakes_name_the_key() -> None:
    assert problems(textwrap.dedent("""
        [host]
        tool_dirs = ["a/tools", "b/tools", "", "team-tools"]
    """)) == [
        "error: conf.toml: host.tool_dirs[1]: two tool folders are named 'tools' (tool_dirs[0]); the folder's name "
        "is its pack's namespace, so each needs its own",
        "error: conf.toml: host.tool_dirs[2]: expected a folder, relative to the config file",
        "error: conf.toml: host.tool_dirs[3]: the folder's name is its pack's namespace, and 'team-tools' is not one: "
        "namespaces are 1-32 characters: a lower-case letter first, then lower-case letters, digits and single "
        "underscores",
    ]
    assert config_from('[host]\ntool_dirs = ["tools"]\n').config.host.tool_dirs == ["tools"]
