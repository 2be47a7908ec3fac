"""Sub-agents: configured agents run through ``toolcrib__run_agent`` on the caller's model, each with its own
permissions, never offered to itself or back along the chain that led to it.

The model is the one part that cannot run here: each test scripts it (a list of replies, standing in for a remote
model), over a channel for the Python API and as a real MCP client's sampling callback for MCP.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

import toolcrib
from conftest import examples, make_host
from models import CONFIG, OWN, ScriptedModel, Stopper, own, run_own, task, text, use
from packs import FILES, MISC, Pack
from toolcrib.mcp.adapter import UNVERIFIABLE, build_server
from toolcrib.mcp.state import ServingState

RUN_AGENT = ("Hand a task to another agent, which works on it with its own tools and answers with its result. "
             "Describe the task fully: the agent sees nothing of this conversation.")


def host():  # type: ignore[no-untyped-def]
    return make_host(CONFIG, {"files": FILES, "misc": MISC})




def model_client(server: Any, sampling: Any, mode: str = "auto", **kwargs: Any) -> Client:
    """A real MCP client whose sampling (with tools) is answered by ``sampling``: the scripted model."""
    return Client(server, mode=mode, cache=None, sampling_callback=sampling,  # type: ignore[arg-type]
                  sampling_capabilities=types.SamplingCapability(tools=types.SamplingToolsCapability()), **kwargs)


def run(agent: str, arguments: dict[str, Any], model: ScriptedModel | None = None) -> tuple[bool, str]:
    async def main() -> tuple[bool, str]:
        result = await host().view(agent).call("toolcrib__run_agent", arguments, channel=model)
        return result.is_error, result.text

    return anyio.run(main)


def test_who_sees_whom() -> None:
    h = host()
    assert h.view("lead").names == ["files__read", "toolcrib__run_agent"]
    assert h.view("calc").names == ["misc__add", "toolcrib__run_agent"]
    assert h.view("narcissus").names == []  # its one permitted agent is itself
    assert h.view("loner").names == ["files__read", "files__rm", "files__touch", "files__write", "misc__add",
                                     "misc__slow", "misc__slow_sync"]  # no subagents rule: no agents
    described = {t["name"]: t["description"] for t in h.view("lead").mcp_tools}
    assert described["toolcrib__run_agent"] == (f"{RUN_AGENT}\n\nAgents you can run:\n- calc: Adds numbers.\n"
                                                "- loner: no description\n- narcissus: no description")
    calc = {t["name"]: t["description"] for t in h.view("calc").mcp_tools}
    assert calc["toolcrib__run_agent"] == (f"{RUN_AGENT}\n\nAgents you can run:\n- lead: Plans the work and hands "
                                           "parts of it out.")
    explained = h.explain("narcissus", "toolcrib__run_agent")
    assert explained is not None and not explained.visible
    assert explained.reason == "not available: none of its subagents is permitted by " \
                               "agents.narcissus.permissions.subagents"


def test_a_sub_agent_runs_on_the_callers_model_with_its_own_tools() -> None:
    model = ScriptedModel(
        {"role": "assistant", "model": "scripted", "content": [
            {"type": "text", "text": "Adding."}, use("misc__add", {"a": 2, "b": 3}),
            use("files__read", {"path": "secret"}, id="u2")]},
        text("The sum is 5."),
    )
    assert run("lead", {"agent": "calc", "task": "Add 2 and 3."}, model) == (False, "The sum is 5.")
    first, second = model.requests
    assert first["systemPrompt"] == "You are calc. Add."
    assert first["maxTokens"] == 4096
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Add 2 and 3."}]}]
    # calc's own view; run_agent is gone: lead is the chain that led here, and calc is never offered itself
    assert [t["name"] for t in first["tools"]] == ["misc__add"]
    # its calls ran with its permissions: lead's files__read is nothing to calc
    assert second["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "toolUseId": "u1", "content": [{"type": "text", "text": "5"}], "isError": False},
        {"type": "tool_result", "toolUseId": "u2", "content": [{"type": "text", "text": "Unknown tool: files__read"}],
         "isError": True},
    ]}


def test_no_cycle_back_along_the_chain() -> None:
    # calc may run lead; run from calc, lead is offered the agents it may run except calc (and itself)
    model = ScriptedModel({"role": "assistant", "model": "scripted",
                           "content": [use("toolcrib__run_agent", {"agent": "calc", "task": "loop"})]},
                          text("done"))
    assert run("calc", {"agent": "lead", "task": "Plan."}, model) == (False, "done")
    offered = {t["name"]: t["description"] for t in model.requests[0]["tools"]}
    assert offered["toolcrib__run_agent"] == (f"{RUN_AGENT}\n\nAgents you can run:\n- loner: no description\n"
                                              "- narcissus: no description")
    assert model.requests[1]["messages"][2]["content"][0]["content"] == [
        {"type": "text", "text": "Unknown agent: calc"}]  # the way back is closed, like any unknown agent


@pytest.mark.parametrize(("agent", "asked"), [("lead", "ghost"), ("lead", "lead"), ("calc", "narcissus"),
                                              ("calc", "calc")])
def test_hidden_self_and_unknown_agents_answer_alike(agent: str, asked: str) -> None:
    assert run(agent, {"agent": asked, "task": "x"}, ScriptedModel()) == (True, f"Unknown agent: {asked}")


def test_a_run_ends_at_max_turns() -> None:
    looping = {"role": "assistant", "model": "scripted", "content": [use("misc__add", {"a": 1, "b": 1})]}
    model = ScriptedModel(looping, looping, looping)
    assert run("lead", {"agent": "calc", "task": "Keep adding."}, model) == (
        True, "agent 'calc' did not finish within 3 turns (its max_turns)")
    assert len(model.requests) == 3


def test_without_a_model_the_run_says_so() -> None:
    assert run("lead", {"agent": "calc", "task": "Add."}) == (
        True, "This needs the client's model, and the client offers none (it does not support MCP sampling).")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_over_mcp_the_clients_sampling_runs_the_sub_agent(mode: str) -> None:
    seen: list[types.CreateMessageRequestParams] = []
    replies = [types.CreateMessageResultWithTools(role="assistant", model="scripted", content=[
                   types.ToolUseContent(id="u1", name="misc__add", input={"a": 20, "b": 22})]),
               types.CreateMessageResultWithTools(role="assistant", model="scripted",
                                                  content=[types.TextContent(text="42")])]

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        seen.append(params)
        return replies.pop(0)

    async def main() -> types.CallToolResult:
        server = build_server(ServingState(host()), "lead")
        async with model_client(server, sampling, mode) as client:
            return await client.call_tool("toolcrib__run_agent", {"agent": "calc", "task": "20 + 22?"})

    result = anyio.run(main)
    assert (result.is_error, result.content) == (False, [types.TextContent(text="42")])
    assert [t.name for t in seen[0].tools or []] == ["misc__add"]
    assert seen[0].system_prompt == "You are calc. Add."
    assert seen[1].messages[-1].content == [types.ToolResultContent(
        tool_use_id="u1", content=[types.TextContent(text="42")], is_error=False)]


BUMPS: list[str] = []


@toolcrib.tool
def bump(label: str) -> str:
    """Record that it ran (a side effect that must happen exactly once per call the model makes)."""
    BUMPS.append(label)
    return f"bumped {label}"


CHAIN = """
[agents.boss]
[agents.boss.permissions]
tools = { allow = ["toolcrib__run_agent"] }
subagents = { allow = ["mid"] }
ask = ["toolcrib__run_agent"]

