"""Sub-agents: a task handed from one agent to another (``toolcrib__run_agent``, in the host's own pack).

toolcrib runs no model of its own. A sub-agent runs on the *caller's* model: each turn is a sampling request
(``Context.sample``: MCP ``sampling/createMessage`` with tools, or ``sample`` on the channel an embedder passes),
offering the sub-agent's own tools and its system prompt; every tool call the model makes goes through the
sub-agent's own view and pipeline (``Context.subagent``), so it runs with exactly the sub-agent's permissions, never the
caller's. Who may run whom is the one decision's (``permissions.decide``): an agent is never offered itself, and
while a sub-agent runs no agent of the chain that led to it is offered again.

A skill whose SKILL.md says ``sub-agent: true`` can run the same way as a *temporary* sub-agent of its caller
(``toolcrib__call_skill_sub_agent``): the caller itself, briefly, with the skill's instructions as its prompt and
the caller's own view, so never more than the caller may do.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from typing import Any

import anyio

from toolcrib.config import AgentConfig
from toolcrib.context import AvailabilityContext, Context
from toolcrib.errors import ToolError
from toolcrib.reach import Delegate
from toolcrib.skills import Skill, read

SKILL_TOOL = "toolcrib__call_skill_sub_agent"
SKILL_DESCRIPTION = ("Hand a task to a skill's sub-agent: a temporary agent that follows the skill's instructions "
                     "with your tools and answers with its result. Describe the task fully: it sees nothing of this "
                     "conversation.")
MAX_TOKENS = 4096  # per model turn
RUN_TIMEOUT = 3600.0  # the tool's own bound; each agent's run_timeout (at most this) ends its runs sooner
DESCRIPTION = ("Hand a task to another agent, which works on it with its own tools and answers with its result. "
               "Describe the task fully: the agent sees nothing of this conversation.")


def describe(ctx: AvailabilityContext, agents: Mapping[str, AgentConfig]) -> str:
    """``toolcrib__run_agent``'s description for one agent: the agents it may run, each with its description."""
    lines = [DESCRIPTION, "", "Agents you can run:"]
    for name in sorted(agents):
        if ctx.permits("subagents", name):
            lines.append(f"- {name}: {agents[name].description or 'no description'}")
    return "\n".join(lines)


async def run(ctx: Context, name: str, task: str) -> str:
    """Run agent ``name`` on ``task`` for the calling agent, on the client's model; its answer."""
    delegate = ctx.subagent(name)
    if delegate is None:
        raise ToolError(f"Unknown agent: {name}")  # hidden, itself, back along the chain, nonexistent: alike
    who = f"agent {name!r}"
    if runs_on(delegate.config) == "llm":
        return await _bounded(delegate, who, run_on_llm(delegate, task, system_prompt(delegate), who))
    return await _bounded(delegate, who, converse(ctx, delegate, task, system_prompt(delegate), who))


def runs_on(config: AgentConfig) -> str:
    """Where an agent runs as a sub-agent: ``"client"`` (the calling client's model, MCP sampling) or ``"llm"`` (its
    own ``model`` through the llm library). ``runner = "auto"`` (the default) is ``"llm"`` where an installed llm
    plugin runs the agent's model and its key (if it needs one) is at hand, so that no sampling is needed (it is
    deprecated as of 2026-07-28, and a client may not offer it), else ``"client"``."""
    if config.runner != "auto":
        return config.runner
    if config.model is None:
        return "client"
    try:
        import llm

        llm.get_async_model(config.model).get_key()
    except Exception:  # (no llm; no plugin runs that model; no key for it: each means "not here")
        return "client"
    return "llm"


async def _bounded(delegate: Delegate, who: str, run: Awaitable[str]) -> str:
    """A run within the agent's ``run_timeout``."""
    try:
        with anyio.fail_after(delegate.config.run_timeout):
            return await run
    except TimeoutError:
        raise ToolError(f"{who} did not finish within {delegate.config.run_timeout:g} seconds (its "
                        "run_timeout)") from None


