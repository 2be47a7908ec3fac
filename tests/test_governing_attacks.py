"""An agent reaching what governs it: the config, the files and programs it names, the code a hook or an upstream server
runs, the host's own process; each case an attack round got through, against real packs, programs and servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
import toolcrib_fs
import toolcrib_shell
from mcp import Client

import toolcrib
from attacking import call, host_at, protected_message, yes
from conftest import cli
from packs import Pack
from toolcrib import sandbox, workspace
from toolcrib.host import Host

# -- critical: an agent rewrites its own rules ----------------------------------------------------------------


@pytest.fixture
def starter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The unmodified `toolcrib init` starter config, in the folder it serves as the workspace."""
    monkeypatch.chdir(tmp_path)
    assert cli("init")[0] == 0
    return tmp_path / "toolcrib.toml"


def test_the_starter_config_asks_before_every_write(starter: Path) -> None:
    host = host_at(starter, fs=toolcrib_fs)
    before = starter.read_text()
    for tool, args in [("fs__batch_edit", {"path": "toolcrib.toml", "edits": [{"old_text": "fs", "new_text": "x"}]}),
                       ("fs__copy", {"source": "toolcrib.toml", "destination": "b.toml"}),
                       ("fs__rename", {"source": "toolcrib.toml", "destination": "b.toml"}),
                       ("fs__write_file", {"path": "a.txt", "content": "x"})]:
        result = call(host, "assistant", tool, **args)
        assert result.is_error
        assert result.text.startswith(f"Permission denied: {tool} needs approval (ask rule '@writes')"), result.text
    assert call(host, "assistant", "fs__read_file", path="toolcrib.toml").text == before  # reading needs nobody
    assert starter.read_text() == before


def test_no_file_tool_changes_what_governs_the_host(starter: Path) -> None:
    """Even approved, no tool of the file pack writes, edits, renames, replaces or copies over the config or the lock
    beside it (the starter config denies fs__rm; removing is tested below)."""
    host = host_at(starter, fs=toolcrib_fs)
    before = starter.read_text()
    config, lock = "the config file toolcrib.toml", "the lock file toolcrib.lock"
    attempts = [
        ("fs__write_file", {"path": "toolcrib.toml", "content": "[agents.assistant]"}, "toolcrib.toml", config),
        ("fs__edit", {"path": "toolcrib.toml", "old_text": '"fs", "media"', "new_text": '"*"'}, "toolcrib.toml",
         config),
        ("fs__batch_edit", {"path": "./toolcrib.toml", "edits": [{"old_text": "fs", "new_text": "shell"}]},
         "toolcrib.toml", config),
        ("fs__rename", {"source": "toolcrib.toml", "destination": "old.toml"}, "toolcrib.toml", config),
        ("fs__copy", {"source": "toolcrib.toml", "destination": "x.toml"}, None, None),  # reading it is fine
        ("fs__copy", {"source": "x.toml", "destination": "toolcrib.toml", "overwrite": True}, "toolcrib.toml", config),
        ("fs__rename", {"source": "x.toml", "destination": "toolcrib.toml", "overwrite": True}, "toolcrib.toml",
         config),
        ("fs__write_file", {"path": "toolcrib.lock", "content": "{}"}, "toolcrib.lock", lock),
        ("fs__mkdir", {"path": "toolcrib.lock"}, "toolcrib.lock", lock),
    ]
    for tool, args, path, what in attempts:
        result = call(host, "assistant", tool, approver=yes, **args)
        if path is None:
            assert not result.is_error, result.text
        else:
            assert (result.is_error, result.text) == (True, protected_message(path, what)), tool
    assert starter.read_text() == before
    assert not (starter.parent / "toolcrib.lock").exists()


def test_a_folder_holding_a_protected_file_cannot_be_moved_or_removed(tmp_path: Path) -> None:
    (tmp_path / "ws" / "conf").mkdir(parents=True)
    (tmp_path / "ws" / "conf" / "check.py").write_text("print('ok')\n")
    config = tmp_path / "ws" / "conf" / "toolcrib.toml"
    config.write_text(textwrap.dedent(f"""
        [host]
        workspace = ".."
        audit_log = "../logs/audit.jsonl"
        [[hooks.pre_tool_use]]
        command = [{json.dumps(sys.executable)}, "check.py"]
        tools = ["nothing__*"]
        [[hooks.post_tool_use]]
        command = ["./redact.sh"]
        tools = ["nothing__*"]
        [agents.a]
        [agents.a.permissions]
        plugins = {{ allow = ["fs"] }}
        tools = {{ allow = ["*"] }}
    """))
    (tmp_path / "ws" / "conf" / "redact.sh").write_text("#!/bin/sh\n")
    (tmp_path / "ws" / "conf" / "redact.sh").chmod(0o755)
    host = host_at(config, fs=toolcrib_fs)
    hook = "a program of hooks.pre_tool_use[0]"
    for tool, args, path, what, there in [
        ("fs__rename", {"source": "conf", "destination": "elsewhere"}, "conf", "the config file toolcrib.toml", False),
        ("fs__rm", {"path": "conf", "recursive": True}, "conf", "the config file toolcrib.toml", False),
        ("fs__write_file", {"path": "conf/check.py", "content": "import os"}, "conf/check.py", hook, True),
        ("fs__write_file", {"path": "conf/redact.sh", "content": "exit 0"}, "conf/redact.sh",
         "a program of hooks.post_tool_use[0]", True),
        ("fs__write_file", {"path": "logs/audit.jsonl", "content": ""}, "logs/audit.jsonl", "the audit log", True),
        ("fs__rm", {"path": "logs", "recursive": True}, "logs", "the audit log", False),
    ]:
        assert call(host, "a", tool, **args).text == protected_message(path, what, there), tool
    assert call(host, "a", "fs__write_file", path="other/x.txt", content="fine").text == "created other/x.txt (4 bytes)"
    assert (tmp_path / "ws" / "conf" / "check.py").read_text() == "print('ok')\n"


