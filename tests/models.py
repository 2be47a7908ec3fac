"""Scripted models for the sub-agent and skill tests (a remote model cannot run here: each answer is scripted, the rest
of the loop is real), the sub-agents' config, and helpers that run an agent's own sub-agent."""

from __future__ import annotations

import copy
import json
from typing import Any

import anyio

import toolcrib
from conftest import make_host
from packs import FILES, MISC

CONFIG = """
[agents.lead]
description = "Plans the work and hands parts of it out."
[agents.lead.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["files__read", "toolcrib__run_agent"] }
subagents = { allow = ["*"] }

[agents.calc]
description = "Adds numbers."
prompt = "You are calc. Add."
max_turns = 3
[agents.calc.permissions]
plugins = { allow = ["misc"] }
tools = { allow = ["misc__add", "toolcrib__run_agent"] }
subagents = { allow = ["lead", "calc"] }

[agents.narcissus]
[agents.narcissus.permissions]
tools = { allow = ["*"] }
subagents = { allow = ["narcissus"] }

[agents.loner]
[agents.loner.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
"""


def text(words: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": words}], "model": "scripted"}


def use(name: str, arguments: dict[str, Any], id: str = "u1") -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


class ScriptedModel:
    """A channel whose ``sample`` answers from a script and records every request (the mocked remote model)."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        pass

    async def log(self, level: str, message: str, logger: str | None) -> None:
        pass

    async def sample(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(copy.deepcopy(request))
        return self.replies.pop(0)


class Stopper:
    """A policy plugin that ends the agent's turn on any call of misc__add with a = 13, and notes call ids."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    @toolcrib.hookimpl
    def toolcrib_pre_tool_use(self, agent: str, tool: str, arguments: Any, call_id: str) -> Any:
        self.seen.append(("pre", tool, call_id))
        if tool == "misc__add" and arguments.get("a") == 13:
            return toolcrib.Deny("13 is unlucky; stop and ask the user", interrupt=True)
        return None

    @toolcrib.hookimpl
    def toolcrib_post_tool_use(self, tool: str, call_id: str) -> None:
        self.seen.append(("post", tool, call_id))


OWN = """
[models.echo]
[agents.lead]
[agents.lead.permissions]
plugins = { allow = ["misc"] }
tools = { allow = ["toolcrib__run_agent"] }
subagents = { allow = ["*"] }

[agents.echoer]
model = "echo"
runner = "llm"
description = "Runs on its own model."
prompt = "You are echoer."
EXTRA
[agents.echoer.permissions]
plugins = { allow = ["misc", "files"] }
tools = { allow = ["misc__add"] }
"""


def own(extra: str = "", **plugins: Any) -> Any:
    return make_host(OWN.replace("EXTRA", extra), {"files": FILES, "misc": MISC, **plugins})


def task(*calls: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"prompt": "work", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]})


def run_own(h: Any, text: str) -> tuple[bool, str]:
    result = anyio.run(lambda: h.view("lead").call("toolcrib__run_agent", {"agent": "echoer", "task": text}))
    return result.is_error, result.text