async def run_on_llm(delegate: Delegate, task: str, system: str, who: str) -> str:
    """Run on the agent's own ``model`` through the llm library (any model an llm plugin offers; keys as llm
    reads them): llm's tool loop, each tool call through the agent's own view and pipeline, at most ``max_turns``
    model turns and ``max_run_tokens`` tokens."""
    try:
        import llm
    except ImportError:
        raise ToolError(f"{who} runs on its own model through the llm library, which is not installed (pip "
                        "install llm and the plugin of its model)") from None
    model_id = delegate.config.model
    try:
        model = llm.get_async_model(model_id)
    except llm.UnknownModelError:
        raise ToolError(f"{who}: no installed llm plugin offers the model {model_id!r} (`llm models` lists "
                        "them)") from None

    class Stopped(llm.PauseChain):
        """A policy ended the agent's turn (``Deny(..., interrupt=True)``): the run ends."""

    stopped: list[str] = []  # why a policy ended the turn: no later call of the turn runs
    turn = anyio.Lock()  # llm runs a turn's async tools side by side: here they run one at a time, in order

    def implementation(name: str) -> Any:
        async def call(**arguments: Any) -> str:
            async with turn:
                if stopped:
                    raise Stopped(stopped[0])
                result = await delegate.call(name, arguments)
                if result.interrupt:
                    stopped.append(result.text)
                    raise Stopped(result.text)
            text = "\n".join(json.dumps(block) if block.get("type") != "text" else block["text"]
                             for block in result.content)
            return f"Error: {text}" if result.is_error else text

        return call

    async def before_call(tool: Any, tool_call: Any) -> None:
        if tool is None:  # llm answers "does not exist" itself: the call is audited as a direct one would be
            await delegate.refuse(str(tool_call.name))

    tools: list[Any] = [llm.Tool(name=t["name"], description=t.get("description") or "", input_schema=t["inputSchema"],
                      implementation=implementation(t["name"])) for t in delegate.tools()]
    budget = delegate.config.max_run_tokens
    used = 0
    answer = ""
    with delegate.running():
        chain = model.conversation().chain(task, system=system, tools=tools or None, chain_limit=delegate.max_turns,
                                           before_call=before_call)
        try:
            async for response in chain.responses():
                answer = await response.text()
                usage = await response.usage()
                used += (usage.input or 0) + (usage.output or 0)
                if budget is not None and used > budget:
                    raise ToolError(f"{who} used {used} tokens, more than its budget of {budget} (max_run_tokens)")
        except Stopped as exc:
            raise ToolError(f"{who} was stopped by a policy check: {exc}") from None
        except ValueError as exc:
            if "Chain limit" not in str(exc):
                raise
            raise ToolError(f"{who} did not finish within {delegate.max_turns} turns (its max_turns)") from None
        except llm.NeedsKeyException as exc:
            raise ToolError(f"{who}: model {model_id!r} needs a key: {exc}") from None
    return answer or "(no answer)"


async def run_skill(ctx: Context, skill: Skill, task: str) -> str:
    """Run ``skill`` as a temporary sub-agent of the calling agent (seed 002's ``call_skill_sub_agent``): the skill's
    instructions as its system prompt, the caller's own tools and permissions (the one exception to sub-agents not
    inheriting: it is the caller, briefly, never wider), without this tool itself; its answer."""
    delegate = ctx.itself(exclude=(SKILL_TOOL,))
    if delegate is None:
        raise ToolError("a skill sub-agent runs only inside an agent's call")
    instructions = read(skill, None)
    system = (f"You are a temporary sub-agent of {ctx.agent}, following the skill {skill.name!r} below to do the "
              f"task you are given. Use your tools as needed, then answer with the result.\n\n{instructions}")
    who = f"skill sub-agent {skill.name!r}"
    return await _bounded(delegate, who, converse(ctx, delegate, task, system, who))


async def converse(ctx: Context, delegate: Delegate, task: str, system: str, who: str) -> str:
    """The tool loop of a run on the client's model: the task, then turns until the model answers without a tool
    call (or ``max_turns`` runs out, or a policy interrupts)."""
    tools = delegate.tools()
    offered = {t["name"] for t in tools}
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": task}]}]
    name = who
    with delegate.running():
        for _ in range(delegate.max_turns):
            reply = await ctx.sample(messages, system_prompt=system, tools=tools, max_tokens=MAX_TOKENS)
            content = _blocks(reply.get("content"))
            messages.append({"role": "assistant", "content": content})
            uses = [block for block in content if block.get("type") == "tool_use"]
            if not uses:
                return "\n".join(b["text"] for b in content if b.get("type") == "text") or "(no answer)"
            results = []
            for use in uses:  # in the order the model asked; a policy that ends the turn stops the rest
                block = await _use(ctx, delegate, use, offered)
                if block.pop("interrupt", False):  # Deny(..., interrupt=True): the run ends here
                    reason = "\n".join(b["text"] for b in block["content"] if b.get("type") == "text")
                    raise ToolError(f"{name} was stopped by a policy check: {reason}")
                results.append(block)
            messages.append({"role": "user", "content": results})
    raise ToolError(f"{name} did not finish within {delegate.max_turns} turns (its max_turns)")


def system_prompt(delegate: Delegate) -> str:
    if delegate.config.prompt:
        return delegate.config.prompt
    role = f" {delegate.description}" if delegate.description else ""
    return (f"You are {delegate.name}, an agent working on a task handed to you by another agent.{role} Use your "
            "tools as needed, then answer with the result.")


async def _use(ctx: Context, delegate: Delegate, use: Mapping[str, Any], offered: set[str]) -> dict[str, Any]:
    async def run_tool() -> dict[str, Any]:
        name = use.get("name")
        if name in offered:
            result = await delegate.call(str(name), use.get("input"))
        else:
            result = await delegate.refuse(str(name))
        block: dict[str, Any] = {"type": "tool_result", "toolUseId": str(use.get("id", "")),
                                 "content": list(result.content), "isError": result.is_error}
        if result.structured_content is not None:
            block["structuredContent"] = result.structured_content
        if result.interrupt:
            block["interrupt"] = True
        return block

    return dict(await ctx.remember("tool", run_tool))  # done in an earlier round of this call: never twice


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []
