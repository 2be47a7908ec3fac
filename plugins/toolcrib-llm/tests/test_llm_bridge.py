"""toolcrib-llm with the real llm package and an llm tool plugin installed as a distribution (dist-info on a
path entry), run in subprocesses: llm loads its plugins once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("llm")

pytestmark = pytest.mark.slow  # every test starts toolcrib in a subprocess

PLUGIN = '''
import threading

import llm


def add_numbers(a: int, b: int = 1) -> int:
    """Add two integers."""
    return a + b


async def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()


def llm_time() -> str:
    """A second tool named like one of llm's own."""
    return "collision"


class Memory(llm.Toolbox):
    def __init__(self, prefix: str = ""):
        self.prefix = prefix
        self.data = {}
        self.thread = threading.get_ident()  # like a sqlite3 connection, usable only on the thread that made it

    def remember(self, key: str, value: str) -> str:
        """Remember a value under a key."""
        if threading.get_ident() != self.thread:
            raise RuntimeError("objects created in a thread can only be used in that same thread")
        self.data[key] = value
        return f"remembered {key}"

    async def recall(self, key: str) -> str:
        """Recall the value of a key."""
        return self.prefix + self.data.get(key, "(nothing)")


class Needy(llm.Toolbox):
    def __init__(self, token: str):
        self.token = token

    def ping(self) -> str:
        """Ping."""
        return "pong"


@llm.hookimpl
def register_tools(register):
    register(Memory)
    register(Needy)
    register(add_numbers)
    register(shout, name="yell")
    register(llm_time)
    register(llm.Tool(name="raw_echo", description="Echo with a hand-written schema.",
                      input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
                      implementation=lambda x: x))
    register(add_numbers, name="bad-name")
