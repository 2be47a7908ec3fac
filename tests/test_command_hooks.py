"""Policy hooks written as programs ([[hooks.pre_tool_use]]): a real program per call, its answers, and every
way it can fail, which always refuses the call."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolcrib
from conftest import examples, make_host
from packs import FILES
from toolcrib.errors import ConfigError

POLICY = r'''
import json, sys, time
call = json.load(sys.stdin)
with open("seen.log", "a") as log:
    log.write(call["agent"] + " " + call["tool"] + " " + json.dumps(call["arguments"], sort_keys=True) + "\n")
tool, args = call["tool"], call["arguments"]
path = args.get("path", "")
if tool == "files__rm":
    print("rm is never allowed here; move files to trash/ instead", file=sys.stderr)
    sys.exit(2)
if tool == "files__write":
    if path.startswith("/"):
        print(json.dumps({"decision": "deny", "message": "absolute paths are refused"}))
    elif path == "typed":
        print(json.dumps({"decision": "allow", "updated_input": {"path": "typed", "text": 5}}))
    else:
        redacted = {**args, "text": args["text"].replace("SECRET", "[x]")}
        print(json.dumps({"decision": "allow", "updated_input": redacted}))
    sys.exit(0)
if tool == "files__touch":
    sys.exit(3)
if call["agent"] == "wslow":
    time.sleep(30)  # never answers within the second hook's timeout
if path == "bad-answer":
    print("yes please")
'''

CONFIG = """
[[hooks.pre_tool_use]]
command = [{python}, "policy.py"]
tools = ["files__*"]
agents = ["writer"]

[[hooks.pre_tool_use]]
command = [{python}, "policy.py"]
tools = ["files__read"]
agents = ["w*slow"]
timeout = 0.5

[agents.wslow]
[agents.wslow.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["*"] }}

[agents.writer]
[agents.writer.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["*"] }}

[agents.other]
[agents.other.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["*"] }}
"""

FAILED = "The call was refused: a policy check failed (the host's log says why)."


@pytest.fixture
def calls(tmp_path: Path) -> Any:
    (tmp_path / "policy.py").write_text(POLICY)
    host = make_host(CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)

    def call(agent: str, tool: str, **arguments: Any) -> tuple[bool, str]:
        async def main() -> tuple[bool, str]:
            result = await host.view(agent).call(tool, arguments)
            return result.is_error, result.text

        return anyio.run(main)

    return call


def test_the_programs_answers(calls: Any, tmp_path: Path) -> None:
    assert calls("writer", "files__read", path="x") == (False, "contents of x")  # no answer: no objection
    assert calls("writer", "files__rm", path="x") == (True, "rm is never allowed here; move files to trash/ instead")
    assert calls("writer", "files__write", path="/etc/x", text="y") == (True, "absolute paths are refused")
    assert calls("writer", "files__write", path="a", text="my SECRET") == (False, "wrote 6 characters to a")
    assert calls("writer", "files__write", path="typed", text="y") == (
        True, "Invalid arguments for files__write (as replaced by 'toolcrib.hooks'):\n"
              "- text: Input should be a valid string (got 5)")
    assert (tmp_path / "seen.log").read_text().splitlines() == [
        'writer files__read {"path": "x"}',
        'writer files__rm {"path": "x"}',
        'writer files__write {"path": "/etc/x", "text": "y"}',
        'writer files__write {"path": "a", "text": "my SECRET"}',
        'writer files__write {"path": "typed", "text": "y"}',
    ]


def test_a_hook_that_cannot_answer_refuses_the_call(calls: Any) -> None:
    assert calls("writer", "files__touch", path="x") == (True, FAILED)  # exit status 3
    assert calls("writer", "files__read", path="bad-answer") == (True, FAILED)  # not an answer
    assert calls("wslow", "files__read", path="x") == (True, FAILED)  # no answer within its timeout


def test_hooks_see_only_the_calls_they_match(calls: Any, tmp_path: Path) -> None:
    assert calls("other", "files__rm", path="x") == (False, "removed x")
    assert not (tmp_path / "seen.log").exists()


def test_a_missing_program_refuses_the_call_and_check_says_so(tmp_path: Path) -> None:
    config = CONFIG.format(python='"./no-such-program"')
    host = make_host(config, {"files": FILES}, base_dir=tmp_path)
    result = anyio.run(lambda: host.view("writer").call("files__read", {"path": "x"}))
    assert (result.is_error, result.text) == (True, FAILED)
    warnings = [str(p) for p in host.problems() if p.severity == "warning"]
    assert warnings == [f"warning: toolcrib.toml: hooks.pre_tool_use[{i}].command: program './no-such-program' is "
                        f"not found ({tmp_path / 'no-such-program'}); every call it matches is refused" for i in (0, 1)]


@pytest.mark.parametrize(("hook", "error"), [
    ('command = []', "error: toolcrib.toml: hooks.pre_tool_use[0].command: expected the program to run, then its "
                     'arguments: ["python3", "check.py"]'),
    ('command = ["x"]\ntools = ["shell__exec(git *)"]',
     "error: toolcrib.toml: hooks.pre_tool_use[0].tools[0]: 'shell__exec(git *)': hooks match calls by tool name "
     "only; the hook's program sees the arguments and can check them itself"),
    ('command = ["x"]\nagents = ["a-b"]',
     "error: toolcrib.toml: hooks.pre_tool_use[0].agents[0]: 'a-b' is not a valid pattern: agent names: letters, "
     "digits and '_' and '*'"),
    ('command = ["x"]\nshell = true', "error: toolcrib.toml: hooks.pre_tool_use[0].shell: unknown key 'shell'; "
                                      "expected one of: command, tools, agents, timeout, env, pass_env, out_of_reach, "
                                      "process"),
    ('command = ["x"]\nprocess = "forever"', "error: toolcrib.toml: hooks.pre_tool_use[0].process: expected one "
                                            "of 'per-call' or 'long-lived', got a string ('forever')"),
])
def test_bad_hook_tables_are_config_errors(hook: str, error: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_host(f"[[hooks.pre_tool_use]]\n{hook}\n")
    assert [str(p) for p in info.value.problems] == [error]


# -- hook scripts written for Claude Code / the Qoder SDK, unchanged ---------------------------------------------

CLAUDE_PRE = r'''
import json, sys
event = json.load(sys.stdin)
with open("events.log", "a") as log:
    log.write(json.dumps({k: event[k] for k in ("hook_event_name", "tool_name", "tool_input", "cwd",
                                               "permission_mode")}) + "\n")
assert event["tool_use_id"].startswith("call_") and event["session_id"] == event["tool_use_id"]
inp = event["tool_input"]
path = inp.get("path", "")
def decide(decision, **more):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision, **more}}))
if path.startswith("/etc"):
    decide("deny", permissionDecisionReason="system files are off limits")
elif path.startswith("review/"):
    decide("ask", permissionDecisionReason="files under review/ need a second look")
elif path == "rename-me":
    decide("allow", updatedInput={**inp, "path": "renamed"})
elif path == "legacy-block":
    print(json.dumps({"decision": "block", "reason": "blocked the old way"}))
elif path == "stop":
    print(json.dumps({"continue": False, "stopReason": "stop everything"}))
elif path == "quiet":
    print(json.dumps({"suppressOutput": True}))
elif path == "weird":
    decide("maybe")
'''

CLAUDE_POST = r'''
import json, sys
event = json.load(sys.stdin)
assert event["hook_event_name"] == "PostToolUse" and event["tool_input"]["path"]
text = event["tool_response"]["content"][0]["text"]
def out(**specific):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse", **specific}}))
if "SECRET" in text:
    out(updatedMCPToolOutput=[{"type": "text", "text": text.replace("SECRET", "[redacted]")}])
elif "notes" in text:
    out(additionalContext="notes older than a day are stale")
elif "flagged" in text:
    print("this file is flagged; tell the user", file=sys.stderr)
    sys.exit(2)
elif "legacy" in text:
    print(json.dumps({"decision": "block", "reason": "blocked after the fact"}))
elif "crash" in text:
    sys.exit(1)
'''

CLAUDE_CONFIG = """
[[hooks.pre_tool_use]]
command = [{python}, "pre.py"]
tools = ["files__write"]