SED = shutil.which("sed")


TEE = shutil.which("tee")


def shell_config(workspace_line: str) -> str:
    return textwrap.dedent(f"""
        [host]
        {workspace_line}
        [packs.shell]
        allowed_programs = [{json.dumps(SED)}, {json.dumps(TEE)}, "sed", "tee", "cat"]
        [agents.dev]
        [agents.dev.permissions]
        plugins = {{ allow = ["shell"] }}
        tools = {{ allow = ["*"] }}
    """)


@pytest.mark.skipif(SED is None or TEE is None, reason="needs sed and tee")
def test_an_allowlisted_program_cannot_rewrite_the_config(tmp_path: Path) -> None:
    """`sed -i` and `tee` are allowed programs; the config beside the workspace stays as it is."""
    (tmp_path / "ws").mkdir()
    config = tmp_path / "toolcrib.toml"
    config.write_text(shell_config('workspace = "ws"'))
    before = config.read_text()
    host = host_at(config, shell=toolcrib_shell)
    if not sandbox.landlock_abi():  # nothing can confine programs here, and this process can write the config
        assert "shell__exec" not in host.view("dev")
        decision = host.explain("dev", "shell__exec")
        assert decision is not None and decision.checks[-1].kind == "unconfinable"
        return
    sed = call(host, "dev", "shell__exec", command=["sed", "-i", "s/allow/deny/", str(config)])
    tee = call(host, "dev", "shell__exec", command=f"tee {config}")
    relative = call(host, "dev", "shell__exec", command="sed -i s/dev/root/ ../toolcrib.toml")
    for result in (sed, tee, relative):
        assert result.structured_content is not None and result.structured_content["exit_code"] != 0, result.text
        assert "Permission denied" in result.structured_content["stderr"]
    assert config.read_text() == before
    inside = call(host, "dev", "shell__exec", command=f"tee {tmp_path / 'ws' / 'note.txt'}")
    assert inside.structured_content is not None and inside.structured_content["exit_code"] == 0  # its own folder


def test_programs_are_hidden_while_what_governs_the_host_is_within_their_reach(tmp_path: Path) -> None:
    config = tmp_path / "toolcrib.toml"
    config.write_text(shell_config('workspace = "."'))
    host = host_at(config, shell=toolcrib_shell)
    assert [vt.name for vt in host.view("dev").tools] == ["shell__exec_status", "shell__exec_stop", "shell__sleep"]
    decision = host.explain("dev", "shell__exec")
    assert decision is not None and not decision.visible
    check = decision.checks[-1]
    assert (check.name, check.kind) == ("available", "unconfinable")
    if sandbox.landlock_abi():
        assert check.detail.startswith(f"not available: programs may write in {tmp_path}, and ")
    warnings = [str(p) for p in host.problems() if p.where in ("tool 'shell__exec'", "tool 'shell__exec_async'")]
    assert len(warnings) == 2 and all(w.startswith("warning: tool 'shell__exec") for w in warnings)
    assert "hidden from dev: not available: programs " in warnings[0]


def test_what_governs_the_host_is_protected_in_every_root_of_the_process(tmp_path: Path) -> None:
    """The protection is `toolcrib.workspace.Root`'s, so a third-party pack that builds its own Root has it too."""
    (tmp_path / "toolcrib.toml").write_text("[agents.a]\n")
    host_at(tmp_path / "toolcrib.toml")
    root = workspace.Root(tmp_path)
    with pytest.raises(workspace.PathError, match="is protected"):
        root.write_bytes(("toolcrib.toml",), b"")
    with pytest.raises(workspace.PathError, match="is protected"):
        root.remove(("toolcrib.lock",))
    root.write_bytes(("other.txt",), b"fine")
    assert str(tmp_path / "toolcrib.toml") in workspace.protected()


# -- HTTP -----------------------------------------------------------------------------------------------------


def test_check_warns_when_an_upstream_server_is_given_what_governs_the_host(tmp_path: Path) -> None:
    config = tmp_path / "toolcrib.toml"
    config.write_text(textwrap.dedent(f"""
        [mcps.files]
        command = "npx"
        args = ["-y", "@modelcontextprotocol/server-filesystem", {json.dumps(str(tmp_path))}]
        lazy = true
        [agents.a]
    """))
    warnings = [str(p) for p in host_at(config).problems() if "mcps.files.args" in p.where]
    assert warnings == [f"warning: {config}: mcps.files.args: upstream server 'files' is given the folder {tmp_path}, "
                        f"which holds what governs the host: {tmp_path}/toolcrib.lock (the lock file toolcrib.lock), "
                        f"{config} (the config file toolcrib.toml); toolcrib cannot keep another program from "
                        "changing it"]