[agents.mid]
description = "Middle."
[agents.mid.permissions]
plugins = { allow = ["count"] }
tools = { allow = ["count__bump", "toolcrib__run_agent"] }
subagents = { allow = ["leaf"] }

[agents.leaf]
description = "Leaf."
[agents.leaf.permissions]
plugins = { allow = ["count"] }
tools = { allow = ["count__bump"] }
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_chain_of_runs_over_mcp_does_each_thing_once(mode: str) -> None:
    """boss runs mid (after the user's approval), mid bumps and runs leaf, leaf bumps. On 2026-07-28 every model
    turn is a round trip of the whole call: the retried call replays what earlier rounds did, never redoes it."""
    BUMPS.clear()
    asked: list[str] = []
    script = [
        [types.ToolUseContent(id="m1", name="count__bump", input={"label": "mid"}),
         types.ToolUseContent(id="m2", name="toolcrib__run_agent", input={"agent": "leaf", "task": "Bump once."})],
        [types.ToolUseContent(id="l1", name="count__bump", input={"label": "leaf"})],
        [types.TextContent(text="leaf done")],
        [types.TextContent(text="all done")],
    ]
    prompts: list[str | None] = []

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        prompts.append(params.system_prompt)
        return types.CreateMessageResultWithTools(role="assistant", model="scripted", content=script.pop(0))

    async def elicitation(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async def main() -> types.CallToolResult:
        h = make_host(CHAIN, {"count": Pack(bump)})
        async with model_client(build_server(ServingState(h), "boss"), sampling, mode,
                                elicitation_callback=elicitation) as client:
            return await client.call_tool("toolcrib__run_agent", {"agent": "mid", "task": "Bump, then have leaf bump."})

    result = anyio.run(main)
    assert (result.is_error, result.content) == (False, [types.TextContent(text="all done")])
    assert BUMPS == ["mid", "leaf"]
    assert asked == ["Agent 'boss' wants to call toolcrib__run_agent (ask rule 'toolcrib__run_agent'). Allow this "
                     "call?"]
    assert [p.split(",")[0] if p else p for p in prompts] == ["You are mid", "You are leaf", "You are leaf",
                                                              "You are mid"]
    assert script == []


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_approval_for_the_run_is_not_one_for_the_sub_agents_calls(mode: str) -> None:
    """boss's run of mid was approved; mid's own asked call needs its own approval. On 2025-11-25 the user is
    asked again; on 2026-07-28 it cannot be asked from inside the run, so it is refused, never approved."""
    BUMPS.clear()
    asked: list[str] = []
    script = [[types.ToolUseContent(id="m1", name="count__bump", input={"label": "mid"})],
              [types.TextContent(text="over")]]
    seen: list[types.CreateMessageRequestParams] = []

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        seen.append(params)
        return types.CreateMessageResultWithTools(role="assistant", model="scripted", content=script.pop(0))

    async def elicitation(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async def main() -> types.CallToolResult:
        config = CHAIN.replace('allow = ["leaf"] }', 'allow = ["leaf"] }\nask = ["count__bump"]')
        h = make_host(config, {"count": Pack(bump)})
        async with model_client(build_server(ServingState(h), "boss"), sampling, mode,
                                elicitation_callback=elicitation) as client:
            return await client.call_tool("toolcrib__run_agent", {"agent": "mid", "task": "Bump."})

    assert anyio.run(main).content == [types.TextContent(text="over")]
    bump_result = seen[1].messages[-1].content[0]  # type: ignore[index]
    if mode == "legacy":
        assert BUMPS == ["mid"] and len(asked) == 2
        assert asked[1] == "Agent 'mid' wants to call count__bump (ask rule 'count__bump'). Allow this call?"
    else:
        assert BUMPS == [] and len(asked) == 1
        assert bump_result.is_error and bump_result.content[0].text == (  # type: ignore[union-attr]
            "Permission denied: count__bump needs approval (ask rule 'count__bump'); a sub-agent's call cannot be put "
            "to the user from inside its run on a 2026-07-28 connection (use a 2025-11-25 session, or an approval "
            "hook)")


def test_a_2026_round_trip_state_cannot_be_forged() -> None:
    """The state a client carries between rounds is sealed to the call: an altered one ends the call with an error
    that says so (the run is not started over, nothing recorded is believed), and one from another call too."""
    BUMPS.clear()

    async def main() -> None:
        h = make_host(CHAIN.replace('ask = ["toolcrib__run_agent"]', ""), {"count": Pack(bump)})
        async with model_client(build_server(ServingState(h), "boss"), lambda c, p: None) as client:
            args = {"agent": "mid", "task": "Bump."}
            first = await client.session.call_tool("toolcrib__run_agent", args, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult) and first.request_state
            turn = types.CreateMessageResultWithTools(role="assistant", model="scripted", content=[
                types.ToolUseContent(id="m1", name="count__bump", input={"label": "mid"})])
            second = await client.session.call_tool("toolcrib__run_agent", args, allow_input_required=True,
                                                    input_responses={"toolcrib_sample": turn},
                                                    request_state=first.request_state)
            assert isinstance(second, types.InputRequiredResult) and BUMPS == ["mid"]
            body, _, mac = (second.request_state or "").rpartition(".")
            forged = body[:-4] + ("AAAA" if body[-4:] != "AAAA" else "BBBB") + "." + mac
            for state, other_args in ((forged, args), (second.request_state, {"agent": "mid", "task": "Other."})):
                with pytest.raises(MCPError) as again:
                    await client.session.call_tool("toolcrib__run_agent", other_args, allow_input_required=True,
                                                   input_responses={"toolcrib_sample": turn}, request_state=state)
                assert (again.value.error.code, again.value.error.message) == (-32602, UNVERIFIABLE)
            assert BUMPS == ["mid"]  # nothing run again, nothing recorded believed

    anyio.run(main)


def test_a_client_without_sampling_gets_the_refusal() -> None:
    async def main() -> types.CallToolResult:
        async with Client(build_server(ServingState(host()), "lead"), mode="legacy", cache=None) as client:
            return await client.call_tool("toolcrib__run_agent", {"agent": "calc", "task": "Add."})

    result = anyio.run(main)
    assert result.is_error
    assert result.content == [types.TextContent(
        text="This needs the client's model, and the client offers none (it does not support MCP sampling).")]


POOL = ["ana", "bob", "bea", "cy"]


@settings(max_examples=examples(150), deadline=None)
@given(rules=st.dictionaries(st.sampled_from(POOL), st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["allow", "deny"]),
              st.lists(st.sampled_from([*POOL, "*", "b*", "zed"]), max_size=3)))))