[[hooks.post_tool_use]]
command = [{python}, "post.py"]
tools = ["files__read"]

[agents.a]
mode = "acceptEdits"
[agents.a.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["*"] }}
"""


@pytest.fixture
def claude(tmp_path: Path) -> Any:
    (tmp_path / "pre.py").write_text(CLAUDE_PRE)
    (tmp_path / "post.py").write_text(CLAUDE_POST)
    host = make_host(CLAUDE_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)

    def call(tool: str, approver: Any = None, **arguments: Any) -> tuple[bool, str]:
        async def main() -> tuple[bool, str]:
            result = await host.view("a").call(tool, arguments, approver=approver)
            return result.is_error, "\n".join(block["text"] for block in result.content)

        return anyio.run(main)

    call.host = host  # type: ignore[attr-defined]
    return call


def test_claude_shaped_pre_tool_use_answers(claude: Any, tmp_path: Path) -> None:
    assert claude("files__write", path="/etc/passwd", text="x") == (True, "system files are off limits")
    assert claude("files__write", path="rename-me", text="abc") == (False, "wrote 3 characters to renamed")
    assert claude("files__write", path="legacy-block", text="x") == (True, "blocked the old way")
    assert claude("files__write", path="stop", text="x") == (True, "stop everything")
    stopped = anyio.run(lambda: claude.host.view("a").call("files__write", {"path": "stop", "text": "x"}))
    legacy = anyio.run(lambda: claude.host.view("a").call("files__write", {"path": "legacy-block", "text": "x"}))
    assert (stopped.interrupt, legacy.interrupt) == (True, False)  # continue: false ends the agent's turn
    assert claude("files__write", path="quiet", text="x") == (False, "wrote 1 characters to quiet")
    assert claude("files__write", path="weird", text="x") == (True, FAILED)
    workspace = str(claude.host.loaded.workspace)
    first = json.loads((tmp_path / "events.log").read_text().splitlines()[0])
    assert first == {"hook_event_name": "PreToolUse", "tool_name": "files__write",
                     "tool_input": {"path": "/etc/passwd", "text": "x"}, "cwd": workspace,
                     "permission_mode": "acceptEdits"}


def test_a_hook_that_asks_routes_the_call_to_approval(claude: Any) -> None:
    asked: list[str] = []

    async def yes(agent: str, tool: str, arguments: Any, message: str) -> bool:
        asked.append(message)
        return True

    # acceptEdits approves asked calls of tools that are not destructive; files__write is destructive
    assert claude("files__write", path="review/a", text="x") == (True, (
        "Permission denied: files__write needs approval (hook toolcrib.hooks: files under review/ need a second "
        "look), and no approver could answer (the client does not support elicitation and no approval hook "
        "decided)."))
    assert claude("files__write", approver=yes, path="review/a", text="x") == (False, "wrote 1 characters to review/a")
    assert asked == ["Agent 'a' wants to call files__write (hook toolcrib.hooks: files under review/ need a second "
                     "look). Allow this call?"]


def test_claude_shaped_post_tool_use_answers(claude: Any) -> None:
    assert claude("files__read", path="plain") == (False, "contents of plain")
    assert claude("files__read", path="SECRET.txt") == (False, "contents of [redacted].txt")
    assert claude("files__read", path="notes.md") == (False, "contents of notes.md\nnotes older than a day are stale")
    assert claude("files__read", path="flagged") == (True, "contents of flagged\nthis file is flagged; tell the user")
    assert claude("files__read", path="legacy") == (True, "contents of legacy\nblocked after the fact")
    assert claude("files__read", path="crash") == (
        True, "The result of files__read was withheld: a policy check failed (the host's log says why).")


def test_a_post_hook_program_that_is_missing_is_reported_by_check(tmp_path: Path) -> None:
    host = make_host('[[hooks.post_tool_use]]\ncommand = ["./nowhere.sh"]\n[agents.a]\n', base_dir=tmp_path)
    assert [str(p) for p in host.problems() if "nowhere" in str(p)] == [
        f"warning: toolcrib.toml: hooks.post_tool_use[0].command: program './nowhere.sh' is not found "
        f"({tmp_path}/nowhere.sh); the result of every call it matches is withheld"]


# -- what each answer decides, exactly (found wanting by mutation testing) ----------------------------------------

STOPPED = "The call was stopped by a policy check."
REFUSED = "The call was refused by a policy check."


@pytest.mark.parametrize(("answer", "decided"), [
    ({"continue": False}, toolcrib.Deny(STOPPED, interrupt=True)),
    ({"continue": False, "reason": "r"}, toolcrib.Deny("r", interrupt=True)),
    ({"continue": False, "stopReason": "s", "reason": "r"}, toolcrib.Deny("s", interrupt=True)),
    ({"continue": True}, None),
    ({"hookSpecificOutput": {"permissionDecision": "deny"}}, toolcrib.Deny(REFUSED)),
    ({"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": " "}}, toolcrib.Deny(REFUSED)),
    ({"hookSpecificOutput": {"permissionDecision": "ask"}}, toolcrib.Ask("a policy check asks for approval")),
    ({"hookSpecificOutput": {"permissionDecision": "ask", "updatedInput": {"a": 1}}},
     toolcrib.Ask("a policy check asks for approval", updated_input={"a": 1})),
    ({"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"a": 1}}},
     toolcrib.Allow(updated_input={"a": 1})),
    ({"hookSpecificOutput": {"permissionDecision": "allow"}}, toolcrib.Allow()),
    ({"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": [1]}},
     "hookSpecificOutput.updatedInput is not an object"),
    ({"hookSpecificOutput": {"permissionDecision": "maybe"}}, "permissionDecision 'maybe' is not allow, deny or ask"),
    ({"hookSpecificOutput": {"updatedInput": {"a": 1}}}, toolcrib.Allow(updated_input={"a": 1})),
    ({"hookSpecificOutput": {"additionalContext": "x"}}, None),
    ({"decision": "deny", "message": "m"}, toolcrib.Deny("m")),
    ({"decision": "deny", "message": "m", "interrupt": True}, toolcrib.Deny("m", interrupt=True)),
    ({"decision": "deny", "message": "m", "interrupt": False}, toolcrib.Deny("m")),
    ({"decision": "deny"}, "a deny needs a message for the model"),
    ({"decision": "block"}, toolcrib.Deny(REFUSED)),
    ({"decision": "block", "reason": "b"}, toolcrib.Deny("b")),
    ({"decision": "allow"}, toolcrib.Allow()),
    ({"decision": "allow", "updated_input": {"a": 1}}, toolcrib.Allow(updated_input={"a": 1})),
    ({"decision": "allow", "updated_input": "x"}, "updated_input is not an object"),
    ({"decision": "approve"}, toolcrib.Allow()),
    ({"decision": "later"}, "decision 'later' is not deny, allow, block or approve"),
    ({"suppressOutput": True}, None),
    ({"suppressOutput": "yes"}, "suppressOutput is not true or false"),
    ({"interrupt": 1, "decision": "deny", "message": "m"}, "interrupt is not true or false"),
    ({"hookSpecificOutput": None}, None),
], ids=lambda value: None if isinstance(value, dict) else "")
def test_every_pre_answer_decides_exactly(answer: dict[str, Any], decided: Any) -> None:
    from toolcrib.default_plugins.hooks import pre_answer

    assert pre_answer(answer) == decided


def post(answer: dict[str, Any], result: Any = None) -> Any:
    from toolcrib.default_plugins.hooks import _post_answer

    given = result if result is not None else toolcrib.ToolResult(content=({"type": "text", "text": "r"},),
                                                                   structured_content={"k": 1})
    return _post_answer(given, answer)


def test_every_post_answer_changes_the_result_exactly() -> None:
    R = toolcrib.ToolResult
    text = {"type": "text", "text": "r"}
    assert post({}) is None and post({"hookSpecificOutput": {}}) is None
    assert post({"decision": "block"}) == R(content=(text, {"type": "text", "text": "A policy check objected to this "
                                                                              "result."}), is_error=True)
    assert post({"decision": "block", "reason": "no"}) == R(content=(text, {"type": "text", "text": "no"}),
                                                            is_error=True)
    assert post({"decision": "allow"}) == "decision 'allow' is not block"
    replaced = [{"type": "text", "text": "new"}]
    assert post({"hookSpecificOutput": {"updatedMCPToolOutput": replaced}}) == R(content=tuple(replaced))
    failed = R(content=(text,), is_error=True)
    assert post({"hookSpecificOutput": {"updatedMCPToolOutput": replaced}}, failed) == R(content=tuple(replaced),
                                                                                         is_error=True)
    assert post({"hookSpecificOutput": {"updatedMCPToolOutput": {"content": replaced, "isError": True}}}) == R(
        content=tuple(replaced), is_error=True)
    assert post({"hookSpecificOutput": {"updatedMCPToolOutput": {"content": replaced}}}, failed) == R(
        content=tuple(replaced), is_error=False)
    assert post({"hookSpecificOutput": {"updatedMCPToolOutput": "plain"}}, failed) == R(
        content=({"type": "text", "text": "plain"},), is_error=True)
    assert post({"hookSpecificOutput": {"updatedMCPToolOutput": 3}}) == (
        "updatedMCPToolOutput is not content blocks, a result with content, or text")
    assert post({"hookSpecificOutput": {"additionalContext": "more"}}, failed) == R(
        content=(text, {"type": "text", "text": "more"}), is_error=True)
    assert post({"hookSpecificOutput": {"additionalContext": "more"}}) == R(
        content=(text, {"type": "text", "text": "more"}), structured_content={"k": 1})
    assert post({"hookSpecificOutput": {"additionalContext": "  "}}) is None
    assert post({"hookSpecificOutput": "x"}) == "hookSpecificOutput is not an object"


def test_a_program_is_found_by_path_or_on_path_and_must_be_runnable(tmp_path: Path) -> None:
    from toolcrib.default_plugins.hooks import program_path

    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "check"
    script.write_text("#!/bin/sh\n")
    assert program_path("bin/check", tmp_path) is None  # not executable
    script.chmod(0o755)
    assert program_path("bin/check", tmp_path) == str(script)
    assert program_path("bin", tmp_path) is None  # a folder is no program (and has no separator: looked up on PATH)
    assert program_path("./bin", tmp_path) is None
    assert program_path("sh", tmp_path) == shutil.which("sh")
    assert program_path("no-such-program-here", tmp_path) is None


def test_an_answer_of_exactly_the_cap_is_heard_and_one_byte_more_is_not(tmp_path: Path) -> None:
    from toolcrib.default_plugins.hooks import MAX_ANSWER_BYTES

    deny = '{"decision": "deny", "message": "at the cap"}'
    for size, expected in ((MAX_ANSWER_BYTES, "at the cap"), (MAX_ANSWER_BYTES + 1, FAILED)):
        (tmp_path / "cap.py").write_text(f"import sys; sys.stdout.write(' ' * {size - len(deny)} + {deny!r})")
        host = make_host(f'[[hooks.pre_tool_use]]\ncommand = [{json.dumps(sys.executable)}, "cap.py"]\n'
                         '[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n',
                         {"files": FILES}, base_dir=tmp_path)
        result = anyio.run(lambda: host.view("a").call("files__read", {"path": "x"}))  # noqa: B023
        assert (result.is_error, result.text) == (True, expected)


def test_an_answer_is_heard_though_a_child_the_program_left_holds_its_output(tmp_path: Path) -> None:
    """The program answered and exited; a child it started in the background still holds stdout. Its answer
    counts at once (after a short grace), not when the hook's time runs out."""
    (tmp_path / "leaves.py").write_text(
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('{\"decision\": \"deny\", \"message\": \"answered before the child ended\"}', flush=True)\n")
    host = make_host(f'[[hooks.pre_tool_use]]\ncommand = [{json.dumps(sys.executable)}, "leaves.py"]\ntimeout = 20\n'
                     '[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n',
                     {"files": FILES}, base_dir=tmp_path)
    result = anyio.run(lambda: host.view("a").call("files__read", {"path": "x"}))
    assert (result.is_error, result.text) == (True, "answered before the child ended")


def test_a_refusal_on_stderr_that_is_not_utf8_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "bytes.py").write_text("import sys; sys.stderr.buffer.write(b'no \\xff way'); sys.exit(2)")
    host = make_host(f'[[hooks.pre_tool_use]]\ncommand = [{json.dumps(sys.executable)}, "bytes.py"]\n'
                     '[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n',
                     {"files": FILES}, base_dir=tmp_path)
    result = anyio.run(lambda: host.view("a").call("files__read", {"path": "x"}))
    assert (result.is_error, result.text) == (True, "no \ufffd way")