# -- high: every file the config makes the host read or run, under every name that reaches it --------------------


def fs_writer(tmp_path: Path, extra: str, workspace_line: str = 'workspace = "."') -> Host:
    """A host whose agent `a` may use every file tool, from a config written into `tmp_path`."""
    head = f"[host]\n{workspace_line}\n{textwrap.dedent(extra)}\n"
    (tmp_path / "toolcrib.toml").write_text(head + textwrap.dedent("""
        [agents.a]
        [agents.a.permissions]
        plugins = { allow = ["fs"] }
        tools = { allow = ["fs__*"] }
    """))
    return host_at(tmp_path / "toolcrib.toml", fs=toolcrib_fs)


def refused(host: Host, tool: str, **arguments: Any) -> str:
    result = call(host, "a", tool, **arguments)
    assert result.is_error, (tool, arguments, result.text)
    return result.text


def test_no_tool_replaces_the_jwks_file_that_decides_who_is_who(tmp_path: Path) -> None:
    """An agent that could rewrite `[oauth] jwks_file` would sign tokens for any agent with its own key."""
    (tmp_path / "jwks.json").write_text('{"keys": []}')
    host = fs_writer(tmp_path, """
        [oauth]
        issuer = "https://idp.example"
        audience = "https://tools.example"
        jwks_file = "jwks.json"
    """)
    what = "the JWKS file of [oauth]"
    assert refused(host, "fs__write_file", path="jwks.json", content='{"keys": [1]}') == protected_message(
        "jwks.json", what)
    assert refused(host, "fs__edit", path="jwks.json", old_text="[]", new_text="[1]") == protected_message(
        "jwks.json", what)
    assert call(host, "a", "fs__write_file", path="mine.json", content="{}").is_error is False
    assert refused(host, "fs__rename", source="mine.json", destination="jwks.json", overwrite=True) == \
        protected_message("jwks.json", what)
    assert refused(host, "fs__rm", path="jwks.json") == protected_message("jwks.json", what)
    assert (tmp_path / "jwks.json").read_text() == '{"keys": []}'


def test_no_tool_rewrites_the_cedar_policies_that_decide_what_it_sees(tmp_path: Path) -> None:
    """An agent that could rewrite `[policy] cedar` would permit itself everything the rules let through."""
    text = 'permit (principal, action, resource);\n'
    (tmp_path / "policies.cedar").write_text(text)
    host = fs_writer(tmp_path, """
        [policy]
        cedar = "policies.cedar"
    """)
    what = "the Cedar policies"
    assert refused(host, "fs__write_file", path="policies.cedar", content="forbid (principal, action, resource);") \
        == protected_message("policies.cedar", what)
    assert refused(host, "fs__rm", path="policies.cedar") == protected_message("policies.cedar", what)
    assert (tmp_path / "policies.cedar").read_text() == text


def test_every_path_field_of_the_config_model_is_governing() -> None:
    """The governing files are found from the config's model: every field that names a file the host reads or runs
    carries the marker, so a new one cannot be forgotten by a hand-written list."""
    from toolcrib.config import Config
    from toolcrib.governing import Governs

    marked = set()

    def walk(model: Any, where: str) -> None:
        for name, info in model.model_fields.items():
            if any(isinstance(m, Governs) for m in info.metadata):
                marked.add(f"{where}.{name}")
            for kind in typing_args(info.annotation):
                if isinstance(kind, type) and hasattr(kind, "model_fields"):
                    walk(kind, f"{where}.{name}")

    walk(Config, "")
    assert marked == {".host.tool_dirs", ".host.audit_log", ".skills.path", ".oauth.jwks_file", ".openapi.document",
                      ".policy.cedar"}


def typing_args(annotation: Any) -> list[Any]:
    import typing

    found = [annotation]
    for arg in typing.get_args(annotation):
        found += typing_args(arg)
    return found


def test_a_python_module_a_hook_runs_is_protected_before_it_exists(tmp_path: Path) -> None:
    """`python -m policy_mod` and a script not written yet: the agent cannot write the code the host would run."""
    host = fs_writer(tmp_path, f"""
        [[hooks.pre_tool_use]]
        command = [{json.dumps(sys.executable)}, "-m", "policy_mod"]
        tools = ["fs__read_file"]
        [[hooks.post_tool_use]]
        command = [{json.dumps(sys.executable)}, "hooks/later.py"]
        tools = ["fs__read_file"]
    """)
    first, second = "a program of hooks.pre_tool_use[0]", "a program of hooks.post_tool_use[0]"
    assert refused(host, "fs__write_file", path="policy_mod.py", content="x") == protected_message(
        "policy_mod.py", first)
    assert refused(host, "fs__write_file", path="policy_mod/__init__.py", content="x",
                   create_parents=True) == protected_message("policy_mod/__init__.py", first, there=False)
    assert refused(host, "fs__mkdir", path="policy_mod") == protected_message("policy_mod", first)
    assert refused(host, "fs__write_file", path="hooks/later.py", content="x", create_parents=True) == \
        protected_message("hooks/later.py", second)
    assert not (tmp_path / "policy_mod.py").exists() and not (tmp_path / "hooks" / "later.py").exists()