def test_runnable_agents_are_exactly_the_listed_ones(rules: dict[str, Any]) -> None:
    """For generated subagents rules: the agents run_agent lists are exactly those the rule permits minus the
    agent itself (deny wins, no rule denies all), and exactly those can be run; any other name, hidden or
    unknown, gets the same answer."""
    from fnmatch import fnmatchcase

    from toolcrib.errors import UnknownToolError

    lines = []
    for agent in POOL:
        lines += [f"[agents.{agent}]", f"[agents.{agent}.permissions]", 'tools = { allow = ["*"] }']
        if rules.get(agent) is not None:
            kind, patterns = rules[agent]
            lines.append(f"subagents = {{ {kind} = {patterns!r} }}".replace("'", '"'))
    h = make_host("\n".join(lines))

    async def check(agent: str) -> None:
        rule = rules.get(agent)
        if rule is None:
            expected = []
        else:
            kind, patterns = rule
            hit = [b for b in POOL if any(fnmatchcase(b, p) for p in patterns)]
            expected = sorted(b for b in (hit if kind == "allow" else [b for b in POOL if b not in hit]) if b != agent)
        view = h.view(agent)
        if not expected:
            assert "toolcrib__run_agent" not in view
            with pytest.raises(UnknownToolError):
                await view.call("toolcrib__run_agent", {"agent": "ana", "task": "x"})
            return
        listed = {t["name"]: t["description"] for t in view.mcp_tools}["toolcrib__run_agent"]
        assert [line[2:].split(":")[0] for line in listed.splitlines() if line.startswith("- ")] == expected
        for name in [*POOL, "ghost"]:
            result = await view.call("toolcrib__run_agent", {"agent": name, "task": "x"},
                                     channel=ScriptedModel(text("ok")))
            assert result.text == ("ok" if name in expected else f"Unknown agent: {name}")

    async def main() -> None:
        for agent in POOL:
            await check(agent)

    anyio.run(main)