# -- one hook program, every way it ends (the _Hook and run_hook units, with real programs) ----------------------


def _unit(tmp_path: Path, command: list[str], where: str = "hooks.pre_tool_use[0]", timeout: float = 30,
          workspace: Path | None = None) -> Any:
    from toolcrib.config import CommandHook
    from toolcrib.default_plugins.hooks import _Hook

    config = CommandHook(command=command, timeout=timeout)
    return _Hook(where, config, tmp_path, workspace or tmp_path / "elsewhere")


def _script(tmp_path: Path, name: str, text: str) -> list[str]:
    (tmp_path / name).write_text(text)
    return [sys.executable, name]


@pytest.mark.parametrize(("case", "outcome", "message"), [
    ("exit 3", ("refuse", None),
     "hooks.pre_tool_use[0] exited with status 3; the call is refused. stderr: " + "e" * 2000),
    ("exit 2", ("exit2", "e" * 2000), None),
    ("not an object", ("refuse", None), "hooks.pre_tool_use[0] answered '[1]', which is not a JSON object; the call "
                                        "is refused"),
    ("not JSON", ("refuse", None), "hooks.pre_tool_use[0] answered 'yes', which is not a JSON object; the call is "
                                   "refused"),
    ("long and not UTF-8", ("refuse", None), "hooks.pre_tool_use[0] answered '\ufffd" + "y" * 499 + "', which is "
                                             "not a JSON object; the call is refused"),
    ("nothing", ("none", None), None),
    ("an answer", ("answer", {"decision": "allow"}), None),
    ("post, exit 3", ("refuse", None), "hooks.post_tool_use[1] exited with status 3; the result is withheld. stderr: "
                                       + "e" * 2000),
], ids=["exit3", "exit2", "array", "text", "long-bytes", "silent", "answer", "post-exit3"])
def test_a_hook_programs_outcome_and_what_the_log_says(tmp_path: Path, case: str, outcome: tuple[str, Any],
                                                       message: str | None, caplog: pytest.LogCaptureFixture) -> None:
    loud = "sys.stderr.write('e' * 2500); sys.exit({})"
    body = {"exit 3": loud.format(3), "exit 2": loud.format(2), "post, exit 3": loud.format(3),
            "not an object": "print('[1]')", "not JSON": "print('yes')", "nothing": "pass",
            "long and not UTF-8": "sys.stdout.buffer.write(b'\\xff' + b'y' * 600)",
            "an answer": "print(json.dumps({'decision': 'allow'}))"}[case]
    hook = _unit(tmp_path, _script(tmp_path, "h.py", f"import json, sys\n{body}\n"),
                 "hooks.post_tool_use[1]" if case.startswith("post") else "hooks.pre_tool_use[0]")
    with caplog.at_level(logging.ERROR, logger="toolcrib"):
        assert anyio.run(hook.run, b'{"tool": "t"}') == outcome
    assert [r.getMessage() for r in caplog.records] == ([message] if message else [])