def code_message(path: str, folder: Path, where: str) -> str:
    return (f"{path}: is protected: {where} imports Python modules from {folder}, so no tool may change Python code "
            "there")


def test_no_tool_writes_a_module_a_python_hook_would_import(tmp_path: Path) -> None:
    """A Python hook imports from its script's folder first (`hooks/json.py` would shadow the standard library's),
    and `-m` from its working directory and PYTHONPATH: no Python code may change there; other files may."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "policy.py").write_text("import json\n")
    host = fs_writer(tmp_path, f"""
        [[hooks.pre_tool_use]]
        command = [{json.dumps(sys.executable)}, "hooks/policy.py"]
        tools = ["fs__read_file"]
        env = {{ PYTHONPATH = "lib" }}
    """)
    where = "hooks.pre_tool_use[0]"
    hooks, lib = tmp_path / "hooks", tmp_path / "lib"
    assert refused(host, "fs__write_file", path="hooks/json.py", content="x") == code_message(
        "hooks/json.py", hooks, where)
    assert refused(host, "fs__write_file", path="hooks/__pycache__/json.cpython-311.pyc", content="x",
                   create_parents=True) == code_message("hooks/__pycache__/json.cpython-311.pyc", hooks, where)
    assert refused(host, "fs__write_file", path="lib/pkg/__init__.py", content="x", create_parents=True) == \
        code_message("lib/pkg/__init__.py", lib, where)
    assert refused(host, "fs__write_file", path="hooks/policy.py", content="x") == protected_message(
        "hooks/policy.py", f"a program of {where}")
    (tmp_path / "staged" / "json").mkdir(parents=True)
    (tmp_path / "staged" / "json" / "data.txt").write_text("a folder that would become a package")
    assert refused(host, "fs__rename", source="staged/json", destination="hooks/json") == code_message(
        "hooks/json", hooks, where)
    assert call(host, "a", "fs__write_file", path="hooks/notes.txt", content="fine").text == \
        "created hooks/notes.txt (4 bytes)"
    assert call(host, "a", "fs__write_file", path="app/main.py", content="fine", create_parents=True).is_error is False
    assert sorted(p.name for p in hooks.iterdir()) == ["notes.txt", "policy.py"]


@pytest.mark.parametrize("command", [["sh", "-c", "exec python3 hooks/shpolicy.py"],
                                     [sys.executable, "-c", "import shpolicy"],
                                     ["bash", "-ec", "true"]])
def test_a_hook_whose_code_cannot_be_located_does_not_start_inside_the_workspace(tmp_path: Path,
                                                                               command: list[str]) -> None:
    (tmp_path / "a.txt").write_text("A")
    host = fs_writer(tmp_path, f"""
        [[hooks.pre_tool_use]]
        command = {json.dumps(command)}
        tools = ["fs__read_file"]
    """)
    assert call(host, "a", "fs__read_file", path="a.txt").text == \
        "The call was refused: a policy check failed (the host's log says why)."
    _, _, out = cli("check", "--config", str(tmp_path / "toolcrib.toml"))
    assert f"warning: {tmp_path / 'toolcrib.toml'}: hooks.pre_tool_use[0].command: hooks.pre_tool_use[0] does not " \
           "start: " in out
    assert f"and it runs in {tmp_path}, inside the workspace, where an agent could write what it runs; move it out " \
           "of the workspace, name its script by path, or set out_of_reach = true if its code is out of every " \
           "agent's reach" in out
    vouched = fs_writer(tmp_path, f"""
        [[hooks.pre_tool_use]]
        command = {json.dumps([*command[:1], command[1], "exit 0"] if command[0] != sys.executable else
                              [sys.executable, "-c", "pass"])}
        tools = ["fs__read_file"]
        out_of_reach = true
    """)
    assert call(vouched, "a", "fs__read_file", path="a.txt").text == "A"
    outside = fs_writer(tmp_path, f"""
        [[hooks.pre_tool_use]]
        command = {json.dumps([sys.executable, "-c", "pass"])}
        tools = ["fs__read_file"]
    """, workspace_line='workspace = "ws"')
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "a.txt").write_text("in ws")
    assert call(outside, "a", "fs__read_file", path="a.txt").text == "in ws"  # its folder is not the agent's


@pytest.mark.parametrize(("workspace", "cwd", "refused"), [
    ("ws", "ws", True), ("ws", "ws/hooks/deep", True), ("ws", "ws-other", False), ("ws", ".", False),
    ("/", "ws", True),
], ids=["the-workspace", "a-folder-in-it", "a-sibling-with-its-name-as-prefix", "its-parent", "workspace-is-root"])
def test_an_unlocated_hook_is_refused_exactly_when_it_runs_inside_the_workspace(
        tmp_path: Path, workspace: str, cwd: str, refused: bool) -> None:
    from toolcrib.governing import unlocated

    for folder in ("ws/hooks/deep", "ws-other"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    where = tmp_path / cwd
    why = unlocated("hooks.pre_tool_use[0]", ["sh", "-c", "true"], where, {}, tmp_path / workspace, False)
    assert why == (f"hooks.pre_tool_use[0] does not start: sh -c runs a string of commands toolcrib cannot follow, "
                   f"and it runs in {os.path.realpath(where)}, inside the workspace, where an agent could write what "
                   "it runs; move it out of the workspace, name its script by path, or set out_of_reach = true if its "
                   "code is out of every agent's reach" if refused else None)
    assert unlocated("h", ["sh", "-c", "true"], where, {}, tmp_path / workspace, True) is None  # vouched for
    assert unlocated("h", ["sh", "hooks/x.sh"], where, {}, tmp_path / workspace, False) is None  # located


def test_governing_files_reached_through_symlinks_cannot_be_replaced(tmp_path: Path) -> None:
    """A workspace whose config, tool folder, hooks and skill are links into a dotfiles folder: no link can be
    replaced, removed or renamed, and nothing can be written through it."""
    dot, ws = tmp_path / "dotfiles", tmp_path / "ws"
    for folder in ("tools", "hooks", "skill"):
        (dot / folder).mkdir(parents=True)
    (dot / "hooks" / "policy.py").write_text("")
    (dot / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nbody\n")
    (dot / "toolcrib.toml").write_text(textwrap.dedent(f"""
        [host]
        workspace = "{ws}"
        tool_dirs = ["{ws / 'tools'}"]
        [skills.s]
        path = "{ws / 'skill'}"
        [[hooks.pre_tool_use]]
        command = [{json.dumps(sys.executable)}, "{ws / 'hooks' / 'policy.py'}"]
        tools = ["nothing"]
        [agents.a]
        [agents.a.permissions]
        plugins = {{ allow = ["fs"] }}
        tools = {{ allow = ["fs__*"] }}
    """))
    ws.mkdir()
    for name in ("toolcrib.toml", "tools", "hooks", "skill"):
        (ws / name).symlink_to(dot / name)
    host = host_at(ws / "toolcrib.toml", fs=toolcrib_fs)
    attempts = [
        ("fs__write_file", {"path": "toolcrib.toml", "content": "[agents.a]"}, "toolcrib.toml",
         "the config file toolcrib.toml", True),
        ("fs__rm", {"path": "tools", "recursive": True}, "tools", "the tool folder 'tools'", True),
        ("fs__rm", {"path": "tools"}, "tools", "the tool folder 'tools'", True),
        ("fs__rename", {"source": "hooks", "destination": "old-hooks"}, "hooks",
         "a program of hooks.pre_tool_use[0]", True),
        ("fs__write_file", {"path": "tools/evil.py", "content": "x"}, "tools/evil.py", "the tool folder 'tools'",
         False),
        ("fs__rename", {"source": "skill", "destination": "old-skill"}, "skill", "the folder of skill 's'", True),
        ("fs__write_file", {"path": "skill", "content": "x"}, "skill", "the folder of skill 's'", True),
    ]
    for tool, arguments, path, what, there in attempts:
        assert refused(host, tool, **arguments) == protected_message(path, what, there), (tool, arguments)
    assert all((ws / name).is_symlink() for name in ("toolcrib.toml", "tools", "hooks", "skill"))
    assert sorted(p.name for p in (dot / "tools").iterdir()) == []


def test_an_upstream_servers_script_and_modules_are_protected(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text("")
    host = fs_writer(tmp_path, f"""
        [mcps.local]
        command = {json.dumps(sys.executable)}
        args = ["server.py", "--data", "data/"]
        cwd = "."
        lazy = true
        [mcps.inline]
        command = "bash"
        args = ["-c", "exec python3 other.py"]
        lazy = true
    """)
    assert refused(host, "fs__write_file", path="server.py", content="x") == protected_message(
        "server.py", "a program of mcps.local")
    assert refused(host, "fs__write_file", path="json.py", content="x") == code_message(
        "json.py", tmp_path, "mcps.local")
    assert call(host, "a", "fs__write_file", path="data/x.txt", content="x", create_parents=True).is_error is False
    _, _, err = cli("check", "--config", str(tmp_path / "toolcrib.toml"))
    assert (f"warning: {tmp_path / 'toolcrib.toml'}: mcps.inline.command: bash -c runs a string of commands toolcrib "
            "cannot follow: toolcrib cannot protect the code this server runs; name its script by path") in err


# -- seed parity: an interrupt ends the turn, and a sub-agent's hidden calls are audited -------------------------


def test_check_warns_when_a_python_module_folder_holds_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "toolcrib.toml").write_text(textwrap.dedent(f"""
        [mcps.time]
        command = {json.dumps(sys.executable)}
        args = ["-m", "mcp_server_time"]
        cwd = "."
        lazy = true
        [agents.a.permissions]
        mcps = {{ allow = ["time"] }}
    """))
    _, _, err = cli("check", "--config", str(tmp_path / "toolcrib.toml"))
    assert (f"warning: {tmp_path / 'toolcrib.toml'}: mcps.time: mcps.time imports Python modules from {tmp_path}, "
            "which holds the workspace: no tool may change a Python file anywhere in the workspace (one could shadow "
            "a module it imports); give it a cwd (or a script folder) outside the workspace") in err.splitlines()


@pytest.mark.parametrize(("command", "files", "module_paths", "opaque"), [
    (["python", "hooks/p.py", "--rules", "rules.json"], ["hooks/p.py"], ["hooks"], None),
    (["python3.11", "-u", "-W", "ignore", "hooks/p.py"], ["hooks/p.py"], ["hooks"], None),
    (["/usr/bin/python3", "-m", "pol.sub"], ["/usr/bin/python3", "pol.py", "pol"], ["."], None),
    (["python3", "-mpol"], ["pol.py", "pol"], ["."], None),
    (["python3", "-I", "hooks/p.py"], ["hooks/p.py"], [], None),  # isolated: not even the script's folder
    (["python3", "-Pm", "pol"], [], [], None),  # safe path: the working directory is not searched
    (["python3", "-c", "import x"], [], ["."], "python -c runs a string of code toolcrib cannot follow"),
    (["python3", "-Bc", "import x"], [], ["."], "python -c runs a string of code toolcrib cannot follow"),
    (["python3"], [], [], "python without a script reads its code from standard input"),
    (["env", "A=1", "-i", "python3", "hooks/p.py"], ["hooks/p.py"], ["hooks"], None),
    (["env", "PYTHONPATH=lib", "python3", "-m", "m"], ["m.py", "m", "lib/m.py", "lib/m"], [".", "lib"], None),
    (["env", "--split-string=python3 x"], [], [], "env -S runs a string of words toolcrib cannot follow"),
    (["python3", "--check-hash-based-pycs", "always", "hooks/p.py"], ["hooks/p.py"], ["hooks"], None),
    (["python3", "-X", "dev", "hooks/p.py", "a/b.txt"], ["hooks/p.py", "a/b.txt"], ["hooks"], None),
    (["python3", "-Xdev", "-W", "error", "hooks/p.py"], ["hooks/p.py"], ["hooks"], None),
    (["python3", "-", "hooks/p.py"], [], [], "python without a script reads its code from standard input"),
    (["env", "-S", "python3 hooks/p.py"], [], [], "env -S runs a string of words toolcrib cannot follow"),
    (["sh", "hooks/check.sh", "later/x.txt"], ["hooks/check.sh", "later/x.txt"], [], None),
    (["bash", "-e", "-o", "pipefail", "hooks/check.sh"], ["hooks/check.sh"], [], None),
    (["bash", "-lc", "true"], [], [], "bash -c runs a string of commands toolcrib cannot follow"),
    (["sh"], [], [], "sh without a script reads its code from standard input"),
    (["node", "--eval", "1"], [], [], "node --eval runs a string of code toolcrib cannot follow"),
    (["node", "--eval=1"], [], [], "node --eval=1 runs a string of code toolcrib cannot follow"),
    (["node", "--inspect", "srv.js"], ["srv.js"], [], None),
    (["perl", "-E", "say 1"], [], [], "perl -E runs a string of code toolcrib cannot follow"),
    (["ruby", "-e", "1"], [], [], "ruby -e runs a string of code toolcrib cannot follow"),
    (["php", "-r", "1;"], [], [], "php -r runs a string of code toolcrib cannot follow"),
    (["./bin/policy", "-v", "conf/", "data/new.txt", "."], ["bin/policy", "data/new.txt"], [], None),
], ids=[f"case{i}" for i in range(28)])
def test_what_a_command_runs_is_found_from_its_command_line(tmp_path: Path, command: list[str], files: list[str],
                                                            module_paths: list[str], opaque: str | None) -> None:
    from toolcrib.governing import analyse

    (tmp_path / "rules.json").write_text("{}")
    (tmp_path / "conf").mkdir()
    code = analyse(command, tmp_path, {"PYTHONPATH": ""})

    def local(path: Path) -> str:
        return os.path.relpath(path, tmp_path) if str(path).startswith(str(tmp_path)) else str(path)

    expected_files = files + (["rules.json"] if "rules.json" in command else [])
    assert ([local(p) for p in code.files], [local(p) for p in code.module_paths], code.opaque) == (
        sorted(set(expected_files), key=expected_files.index), module_paths, opaque)


@pytest.mark.parametrize(("command", "env", "files", "module_paths", "opaque"), [
    # env as GNU env reads it: -u unsets, -i empties, -C changes directory, -S splits a string, -- ends options
    (["env", "-u", "PYTHONPATH", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "-uPYTHONPATH", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "--unset=PYTHONPATH", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "--unset", "PYTHONPATH", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "-i", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "-iv", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "-", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "--ignore-environment", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m"], ["."], None),
    (["env", "-v", "python3", "-m", "m"], {"PYTHONPATH": "lib"}, ["m.py", "m", "lib/m.py", "lib/m"], [".", "lib"],
     None),
    (["env", "PYTHONPATH=a=b", "python3", "-m", "m"], {}, ["m.py", "m", "a=b/m.py", "a=b/m"], [".", "a=b"], None),
    (["env", "-C", "sub", "./run", "x/y.txt"], {}, ["sub/run", "sub/x/y.txt"], [], None),
    (["env", "--chdir=sub", "python3", "p.py"], {}, ["sub/p.py"], ["sub"], None),
    (["env", "-Csub", "python3", "p.py"], {}, ["sub/p.py"], ["sub"], None),
    (["env", "--", "./run"], {}, ["run"], [], None),
    (["env", "A=1"], {}, [], [], None),
    (["env", "-Spython3 x"], {}, [], [], "env -S runs a string of words toolcrib cannot follow"),
    (["env", "-vS", "python3 x"], {}, [], [], "env -S runs a string of words toolcrib cannot follow"),
    (["env", "--split-string", "python3 x"], {}, [], [], "env -S runs a string of words toolcrib cannot follow"),
    (["env", "-a", "name", "./run"], {}, ["run"], [], None),
    # Python: long options, options that take the next word, -m without a module
    (["python3", "-B", "--check-hash-based-pycs", "always", "p.py"], {}, ["p.py"], ["."], None),
    (["python3", "--help-env", "p.py"], {}, ["p.py"], ["."], None),
    (["python3", "-u", "-m", "pol"], {}, ["pol.py", "pol"], ["."], None),
    (["python3", "-mp", "data/a.txt"], {}, ["p.py", "p", "data/a.txt"], ["."], None),
    (["python3", "-B", "-m", "pol", "out/r.txt"], {}, ["pol.py", "pol", "out/r.txt"], ["."], None),
    (["python3", "-m", "pol.py"], {}, ["pol.py", "pol"], ["."], None),
    (["python3", "-m"], {}, [], [], None),  # python refuses to start
    (["python3", "-W"], {}, [], [], "python without a script reads its code from standard input"),
    (["python3", "-c", "1"], {"PYTHONPATH": "lib"}, [], [".", "lib"],
     "python -c runs a string of code toolcrib cannot follow"),
    (["python3", "-u", "-B", "p.py"], {}, ["p.py"], ["."], None),
    # shells: options that take a value, + options, - and --
    (["sh", "+e", "hooks/check.sh"], {}, ["hooks/check.sh"], [], None),
    (["bash", "-eo", "pipefail", "hooks/check.sh"], {}, ["hooks/check.sh"], [], None),
    (["bash", "+O", "extglob", "hooks/check.sh"], {}, ["hooks/check.sh"], [], None),
    (["bash", "--rcfile", "rc", "hooks/check.sh"], {}, ["hooks/check.sh"], [], None),
    (["bash", "--noprofile", "hooks/check.sh"], {}, ["hooks/check.sh"], [], None),
    (["bash", "--", "-odd.sh"], {}, ["-odd.sh"], [], None),
    (["bash", "--"], {}, [], [], "bash without a script reads its code from standard input"),
    (["bash", "-"], {}, [], [], "bash without a script reads its code from standard input"),
    (["bash", "-e", "-", "x"], {}, [], [], "bash without a script reads its code from standard input"),
    # what interpreters load by option: node's --require and --import, perl's and ruby's -I
    (["node", "-r", "./pre.js", "srv.js"], {}, ["pre.js", "srv.js"], [], None),
    (["node", "--import=./pre.mjs", "--require", "dotenv", "srv.js"], {}, ["pre.mjs", "srv.js"], [], None),
    (["node", "-C", "dev", "srv.js"], {}, ["srv.js"], [], None),
    (["perl", "-Ilib", "x.pl"], {}, ["x.pl"], ["lib"], None),
    (["ruby", "-I", "lib", "-r", "json", "x.rb"], {}, ["x.rb"], ["lib"], None),
    # arguments that name files, and those that do not
    (["./bin/p", "--out=a/b.txt", "a/\x00b", "conf", "nothing", "a" * 5000, "data/new.txt"], {},
     ["bin/p", "data/new.txt"], [], None),
], ids=[f"case{i}" for i in range(44)])
def test_what_more_command_lines_run_is_found(tmp_path: Path, command: list[str], env: dict[str, str],
                                               files: list[str], module_paths: list[str], opaque: str | None) -> None:
    from toolcrib.governing import analyse

    (tmp_path / "conf").mkdir()
    (tmp_path / "pol.py").write_text("")
    (tmp_path / "srv.js").write_text("")
    code = analyse(command, tmp_path, env)
    relative = [[os.path.relpath(p, tmp_path) for p in paths] for paths in (code.files, code.module_paths)]
    assert (*relative, code.opaque) == (files, module_paths, opaque)


def test_code_an_environment_makes_a_program_load_is_found(tmp_path: Path) -> None:
    from toolcrib.governing import analyse

    env = {"LD_PRELOAD": "lib/a.so:/opt/b.so", "BASH_ENV": "rc.sh", "ENV": "", "NODE_OPTIONS": (
        "--require ./hooks/pre.js -r=/abs/x.js --import mod --max-old-space-size=100 --loader")}
    assert [os.path.relpath(p, tmp_path) if str(p).startswith(str(tmp_path)) else str(p)
            for p in analyse(["node", "srv.js"], tmp_path, env).files] == [
        "lib/a.so", "/opt/b.so", "rc.sh", "hooks/pre.js", "/abs/x.js", "srv.js"]


def test_pythonpath_adds_module_folders_unless_isolated(tmp_path: Path) -> None:
    from toolcrib.governing import analyse

    env = {"PYTHONPATH": f"lib{os.pathsep}{tmp_path / 'abs'}{os.pathsep}"}
    assert analyse(["python3", "-m", "m"], tmp_path, env).module_paths == [tmp_path, tmp_path / "lib", tmp_path / "abs"]
    assert analyse(["python3", "sub/x.py"], tmp_path, env).module_paths == [tmp_path / "sub", tmp_path / "lib",
                                                                           tmp_path / "abs"]
    assert analyse(["python3", "-I", "-m", "m"], tmp_path, env).module_paths == []
    assert analyse(["python3", "-P", "sub/x.py"], tmp_path, env).module_paths == [tmp_path / "lib", tmp_path / "abs"]
    assert analyse(["python3", "-E", "-m", "m"], tmp_path, env).module_paths == [tmp_path]
    assert analyse(["python3", "-m", "m"], tmp_path, {**env, "PYTHONSAFEPATH": "1"}).module_paths == [
        tmp_path / "lib", tmp_path / "abs"]


def test_python_code_is_protected_in_a_workspace_that_holds_no_other_governing_file(tmp_path: Path) -> None:
    """The config and the hook live outside the workspace; only the hook's PYTHONPATH reaches into it."""
    (tmp_path / "ws" / "lib").mkdir(parents=True)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "hook.py").write_text("")
    host = fs_writer(tmp_path, f"""
        [[hooks.pre_tool_use]]
        command = [{json.dumps(sys.executable)}, "hooks/hook.py"]
        tools = ["nothing"]
        env = {{ PYTHONPATH = "ws/lib" }}
    """, workspace_line='workspace = "ws"')
    assert refused(host, "fs__write_file", path="lib/json.py", content="x") == code_message(
        "lib/json.py", tmp_path / "ws" / "lib", "hooks.pre_tool_use[0]")
    assert call(host, "a", "fs__write_file", path="lib/data.txt", content="x").is_error is False
    assert workspace.Root(tmp_path / "ws")._protected == []  # nothing else governing is in this workspace


