"""Sub-agents: configured agents offered to other agents through one built-in tool, ``toolcrib__run_agent``,
filtered by the ``subagents`` permission dimension.

toolcrib runs no model of its own. A sub-agent runs on the *caller's* model: each turn is a sampling request
(MCP ``sampling/createMessage`` with tools, or ``sample`` on the channel an embedder passes), offering the
sub-agent's own view and its system prompt; every tool call the model makes goes through the sub-agent's own
view and pipeline, so it runs with exactly the sub-agent's permissions, never the caller's.

An agent is never offered itself (``AgentRules.source_permits``), and while a sub-agent runs, no agent of the
chain that led to it is offered again: there are no cycles. A name the agent may not run, hidden or unknown,
gets the same "Unknown agent" answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Annotated, Any

from pydantic import Field

from toolcrib.catalog import Entry
from toolcrib.config import AgentConfig
from toolcrib.content import ToolResult
from toolcrib.context import Context
from toolcrib.errors import ToolError, UnknownToolError
from toolcrib.tool import get_tool, tool

NAMESPACE = "toolcrib"
NAME = f"{NAMESPACE}__run_agent"
MAX_TOKENS = 4096  # per model turn
RUN_TIMEOUT = 900.0  # seconds for a whole run: several model turns, each of which may take a while
DESCRIPTION = ("Hand a task to another agent, which works on it with its own tools and answers with its result. "
               "Describe the task fully: the agent sees nothing of this conversation.")

# The agents of the running delegation chain, outermost first; set while a sub-agent's turns run.
_CHAIN: ContextVar[tuple[str, ...]] = ContextVar("toolcrib_agent_chain", default=())


class Journal:
    """What earlier rounds of one call got, in order: model turns (``sample``) and the results of the tool calls
    sub-agents made (``tool``). A run is deterministic given these, so a call made again replays them and goes
    on live where they end (MCP 2026-07-28, where each model turn is a round trip of the whole call).

    A nested run (a sub-agent's own ``run_agent`` call) records its turns as they happen and its result only when
    it ends, so its result follows its turns: replaying it means running it again over its recorded turns, then
    taking its recorded result.
    """

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self._next = 0

    def next_kind(self) -> str | None:
        """``sample`` or ``tool`` for the next recorded event; None once the record is used up."""
        if self._next >= len(self.events):
            return None
        event = self.events[self._next]
        return next(iter(event)) if isinstance(event, dict) and len(event) == 1 else "?"

    def replay(self, kind: str) -> Any:
        """The next recorded event, which must be of ``kind``; None once the record is used up."""
        found = self.next_kind()
        if found is None:
            return None
        if found != kind:
            raise ToolError("The run cannot be continued: the config changed between its rounds. Start it again.")
        self._next += 1
        return self.events[self._next - 1][kind]

    def record(self, kind: str, value: Any) -> None:
        """Note what just happened: appended when live, or matched to the record when it was replayed."""
        if self.next_kind() is None:
            self.events.append({kind: value})
            self._next = len(self.events)
        else:
            self.replay(kind)


class SubAgents:
    """The configured agents as sub-agents, and the ``toolcrib__run_agent`` tool over them."""

    def __init__(self, agents: Mapping[str, AgentConfig]) -> None:
        self.agents = dict(agents)
        self.view_of: Callable[[str], Any] | None = None  # set by the host: agent name -> its AgentView

    def offered(self, rules: Any, chain: tuple[str, ...] = ()) -> list[str]:
        """The agents ``rules.agent`` may run now (never itself, never one of the chain)."""
        return [name for name in sorted(self.agents)
                if name not in chain and rules.source_permits("subagents", name)[0]]

    def describe(self, rules: Any, chain: tuple[str, ...] = ()) -> str:
        lines = [DESCRIPTION, "", "Agents you can run:"]
        for name in self.offered(rules, chain):
            lines.append(f"- {name}: {self.agents[name].description or 'no description'}")
        return "\n".join(lines)

    def entry(self) -> Entry:
        subagents = self

        @tool(name="run_agent", description=DESCRIPTION, annotations={"openWorldHint": True}, rule_subject="agent",
              timeout=RUN_TIMEOUT)
        async def run_agent(
            agent: Annotated[str, Field(max_length=64, description="The agent's name, from the list")],
            task: Annotated[str, Field(min_length=1, max_length=100_000, description="What the agent is to do")],
            ctx: Context,
        ) -> str:
            return await subagents.run(ctx, agent, task)

        spec = get_tool(run_agent)
        assert spec is not None
        return Entry(name=NAME, namespace=NAMESPACE, kind="builtin", dimension="subagents", source="*", tool=spec,
                     sources=tuple(self.agents), describe_for=self.describe)

    async def run(self, ctx: Context, agent: str, task: str) -> str:
        chain = _CHAIN.get() or (ctx.agent,)
        if self.view_of is None or agent not in self.offered(ctx._view.rules, chain):
            raise ToolError(f"Unknown agent: {agent}")  # hidden and nonexistent alike
        view = self.view_of(agent)
        chain = (*chain, agent)
        tools = self._tools_for(view, chain)
        offered = {t["name"] for t in tools}
        config = self.agents[agent]
        messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": task}]}]
        token = _CHAIN.set(chain)
        try:
            for _ in range(config.max_turns):
                reply = await ctx.sample(messages, system_prompt=self._system_prompt(agent, config), tools=tools,
                                         max_tokens=MAX_TOKENS)
                content = _blocks(reply.get("content"))
                messages.append({"role": "assistant", "content": content})
                uses = [block for block in content if block.get("type") == "tool_use"]
                if not uses:
                    return "\n".join(b["text"] for b in content if b.get("type") == "text") or "(no answer)"
                results = [await self._use(view, ctx, use, offered) for use in uses]
                messages.append({"role": "user", "content": results})
        finally:
            _CHAIN.reset(token)
        raise ToolError(f"agent {agent!r} did not finish within {config.max_turns} turns (its max_turns)")

    def _tools_for(self, view: Any, chain: tuple[str, ...]) -> list[dict[str, Any]]:
        """The sub-agent's tools as the model is offered them: its view, with run_agent naming only the agents
        it may still run (and gone when there are none)."""
        tools = []
        for wire in view.mcp_tools:
            if wire["name"] == NAME:
                if not self.offered(view.rules, chain):
                    continue
                wire = {**wire, "description": self.describe(view.rules, chain)}
            tools.append(wire)
        return tools

    @staticmethod
    def _system_prompt(agent: str, config: AgentConfig) -> str:
        if config.prompt:
            return config.prompt
        role = f" {config.description}" if config.description else ""
        return (f"You are {agent}, an agent working on a task handed to you by another agent.{role} Use your tools "
                "as needed, then answer with the result.")

    @staticmethod
    async def _use(view: Any, ctx: Context, use: Mapping[str, Any], offered: set[str]) -> dict[str, Any]:
        journal: Journal | None = getattr(ctx._channel, "journal", None)
        if journal is not None and journal.next_kind() == "tool":
            return dict(journal.replay("tool"))  # done in an earlier round of this call: never twice
        name, arguments = use.get("name"), use.get("input")
        try:
            if name not in offered:
                raise UnknownToolError(str(name))
            result = await view.call(name, arguments if arguments is not None else {},
                                     approver=_nested_approver(ctx._approver), channel=ctx._channel)
        except UnknownToolError as exc:
            result = ToolResult.error(str(exc))
        block: dict[str, Any] = {"type": "tool_result", "toolUseId": str(use.get("id", "")),
                                 "content": list(result.content),
                                 "isError": result.is_error}
        if result.structured_content is not None:
            block["structuredContent"] = result.structured_content
        if journal is not None:
            journal.record("tool", block)
        return block


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


def _nested_approver(approver: Any) -> Any:
    """The caller's approver for the sub-agent's calls, except that a question that needs a new round trip of
    the whole call (2026-07-28) cannot be asked from inside a run: such a call is refused, saying why."""
    if approver is None:
        return None
    from toolcrib.calls import ApprovalPending
    from toolcrib.policy import Deny

    async def ask(*args: Any) -> Any:
        try:
            return await approver(*args)
        except ApprovalPending:
            return Deny("a sub-agent's call cannot be put to the user from inside its run on a 2026-07-28 "
                        "connection (use a 2025-11-25 session, or an approval hook)")

    return ask