@toolcrib.tool
async def ask_model(question: str, ctx: toolcrib.Context) -> str:
    """Ask the client's model one question."""
    reply = await ctx.sample([{"role": "user", "content": [{"type": "text", "text": question}]}], max_tokens=50)
    content = reply["content"]
    return str((content[0] if isinstance(content, list) else content)["text"])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_any_async_handler_can_ask_the_clients_model(mode: str) -> None:
    questions: list[str] = []

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        questions.append(params.messages[0].content[0].text)  # type: ignore[index,union-attr]
        return types.CreateMessageResult(role="assistant", model="scripted", content=types.TextContent(text="blue"))

    async def main() -> types.CallToolResult:
        h = make_host("[agents.a]\n[agents.a.permissions]\nplugins = { allow = ['q'] }\ntools = { allow = ['*'] }",
                      {"q": Pack(ask_model)})
        async with Client(build_server(ServingState(h), "a"), mode=mode, cache=None, sampling_callback=sampling
                          ) as client:  # type: ignore[arg-type]
            return await client.call_tool("q__ask_model", {"question": "Sky colour?"})

    assert anyio.run(main).content == [types.TextContent(text="blue")]
    assert questions == ["Sky colour?"]


@toolcrib.tool
def long_text() -> str:
    """Return a long text."""
    return "x" * 3000


