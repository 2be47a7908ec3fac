"""Command hooks and shell jobs: what they are given, what outlives them, and a policy answer that cannot be read; each
case an attack round got through, against real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import toolcrib_shell

from attacking import call, host_at
from packs import FILES
from toolcrib.host import Host

# -- command hooks ---------------------------------------------------------------------------------------------


def hook_host(tmp_path: Path, script: str, timeout: float = 10, process: str = "per-call") -> Host:
    (tmp_path / "hook.py").write_text(textwrap.dedent(script))
    (tmp_path / "toolcrib.toml").write_text(textwrap.dedent(f"""
        [[hooks.pre_tool_use]]
        command = [{json.dumps(sys.executable)}, "hook.py"]
        process = "{process}"
        timeout = {timeout}
        pass_env = ["HOOK_WANTS_THIS"]
        env = {{ FIXED = "1" }}
        [agents.a]
        [agents.a.permissions]
        plugins = {{ allow = ["files"] }}
        tools = {{ allow = ["*"] }}
    """))
    return host_at(tmp_path / "toolcrib.toml", files=FILES)


@pytest.mark.parametrize(("script", "expected"), [
    ("import sys; sys.stderr.write('no: denied at once'); sys.exit(2)", (True, "no: denied at once")),
    ("print('{\"decision\": \"deny\", \"message\": \"denied unread\"}')", (True, "denied unread")),
    ("print('{\"decision\": \"allow\"}')", (False, "wrote 6 characters to x")),
], ids=["exit-2", "deny", "allow"])
def test_a_hook_that_answers_without_reading_its_input_is_heard(tmp_path: Path, script: str,
                                                                 expected: tuple[bool, str]) -> None:
    """A large call (bigger than a pipe holds) to a hook that never reads it: its answer counts, every time."""
    host = hook_host(tmp_path, script)
    for _ in range(3):
        result = call(host, "a", "files__write", path="x", text="y" * 6 if expected[0] is False else "y" * 300_000)
        assert (result.is_error, result.text) == expected


@pytest.mark.parametrize("process", ["per-call", "long-lived"])
def test_hooks_get_a_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, process: str) -> None:
    for name, value in (("TOOLCRIB_STATE_SECRET", "s" * 40), ("AWS_SECRET_ACCESS_KEY", "hunter2"),
                        ("TOK_A", "t" * 32), ("HOOK_WANTS_THIS", "yes")):
        monkeypatch.setenv(name, value)
    script = ("import os, sys; sys.stderr.write(' '.join(sorted(os.environ))); sys.exit(2)" if process == "per-call"
              else "import json, os, sys\nfor line in sys.stdin:\n    print(json.dumps({'decision': 'block', "
                   "'reason': ' '.join(sorted(os.environ))}), flush=True)\n")
    host = hook_host(tmp_path, script, process=process)
    names = set(call(host, "a", "files__read", path="x").text.split())
    host.close()
    assert {"FIXED", "HOOK_WANTS_THIS", "PATH"} <= names
    assert names <= {"FIXED", "HOOK_WANTS_THIS", "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE",
                     "TZ", "TMPDIR"}


@pytest.mark.waits
def test_a_timed_out_hooks_children_are_ended(tmp_path: Path) -> None:
    host = hook_host(tmp_path, """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open("child.pid", "w").write(str(child.pid))
        time.sleep(120)
    """, timeout=2)
    result = call(host, "a", "files__read", path="x")
    assert result.text == "The call was refused: a policy check failed (the host's log says why)."
    child = int((tmp_path / "child.pid").read_text())
    assert not _alive(child)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped does not), once a killed process has had a moment to
    die: a SIGKILL is delivered at once, but on a busy machine the process may take a while to end."""
    for _ in range(500):
        if not _running(pid):
            return False
        time.sleep(0.02)
    return True


# -- shell jobs outliving the server ---------------------------------------------------------------------------


ESCAPE = ("import os, sys, time\n"
          "if os.fork() == 0:\n"
          "    os.setsid()\n"
          "    open('escaped.pid', 'w').write(str(os.getpid()))\n"
          "    time.sleep(300)\n"
          "time.sleep(300)\n")


def jobs_host(tmp_path: Path, extra: str = "") -> Host:
    (tmp_path / "ws").mkdir(exist_ok=True)
    config = tmp_path / "toolcrib.toml"
    config.write_text(textwrap.dedent(f"""
        [host]
        workspace = "ws"
        [packs.shell]
        allowed_programs = [{json.dumps(sys.executable)}]
        {extra}
        [agents.a]
        [agents.a.permissions]
        plugins = {{ allow = ["shell"] }}
        tools = {{ allow = ["*"] }}
    """))
    return host_at(config, shell=toolcrib_shell)


