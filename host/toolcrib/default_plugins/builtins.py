"""The host's own pack, namespace ``toolcrib``: the tools that serve what is not a tool, registered through the same
``toolcrib_tools`` hook as any pack and written only against ``toolcrib``'s public API (``Context.permits``,
``Context.subagent``, ``Context.server``, ``Context.sample``), as a third-party pack could be.

- ``toolcrib__load_skill``: a skill the agent may load (``skills``), and each such skill as a prompt too
  (``toolcrib__<skill>``, hyphens written as underscores), for clients that offer prompts to their user;
- ``toolcrib__run_agent``: hand a task to an agent the agent may run (``subagents``);
- ``toolcrib__load_mcp``, ``toolcrib__call_mcp_tool``, ``toolcrib__read_mcp_resource``: lazy upstream servers the
  agent may load (``mcps``), and their tools, each still decided like any tool.

Each is offered only where it serves something: its availability check asks the agent's rules whether there is
something to serve, and its description (``describe``) lists exactly that, for each agent. A name the agent may not
have, hidden or nonexistent, gets the same "Unknown ..." answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field

from toolcrib import skills, subagents
from toolcrib.config import AgentConfig
from toolcrib.content import ToolResult
from toolcrib.context import AvailabilityContext, Context
from toolcrib.declarations import prompt
from toolcrib.decorator import tool
from toolcrib.errors import ToolError
from toolcrib.hookspecs import hookimpl
from toolcrib.names import tool_name_problem
from toolcrib.search import SearchError

NAMESPACE = "toolcrib"

LOAD_SKILL = ("Load a skill: expert instructions for a kind of task (its SKILL.md), or one of its other files. Load "
              "the skill before starting a task it covers.")
SERVERS_NOTE = "Servers you can load:"
SEARCH_TOOLS = ("Find tools by what they do. Only some of your tools are listed; search before concluding that a "
                "tool does not exist. Returns each match's full definition (name, description, input schema), best "
                "first; call a found tool by its name, or through toolcrib__call_tool if your tool list does not "
                "show it.")
CALL_TOOL = ("Call a tool that toolcrib__search_tools found, by its name, with its arguments. The tool's own rules "
             "apply (approvals included); its result is this call's result.")


def prompt_name(skill: str) -> str:
    """The name a skill's prompt has (prompt names take no hyphens)."""
    return skill.replace("-", "_")