def test_a_2026_run_whose_state_outgrows_a_round_trip_stops_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.mcp import adapter

    monkeypatch.setattr(adapter, "MAX_STATE_CHARS", 2000)  # the real cap is 2 MiB; the behaviour is the same
    script = [[types.ToolUseContent(id="m1", name="count__long_text", input={})], [types.TextContent(text="never")]]

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        return types.CreateMessageResultWithTools(role="assistant", model="scripted", content=script.pop(0))

    async def main() -> types.CallToolResult:
        config = CHAIN.replace('ask = ["toolcrib__run_agent"]', "").replace('"count__bump"', '"count__long_text"')
        h = make_host(config, {"count": Pack(long_text)})
        async with model_client(build_server(ServingState(h), "boss"), sampling) as client:
            return await client.call_tool("toolcrib__run_agent", {"agent": "mid", "task": "Read the long text."})

    result = anyio.run(main)
    assert (result.is_error, result.content) == (True, [types.TextContent(
        text="Tool toolcrib__run_agent stopped: its conversation grew past what a 2026-07-28 round trip carries "
             "(2000 characters of request state); a 2025-11-25 session has no such limit.")])




def test_an_interrupting_deny_ends_a_sub_agents_run_and_is_marked_over_mcp(tmp_path: Any) -> None:
    stopper = Stopper()
    log = tmp_path / "audit.jsonl"
    h = make_host(f'[host]\naudit_log = "{log}"\n' + CONFIG, {"files": FILES, "misc": MISC, "stopper": stopper})
    model = ScriptedModel(
        {"role": "assistant", "model": "scripted", "content": [use("misc__add", {"a": 1, "b": 1})]},
        {"role": "assistant", "model": "scripted", "content": [use("misc__add", {"a": 13, "b": 1}, id="u2")]},
        text("never asked"),
    )

    async def main() -> Any:
        result = await h.view("lead").call("toolcrib__run_agent", {"agent": "calc", "task": "Add."}, channel=model)
        async with Client(build_server(ServingState(h), "calc"), cache=None) as client:
            marked = await client.call_tool("misc__add", {"a": 13, "b": 0})
        return result, marked

    result, marked = anyio.run(main)
    assert (result.is_error, result.text) == (
        True, "agent 'calc' was stopped by a policy check: 13 is unlucky; stop and ask the user")
    assert len(model.requests) == 2  # the run ended: no third turn
    assert marked.is_error and marked.content[0].text == "13 is unlucky; stop and ask the user"
    assert marked.meta is not None and marked.meta["toolcrib/interrupt"] is True
    h.close()
    # one id per call, the same in its pre and post hooks and its audit record
    pre_add, post_add = stopper.seen[1], stopper.seen[2]
    assert pre_add[0] == "pre" and post_add == ("post", "misc__add", pre_add[2]) and pre_add[2].startswith("call_")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    by_id = {line["call_id"]: line for line in lines}
    assert by_id[pre_add[2]]["tool"] == "misc__add" and by_id[pre_add[2]]["decision"] == "allowed"
    stopped = [line for line in lines if line["by"] == "hook stopper (interrupt)"]
    assert [line["decision"] for line in stopped] == ["denied", "denied"]
    assert len({line["call_id"] for line in lines}) == len(lines)


# -- a sub-agent on its own model (runner = "llm"), offline with the llm-echo plugin ---------------------------
# llm-echo is a real llm model plugin ("echo"): a prompt of JSON with "tool_calls" makes it call those tools, and
# each answer echoes what it was given (the tool results included) as JSON.



def test_a_sub_agent_runs_on_its_own_model_through_its_own_view() -> None:
    error, text = run_own(own(), task(("misc__add", {"a": 2, "b": 3}), ("files__read", {"path": "x"})))
    assert not error
    answer = json.loads(text)  # the model's last turn: what it was given
    assert answer["system"] == "You are echoer."
    assert [(r["name"], r["output"]) for r in answer["tool_results"]] == [
        ("misc__add", "5"), ("files__read", 'Error: tool "files__read" does not exist')]