def wait_for(path: Path) -> int:
    for _ in range(500):
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def test_stopping_an_async_job_ends_what_left_its_group(tmp_path: Path) -> None:
    host = jobs_host(tmp_path)
    started = call(host, "a", "shell__exec_async", command=[sys.executable, "-c", ESCAPE]).structured_content
    assert started is not None
    escaped = wait_for(tmp_path / "ws" / "escaped.pid")
    assert _running(escaped)
    stopped = call(host, "a", "shell__exec_stop", handle=started["handle"]).structured_content
    assert stopped is not None and stopped["killed"] is True
    assert not _alive(escaped) and not _alive(started["pid"])


def test_an_async_job_past_its_lifetime_is_ended(tmp_path: Path) -> None:
    host = jobs_host(tmp_path, "max_async_seconds = 0.5")
    started = call(host, "a", "shell__exec_async", command=[sys.executable, "-c", ESCAPE]).structured_content
    assert started is not None
    escaped = wait_for(tmp_path / "ws" / "escaped.pid")
    status = call(host, "a", "shell__exec_status", handle=started["handle"], wait_seconds=30).structured_content
    assert status is not None
    assert (status["running"], status["killed"], status["expired"]) == (False, True, "ran longer than "
                                                                       "max_async_seconds")
    assert not _alive(escaped)


def test_exec_leaves_nothing_running(tmp_path: Path) -> None:
    host = jobs_host(tmp_path)
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    open('escaped.pid', 'w').write(str("
              "os.getpid()))\n    os.close(1); os.close(2)\n    time.sleep(300)\n")
    result = call(host, "a", "shell__exec", command=[sys.executable, "-c", daemon])
    assert result.structured_content is not None and result.structured_content["exit_code"] == 0
    assert not _alive(wait_for(tmp_path / "ws" / "escaped.pid"))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_async_jobs_end_with_the_server(tmp_path: Path, how: str) -> None:
    (tmp_path / "ws").mkdir()
    config = tmp_path / "toolcrib.toml"
    config.write_text(jobs_host(tmp_path).loaded.path.read_text())  # type: ignore[union-attr]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="shell")
    proc = subprocess.Popen([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "a", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    for line in [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "shell__exec_async", "arguments": {
            "command": [sys.executable, "-c", ESCAPE]}}},
    ]:
        proc.stdin.write((json.dumps(line) + "\n").encode())
        proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
    job = answers[1]["result"]["structuredContent"]["pid"]
    escaped = wait_for(tmp_path / "ws" / "escaped.pid")
    proc.send_signal(getattr(signal, how))  # stdin stays open: only the signal stops it
    proc.wait(timeout=60)
    assert not _alive(job) and not _alive(escaped)


# -- low: a policy answer that cannot be read refuses ------------------------------------------------------------


FAILED_POLICY = "The call was refused: a policy check failed (the host's log says why)."


@pytest.mark.parametrize(("script", "logged"), [
    ("import sys; sys.stdout.write('\\n' * 1_500_000 + '{\"decision\": \"deny\", \"message\": \"no\"}')",
     "hooks.pre_tool_use[0] wrote more than 1048576 bytes to stdout, which is no answer; the call is refused"),
    ("print('{\"hookSpecificOutput\": \"deny\"}')", "hookSpecificOutput is not an object; the call is refused"),
    ("print('{\"continue\": \"false\"}')", "continue is not true or false; the call is refused"),
    ("print('{\"decision\": 0}')", "decision is not a string; the call is refused"),
], ids=["too-long", "specific-not-object", "continue-not-bool", "decision-not-string"])
def test_a_pre_hook_answer_too_long_or_malformed_refuses(tmp_path: Path, script: str, logged: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    host = hook_host(tmp_path, script)
    result = call(host, "a", "files__write", path="x", text="y")
    assert (result.is_error, result.text) == (True, FAILED_POLICY)
    assert not (tmp_path / "x").exists()
    assert any(r.getMessage().endswith(logged) for r in caplog.records), [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("script", [
    "import sys; sys.stdout.write(' ' * 1_500_000 + '{\"decision\": \"block\", \"reason\": \"r\"}')",
    "print('{\"hookSpecificOutput\": \"block\"}')",
    "print('{\"decision\": [\"block\"]}')",
], ids=["too-long", "specific-not-object", "decision-not-string"])
def test_a_post_hook_answer_too_long_or_malformed_withholds_the_result(tmp_path: Path, script: str) -> None:
    (tmp_path / "post.py").write_text(script)
    (tmp_path / "toolcrib.toml").write_text(textwrap.dedent(f"""
        [[hooks.post_tool_use]]
        command = [{json.dumps(sys.executable)}, "post.py"]
        [agents.a.permissions]
        plugins = {{ allow = ["files"] }}
        tools = {{ allow = ["*"] }}
    """))
    host = host_at(tmp_path / "toolcrib.toml", files=FILES)
    result = call(host, "a", "files__read", path="x")
    assert (result.is_error, result.text) == (True, "The result of files__read was withheld: a policy check "
                                                    "failed (the host's log says why).")
