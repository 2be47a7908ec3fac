"""Policy hooks written as programs ([[hooks.pre_tool_use]]): a real program per call, its answers, and every
way it can fail, which always refuses the call."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import make_host
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
                                      "expected one of: command, tools, agents, timeout, env, pass_env"),
])
def test_bad_hook_tables_are_config_errors(hook: str, error: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_host(f"[[hooks.pre_tool_use]]\n{hook}\n")
    assert [str(p) for p in info.value.problems] == [error]