def test_by_default_a_sub_agent_whose_model_llm_runs_runs_on_it_and_needs_no_sampling() -> None:
    """runner = "auto" (the default): llm runs "echo" (no key needed), so the run is on it, not on the client's."""
    host = make_host(OWN.replace('runner = "llm"\n', "").replace("EXTRA", ""), {"files": FILES, "misc": MISC})
    error, text = run_own(host, task(("misc__add", {"a": 2, "b": 3})))
    answer = json.loads(text)
    assert not error and (answer["system"], [r["output"] for r in answer["tool_results"]]) == ("You are echoer.", ["5"])


def test_its_budgets_end_a_run_clearly() -> None:
    assert run_own(own("max_turns = 1"), task(("misc__add", {"a": 1, "b": 1}))) == (
        True, "agent 'echoer' did not finish within 1 turns (its max_turns)")
    error, text = run_own(own("max_run_tokens = 5"), task(("misc__add", {"a": 1, "b": 1})))
    assert error and text.startswith("agent 'echoer' used ") and text.endswith(
        " tokens, more than its budget of 5 (max_run_tokens)")


def test_an_interrupting_policy_ends_a_run_on_its_own_model() -> None:
    assert run_own(own(stopper=Stopper()), task(("misc__add", {"a": 13, "b": 1}))) == (
        True, "agent 'echoer' was stopped by a policy check: 13 is unlucky; stop and ask the user")


def test_a_model_no_plugin_offers_is_a_clear_error() -> None:
    host = make_host(OWN.replace("EXTRA", "").replace('model = "echo"', 'model = "nowhere-9"').replace(
        "[models.echo]", '[models."nowhere-9"]'), {"files": FILES, "misc": MISC})
    assert run_own(host, "hi") == (True, "agent 'echoer': no installed llm plugin offers the model 'nowhere-9' "
                                         "(`llm models` lists them)")
    from conftest import problems

    assert problems('[agents.a]\nrunner = "llm"\nmax_run_tokens = 10\n[agents.b]\nrunner = "client"\n'
                    'max_run_tokens = 10\n[agents.c]\nmax_run_tokens = 10\n') == [
        'error: conf.toml: agents.a.runner: runner = "llm" runs the agent on its own model: set model to an llm '
        "model id (`llm models` lists them)",
        'error: conf.toml: agents.b.max_run_tokens: a token budget applies to runs on the agent\'s own model '
        '(runner = "llm", or "auto" where llm runs its model); on the client\'s model, the client counts',
    ]


def test_check_says_which_sub_agents_depend_on_the_clients_sampling(cli_config: Any) -> None:
    """Sampling is deprecated as of 2026-07-28 (SEP-2577): a sub-agent that runs on the calling client's model may
    find no model to run on. An agent no one may run, or one that runs on its own model, is not named."""
    from conftest import cli

    # own: runner "llm"; auto: the default, on its own model since llm runs "echo" (no key needed); far: the
    # default too, but no llm plugin runs its model, so on the client's; near: "client" though llm could run it
    path = cli_config((CHAIN + '\n[models."echo"]\n[agents.own]\nmodel = "echo"\nrunner = "llm"\n'
                       '[agents.own.permissions]\nplugins = { allow = ["count"] }\n'
                       '[agents.auto]\nmodel = "echo"\n[models."nowhere-9"]\n[agents.far]\nmodel = "nowhere-9"\n'
                       '[agents.near]\nmodel = "echo"\nrunner = "client"\n')
                      .replace('subagents = { allow = ["leaf"] }', 'subagents = { allow = ["leaf", "own", "auto", '
                                                                    '"far", "near"] }'), "")
    code, out, _ = cli("--config", path, "check")
    assert code == 0 and [line for line in out.splitlines() if line.startswith("sub-agents")] == [
        "sub-agents on the calling client's model (MCP sampling, deprecated as of 2026-07-28: a client may not "
        "offer it; one whose model llm runs, with its key, runs on its own): far (of mid), leaf (of mid), "
        "mid (of boss), near (of mid)"]
    code, out, _ = cli("--config", path, "check", "--json")
    assert code == 0 and json.loads(out)["sampling_subagents"] == {"far": ["mid"], "leaf": ["mid"], "mid": ["boss"],
                                                                   "near": ["mid"]}