def test_a_hook_that_cannot_start_times_out_or_is_refused_says_which(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    missing = _unit(tmp_path, ["bin/missing"])
    slow = _unit(tmp_path, _script(tmp_path, "slow.py", "import time\ntime.sleep(30)\n"), timeout=0.3)
    shell = _unit(tmp_path, ["sh", "-c", "true"], workspace=tmp_path)
    with caplog.at_level(logging.ERROR, logger="toolcrib"):
        for hook in (missing, slow, shell):
            assert anyio.run(hook.run, b"{}") == ("refuse", None)
    program = tmp_path / "bin" / "missing"
    assert [r.getMessage() for r in caplog.records] == [
        f"hooks.pre_tool_use[0] cannot run '{program}': [Errno 2] No such file or directory: '{program}'; the call "
        "is refused",
        f"hooks.pre_tool_use[0] ({sys.executable}) gave no answer within 0.3 seconds; the call is refused",
        "hooks.pre_tool_use[0] does not start: sh -c runs a string of commands toolcrib cannot follow, and it runs "
        f"in {tmp_path}, inside the workspace, where an agent could write what it runs; move it out of the "
        "workspace, name its script by path, or set out_of_reach = true if its code is out of every agent's reach; "
        "the call is refused"]


def _state(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent, or None once it is reaped."""
    try:
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except FileNotFoundError:
        return None
    return state, int(ppid)


def _reaped(pid: int) -> bool:
    """Ended and waited for: gone, or a zombie whose parent is not this process (which will reap it)."""
    found = _state(pid)
    return found is None or (found[0] == "Z" and found[1] != os.getpid())


def _dead(pid: int) -> bool:
    """Ended (reaped or not: a killed grandchild this process adopted as a subreaper is its zombie)."""
    found = _state(pid)
    return found is None or found[0] == "Z"


def test_run_hook_caps_output_at_one_byte_past_the_limit_and_takes_input_it_never_reads(tmp_path: Path) -> None:
    from toolcrib.default_plugins.hooks import MAX_ANSWER_BYTES, run_hook

    loud = _script(tmp_path, "loud.py", "import sys\nfor _ in range(20):\n    sys.stdout.write('x' * 65536)\n")
    code, out, err = anyio.run(lambda: run_hook(loud, b"", cwd=tmp_path, env={}, timeout=30))
    assert (code, len(out), out.strip(b"x"), err) == (0, MAX_ANSWER_BYTES + 1, b"", b"")
    deaf = _script(tmp_path, "deaf.py", "print('{}')\n")  # exits at once: the 4 MiB it is sent find a closed pipe
    assert anyio.run(lambda: run_hook(deaf, b"x" * (4 << 20), cwd=tmp_path, env={}, timeout=30)) == (0, b"{}\n", b"")


def test_run_hook_ends_what_the_program_started_and_reaps_it_when_the_call_is_cancelled(tmp_path: Path) -> None:
    from toolcrib.default_plugins.hooks import run_hook

    starter = _script(tmp_path, "starter.py", "import os, subprocess, time\n"
                      "child = subprocess.Popen(['sleep', '600'])\n"  # outlives the program by far
                      "open('pids', 'w').write(f'{os.getpid()} {child.pid}')\n"
                      "time.sleep(60)\n")

    async def cancelled() -> None:
        with anyio.move_on_after(1.5):
            await run_hook(starter, b"", cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout=60)

    anyio.run(cancelled)
    hook, child = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert _reaped(hook)  # killed and waited for, though the call was cancelled
    for _ in range(100):  # the child was killed with its group; its reaper (init) may take a moment
        if _dead(child):
            break
        time.sleep(0.05)
    assert _dead(child)


# -- process = "long-lived": one process answers every call, a JSON line each ---------------------------------------

RESIDENT = r'''
import json, os, sys, time
for line in sys.stdin:
    call = json.loads(line)
    args = call["arguments"]
    with open("seen.log", "a") as log:
        log.write(f"{os.getpid()} {call['tool']} {args.get('path')}\n")
    path = args.get("path", "")
    if path == "die":
        sys.exit(1)
    if path == "slow":
        time.sleep(30)
    if path == "garbage":
        print("yes please", flush=True)
        continue
    if path == "huge":
        print("x" * (2 * 1024 * 1024), flush=True)
        continue
    if path.startswith("/"):
        answer = {"decision": "deny", "message": f"absolute paths are refused ({path})"}
    elif call["tool"] == "files__rm":
        answer = {"decision": "block", "reason": "rm is never allowed here"}
    elif path == "redact":
        answer = {"decision": "allow", "updated_input": {**args, "text": "[x]"}}
    else:
        answer = {}
    print(json.dumps(answer) if answer or path != "empty" else "", flush=True)
'''

RESIDENT_CONFIG = """
[[hooks.pre_tool_use]]
command = [{python}, "resident.py"]
tools = ["files__*"]
process = "long-lived"
timeout = 2

[agents.writer]
[agents.writer.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ allow = ["*"] }}
"""


@pytest.mark.waits
def test_a_long_lived_hook_answers_every_call_from_one_process_and_is_started_again_when_it_dies(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "resident.py").write_text(RESIDENT)
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)
    caplog.set_level(logging.INFO, logger="toolcrib.hooks")
    asked = [("files__read", {"path": "a"}), ("files__write", {"path": "/etc/x", "text": "y"}),
             ("files__rm", {"path": "a"}), ("files__write", {"path": "redact", "text": "my SECRET"}),
             ("files__read", {"path": "empty"}), ("files__read", {"path": "garbage"}), ("files__read", {"path": "b"}),
             ("files__read", {"path": "die"}), ("files__read", {"path": "c"}), ("files__read", {"path": "slow"}),
             ("files__read", {"path": "huge"}), ("files__read", {"path": "d"})]

    async def main() -> list[tuple[bool, str]]:
        said = []
        for tool, arguments in asked:
            result = await host.view("writer").call(tool, arguments)
            said.append((result.is_error, result.text))
        host.close()
        return said

    said = anyio.run(main)
    assert said == [(False, "contents of a"), (True, "absolute paths are refused (/etc/x)"),
                    (True, "rm is never allowed here"), (False, "wrote 3 characters to redact"),
                    (False, "contents of empty"), (True, FAILED), (False, "contents of b"),
                    (True, FAILED), (False, "contents of c"), (True, FAILED), (True, FAILED), (False, "contents of d")]
    seen = [line.split(" ", 1) for line in (tmp_path / "seen.log").read_text().splitlines()]
    pids = [int(pid) for pid, _ in seen]
    assert [what for _, what in seen] == [f"{tool} {args['path']}" for tool, args in asked]
    # one process until it died, the next until it gave no answer in time, one that wrote too much, and a fourth
    runs = [pids[:8], pids[8:10], pids[10:11], pids[11:]]
    assert [len(set(run)) for run in runs] == [1, 1, 1, 1]
    assert len({run[0] for run in runs}) == 4
    messages = [r.getMessage() for r in caplog.records if r.name == "toolcrib.hooks"]
    started = [m for m in messages if m.startswith("hooks.pre_tool_use[0]: started its long-lived process ")]
    assert started == [f"hooks.pre_tool_use[0]: started its long-lived process {run[0]} ({sys.executable})"
                       for run in runs]
    refused = [m for m in messages if m.endswith("the call is refused")]
    assert refused == [
        "hooks.pre_tool_use[0] answered 'yes please', which is not a JSON object; the call is refused",
        f"hooks.pre_tool_use[0] cannot run {sys.executable!r}: its process ended (its output closed); the call is "
        "refused",
        f"hooks.pre_tool_use[0] ({sys.executable}) gave no answer within 2 seconds; the call is refused",
        f"hooks.pre_tool_use[0] wrote more than {1024 * 1024} bytes to stdout, which is no answer; the call is "
        "refused"]
    # every process it started has ended and been reaped (the last one with the host)
    assert [pid for pid in set(pids) if Path(f"/proc/{pid}").exists()] == []


def test_long_lived_and_per_call_programs_give_the_same_answers(tmp_path: Path) -> None:
    (tmp_path / "policy.py").write_text(POLICY)
    (tmp_path / "resident.py").write_text(
        "import json, subprocess, sys\n"
        "for line in sys.stdin:\n"  # the per-call policy, run per line: its answers as a long-lived hook's
        "    done = subprocess.run([sys.executable, 'policy.py'], input=line, capture_output=True, text=True)\n"
        "    answer = done.stdout.strip() or '{}'\n"
        "    if done.returncode == 2:\n"
        "        answer = json.dumps({'decision': 'block', 'reason': done.stderr.strip()})\n"
        "    print(answer, flush=True)\n")
    per_call = CONFIG.format(python=json.dumps(sys.executable))
    long_lived = per_call.replace('"policy.py"]\ntools = ["files__*"]', '"resident.py"]\ntools = ["files__*"]\n'
                                  'process = "long-lived"', 1)
    assert long_lived != per_call
    answers = []
    for config in (per_call, long_lived):
        host = make_host(config, {"files": FILES}, base_dir=tmp_path)

        async def main(host: Any = host) -> list[tuple[bool, str]]:
            said = []
            for tool, arguments in [("files__read", {"path": "x"}), ("files__rm", {"path": "x"}),
                                    ("files__write", {"path": "/etc/x", "text": "y"}),
                                    ("files__write", {"path": "a", "text": "my SECRET"})]:
                result = await host.view("writer").call(tool, arguments)
                said.append((result.is_error, result.text))
            host.close()
            return said

        answers.append(anyio.run(main))
    assert answers[0] == answers[1] == [(False, "contents of x"), (True, "rm is never allowed here; move files to "
                                                                          "trash/ instead"),
                                        (True, "absolute paths are refused"), (False, "wrote 6 characters to a")]


def test_the_operator_guide_s_long_lived_hook_works_as_written(tmp_path: Path) -> None:
    import re

    guide = (Path(__file__).parent.parent / "docs" / "operators.md").read_text()
    script = re.search(r'`process = "long-lived"`.*?```python\n(.+?)```', guide, re.S)
    assert script is not None
    (tmp_path / "resident.py").write_text(script.group(1))
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)

    async def main() -> list[tuple[bool, str]]:
        said = []
        for text in ("my SECRET", "nothing to hide"):
            result = await host.view("writer").call("files__write", {"path": "a", "text": text})
            said.append((result.is_error, result.text))
        host.close()
        return said

    assert anyio.run(main) == [(True, "no secrets in files"), (False, "wrote 15 characters to a")]


DEAF = r'''
import json, os, sys, time
sys.stdin.readline()
os.close(0)  # no more questions: its input is closed before the answer is out, so the next write finds it so
print(json.dumps({}), flush=True)
time.sleep(30)
'''


def test_a_long_lived_hook_that_stops_reading_refuses_the_call_it_cannot_be_asked_and_is_started_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "resident.py").write_text(DEAF)
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)
    caplog.set_level(logging.INFO, logger="toolcrib.hooks")

    async def main() -> list[tuple[bool, str]]:
        said = []
        for path in ("a", "b", "c"):
            result = await host.view("writer").call("files__read", {"path": path})
            said.append((result.is_error, result.text))
        host.close()
        return said

    assert anyio.run(main) == [(False, "contents of a"), (True, FAILED), (False, "contents of c")]
    messages = [r.getMessage() for r in caplog.records if r.name == "toolcrib.hooks"]
    assert [m for m in messages if m.endswith("the call is refused")] == [
        f"hooks.pre_tool_use[0] cannot run {sys.executable!r}: its process ended (its input is closed); the call is "
        "refused"]
    assert len([m for m in messages if m.startswith("hooks.pre_tool_use[0]: started its long-lived process ")]) == 2


def test_a_long_lived_hook_that_died_between_calls_is_started_again_for_the_next_call(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing looks at the process before a call: one that ended since the last call is found by its closed input,
    before any of the call is written, and the call goes to a new one (not refused)."""
    import signal

    (tmp_path / "resident.py").write_text(RESIDENT)
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)
    caplog.set_level(logging.INFO, logger="toolcrib.hooks")

    async def main() -> list[tuple[bool, str]]:
        view = host.view("writer")
        first = await view.call("files__read", {"path": "/one"})
        pid = int((tmp_path / "seen.log").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(10):
            while Path(f"/proc/{pid}/fd/0").exists():  # (its pipes closed: it is gone, or a zombie)
                await anyio.sleep(0.01)
        second = await view.call("files__read", {"path": "/two"})
        host.close()
        return [(first.is_error, first.text), (second.is_error, second.text)]

    assert anyio.run(main) == [(True, "absolute paths are refused (/one)"), (True, "absolute paths are refused (/two)")]
    pids = [int(line.split()[0]) for line in (tmp_path / "seen.log").read_text().splitlines()]
    assert len(pids) == 2 and pids[0] != pids[1]
    messages = [r.getMessage() for r in caplog.records if r.name == "toolcrib.hooks"]
    assert [m for m in messages if m.endswith("the call is refused")] == []
    assert [m for m in messages if m.startswith("hooks.pre_tool_use[0]: started its long-lived process ")] == [
        f"hooks.pre_tool_use[0]: started its long-lived process {pid} ({sys.executable})" for pid in pids]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_long_lived_hook_answers_calls_made_at_once_each_its_own_answer(tmp_path: Path, backend: str) -> None:
    """Calls made at once from one loop, and from loops in two threads, take turns at the one process: each gets
    the answer to its own line."""
    import threading

    (tmp_path / "resident.py").write_text(RESIDENT)
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)
    view = host.view("writer")
    said: dict[str, str] = {}

    async def calls(prefix: str) -> None:
        async def one(path: str) -> None:
            said[path] = (await view.call("files__read", {"path": path})).text

        async with anyio.create_task_group() as tg:
            for n in range(12):
                tg.start_soon(one, f"/{prefix}{n}")

    threads = [threading.Thread(target=anyio.run, args=(calls, prefix), kwargs={"backend": backend})
               for prefix in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    host.close()
    expected = {f"/{prefix}{n}" for prefix in ("a", "b") for n in range(12)}
    assert said == {path: f"absolute paths are refused ({path})" for path in expected}
    seen = (tmp_path / "seen.log").read_text().splitlines()
    assert len({line.split()[0] for line in seen}) == 1  # one process answered them all
    assert sorted(line.split()[2] for line in seen) == sorted(expected)


def test_turns_are_taken_in_order_and_a_cancelled_waiter_takes_none() -> None:
    from toolcrib.pipes import Turns

    turns = Turns()
    order: list[str] = []

    async def main() -> bool:
        scopes = {name: anyio.CancelScope() for name in ("first", "gone", "second", "handed", "third")}

        async def waiter(name: str) -> None:
            with scopes[name]:
                await turns.take()
                order.append(name)
                turns.give()

        await turns.take()  # held here: the others wait, in the order they came
        with anyio.fail_after(10):  # (a turn never handed on would hang)
            async with anyio.create_task_group() as tg:
                for name in scopes:
                    tg.start_soon(waiter, name)
                    await anyio.sleep(0.01)
                scopes["gone"].cancel()  # cancelled while it waits: it takes nothing
                await anyio.sleep(0.01)
                turns.give()  # to "first", which gives it to "second", which gives it to "handed"...
                while order != ["first", "second"]:
                    await anyio.sleep(0)
                scopes["handed"].cancel()  # ... cancelled as it is handed the turn: it passes the turn on
            await turns.take()  # and it is free again: taken at once
        turns.give()
        return True

    assert anyio.run(main)
    assert order == ["first", "second", "third"]


NEVER_READS = r'''
import time
time.sleep(30)  # never reads: a call larger than the pipe holds cannot be written to it
'''


def test_a_long_lived_hook_that_never_reads_a_call_too_large_for_its_pipe_refuses_it_within_its_timeout(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The hook's ``timeout`` covers writing the call as well as reading the answer: a write that waits for room
    in a full pipe gives up at the deadline (the call refused, the process ended), rather than holding the call."""
    (tmp_path / "resident.py").write_text(NEVER_READS)
    config = RESIDENT_CONFIG.format(python=json.dumps(sys.executable)).replace("timeout = 2", "timeout = 1")
    host = make_host(config, {"files": FILES}, base_dir=tmp_path)
    caplog.set_level(logging.INFO, logger="toolcrib.hooks")

    async def main() -> tuple[bool, str, float]:
        with anyio.fail_after(30):  # a hang guard: without the deadline the write would wait for good
            begun = time.monotonic()
            result = await host.view("writer").call("files__write", {"path": "a", "text": "x" * 300_000})
            took = time.monotonic() - begun
        host.close()
        return result.is_error, result.text, took

    is_error, text, took = anyio.run(main)
    assert (is_error, text) == (True, FAILED)
    assert took >= 1.0
    messages = [r.getMessage() for r in caplog.records if r.name == "toolcrib.hooks"]
    assert [m for m in messages if m.endswith("the call is refused")] == [
        f"hooks.pre_tool_use[0] ({sys.executable}) gave no answer within 1 seconds; the call is refused"]


# -- the call's JSON, as a program reads it --------------------------------------------------------------------------

RECORDER = r'''
import sys
if len(sys.argv) > 1:  # long-lived: a line per call, each let through
    for line in sys.stdin:
        open("calls.log", "a").write(line)
        print("{}", flush=True)
else:
    open("calls.log", "a").write(sys.stdin.read() + "\n")
'''


@pytest.mark.parametrize("process", ["per-call", "long-lived"])
def test_a_program_reads_the_call_as_json_dumps_writes_it_in_the_documented_order(tmp_path: Path,
                                                                                 process: str) -> None:
    """Byte for byte what ``json.dumps`` writes of the call's fields (a script may read it with a pattern, not a
    parser), pre and post, with text that JSON must escape."""
    (tmp_path / "recorder.py").write_text(RECORDER)
    command = '[{python}, "recorder.py"' + (', "long-lived"]\nprocess = "long-lived"' if process == "long-lived"
                                            else "]")
    config = CLAUDE_CONFIG.replace('[{python}, "pre.py"]', command).replace('[{python}, "post.py"]', command)
    config = config.replace('tools = ["files__read"]', 'tools = ["files__write"]')
    host = make_host(config.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)
    arguments = {"path": "naïve \"q\"\n✓", "text": "😀 \\ tab\t"}

    async def main() -> Any:
        result = await host.view("a").call("files__write", arguments)
        host.close()
        return result

    result = anyio.run(main)
    assert result.text == f"wrote {len(arguments['text'])} characters to {arguments['path']}"
    lines = (tmp_path / "calls.log").read_text().splitlines()
    pre, post = (json.loads(line) for line in lines)
    assert [line == json.dumps(json.loads(line)) for line in lines] == [True, True]
    base = ["agent", "tool", "arguments", "hook_event_name", "tool_name", "tool_input", "tool_use_id", "session_id",
            "cwd", "permission_mode"]
    assert list(pre) == [*base, "annotations"]
    assert list(post) == [*base, "result", "tool_response"]
    assert pre["arguments"] == pre["tool_input"] == post["arguments"] == arguments
    assert (pre["agent"], pre["tool"], pre["tool_name"], pre["hook_event_name"], post["hook_event_name"]) == (
        "a", "files__write", "files__write", "PreToolUse", "PostToolUse")
    assert pre["tool_use_id"] == pre["session_id"] == post["tool_use_id"] == post["session_id"]
    assert pre["tool_use_id"].startswith("call_")
    assert (pre["cwd"], pre["permission_mode"]) == (str(host.loaded.workspace), "acceptEdits")
    assert pre["annotations"] == host.view("a").lookup("files__write").tool.annotations
    assert post["result"] == post["tool_response"] == result.to_wire()


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                     max_leaves=10)


@given(agent=st.text(), tool=st.text(), cwd=st.text(), mode=st.text(), call_id=st.text(),
       arguments=st.dictionaries(st.text(), _json, max_size=4), annotations=st.dictionaries(st.text(), _json,
                                                                                           max_size=3),
       result=st.dictionaries(st.text(), _json, max_size=3))
@settings(max_examples=examples(200), deadline=None)
def test_the_call_s_line_is_what_json_dumps_writes_of_its_fields(agent: str, tool: str, cwd: str, mode: str,
                                                                 call_id: str, arguments: dict[str, Any],
                                                                 annotations: dict[str, Any],
                                                                 result: dict[str, Any]) -> None:
    from toolcrib.default_plugins.hooks import _Line

    fields = {"agent": agent, "tool": tool, "arguments": arguments, "hook_event_name": "PreToolUse",
              "tool_name": tool, "tool_input": arguments, "tool_use_id": call_id, "session_id": call_id, "cwd": cwd,
              "permission_mode": mode}
    pre, post = _Line("PreToolUse", agent, tool, cwd, mode), _Line("PostToolUse", agent, tool, cwd, mode)
    assert pre(arguments, call_id, pre.annotations(annotations)) == json.dumps(
        {**fields, "annotations": annotations}).encode()
    assert pre(arguments, call_id, pre.annotations(annotations)) == json.dumps(  # (remembered: the same)
        {**fields, "annotations": annotations}).encode()
    assert post(arguments, call_id, post.result(result)) == json.dumps(
        {**fields, "hook_event_name": "PostToolUse", "result": result, "tool_response": result}).encode()


def test_a_post_hook_that_fails_is_logged_under_its_place_in_the_config(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "post.py").write_text("import sys; sys.stderr.write('post says no'); sys.exit(3)")
    host = make_host(f'[[hooks.post_tool_use]]\ncommand = [{json.dumps(sys.executable)}, "post.py"]\n'
                     '[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n',
                     {"files": FILES}, base_dir=tmp_path)
    with caplog.at_level(logging.ERROR, logger="toolcrib.hooks"):
        result = anyio.run(lambda: host.view("a").call("files__read", {"path": "x"}))
    assert (result.is_error, result.text) == (True, "The result of files__read was withheld: a policy check failed "
                                                    "(the host's log says why).")
    assert [r.getMessage() for r in caplog.records] == [
        "hooks.post_tool_use[0] exited with status 3; the result is withheld. stderr: post says no"]


TWO_AT_ONCE = r'''
import json, sys
first = True
for line in sys.stdin:
    if first:  # two answers in one write: the first is this call's, the second waits for the next call
        sys.stdout.write(json.dumps({"decision": "deny", "message": "first"}) + "\n"
                         + json.dumps({"decision": "deny", "message": "second"}) + "\n")
        sys.stdout.flush()
        first = False
    else:
        print(json.dumps({"decision": "deny", "message": "later " + json.loads(line)["arguments"]["path"]}),
              flush=True)
'''


def test_a_long_lived_hook_s_lines_answer_the_calls_in_order(tmp_path: Path) -> None:
    (tmp_path / "resident.py").write_text(TWO_AT_ONCE)
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)

    async def main() -> list[str]:
        said = [(await host.view("writer").call("files__read", {"path": p})).text for p in ("a", "b", "c")]
        host.close()
        return said

    assert anyio.run(main) == ["first", "second", "later b"]


@pytest.mark.parametrize(("size", "expected"), [(1024 * 1024, "at the cap"), (1024 * 1024 + 1, FAILED)])
def test_a_long_lived_answer_of_exactly_the_cap_is_heard_and_one_byte_more_is_not(tmp_path: Path, size: int,
                                                                                  expected: str) -> None:
    from toolcrib.default_plugins.hooks import MAX_ANSWER_BYTES

    assert size - MAX_ANSWER_BYTES in (0, 1)
    deny = '{"decision": "deny", "message": "at the cap"}'
    (tmp_path / "resident.py").write_text(
        "import sys\nfor line in sys.stdin:\n"
        f"    sys.stdout.write(' ' * {size - len(deny)} + {deny!r} + '\\n')\n    sys.stdout.flush()\n")
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)

    async def main() -> str:
        result = await host.view("writer").call("files__read", {"path": "x"})
        host.close()
        return result.text

    assert anyio.run(main) == expected


def test_a_long_lived_hook_s_pipes_are_closed_when_it_is_ended(tmp_path: Path) -> None:
    """Every process started, and every restart, leaves no descriptor of this process open."""
    (tmp_path / "resident.py").write_text(RESIDENT)
    fds = set(os.listdir("/proc/self/fd"))
    host = make_host(RESIDENT_CONFIG.format(python=json.dumps(sys.executable)), {"files": FILES}, base_dir=tmp_path)

    async def main() -> list[bool]:
        said = [(await host.view("writer").call("files__read", {"path": p})).is_error for p in ("a", "die", "b")]
        host.close()
        return said

    assert anyio.run(main) == [False, True, False]  # (the second process started after the first died)
    assert set(os.listdir("/proc/self/fd")) - fds == set()
