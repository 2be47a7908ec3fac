"""toolcrib-shell through the full pipeline with real subprocesses."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import toolcrib_shell

import toolcrib
from toolcrib.config import parse_config

SH = shutil.which("sh") or "/bin/sh"

CONFIG = f"""
[host]
workspace = "ws"

[packs.shell]
allowed_programs = ["echo", "ls", "env", "cat", "sleep", {SH!r}, "{sys.executable}"]
max_output_chars = 100
default_timeout = 5
max_processes = 2

[agents.dev]
[agents.dev.permissions]
plugins = {{ allow = ["shell"] }}
tools = {{ allow = ["shell__*"] }}

[agents.git_only]
[agents.git_only.permissions]
plugins = {{ allow = ["shell"] }}
tools = {{ allow = ["shell__exec(echo hello*)"] }}
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    (tmp_path / "ws" / "sub" / "file.txt").write_text("inside\n")
    return tmp_path / "ws"


def host_for(ws: Path, config: str = CONFIG) -> toolcrib.Host:
    return toolcrib.Host(parse_config(config, "toolcrib.toml", ws.parent), plugins={"shell": toolcrib_shell},
                         autoload=False, env={})


@pytest.fixture
def host(ws: Path) -> toolcrib.Host:
    return host_for(ws)


def call(host: toolcrib.Host, tool: str, agent: str = "dev", **args: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call(agent, f"shell__{tool}", args))


def test_exec_runs_an_allowed_program(host: toolcrib.Host) -> None:
    result = call(host, "exec", command="echo hello world")
    assert result.structured_content == {"exit_code": 0, "stdout": "hello world\n", "stderr": ""}
    listed = call(host, "exec", command=["ls"], cwd="sub")
    assert listed.structured_content == {"exit_code": 0, "stdout": "file.txt\n", "stderr": ""}
    failing = call(host, "exec", command=["ls", "missing-file"])
    assert failing.structured_content is not None and failing.structured_content["exit_code"] != 0
    assert not failing.is_error  # the command ran; its failure is in its exit code


def test_nothing_runs_until_an_operator_allows_it(ws: Path) -> None:
    bare = host_for(ws, CONFIG.replace("[packs.shell]\nallowed_programs", "[packs.shell]\n_unused").replace(
        "_unused = ", "# "))
    assert call(bare, "exec", command="echo hi").text == (
        "program 'echo' is not allowed (allowed programs: none: an operator must list programs in [packs.shell] "
        "allowed_programs)")


def test_refusals(host: toolcrib.Host) -> None:
    assert call(host, "exec", command="rm -rf /").text.startswith("program 'rm' is not allowed (allowed programs: ")
    assert call(host, "exec", command="/bin/echo hi").text.startswith("program '/bin/echo' is not allowed")
    assert call(host, "exec", command="").text == "the command is empty"
    assert call(host, "exec", command="echo 'unclosed").text == "cannot split the command: No closing quotation"
    assert call(host, "exec", command="echo hi", cwd="../").text == (
        "'../': '..' is not allowed; paths stay inside the workspace")
    assert call(host, "exec", command="echo hi", cwd="/tmp").text == (
        "'/tmp': absolute paths are not allowed; give a path relative to the workspace")


def test_metacharacters_are_never_interpreted_without_a_shell(host: toolcrib.Host, ws: Path) -> None:
    result = call(host, "exec", command="echo a; touch pwned && echo $(id) `id` | cat")
    assert result.structured_content is not None
    assert result.structured_content["stdout"] == "a; touch pwned && echo $(id) `id` | cat\n"
    assert not (ws / "pwned").exists()