'''

CONFIG = """
[agents.a]
[agents.a.permissions]
plugins = { allow = ["llm"] }
tools = { allow = ["llm__*"] }
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "llm_tools_demo.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "llm_tools_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-tools-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llm]\nllm_tools_demo = llm_tools_demo\n")
    (tmp_path / "toolcrib.toml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLCRIB_", "LLM_"))}
    env.update({"PYTHONPATH": str(site), "TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "llm",
                "LLM_USER_PATH": str(tmp_path / "llm-home"),
                "LLM_LOAD_PLUGINS": "llm-tools-demo"})  # llm's own and this one: not others the machine has
    return env


def toolcrib(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolcrib.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_llm_plugin_tools_are_served(env: dict[str, str], tmp_path: Path) -> None:
    listed = toolcrib(env, tmp_path, "tools", "--agent", "a", "--json")
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)}
    assert sorted(tools) == ["llm__add_numbers", "llm__llm_version", "llm__raw_echo", "llm__yell"]
    assert tools["llm__add_numbers"]["inputSchema"] == {
        "additionalProperties": False, "properties": {"a": {"type": "integer"}, "b": {"default": 1, "type": "integer"}},
        "required": ["a"], "type": "object"}
    assert tools["llm__raw_echo"]["inputSchema"] == {"type": "object", "properties": {"x": {"type": "string"}}}
    assert "llm tool 'bad-name' is not served" in listed.stderr
    called = toolcrib(env, tmp_path, "call", "--agent", "a", "llm__add_numbers", "--args", '{"a": 40, "b": 2}')
    assert (called.returncode, called.stdout) == (0, "42\n")
    yelled = toolcrib(env, tmp_path, "call", "--agent", "a", "llm__yell", "--args", '{"text": "hi"}')
    assert (yelled.returncode, yelled.stdout) == (0, "HI\n")
    invalid = toolcrib(env, tmp_path, "call", "--agent", "a", "llm__add_numbers", "--args", '{"a": "x"}')
    assert invalid.returncode == 1
    assert invalid.stdout.startswith("Invalid arguments for llm__add_numbers:\n- a: Input should be a valid integer")


def test_a_name_two_llm_plugins_register_is_served_by_neither(env: dict[str, str], tmp_path: Path) -> None:
    checked = toolcrib(env, tmp_path, "check")
    assert checked.returncode == 1
    assert ("error: pack 'llm' (toolcrib-llm 0.1.0): tool name 'llm_time' is declared 2 times; none of them is "
            "served: rename all but one") in checked.stderr


def test_only_the_chosen_llm_plugins(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "toolcrib.toml").write_text(CONFIG + '\n[packs.llm]\nplugins = ["llm-tools-demo"]\n')
    listed = toolcrib(env, tmp_path, "tools", "--agent", "a")
    names = [line.split("(")[0] for line in listed.stdout.splitlines()]
    # llm's own tools (llm_version, llm_time) are left out, so the demo plugin's llm_time no longer collides
    assert names == ["llm__add_numbers", "llm__llm_time", "llm__raw_echo", "llm__yell"]
    # a name `llm plugins` does not print (the plugin's module) is a warning of check
    (tmp_path / "toolcrib.toml").write_text(CONFIG + '\n[packs.llm]\nplugins = ["llm_tools_demo"]\n')
    checked = toolcrib(env, tmp_path, "check")
    assert ("warning: pack 'llm' (toolcrib-llm 0.1.0): [packs.llm] plugins names 'llm_tools_demo', which is not an "
            "installed llm plugin with tools (`llm plugins` lists them)") in checked.stderr


def test_each_llm_plugin_is_a_plugin_operators_allow_or_deny(env: dict[str, str], tmp_path: Path) -> None:
    listed = toolcrib(env, tmp_path, "plugins", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    demo = rows["llm-tools-demo"]
    assert (demo["kind"], demo["state"], demo["distribution"], demo["version"], demo["tool_count"]) == (
        "llm", "loaded", "llm-tools-demo", "0.1", 3)  # llm_time collides with llm's own, bad-name is refused
    assert rows["llm.default_plugins.default_tools"]["tool_count"] == 1  # llm_version (llm_time collides)

    def names(rule: str) -> list[str]:
        (tmp_path / "toolcrib.toml").write_text(CONFIG.replace('plugins = { allow = ["llm"] }', rule))
        listed = toolcrib(env, tmp_path, "tools", "--agent", "a")
        return [line.split("(")[0] for line in listed.stdout.splitlines()]

    demo_tools = ["llm__add_numbers", "llm__raw_echo", "llm__yell"]
    assert names('plugins = { deny = ["llm-tools-demo"] }') == ["llm__llm_version"]  # even though llm is not denied
    assert names('plugins = { allow = ["llm-tools-demo"] }') == demo_tools  # without allowing all of llm
    assert names('plugins = { deny = ["llm"] }') == []  # the pack, with every plugin's tools
    explained = toolcrib(env, tmp_path, "explain", "--agent", "a", "llm__yell")
    assert explained.stdout.splitlines()[1] == (
        "  source      FAIL  pack 'llm' (its plugin 'llm-tools-demo'): denied by agents.a.permissions.plugins.deny "
        "'llm'")


TOOLBOX_SCRIPT = """
import anyio, json, toolcrib
host = toolcrib.Host.from_config("toolcrib.toml")
view = host.view("a")
print(json.dumps([t.name for t in view.tools if "Memory" in t.name or "Needy" in t.name]))
print(json.dumps({t["name"]: t["inputSchema"] for t in view.mcp_tools}["llm__Memory_remember"]))

async def main():
    for name, args in (("llm__Memory_remember", {"key": "sky", "value": "blue"}),
                       ("llm__Memory_recall", {"key": "sky"}), ("llm__Memory_recall", {"key": 7})):
        result = await view.call(name, args)
        print(result.is_error, result.text.splitlines()[0])

anyio.run(main)
"""


def test_toolboxes_are_served_when_the_operator_configures_them(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "toolcrib.toml").write_text(CONFIG + """
[packs.llm]
plugins = ["llm-tools-demo"]
[packs.llm.toolboxes.Memory]
prefix = "> "
[packs.llm.toolboxes.Needy]
[packs.llm.toolboxes.Ghost]
""")
    ran = subprocess.run([sys.executable, "-c", TOOLBOX_SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        '["llm__Memory_recall", "llm__Memory_remember"]',  # one instance, its methods; Needy could not be built
        '{"additionalProperties": false, "properties": {"key": {"type": "string"}, "value": {"type": "string"}}, '
        '"required": ["key", "value"], "type": "object"}',
        "False remembered sky",
        "False > blue",  # the same instance, configured by the operator
        "True Invalid arguments for llm__Memory_recall:",
    ]
    assert ("llm toolbox Needy is not served: it cannot be set up with {} (TypeError: missing a required argument: "
            "'token')") in ran.stderr
    assert "[packs.llm.toolboxes.Ghost]: no installed llm plugin registers a toolbox of that name" in ran.stderr


DISCOVERY_SCRIPT = """
import sys, toolcrib
host = toolcrib.Host.from_config("toolcrib.toml")
print(sorted(t["name"] for t in host.view("a").mcp_tools))
print(sorted(name for name in ("openai", "llm.default_plugins.openai_models") if name in sys.modules))
"""


def test_discovery_loads_llms_plugins_of_tools_but_not_its_openai_models(env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    """llm's own loader imports its OpenAI models module (and openai: ~0.6 s of every toolcrib start), which
    registers no tool; the pack loads the plugins without it. A plugin that cannot be imported (whatever it raises)
    costs only its own tools, as does a name in $LLM_LOAD_PLUGINS that is not installed."""
    site = Path(env["PYTHONPATH"])
    (site / "llm_tools_broken.py").write_text("raise SystemExit('broken at import')\n")
    info = site / "llm_tools_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-tools-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llm]\nllm_tools_broken = llm_tools_broken\n")
    env = {**env, "LLM_LOAD_PLUGINS": "llm-tools-broken, llm-tools-demo,,llm-tools-absent"}
    ran = subprocess.run([sys.executable, "-c", DISCOVERY_SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "['llm__add_numbers', 'llm__llm_version', 'llm__raw_echo', 'llm__yell']",
        "[]",  # neither imported
    ]
    assert "llm plugin 'llm_tools_broken' (llm-tools-broken) cannot be loaded; its tools are not served" in ran.stderr
    assert "SystemExit: broken at import" in ran.stderr
    assert "$LLM_LOAD_PLUGINS names 'llm-tools-absent', which is not installed" in ran.stderr