def test_a_program_a_tool_runs_cannot_read_the_hosts_environment_from_proc(tmp_path: Path) -> None:
    """The agents' tokens, TOOLCRIB_STATE_SECRET and a Redis password live in the serving process's environment;
    a program of the same user (a shell tool's, a hook's, an upstream server) could read it from
    /proc/<pid>/environ, unless the host made itself undumpable (``sandbox.keep_private``, which serve and call
    do). As an ordinary user the child's read is refused, and the control shows it works without; root reads every
    process's environment whatever it does (run toolcrib as an ordinary user), so as root only the flag is checked."""
    import platform
    import sys

    if platform.system() != "Linux":
        pytest.skip("Linux only")
    script = (
        "import ctypes, subprocess, sys\n"
        "from toolcrib import sandbox\n"
        "if sys.argv[1] == 'private': assert sandbox.keep_private() is True\n"
        "dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)\n"  # PR_GET_DUMPABLE
        "child = subprocess.run(['sh', '-c', 'cat /proc/$PPID/environ'], capture_output=True)\n"
        "read = b'TOKEN_OF_ANOTHER_AGENT=s3cret-token-of-an-agent' in child.stdout\n"
        "print(dumpable, 'read' if read else 'refused')\n")
    found = {}
    for mode in ("private", "control"):
        proc = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, env={**os.environ, "TOKEN_OF_ANOTHER_AGENT": "s3cret-token-of-an-agent"})
        assert proc.returncode == 0, proc.stderr
        found[mode] = proc.stdout.strip()
    if os.getuid() == 0:
        assert found == {"private": "0 read", "control": "1 read"}
    else:
        assert found == {"private": "0 refused", "control": "1 read"}


