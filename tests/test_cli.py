"""The CLI as a newcomer meets it (issue 18): the real commands, in-process through click."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import toolcrib
from conftest import cli
from packs import Pack

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 8


@toolcrib.tool(annotations={"readOnlyHint": True})
def picture() -> list[Any]:
    """A result of every kind of content."""
    return [toolcrib.Text("here it is"), toolcrib.Image(PNG, "image/png"),
            toolcrib.EmbeddedResource(uri="notes://1", text="a note"),
            toolcrib.EmbeddedResource(uri="blobs://1", blob=b"\x00\x01", mime_type="application/pdf"),
            toolcrib.ResourceLink(uri="https://example.com/a.png", name="a.png", mime_type="image/png")]


PICS = Pack(picture)

ONE = """
[host]
workspace = "."
[agents.solo]
description = "The only agent."
[agents.solo.permissions]
plugins = { allow = ["files", "misc"] }
tools = { allow = ["*"] }
ask = ["files__write"]
"""

TWO = ONE + """
[agents.planner]
mode = "plan"
model = "m"
[models.m]
[agents.planner.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["files__read"] }
"""


@pytest.fixture
def one(cli_config: Any) -> str:
    return str(cli_config(ONE, "files=packs:FILES,misc=packs:MISC"))


@pytest.fixture
def two(cli_config: Any) -> str:
    return str(cli_config(TWO, "files=packs:FILES,misc=packs:MISC"))


def test_the_only_agent_needs_no_agent_option(one: str) -> None:
    code, out, _ = cli("tools", "--config", one)
    assert code == 0
    assert out.splitlines()[:2] == ["files__read(path: str)              Read a file.",
                                    "files__rm(path: str)                Remove a file."]
    assert "misc__slow(seconds: float)          Sleep, then answer." in out.splitlines()


def test_several_agents_need_the_option_and_are_named(two: str) -> None:
    code, _, err = cli("tools", "--config", two)
    assert code == 2
    assert "pass --agent NAME: the config has 2 agents (planner, solo); `toolcrib agents` describes them" in err


def test_agents_lists_them(two: str) -> None:
    code, out, _ = cli("agents", "--config", two)
    assert (code, out.splitlines()) == (0, [
        "NAME     MODE     MODEL  TOOLS  DESCRIPTION",
        "planner  plan     m      1",
        "solo     default  -      7      The only agent.",
    ])
    code, out, _ = cli("agents", "--config", two, "--json")
    assert json.loads(out)[0] == {"name": "planner", "mode": "plan", "model": "m", "tools": 1, "description": None}


def test_call_takes_key_value_pairs_typed_by_the_schema(one: str) -> None:
    assert cli("call", "--config", one, "misc__add", "a=2", "b=40") == (0, "42\n", "")
    assert cli("call", "--config", one, "files__read", "path=123") == (0, "contents of 123\n", "")  # a str stays one
    code, out, _ = cli("call", "--config", one, "misc__add", "a=two", "b=1")
    assert code == 1 and out.startswith("Invalid arguments for misc__add:\n- a: ")
    code, _, err = cli("call", "--config", one, "misc__add", "a")
    assert code == 2 and "'a' is not KEY=VALUE" in err
    assert cli("call", "--config", one, "misc__add", "--args", '{"a": 1}', "b=2") == (0, "3\n", "")


def test_call_yes_approves_asked_calls_for_scripts(one: str) -> None:
    code, out, _ = cli("call", "--config", one, "files__write", "path=a", "text=hi")
    assert (code, out) == (1, "Permission denied: files__write needs approval (ask rule 'files__write'); stdin is "
                              "not a terminal, so nobody could be asked; toolcrib call --yes approves it\n")
    code, out, err = cli("call", "--config", one, "--yes", "files__write", "path=a", "text=hi")
    assert (code, out) == (0, "wrote 2 characters to a\n")
    assert err == ("approved (--yes): Agent 'solo' wants to call files__write (ask rule 'files__write'). Allow this "
                   "call?\n")


def test_check_json(one: str, tmp_path: Path) -> None:
    Path(one).write_text(ONE + '\n[packs.fils]\n')
    code, out, _ = cli("check", "--config", one, "--json")
    report = json.loads(out)
    assert code == 0 and (report["agents"], report["errors"], report["warnings"]) == (1, 0, 1)
    assert report["problems"] == [{"severity": "warning", "where": f"{one}: packs.fils",
                                   "message": "no pack with namespace 'fils' is installed (did you mean 'files'?)"}]


def test_config_mistakes_suggest_what_was_meant(cli_config: Any) -> None:
    path = cli_config(textwrap.dedent("""
        [agents.a]
        mdoe = "plan"
        [agents.b]
        mode = "plna"
        [agents.c.permissions]
        plugins = ["files"]
    """), "files=packs:FILES")
    code, _, err = cli("check", "--config", path)
    assert code == 2
    assert [line.removeprefix(f"error: {path}:") for line in err.splitlines()] == [
        "3: agents.a.mdoe: unknown key 'mdoe' (did you mean 'mode'?); expected one of: model, "
        "mode, description, prompt, max_turns, runner, max_run_tokens, run_timeout, token_env, identity, limits, "
        "tool_search, bare_names, approvals, approval_timeout, allow_dangerously_skip_permissions, upstream_scopes, "
        "permissions",
        "5: agents.b.mode: expected one of 'default', 'plan', 'acceptEdits', 'dontAsk' or "
        "'bypassPermissions', got a string ('plna'); did you mean 'plan'?",
        "7: agents.c.permissions.plugins: expected a table, got an array; a rule is a table: "
        'plugins = { allow = ["files"] } (or deny = [...])',
    ]
    typo = cli_config('[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["files_read"] }\n',
                      "files=packs:FILES")
    _, _, err = cli("check", "--config", typo)
    assert f"{typo}: agents.a.permissions.tools.allow[0]: 'files_read' matches no installed tool (did you " \
           "mean 'files__read'?)" in err


def test_init_into_a_missing_folder_says_so(tmp_path: Path) -> None:
    code, _, err = cli("init", str(tmp_path / "nowhere" / "x.toml"))
    assert code == 1
    assert err == f"error: cannot write {tmp_path}/nowhere/x.toml: No such file or directory (create the folder " \
                  "first)\n"


def test_serve_on_a_port_in_use_says_so(one: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("serve", "--http", "--port", str(port), "--config", one)
    assert code == 1
    assert err == f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another server is there; " \
                  "pick another --port)\n"


def test_call_shows_every_kind_of_content_and_saves_what_is_binary(cli_config: Any, tmp_path: Path) -> None:
    config = cli_config('[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n',
                        "pics=test_cli:PICS,talk=packs:TALK")
    code, out, _ = cli("call", "--config", config, "pics__picture")
    assert (code, out.splitlines()) == (0, [
        "here it is",
        "[image image/png, 16 bytes; --save DIR writes it to a file]",
        "[resource notes://1]", "a note",
        "[resource application/pdf, 2 bytes, blobs://1; --save DIR writes it to a file]",
        "[resource link https://example.com/a.png (image/png)]",
    ])
    saved = tmp_path / "out"
    code, out, _ = cli("call", "--config", config, "pics__picture", "--save", str(saved))
    assert out.splitlines()[1] == f"[image image/png, 16 bytes, saved to {saved}/pics__picture-1.png]"
    assert (saved / "pics__picture-1.png").read_bytes() == PNG
    assert (saved / "pics__picture-3.pdf").read_bytes() == b"\x00\x01"
    code, out, err = cli("call", "--config", config, "talk__chatty", "steps=2")
    assert (code, out) == (0, "done\n")
    assert err.splitlines() == ["progress 1/2: step 1", "progress 2/2: step 2",
                                "info toolcrib.pack.talk: halfway there"]


def test_check_warns_about_what_the_environment_lacks(cli_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = cli_config(textwrap.dedent("""
        [host]
        workspace = "not-there"
        metrics_token_env = "TOK_METRICS_UNSET"
        [packs.files]
        api_key_env = "KEY_UNSET"
        [agents.a]
        token_env = ["TOK_SET", "TOK_UNSET"]
        [agents.a.permissions]
        plugins = { allow = ["files"] }
        tools = { allow = ["*"] }
    """), "files=packs:FILES")
    monkeypatch.setenv("TOK_SET", "x" * 32)
    for name in ("TOK_UNSET", "KEY_UNSET", "TOK_METRICS_UNSET"):
        monkeypatch.delenv(name, raising=False)
    _, out, _ = cli("check", "--config", config, "--json")
    where = {p["where"].split(": ", 1)[1]: p["message"] for p in json.loads(out)["problems"]
             if p["severity"] == "warning"}
    folder = Path(config).parent / "not-there"
    assert where["host.workspace"] == f"{folder} is not a folder: every call of a file tool will fail"
    assert where["agents.a.token_env"] == "$TOK_UNSET is not set here"
    assert where["host.metrics_token_env"] == "$TOK_METRICS_UNSET is not set here"
    assert where["packs.files.api_key_env"] == "$KEY_UNSET is not set here"


def test_a_failed_pack_is_reported_once(cli_config: Any) -> None:
    config = cli_config('[agents.a]\n', "ghost=no_such_module_anywhere")
    code, out, err = cli("check", "--config", config)
    assert code == 1, (out, err)
    assert [line for line in err.splitlines() if "ghost" in line] == [
        "error: pack 'ghost': import failed: ModuleNotFoundError: No module named 'no_such_module_anywhere'"]


def test_install_adds_the_agent_to_a_clients_config_and_keeps_the_rest(one: str, tmp_path: Path) -> None:
    file = tmp_path / "client" / "claude_desktop_config.json"
    file.parent.mkdir()
    file.write_text(json.dumps({"mcpServers": {"other": {"command": "other-server"}}, "theme": "dark"}))
    code, out, _ = cli("install", "claude-desktop", "--config", one, "--file", str(file), "--env", "A=1")
    assert (code, out) == (0, f"added MCP server 'toolcrib-solo' (agent 'solo') in {file}; restart the client to "
                              "load it\n")
    written = json.loads(file.read_text())
    assert written["theme"] == "dark" and written["mcpServers"]["other"] == {"command": "other-server"}
    assert written["mcpServers"]["toolcrib-solo"] == {
        "command": sys.executable, "args": ["-m", "toolcrib.cli", "serve", "--agent", "solo", "--config",
                                            str(Path(one).resolve())], "env": {"A": "1"}}
    code, out, _ = cli("install", "cursor", "--config", one, "--file", str(file))
    assert out.startswith("updated MCP server 'toolcrib-solo'")
    code, printed, _ = cli("install", "mcp-json", "--config", one, "--name", "tc")
    assert list(json.loads(printed)["mcpServers"]) == ["tc"]
    code, tables, err = cli("mcps", "import", str(file))  # what install writes, the importer reads
    assert code == 0, err
    assert f'args = ["-m", "toolcrib.cli", "serve", "--agent", "solo", "--config", "{Path(one).resolve()}"]' in tables


def test_install_refuses_a_file_it_cannot_read_and_changes_nothing(one: str, tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_text("{not json")
    code, _, err = cli("install", "cursor", "--config", one, "--file", str(file))
    assert code == 1 and err.startswith(f"error: {file}: cannot read it as JSON (")
    assert err.endswith("); nothing was changed\n") and file.read_text() == "{not json"
    file.write_text('{"mcpServers": []}')
    code, _, err = cli("install", "cursor", "--config", one, "--file", str(file))
    assert (code, err) == (1, f'error: {file}: expected a JSON object with an "mcpServers" object; nothing was '
                              "changed\n")
    code, _, err = cli("install", "cursor", "--config", one, "--agent", "ghost", "--file", str(file))
    assert code == 2 and "unknown agent 'ghost'" in err


def test_rules_naming_a_failed_packs_tools_say_that_it_failed(cli_config: Any) -> None:
    config = cli_config('[packs.files]\nno_such_setting = 1\n[agents.a.permissions]\nplugins = { allow = ["files"] }\n'
                        'tools = { allow = ["files__read"] }\n', "files=packs:FILES")
    _, _, err = cli("check", "--config", config)
    assert (f"warning: {config}: agents.a.permissions.tools.allow[0]: 'files__read' matches no installed tool (its "
            "source 'files' failed to load: see its error)") in err.splitlines()


def test_every_command_says_what_it_does_with_an_example() -> None:
    from click import Group

    from toolcrib.cli import main

    def commands(group: Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        found = []
        for name, command in sorted(group.commands.items()):
            if isinstance(command, Group):
                found += [(*prefix, name), *commands(command, (*prefix, name))]  # a group's own help too
            else:
                found.append((*prefix, name))
        return found

    missing = []
    for words in commands(main):
        code, out, _ = cli(*words, "--help")
        if code != 0 or "Example: toolcrib " not in out:
            missing.append(" ".join(words))
    assert missing == []


def test_commands_that_report_can_report_json(tmp_path: Path) -> None:
    for command in ("agents", "plugins", "check", "tools", "explain", "call", "resources", "read", "prompts",
                    "prompt", "lock", "init", "new"):
        code, out, _ = cli(command, "--help")
        assert code == 0 and "--json" in out, command
    target = tmp_path / "made.toml"
    assert cli("init", "--json", str(target)) == (0, json.dumps({"path": str(target)}, indent=2) + "\n", "")
    code, out, _ = cli("lock", "--json", "--config", str(target))
    locked = json.loads(out)
    assert code == 0 and (locked["path"], locked["accepted"]) == (str(tmp_path / "toolcrib.lock"), [])
    assert locked["tools"] == len(json.loads((tmp_path / "toolcrib.lock").read_text())["tools"]) > 0
    code, out, _ = cli("new", "--json", "acme-orders", "--directory", str(tmp_path / "pack"))
    assert (code, json.loads(out)) == (0, {"directory": str(tmp_path / "pack"), "namespace": "acme_orders"})


@toolcrib.tool(annotations={"readOnlyHint": True})
def weigh(grams: float = 1e-05, label: str = "Ünïcode — “quoted” \\ \u2028") -> float:
    """Weigh something: 1e-07 kg at least, Ωhm."""
    return grams


def test_json_output_is_the_text_json_dumps_writes_indented(cli_config: Any) -> None:
    config = cli_config("[agents.solo]\n[agents.solo.permissions]\nplugins = { allow = [\"*\"] }\n"
                        "tools = { allow = [\"*\"] }\n", "scale=test_cli:SCALE")
    code, out, _ = cli("tools", "--json", "--config", str(config))
    listed = json.loads(out)
    assert code == 0 and [tool["name"] for tool in listed] == ["scale__weigh"]
    assert listed[0]["inputSchema"]["properties"]["label"]["default"] == "Ünïcode — “quoted” \\ \u2028"
    # written by pydantic-core: json.dumps's text, non-ASCII as it is, but for the spelling of a few floats
    assert out == json.dumps(listed, indent=2, ensure_ascii=False).replace('"default": 1e-05', '"default": 0.00001') \
        + "\n"


SCALE = Pack(weigh)


def test_json_output_of_a_lone_surrogate_is_escaped_and_reads_back(capsys: pytest.CaptureFixture[str]) -> None:
    from toolcrib.cli import _echo_json

    value = json.loads('{"text": "half a pair: \\ud800", "ok": "é"}')  # what a JSON reader makes of the escape
    _echo_json(value)
    out = capsys.readouterr().out
    assert out == '{\n  "text": "half a pair: \\ud800",\n  "ok": "\\u00e9"\n}\n' and json.loads(out) == value


def test_help_lists_each_command_with_its_whole_first_sentence_and_new_offers_no_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("--help")
    commands = out.split("Commands:\n", 1)[1]
    assert code == 0 and "..." not in commands
    assert "  serve        Serve over MCP: one agent on stdio (--agent NAME), or every agent\n" \
           "               over HTTP (--http).\n" in commands
    code, out, _ = cli("new", "--help")
    assert code == 0 and "--config" not in out and "--debug" in out
    code, _, err = cli("new", "--config", "x.toml", "acme-x")
    assert (code, err.splitlines()[-1]) == (2, "error: No such option '--config'.")


def test_install_honours_xdg_and_writes_a_project_s_mcp_json_without_this_machine_s_paths(
        one: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.clients import client_file

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert client_file("claude-desktop") == tmp_path / "xdg" / "Claude" / "claude_desktop_config.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert client_file("claude-desktop") == Path.home() / ".config" / "Claude" / "claude_desktop_config.json"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert client_file("claude-desktop") == (Path.home() / "Library" / "Application Support" / "Claude" /
                                             "claude_desktop_config.json")
    monkeypatch.setattr(sys, "platform", "linux")
    # a project's .mcp.json beside the config: toolcrib from PATH (this installation's), the config by its place
    monkeypatch.chdir(Path(one).parent)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    code, _, _ = cli("install", "claude-code", "--config", one)
    assert (code, json.loads((Path(one).parent / ".mcp.json").read_text())) == (0, {"mcpServers": {"toolcrib-solo": {
        "command": "toolcrib", "args": ["serve", "--agent", "solo", "--config", "toolcrib.toml"]}}})
    monkeypatch.setenv("PATH", "/nowhere")  # not on PATH: this machine's Python it is
    code, _, _ = cli("install", "claude-code", "--config", one)
    assert (code, json.loads((Path(one).parent / ".mcp.json").read_text())["mcpServers"]["toolcrib-solo"][
        "command"]) == (0, sys.executable)