def test_environment_is_reduced(host: toolcrib.Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    monkeypatch.setenv("TOOLCRIB_CONFIG", "/etc/secret.toml")
    script = "import os; print(' '.join(sorted(os.environ)))"
    out = call(host, "exec", command=[sys.executable, "-c", script]).structured_content
    assert out is not None
    names = set(out["stdout"].split())
    assert "PATH" in names
    # LC_CTYPE: Python's own locale coercion; the temporary folder and the job's marker are toolcrib's own
    assert names <= {"PATH", "LANG", "LC_ALL", "TZ", "LC_CTYPE", "TMPDIR", "TMP", "TEMP", "TOOLCRIB_JOB"}
    assert "TOOLCRIB_CONFIG" not in names and "AWS_SECRET_ACCESS_KEY" not in names


def test_stdin_is_closed(host: toolcrib.Host) -> None:
    result = call(host, "exec", command="cat")
    assert result.structured_content == {"exit_code": 0, "stdout": "", "stderr": ""}


def test_output_is_capped_head_and_tail(host: toolcrib.Host) -> None:
    script = "import sys; sys.stdout.write('A' * 60 + 'B' * 1000 + 'C' * 60)"
    out = call(host, "exec", command=[sys.executable, "-c", script]).structured_content
    assert out is not None
    assert out["stdout"] == "A" * 50 + "\n[... 1020 bytes cut by toolcrib-shell ...]\n" + "C" * 50


def test_timeout_kills_the_whole_process_group(host: toolcrib.Host, ws: Path) -> None:
    script = "echo started; sleep 30 & echo $! > bg.pid; sleep 30"
    result = call(host, "exec", command=[SH, "-c", script], timeout=0.5)
    assert result.is_error
    assert result.text == (f'"{SH} -c \'{script}\'" timed out after 0.5 seconds and was '
                           "killed.\nstdout:\nstarted\n\nstderr:\n")
    background = int((ws / "bg.pid").read_text())
    assert not os.path.exists(f"/proc/{background}") or "Z" in Path(f"/proc/{background}/stat").read_text().split(
        ")")[-1].split()[:1]  # the background sleep was killed with the group, not left running


def test_a_grandchild_holding_the_pipes_does_not_hang_the_call(host: toolcrib.Host) -> None:
    result = call(host, "exec", command=[SH, "-c", "sleep 30 & echo hi"], timeout=20)
    assert result.structured_content == {"exit_code": 0, "stdout": "hi\n", "stderr": ""}


def test_exec_async_status_and_stop(host: toolcrib.Host) -> None:
    started = call(host, "exec_async", command=[SH, "-c", "echo begun; sleep 30"]).structured_content
    assert started is not None and started["handle"].startswith("p-")
    handle = started["handle"]
    status = call(host, "exec_status", handle=handle, wait_seconds=0.3).structured_content
    assert status == {"handle": handle, "running": True, "exit_code": None, "stdout": "begun\n", "stderr": ""}
    other = call(host, "exec_async", command=["sleep", "30"]).structured_content
    assert other is not None
    assert call(host, "exec_async", command=["sleep", "30"]).text == (
        "already 2 processes running (the limit is 2); stop one with shell__exec_stop first")
    stopped = call(host, "exec_stop", handle=handle).structured_content
    assert stopped is not None and stopped["running"] is False and stopped["killed"] is True
    call(host, "exec_stop", handle=other["handle"])
    assert call(host, "exec_status", handle=handle).text == (
        f"no process with handle {handle!r} (handles come from shell__exec_async)")
    done = call(host, "exec_async", command="echo quick").structured_content
    assert done is not None
    final = call(host, "exec_status", handle=done["handle"], wait_seconds=5).structured_content
    assert final == {"handle": done["handle"], "running": False, "exit_code": 0, "stdout": "quick\n", "stderr": ""}


def test_handles_belong_to_their_agent(ws: Path) -> None:
    config = CONFIG + """
[agents.other]
[agents.other.permissions]
plugins = { allow = ["shell"] }
tools = { allow = ["shell__*"] }
"""
    host = host_for(ws, config)
    started = call(host, "exec_async", command=["sleep", "30"]).structured_content
    assert started is not None
    assert call(host, "exec_stop", agent="other", handle=started["handle"]).is_error
    call(host, "exec_stop", handle=started["handle"])


def test_argument_rules_on_the_command(host: toolcrib.Host) -> None:
    assert call(host, "exec", agent="git_only", command="echo hello there").structured_content == {
        "exit_code": 0, "stdout": "hello there\n", "stderr": ""}
    assert call(host, "exec", agent="git_only", command=["echo", "hello", "list"]).structured_content is not None
    assert call(host, "exec", agent="git_only", command="echo bye").text == (
        "Permission denied: shell__exec with command='echo bye' is denied by the agent's permissions (no allow rule "
        "matches its argument).")
    assert call(host, "exec", agent="git_only", command="   echo bye").is_error


def test_sleep(host: toolcrib.Host) -> None:
    assert call(host, "sleep", milliseconds=10).text == "slept 10 ms"
    assert call(host, "sleep", milliseconds=600_000).text == "at most 60000 milliseconds at a time"


def test_shell_mode_needs_sh_allowed(ws: Path) -> None:
    host = host_for(ws, CONFIG.replace("default_timeout = 5", "default_timeout = 5\nallow_shell = true").replace(
        f", {SH!r}", ""))
    assert call(host, "exec", command="echo a | cat").text.startswith("program 'sh' is not allowed")
    allowed = host_for(ws, CONFIG.replace("default_timeout = 5", "default_timeout = 5\nallow_shell = true").replace(
        f"{SH!r}", '"sh"'))
    assert call(allowed, "exec", command="echo a | tr a b").structured_content == {
        "exit_code": 0, "stdout": "b\n", "stderr": ""}


def test_no_orphans_after_a_timeout(host: toolcrib.Host, ws: Path) -> None:
    marker = ws / "pidfile"
    call(host, "exec", command=[SH, "-c", f"sleep 60 & echo $! > {marker}; wait"], timeout=0.5)
    pid = int(marker.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"grandchild {pid} survived the timeout")