class Builtins:
    """The ``toolcrib`` pack for one host: what it serves is what the host has (its skills, its agents, its lazy
    servers), given when the host is built."""

    def __init__(self, skills: Mapping[str, skills.Skill], agents: Mapping[str, AgentConfig],
                 servers: Sequence[str]) -> None:
        self.skills = dict(skills)
        self.agents = dict(agents)
        self.servers = tuple(servers)

    @hookimpl
    def toolcrib_tools(self) -> list[Any]:
        offered: list[Any] = []
        if self.skills:
            offered.append(self._load_skill())
        if any(skill.sub_agent for skill in self.skills.values()):
            offered.append(self._call_skill_sub_agent())
        if any(config.permissions and config.permissions.subagents for config in self.agents.values()):
            offered.append(self._run_agent())
        if self.servers:
            offered += self._lazy_servers()
        if any(config.tool_search is not None for config in self.agents.values()):
            offered += self._tool_search()
        return offered

    @hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [self._skill_prompt(skill) for _, skill in sorted(self.skills.items())
                if tool_name_problem(prompt_name(skill.name)) is None]

    # -- tool search ---------------------------------------------------------------------------------------------

    def _tool_search(self) -> list[Any]:
        """``toolcrib__search_tools`` and ``toolcrib__call_tool``, for agents with ``tool_search``: the first finds
        the agent's tools by what they do (``Context.search``: only what the agent sees is ever found), the second
        calls one by name, through its own rules, hooks, limits and audit record, for clients that do not list
        again what a search found."""
        configs = self.agents

        def available(ctx: AvailabilityContext) -> bool | str:
            config = configs.get(ctx.agent)
            return (config is not None and config.tool_search is not None) or \
                f"agents.{ctx.agent} has no tool_search"

        @tool(name="search_tools", description=SEARCH_TOOLS, is_available=available,
              annotations={"readOnlyHint": True, "openWorldHint": False, "idempotentHint": True})
        def search_tools(
            query: Annotated[str, Field(max_length=1000, description="What the tool should do, in a few words; a "
                                                                      "tool's exact name; or /regex/ over names")],
            ctx: Context,
            limit: Annotated[int | None, Field(ge=1, le=50, description="How many tools at most")] = None,
        ) -> dict[str, Any]:
            config = configs[ctx.agent].tool_search
            assert config is not None
            try:
                found = ctx.search(query, limit or config.results)
            except SearchError as exc:
                raise ToolError(str(exc)) from None
            ctx.note(found=[tool["name"] for tool in found])  # the audit record: what the agent was shown
            given = ctx.conversation
            if given is not None:  # the tools it found are this conversation's tools/list from now on
                given.update(("tool", tool["name"]) for tool in found)
            return {"tools": found}

        @tool(name="call_tool", description=CALL_TOOL, is_available=available,
              annotations={"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True})
        async def call_tool(
            name: Annotated[str, Field(max_length=200, description="The tool's name, as search_tools gave it")],
            ctx: Context,
            arguments: Annotated[dict[str, Any] | None, Field(description="Its arguments")] = None,
        ) -> ToolResult:
            itself = ctx.itself(exclude={"toolcrib__search_tools", "toolcrib__call_tool"})
            if itself is None:
                raise ToolError(f"Unknown tool: {name}")
            return await itself.call(name, arguments)

        return [search_tools, call_tool]

    # -- skills ------------------------------------------------------------------------------------------------

    def _skill_prompt(self, skill: skills.Skill) -> Any:
        """The skill as a prompt: its SKILL.md as one user message, for agents the skills rule allows it."""

        def available(ctx: AvailabilityContext) -> bool | str:
            return ctx.permits("skills", skill.name) or f"agents.{ctx.agent}.permissions.skills does not allow it"

        def load() -> str:
            return skills.read(skill, None)

        return prompt(name=prompt_name(skill.name), description=skill.description or f"The skill {skill.name}.",
                      title=f"Skill: {skill.name}", is_available=available)(load)

    def _load_skill(self) -> Any:
        known = self.skills

        def available(ctx: AvailabilityContext) -> bool | str:
            if any(ctx.permits("skills", name) for name in known):
                return True
            return f"none of its skills is permitted by agents.{ctx.agent}.permissions.skills"

        def describe(ctx: AvailabilityContext) -> str:
            lines = [LOAD_SKILL, "", "Skills you can load:"]
            lines += [f"- {s.name}: {s.description}" for name, s in known.items() if ctx.permits("skills", name)]
            return "\n".join(lines)

        @tool(name="load_skill", description=LOAD_SKILL, is_available=available, describe=describe,
              annotations={"readOnlyHint": True, "openWorldHint": False, "idempotentHint": True},
              rule_subject="name")
        def load_skill(
            name: Annotated[str, Field(max_length=64, description="The skill's name, from the list")],
            ctx: Context,
            file: Annotated[str | None, Field(max_length=4096, description="Another file of the skill, by its "
                                                                           "path inside the skill folder")] = None,
            reload: Annotated[bool, Field(description="Load it again although this conversation has it "
                                                      "already")] = False,
        ) -> str:
            skill = known.get(name)
            if skill is None or not ctx.permits("skills", name):
                raise ToolError(f"Unknown skill: {name}")  # hidden and nonexistent alike
            given = ctx.conversation
            key = ("skill", name, file)
            if given is not None and key in given and not reload:  # idempotent, as seed 002's load_skill
                what = f"{file!r} of the skill {name!r}" if file else f"The skill {name!r}"
                return (f"{what[0].upper()}{what[1:]} is already loaded in this conversation (see above); call "
                        "again with reload=true to load it again.")
            text = skills.read(skill, file)
            if given is not None:
                given.add(key)
            return text

        return load_skill

    def _call_skill_sub_agent(self) -> Any:
        runnable = {name: skill for name, skill in self.skills.items() if skill.sub_agent}

        def available(ctx: AvailabilityContext) -> bool | str:
            if any(ctx.permits("skills", name) for name in runnable):
                return True
            return f"none of its sub-agent skills is permitted by agents.{ctx.agent}.permissions.skills"

        def describe(ctx: AvailabilityContext) -> str:
            lines = [subagents.SKILL_DESCRIPTION, "", "Skills that run as sub-agents:"]
            lines += [f"- {s.name}: {s.description}" for name, s in sorted(runnable.items())
                      if ctx.permits("skills", name)]
            return "\n".join(lines)

        @tool(name="call_skill_sub_agent", description=subagents.SKILL_DESCRIPTION, annotations={"openWorldHint": True},
              is_available=available, describe=describe, rule_subject="skill", timeout=subagents.RUN_TIMEOUT)
        async def call_skill_sub_agent(
            skill: Annotated[str, Field(max_length=64, description="The skill's name, from the list")],
            task: Annotated[str, Field(min_length=1, max_length=100_000, description="What the sub-agent is to do")],
            ctx: Context,
        ) -> str:
            found = runnable.get(skill)
            if found is None or not ctx.permits("skills", skill):
                raise ToolError(f"Unknown skill: {skill}")  # hidden, not a sub-agent skill, nonexistent: alike
            return await subagents.run_skill(ctx, found, task)

        return call_skill_sub_agent

    # -- sub-agents ----------------------------------------------------------------------------------------------

    def _run_agent(self) -> Any:
        agents = self.agents

        def available(ctx: AvailabilityContext) -> bool | str:
            if any(ctx.permits("subagents", name) for name in agents):
                return True
            return f"none of its subagents is permitted by agents.{ctx.agent}.permissions.subagents"

        @tool(name="run_agent", description=subagents.DESCRIPTION, annotations={"openWorldHint": True},
              is_available=available, describe=lambda ctx: subagents.describe(ctx, agents), rule_subject="agent",
              timeout=subagents.RUN_TIMEOUT)
        async def run_agent(
            agent: Annotated[str, Field(max_length=64, description="The agent's name, from the list")],
            task: Annotated[str, Field(min_length=1, max_length=100_000, description="What the agent is to do")],
            ctx: Context,
        ) -> str:
            return await subagents.run(ctx, agent, task)

        return run_agent

    # -- lazy upstream servers ----------------------------------------------------------------------------------

    def _lazy_servers(self) -> list[Any]:
        servers = self.servers

        def available(ctx: AvailabilityContext) -> bool | str:
            if any(ctx.permits("mcps", name) for name in servers):
                return True
            return f"none of its mcps is permitted by agents.{ctx.agent}.permissions.mcps"

        def described(base: str) -> Any:
            def describe(ctx: AvailabilityContext) -> str:
                names = [name for name in servers if ctx.permits("mcps", name)]
                return f"{base}\n\n{SERVERS_NOTE} " + ", ".join(names)

            return describe

        Server = Annotated[str, Field(max_length=32, description="The server's name, from the list")]
        LOAD = "Connect an MCP server (once) and list the tools of it you can call with toolcrib__call_mcp_tool."
        CALL = "Call a tool of an MCP server listed by toolcrib__load_mcp (the server is connected if it is not yet)."
        READ = "Read a resource of an MCP server you can load."

        @tool(name="load_mcp", description=LOAD, is_available=available, describe=described(LOAD),
              annotations={"readOnlyHint": True, "openWorldHint": True, "idempotentHint": True})
        async def load_mcp(server: Server, ctx: Context) -> dict[str, Any]:
            found = ctx.server(server)
            if found is None:
                raise ToolError(f"Unknown MCP server: {server}")
            return {"server": server, "tools": await found.tools()}

        @tool(name="call_mcp_tool", description=CALL, is_available=available, describe=described(CALL),
              annotations={"destructiveHint": True, "openWorldHint": True})
        async def call_mcp_tool(
            server: Server,
            tool_name: Annotated[str, Field(max_length=128, description="The tool's name on that server")],
            ctx: Context,
            arguments: Annotated[dict[str, Any] | None, Field(description="The tool's arguments")] = None,
        ) -> ToolResult:
            found = ctx.server(server)
            if found is None:
                raise ToolError(f"Unknown tool: {server}__{tool_name}")  # hidden and nonexistent alike
            return await found.call(tool_name, arguments)

        # Which resources: argument rules on this tool match the URI, `toolcrib__read_mcp_resource(notes://*)`.
        @tool(name="read_mcp_resource", description=READ, is_available=available, describe=described(READ),
              annotations={"readOnlyHint": True, "openWorldHint": True}, rule_subject="uri")
        async def read_mcp_resource(
            server: Server,
            uri: Annotated[str, Field(max_length=8192, description="The resource's URI")],
            ctx: Context,
        ) -> ToolResult:
            found = ctx.server(server)
            if found is None:
                raise ToolError(f"Unknown MCP server: {server}")
            return await found.read(uri)

        return [load_mcp, call_mcp_tool, read_mcp_resource]