@toolcrib.tool
def dumpable() -> str:
    """Say whether the process serving this call could be read by other processes of its user."""
    import ctypes

    return str(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE


PROBE = Pack(dumpable)


@pytest.mark.parametrize("front", ["call", "serve"])
def test_serve_and_call_make_the_host_unreadable_before_running_any_tool(tmp_path: Path, front: str) -> None:
    import sys

    from mcp import StdioServerParameters

    config = tmp_path / "toolcrib.toml"
    config.write_text('[agents.a.permissions]\nplugins = { allow = ["probe"] }\ntools = { allow = ["*"] }\n')
    tests = str(Path(__file__).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="probe=test_governing_attacks:PROBE",
               PYTHONPATH=tests + os.pathsep + env.get("PYTHONPATH", ""))
    if front == "call":
        proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "call", "--config", str(config), "--agent", "a",
                               "probe__dumpable"], capture_output=True, text=True, timeout=120, env=env)
        assert (proc.returncode, proc.stdout.strip()) == (0, "0"), proc.stderr
        return

    async def main() -> str:
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "toolcrib.cli", "serve", "--agent", "a", "--config", str(config), "--no-reload"], env=env)
        async with Client(params, cache=None) as client:
            return (await client.call_tool("probe__dumpable", {})).content[0].text  # type: ignore[union-attr]

    assert anyio.run(main) == "0"
