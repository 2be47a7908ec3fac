"""Config loading: every error names the file, the key path and what was expected."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import problems
from toolcrib.config import BUILTIN_NAME, find_config, load_config, parse_config
from toolcrib.errors import ConfigError


def test_the_spec_example_loads() -> None:
    loaded = parse_config(textwrap.dedent('''
        [host]
        workspace = "."
        audit_log = "audit.jsonl"
        call_timeout = 60

        [models."qwen-vl-max"]
        vision = true

        [packs.media]
        default_image_model = "flux-schnell"

        [packs.shell]
        enabled = false

        [mcps.time]
        command = "python"
        args = ["-m", "mcp_server_time"]

        [agents.reviewer]
        model = "qwen-vl-max"
        mode = "default"
        token_env = "REVIEWER_TOKEN"

        [agents.reviewer.permissions]
        plugins = { allow = ["*"] }
        mcps = { allow = ["time"] }
        tools = { deny = ["fs__write_file", "fs__rm"] }
        skills = { allow = [] }
        subagents = { allow = ["searcher"] }
        ask = ["shell__*"]
    '''), "toolcrib.toml", Path("/etc/toolcrib"))
    config = loaded.config
    assert config.host.call_timeout == 60.0
    assert loaded.workspace == Path("/etc/toolcrib")
    assert loaded.capabilities("qwen-vl-max") == frozenset({"vision"})
    assert loaded.disabled_packs() == frozenset({"shell"})
    assert config.packs["media"].settings == {"default_image_model": "flux-schnell"}
    assert config.agents["reviewer"].permissions is not None
    assert config.agents["reviewer"].permissions.tools is not None
    assert config.agents["reviewer"].permissions.tools.deny == ["fs__write_file", "fs__rm"]


def test_unknown_keys_name_the_path_and_what_is_allowed() -> None:
    assert problems('''
        [host]
        workspce = "."
        [agents.a.permissions]
        toolz = { allow = ["*"] }
    ''') == [
        "error: conf.toml: host.workspce: unknown key 'workspce' (did you mean 'workspace'?); expected one of: "
        "workspace, tool_dirs, audit_log, audit_arguments, call_timeout, max_argument_bytes, max_result_chars, "
        "sync_workers, availability_timeout, shutdown_timeout, http_session_idle, http_max_sessions, "
        "http_stream_seconds, list_ttl, task_ttl, max_tasks, metrics, metrics_token_env, lock, isolate_packs, "
        "allow_unconfined",
        "error: conf.toml: agents.a.permissions.toolz: unknown key 'toolz' (did you mean 'tools'?); expected one of: "
        "plugins, mcps, tools, resources, prompts, skills, subagents, ask, approve",
    ]


def test_wrong_types() -> None:
    assert problems('''
        [host]
        call_timeout = "60"
        [models.m]
        vision = "yes"
        [agents.a]
        mode = "auto"
        [agents.a.permissions]
        tools = { allow = "fs__*" }
        plugins = { deny = [1] }
    ''') == [
        "error: conf.toml: host.call_timeout: expected a number, got a string ('60')",
        "error: conf.toml: models.m.vision: expected a boolean (true or false), got a string ('yes')",
        "error: conf.toml: agents.a.mode: expected one of 'default', 'plan', 'acceptEdits', 'dontAsk' or "
        "'bypassPermissions', got a string ('auto')",
        "error: conf.toml: agents.a.permissions.plugins.deny[0]: expected a string, got an integer (1)",
        "error: conf.toml: agents.a.permissions.tools.allow: expected an array, got a string ('fs__*')",
    ]


def test_allow_and_deny_together_name_agent_and_dimension() -> None:
    assert problems('''
        [agents.reviewer.permissions]
        tools = { allow = ["*"], deny = ["fs__rm"] }
        skills = {}
    ''') == [
        "error: conf.toml: agents.reviewer.permissions.tools: has both allow and deny; use one: allow lists what is "
        "permitted, deny what is not",
        "error: conf.toml: agents.reviewer.permissions.skills: needs allow = [...] or deny = [...]",
    ]


def test_bad_patterns_names_and_references() -> None:
    assert problems('''
        [models."qwen-vl"]
        vision = true
        [agents.a]
        model = "gpt-9"
        [agents.a.permissions]
        tools = { deny = ["fs__write file", "FS__read_file", "shell__exec(", "x()"] }
        plugins = { allow = ["fs pack"] }
        ask = [""]
        [agents."bad-name"]
        [agents.b]
        mode = "bypassPermissions"
        token_env = "not a var"
    ''') == [
        "error: conf.toml: agents.a.model: model 'gpt-9' is not defined; add a [models.\"gpt-9\"] table (defined: "
        "qwen-vl)",
        "error: conf.toml: agents.a.permissions.plugins.allow[0]: 'fs pack' is not a valid pattern: namespaces, or the "
        "names of the plugins a pack serves tools of (such as llm-tools-simpleeval): letters, digits, '_', '-' and "
        "'.' and '*'",
        "error: conf.toml: agents.a.permissions.tools.deny[0]: 'fs__write file' is not a valid pattern: full tool "
        "names: letters, digits and '_' and '*', optionally followed by '(specifier)'",
        "error: conf.toml: agents.a.permissions.tools.deny[2]: 'shell__exec(': a specifier ends with ')': "
        "tool(specifier)",
        "error: conf.toml: agents.a.permissions.tools.deny[3]: 'x()': the specifier in parentheses is empty; write "
        "the tool name alone",
        "error: conf.toml: agents.a.permissions.ask[0]: an empty pattern matches nothing; remove it (use '*' to match "
        "everything)",
        "error: conf.toml: agents.bad-name: invalid agent name: agent names are 1-64 characters: a letter first, "
        "then letters, digits and single underscores",
        "error: conf.toml: agents.b.mode: bypassPermissions approves every asked call; it is accepted only with "
        "allow_dangerously_skip_permissions = true beside it",
        "error: conf.toml: agents.b.token_env: expected an environment variable name, got 'not a var'",
    ]


def test_case_matters_in_patterns_and_unicode_is_refused() -> None:
    # FS__read_file is a valid pattern, and it is not fs__read_file (tested in test_permissions);
    # a full-width letter is not a name character at all.
    fullwidth_f = "\uff46"
    assert problems(f'''
        [agents.a.permissions]
        tools = {{ allow = ["{fullwidth_f}s__read_file"] }}
    ''') == [
        f"error: conf.toml: agents.a.permissions.tools.allow[0]: '{fullwidth_f}s__read_file' is not a valid pattern: "
        "full tool names: letters, digits and '_' and '*', optionally followed by '(specifier)'",
    ]


def test_mcp_server_needs_one_transport_and_packs_cannot_share_its_namespace() -> None:
    assert problems('''
        [packs.time]
        x = 1
        [mcps.time]
        command = "python"
        [mcps.both]
        command = "a"
        url = "http://x"
        [mcps.web]
        url = "ftp://x"
    ''') == [
        "error: conf.toml: mcps.both: needs exactly one of command (stdio) or url (streamable HTTP)",
    ]
    assert problems('''
        [packs.time]
        x = 1
        [mcps.time]
        command = "python"
        [mcps.web]
        url = "ftp://x"
    ''') == [
        "error: conf.toml: mcps.time: namespace 'time' is also a pack's ([packs.time]); two sources can never share a "
        "namespace",
        "error: conf.toml: mcps.web.url: expected an http:// or https:// URL, got 'ftp://x'",
    ]


def test_invalid_toml_names_the_file() -> None:
    assert problems("[agents\n") == [
        "error: conf.toml: invalid TOML: Expected ']' at the end of a table declaration (at line 1, column 8)",
    ]


def test_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_config(None, {}) is None
    assert load_config(None, {}).source == BUILTIN_NAME
    (tmp_path / "toolcrib.toml").write_text("[agents.local]\n")
    assert find_config(None, {}) == Path("toolcrib.toml")
    env_file = tmp_path / "env.toml"
    env_file.write_text("[agents.from_env]\n")
    assert find_config(None, {"TOOLCRIB_CONFIG": str(env_file)}) == env_file
    assert find_config("given.toml", {"TOOLCRIB_CONFIG": str(env_file)}) == Path("given.toml")
    assert list(load_config(None, {"TOOLCRIB_CONFIG": str(env_file)}).config.agents) == ["from_env"]


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml", {})
    assert str(info.value) == f"error: {tmp_path / 'nope.toml'}: config file not found"


def test_builtin_default_serves_a_default_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load_config(None, {})
    agent = loaded.config.agents["default"]
    assert agent.mode == "plan"
    assert agent.permissions is not None and agent.permissions.plugins is not None
    assert agent.permissions.plugins.allow == ["fs"]


def test_starter_template_is_valid() -> None:
    text = (Path(__file__).parent.parent / "host/toolcrib/templates/toolcrib.toml").read_text()
    loaded = parse_config(text, "toolcrib.toml", Path.cwd())
    assert sorted(loaded.config.agents) == ["assistant", "reader"]


def test_config_errors_know_the_line_of_their_key() -> None:
    text = textwrap.dedent('''
        [agents.a]
        mode = "plan"
        [agents.a.permissions]
        tools = { allow = ["x(", "y"] }

        [[hooks.pre_tool_use]]
        command = ["a"]
        [[hooks.pre_tool_use]]
        command = []
        [agents."b c"]
        [agents.d.identity]
        claims = { sub = "x" }
        [agents.e]
        limits.rate = "lots"
    ''')
    with pytest.raises(ConfigError) as info:
        parse_config(text, "t.toml", Path("/x"))
    assert [(p.line, p.located().split(": ")[1]) for p in info.value.problems] == [
        (10, "t.toml:10"), (5, "t.toml:5"), (11, "t.toml:11"), (12, "t.toml:12"), (15, "t.toml:15")]
    assert str(info.value.problems[0]) == ("error: t.toml: hooks.pre_tool_use[1].command: expected the program to "
                                           "run, then its arguments: [\"python3\", \"check.py\"]")
    with pytest.raises(ConfigError) as info:
        parse_config('[host]\nworkspce = "."\n', "t.toml", Path("/x"))
    assert info.value.problems[0].located().startswith("error: t.toml:2: host.workspce: unknown key 'workspce'")
