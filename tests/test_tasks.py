"""MCP tasks (the io.modelcontextprotocol/tasks extension of 2026-07-28): calls that answer with a task the client
polls, through the SDK's own Client: its extension mechanism (``ClientExtension`` with a claim on
``resultType: "task"``) polls a task to its end, and its ``send_request`` sends tasks/get, tasks/update and
tasks/cancel as any client would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, TypeAdapter

import toolcrib
from conftest import make_host
from packs import GATES, JOBS, RAN, Pack, greet, hold
from redis_server import HANG_GUARD
from serving import TOKENS, http_client, start_http
from toolcrib.errors import ToolDeclarationError
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState
from toolcrib.mcp.tasks import EXTENSION, NOT_FOUND

CONFIG = """
[agents.a.permissions]
plugins = { allow = ["jobs"] }
tools = { allow = ["*"] }
ask = ["jobs__write"]
[agents.b.permissions]
plugins = { allow = ["jobs"] }
tools = { allow = ["*"] }
"""


class Created(types.Result):
    """The task a call answered with (SEP-2663's CreateTaskResult)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


Answer = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class Tasks(ClientExtension):
    """A client that speaks tasks: it polls each task to its end, answering its questions with ``answer``."""

    identifier = EXTENSION

    def __init__(self, answer: Answer | None = None, seen: list[dict[str, Any]] | None = None) -> None:
        self.answer = answer
        self.seen = seen if seen is not None else []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=Created, resolve=self.resolve)]

    async def resolve(self, created: Created, ctx: ClaimContext) -> types.CallToolResult:
        while True:
            task = await request(ctx.session, "tasks/get", taskId=created.task_id)
            self.seen.append(task)
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"], by_name=False)
            if task["status"] in ("failed", "cancelled"):
                raise RuntimeError(f"task {task['status']}: {task.get('error')}")
            if task["status"] == "input_required":
                assert self.answer is not None
                answers = {key: await self.answer(key, asked) for key, asked in task["inputRequests"].items()}
                assert await request(ctx.session, "tasks/update", taskId=created.task_id,
                                     inputResponses=answers) == {"resultType": "complete", "_meta": task["_meta"]}
            await anyio.sleep(0.01)


class _Request(types.Request[dict[str, Any], str]):
    method: str
    params: dict[str, Any]


async def request(session: Any, method: str, **params: Any) -> dict[str, Any]:
    """Any request, as the SDK's session sends it (with the client's envelope on 2026-07-28)."""
    result: dict[str, Any] = await session.send_request(_Request(method=method, params=params),
                                                          TypeAdapter(dict[str, Any]))
    return result


def serving() -> ServingState:
    RAN.clear()
    return ServingState(make_host(CONFIG, {"jobs": JOBS}))


async def _accept(key: str, asked: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {}}


def test_a_client_that_speaks_tasks_gets_a_task_and_polls_it_to_its_result() -> None:
    GATES["one"] = asyncio.Event()
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks(seen=seen)]) as client:
            async def release() -> None:
                while not seen:
                    await anyio.sleep(0.01)
                GATES["one"].set()

            async with anyio.create_task_group() as group:
                group.start_soon(release)
                result = await client.call_tool("jobs__hold", {"label": "one"})
            assert (result.is_error, result.content[0].text) == (False, "held one")  # type: ignore[union-attr]
            # the tool that may not be a task answers at once, as ever
            plain = await client.call_tool("jobs__greet", {"name": "Ada"})
            assert plain.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]

    anyio.run(main)
    assert seen[0]["status"] == "working" and seen[0]["statusMessage"] == "holding one"
    assert seen[-1]["status"] == "completed"
    assert seen[-1]["result"] == {"content": [{"type": "text", "text": "held one"}], "isError": False}
    assert set(seen[-1]) == {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs",
                             "pollIntervalMs", "result", "resultType", "_meta"}
    assert (seen[-1]["ttlMs"], seen[-1]["pollIntervalMs"], seen[-1]["resultType"]) == (3_600_000, 500, "complete")
    assert len(seen[-1]["taskId"]) == 32  # 24 random bytes


def test_the_created_task_is_the_wire_shape_the_extension_defines() -> None:
    GATES["shape"] = asyncio.Event()

    async def main() -> None:
        async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks()]) as client:
            created = await client.session.call_tool("jobs__hold", {"label": "shape"}, allow_claimed=True)
            assert isinstance(created, Created)
            wire = created.model_dump(by_alias=True, exclude_none=True)
            assert sorted(wire) == ["_meta", "createdAt", "lastUpdatedAt", "pollIntervalMs", "resultType", "status",
                                    "taskId", "ttlMs"]
            assert (wire["status"], wire["resultType"]) == ("working", "task")
            got = await request(client.session, "tasks/get", taskId=created.task_id)  # at once: it exists
            assert got["taskId"] == created.task_id
            GATES["shape"].set()

    anyio.run(main)


def test_a_client_that_does_not_speak_tasks_gets_the_plain_call_and_a_required_one_the_missing_capability() -> None:
    GATES["plain"] = asyncio.Event()
    GATES["plain"].set()

    async def main() -> None:
        for mode in ("auto", "legacy"):
            async with Client(build_server(serving(), "a"), mode=mode, cache=None) as client:
                result = await client.call_tool("jobs__hold", {"label": "plain"})
                assert result.content[0].text == "held plain"  # type: ignore[union-attr]
                with pytest.raises(MCPError) as info:
                    await client.call_tool("jobs__only", {"x": 1})
                assert info.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY == -32021
                assert info.value.error.message == (
                    "Missing required client capability: tool jobs__only runs only as an MCP task; it needs the "
                    "io.modelcontextprotocol/tasks extension declared on the request")
                assert info.value.error.data == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
        async with Client(build_server(serving(), "a"), cache=None) as client:
            with pytest.raises(MCPError) as info:
                await request(client.session, "tasks/get", taskId="x")
            assert (info.value.error.code, info.value.error.message) == (-32021, (
                "Missing required client capability: tasks/get needs the io.modelcontextprotocol/tasks extension "
                "declared on the request"))
        async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks()]) as client:
            result = await client.call_tool("jobs__only", {"x": 2})
            assert result.content[0].text == "only 2"  # type: ignore[union-attr]

    anyio.run(main)


def test_the_server_advertises_the_extension() -> None:
    async def main() -> None:
        async with Client(build_server(serving(), "a"), cache=None) as client:
            assert client.server_capabilities.extensions == {EXTENSION: {}}  # type: ignore[union-attr]

    anyio.run(main)


def test_a_task_belongs_to_its_agent_and_another_gets_what_a_task_that_does_not_exist_gets() -> None:
    GATES["mine"] = asyncio.Event()
    s = serving()

    async def main() -> None:
        async with Client(build_server(s, "a"), cache=None, extensions=[Tasks()]) as mine, \
                Client(build_server(s, "b"), cache=None, extensions=[Tasks()]) as other:
            created = await mine.session.call_tool("jobs__hold", {"label": "mine"}, allow_claimed=True)
            assert isinstance(created, Created)
            for method, extra in (("tasks/get", {}), ("tasks/cancel", {}), ("tasks/update", {"inputResponses": {}})):
                for task_id in (created.task_id, "no-such-task"):
                    with pytest.raises(MCPError) as info:
                        await request(other.session, method, taskId=task_id, **extra)
                    assert (info.value.error.code, info.value.error.message) == (types.INVALID_PARAMS, NOT_FOUND)
            assert (await request(mine.session, "tasks/get", taskId=created.task_id))["status"] == "working"
            GATES["mine"].set()

    anyio.run(main)


def test_a_cancelled_task_stops_its_work_and_says_cancelled() -> None:
    GATES["stop"] = asyncio.Event()  # never set: only a cancel ends it
    s = serving()

    async def main() -> None:
        async with Client(build_server(s, "a"), cache=None, extensions=[Tasks()]) as client:
            created = await client.session.call_tool("jobs__hold", {"label": "stop"}, allow_claimed=True)
            assert isinstance(created, Created)
            while "stop" not in RAN:
                await anyio.sleep(0.01)
            ack = await request(client.session, "tasks/cancel", taskId=created.task_id)
            assert ack["resultType"] == "complete" and set(ack) == {"resultType", "_meta"}
            got = await request(client.session, "tasks/get", taskId=created.task_id)
            while got["status"] == "working":
                await anyio.sleep(0.01)
                got = await request(client.session, "tasks/get", taskId=created.task_id)
            assert (got["status"], got["statusMessage"]) == ("cancelled", "cancelled by the client")
            assert "result" not in got and "error" not in got
            again = await request(client.session, "tasks/cancel", taskId=created.task_id)  # ended: the same ack
            assert again["resultType"] == "complete"

    anyio.run(main)


def test_a_tool_error_completes_the_task_with_an_error_result() -> None:
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks(seen=seen)]) as client:
            result = await client.call_tool("jobs__fails", {})
            assert (result.is_error, result.content[0].text) == (True, "it did not work")  # type: ignore[union-attr]

    anyio.run(main)
    assert seen[-1]["status"] == "completed" and "error" not in seen[-1]


def test_a_task_asks_its_questions_as_input_requests_and_goes_on_with_the_answers() -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def answer(key: str, request: dict[str, Any]) -> dict[str, Any]:
        asked.append((key, request))
        field = next(iter(request["params"]["requestedSchema"]["properties"]))
        return {"action": "accept", "content": {field: "Ada" if field == "name" else "London"}}

    async def main() -> None:
        async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks(answer)],
                          elicitation_callback=lambda c, p: _accept("", {})) as client:  # declares elicitation
            result = await client.call_tool("jobs__ask", {})
            assert result.content[0].text == "Ada of London (accept)"  # type: ignore[union-attr]

    anyio.run(main)
    assert asked == [
        ("elicitation-1", {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}}),
        ("elicitation-2", {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Your town?",
            "requestedSchema": {"type": "object", "properties": {"town": {"type": "string"}}}}})]


def test_an_approval_is_a_question_of_the_task_and_a_decline_refuses_the_call() -> None:
    async def decline(key: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"action": "decline"}

    async def main() -> None:
        for answer, expected in ((_accept, "wrote x"), (decline, (
                "Permission denied: jobs__write needs approval (ask rule 'jobs__write'), and the user declined."))):
            async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks(answer)],
                              elicitation_callback=lambda c, p: _accept("", {})) as client:
                result = await client.call_tool("jobs__write", {"text": "x"})
                assert result.content[0].text == expected  # type: ignore[union-attr]

    anyio.run(main)


def test_an_answer_that_is_not_one_is_refused_naming_its_key_and_nothing_is_taken() -> None:
    async def main() -> None:
        async with Client(build_server(serving(), "a"), cache=None, extensions=[Tasks()],
                          elicitation_callback=lambda c, p: _accept("", {})) as client:
            created = await client.session.call_tool("jobs__ask", {}, allow_claimed=True)
            assert isinstance(created, Created)
            got = await request(client.session, "tasks/get", taskId=created.task_id)
            while got["status"] != "input_required":
                await anyio.sleep(0.01)
                got = await request(client.session, "tasks/get", taskId=created.task_id)
            assert list(got["inputRequests"]) == ["elicitation-1"]
            with pytest.raises(MCPError) as info:
                await request(client.session, "tasks/update", taskId=created.task_id,
                              inputResponses={"elicitation-1": {"action": "maybe"}})
            assert info.value.error.code == types.INVALID_PARAMS
            assert info.value.error.message.startswith("inputResponses.elicitation-1.action: Input should be ")
            # keys never asked are ignored; the question stays open
            await request(client.session, "tasks/update", taskId=created.task_id,
                          inputResponses={"nothing-asked": {"action": "accept"}})
            got = await request(client.session, "tasks/get", taskId=created.task_id)
            assert (got["status"], list(got["inputRequests"])) == ("input_required", ["elicitation-1"])
            await request(client.session, "tasks/cancel", taskId=created.task_id)

    anyio.run(main)


def test_a_task_whose_tool_the_agent_no_longer_sees_fails_as_a_tool_that_does_not_exist() -> None:
    GATES["gone"] = asyncio.Event()
    s = serving()

    async def main() -> None:
        async with Client(build_server(s, "a"), cache=None, extensions=[Tasks()]) as client:
            created = await client.session.call_tool("jobs__hold", {"label": "gone"}, allow_claimed=True)
            assert isinstance(created, Created)
            s.host = make_host(CONFIG.replace('tools = { allow = ["*"] }\nask',
                                              'tools = { allow = ["jobs__greet"] }\nask'),
                               {"jobs": JOBS})
            got = await request(client.session, "tasks/get", taskId=created.task_id)
            assert (got["status"], got["error"], got["statusMessage"]) == (
                "failed", {"code": -32602, "message": "Unknown tool: jobs__hold"},
                "its tool is no longer served to this agent")

    anyio.run(main)


def test_an_agent_at_its_task_bound_runs_calls_plainly_and_refuses_the_ones_that_need_a_task() -> None:
    GATES["bound"] = asyncio.Event()
    s = ServingState(make_host("[host]\nmax_tasks = 1\n" + CONFIG, {"jobs": JOBS}))

    async def main() -> None:
        async with Client(build_server(s, "a"), cache=None, extensions=[Tasks()]) as client:
            created = await client.session.call_tool("jobs__hold", {"label": "bound"}, allow_claimed=True)
            assert isinstance(created, Created)
            GATES["bound"].set()
            plain = await client.session.call_tool("jobs__hold", {"label": "bound"}, allow_claimed=True)
            assert isinstance(plain, types.CallToolResult) and plain.content[0].text == "held bound"  # type: ignore[union-attr]
            refused = await client.session.call_tool("jobs__only", {"x": 1}, allow_claimed=True)
            assert isinstance(refused, types.CallToolResult) and refused.is_error
            assert refused.content[0].text == (  # type: ignore[union-attr]
                "Tool jobs__only runs only as an MCP task, and agent 'a' has 1 tasks kept, as many as [host] "
                "max_tasks allows: call it again once one has been forgotten (3600 s after its creation).")

    anyio.run(main)


def test_task_support_is_declared_checked_and_curated() -> None:
    assert (hold.__toolcrib_tool__.task, greet.__toolcrib_tool__.task) == ("optional", "forbidden")  # type: ignore[attr-defined]
    with pytest.raises(ToolDeclarationError) as info:
        toolcrib.tool(task="sometimes")(lambda: None.__class__)  # type: ignore[arg-type]
    with pytest.raises(ToolDeclarationError) as info:
        @toolcrib.tool(task="sometimes")  # type: ignore[arg-type]
        def bad() -> str:
            """Bad."""
            return ""
    assert str(info.value) == ("tool 'bad': task is one of 'forbidden', 'optional', 'required' (whether it runs as "
                               "an MCP task: never, when the client can, or only so), not 'sometimes'")
    host = make_host(CONFIG + '[tools.jobs__greet]\ntask = "required"\n', {"jobs": JOBS})
    assert host.view("a").lookup("jobs__greet").tool.task == "required"  # type: ignore[union-attr]


def test_a_task_holds_its_in_flight_place_until_it_ends_and_a_limit_ends_a_task_with_its_result() -> None:
    GATES["place"] = asyncio.Event()
    s = ServingState(make_host(CONFIG + "[agents.a.limits.tools.\"jobs__hold\"]\nin_flight = 1\n", {"jobs": JOBS}))

    async def main() -> None:
        async with Client(build_server(s, "a"), cache=None, extensions=[Tasks()]) as client:
            first = await client.session.call_tool("jobs__hold", {"label": "place"}, allow_claimed=True)
            assert isinstance(first, Created)
            while "place" not in RAN:
                await anyio.sleep(0.01)
            plain = await Client(build_server(s, "a"), cache=None).__aenter__()
            try:
                limited = await plain.call_tool("jobs__hold", {"label": "place"})
            finally:
                await plain.__aexit__(None, None, None)
            assert limited.is_error and limited.content[0].text == (  # type: ignore[union-attr]
                "Rate limited: agent 'a' may make at most 1 calls of jobs__hold at once; try again when one of them "
                "has finished.")
            second = await client.session.call_tool("jobs__hold", {"label": "place"}, allow_claimed=True)
            assert isinstance(second, Created)  # a task, whose call the limit refuses
            got = await request(client.session, "tasks/get", taskId=second.task_id)
            while got["status"] == "working":
                await anyio.sleep(0.01)
                got = await request(client.session, "tasks/get", taskId=second.task_id)
            assert got["status"] == "completed" and got["result"]["isError"] is True
            assert got["result"]["content"][0]["text"] == limited.content[0].text  # type: ignore[union-attr]
            GATES["place"].set()

    anyio.run(main)


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


def test_a_task_is_kept_for_its_ttl_then_stopped_and_forgotten_and_is_found_only_by_its_principal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import toolcrib.mcp.tasks as tasks_module

    clock = _Clock()
    monkeypatch.setattr(tasks_module, "time", clock)

    async def main() -> None:
        store = tasks_module.Tasks()
        stop = asyncio.Event()

        async def work(task: tasks_module.Task) -> dict[str, Any]:
            await stop.wait()
            return {"content": [], "isError": False}

        task = await store.start("a", "alice", "jobs__hold", 60.0, 100, work)
        assert task is not None
        await asyncio.sleep(0)
        assert await store.find("a", "alice", task.id) is task and store.count("a") == 1
        for agent, principal in (("a", "bob"), ("a", None), ("b", "alice")):
            with pytest.raises(MCPError) as info:
                await store.find(agent, principal, task.id)
            assert (info.value.error.code, info.value.error.message) == (types.INVALID_PARAMS, NOT_FOUND)
        clock.now += 59.9
        assert (await store.find("a", "alice", task.id)).status == "working"
        clock.now += 0.1
        with pytest.raises(MCPError):
            await store.find("a", "alice", task.id)
        await asyncio.sleep(0)
        assert (task.status, task.message, store.count("a")) == ("cancelled", "stopped: its time to live ran out", 0)
        assert task.runner is not None and task.runner.done()
        # a task kept for less time than an older one is forgotten when asked for, and counted no more
        older = await store.start("a", None, "jobs__hold", 60.0, 100, work)
        younger = await store.start("a", None, "jobs__hold", 10.0, 100, work)
        assert older is not None and younger is not None
        assert store.count("a") == 2
        clock.now += 10
        assert store.count("a") == 2  # the oldest has time left: the sweep stops there
        with pytest.raises(MCPError):
            await store.find("a", None, younger.id)
        assert store.count("a") == 1 and await store.find("a", None, older.id) is older
        stop.set()

    asyncio.run(main())


def test_the_writing_packs_example_runs_as_a_task() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "writing-packs.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "task=\"optional\"" in b)
    scope: dict[str, Any] = {"toolcrib": toolcrib}
    exec(block, scope)
    s = ServingState(make_host(CONFIG.replace('["jobs"]', '["docs"]'), {"docs": Pack(scope["build"])}))
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        async with Client(build_server(s, "b"), cache=None, extensions=[Tasks(seen=seen)]) as client:
            result = await client.call_tool("docs__build", {"target": "site"})
            assert result.content[0].text == "built site"  # type: ignore[union-attr]

    anyio.run(main)
    assert seen[-1]["status"] == "completed" and seen[-1]["statusMessage"] == "building site"


def test_the_first_party_packs_long_tools_may_run_as_tasks() -> None:
    shell = pytest.importorskip("toolcrib_shell")
    web = pytest.importorskip("toolcrib_web")
    assert (shell.exec.__toolcrib_tool__.task, web.download_file.__toolcrib_tool__.task) == ("optional", "optional")
    assert (shell.sleep.__toolcrib_tool__.task, web.fetch.__toolcrib_tool__.task) == ("forbidden", "forbidden")


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("--stateless",)])
def test_over_http_a_task_outlives_its_request_and_asks_through_later_ones(tmp_path: Path,
                                                                            flags: tuple[str, ...]) -> None:
    """`toolcrib serve --http` (and --stateless): the call that made the task has been answered; the task asks its
    question in a tasks/get, takes the answer from a tasks/update, and its result is there at the next tasks/get,
    each a request of its own; a new connection of the same agent and token finds the task by its id."""
    config = tmp_path / "toolcrib.toml"
    config.write_text('[agents.a]\ntoken_env = "TOK_READER"\n' + CONFIG.split("[agents.b.permissions]")[0])
    proc, base, _ = start_http(config, *flags, env={"TOOLCRIB_PLUGINS": "jobs=packs:JOBS"}, said=None)
    asked: list[str] = []

    async def answer(key: str, request: dict[str, Any]) -> dict[str, Any]:
        asked.append(key)
        return {"action": "accept", "content": {"name": "Ada", "town": "Paris"}}

    async def main() -> None:
        http, client = await http_client(f"{base}/agents/a/mcp", TOKENS["TOK_READER"], extensions=[Tasks(answer)],
                                         elicitation_callback=lambda c, p: _accept("", {}))
        async with http, client:
            result = await client.call_tool("jobs__ask", {})
            assert result.content[0].text == "Ada of Paris (accept)"  # type: ignore[union-attr]
        http, other = await http_client(f"{base}/agents/a/mcp", TOKENS["TOK_READER"], extensions=[Tasks()],
                                        elicitation_callback=lambda c, p: _accept("", {}))
        async with http, other:
            created = await other.session.call_tool("jobs__ask", {}, allow_claimed=True)
            assert isinstance(created, Created)
        http, later = await http_client(f"{base}/agents/a/mcp", TOKENS["TOK_READER"], extensions=[Tasks()])
        async with http, later:
            got = await request(later.session, "tasks/get", taskId=created.task_id)
            while got["status"] == "working":
                await anyio.sleep(0.01)
                got = await request(later.session, "tasks/get", taskId=created.task_id)
            assert (got["status"], list(got["inputRequests"])) == ("input_required", ["elicitation-1"])
            await request(later.session, "tasks/cancel", taskId=created.task_id)

    try:
        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert asked == ["elicitation-1", "elicitation-2"]


def test_a_call_held_for_an_operator_is_a_task_that_says_so_until_the_operator_answers() -> None:
    from toolcrib.approvals import Desk

    s = ServingState(make_host('[operator]\ntoken_env = "TOK_OP"\n' + CONFIG.replace(
        '[agents.a.permissions]', '[agents.a]\napprovals = "operator"\n[agents.a.permissions]'), {"jobs": JOBS}))
    desk = Desk()
    s.open_desk(desk)

    async def main() -> None:
        async with Client(build_server(s, "a"), cache=None, extensions=[Tasks()]) as client:
            created = await client.session.call_tool("jobs__write", {"text": "x"}, allow_claimed=True)
            assert isinstance(created, Created)
            while not await desk.pending():
                await anyio.sleep(0.01)
            got = await request(client.session, "tasks/get", taskId=created.task_id)
            assert (got["status"], got["statusMessage"]) == (
                "working", "waiting for an operator's approval (ask rule 'jobs__write')")
            pending = (await desk.pending())[0]
            assert await desk.answer(pending.id, True, pending.digest, "the operator") == "approved"
            while got["status"] == "working":
                await anyio.sleep(0.01)
                got = await request(client.session, "tasks/get", taskId=created.task_id)
            assert (got["status"], got["result"]["content"][0]["text"]) == ("completed", "wrote x")
            assert "statusMessage" not in got

    anyio.run(main)


# -- on the fleet ([cluster]: two serving states sharing one real Redis, as two replicas do) -------------------------


@contextlib.asynccontextmanager
async def _fleet(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch,
                 extra: str = "", lease: float = 30.0) -> AsyncIterator[tuple[ServingState, ServingState]]:
    """Two replicas, each with its own config file, as two ``serve`` processes have."""
    from toolcrib.mcp.state import serving_state

    monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "jobs=packs:JOBS")
    text = f'[cluster]\nredis_url = "{url}"\nlease_seconds = {lease}\n{extra}{CONFIG}'
    files = [tmp_path / "one.toml", tmp_path / "two.toml"]
    for file in files:
        file.write_text(text)
    async with serving_state(files[0]) as one, serving_state(files[1]) as two:
        yield one, two


async def _until(client: Client, task_id: str, status: str) -> dict[str, Any]:
    with anyio.fail_after(HANG_GUARD):
        while True:
            got = await request(client.session, "tasks/get", taskId=task_id)
            if got["status"] == status:
                return got
            await anyio.sleep(0.01)


def test_on_the_fleet_any_replica_polls_answers_and_cancels_the_task_another_runs(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    GATES["far"] = asyncio.Event()
    GATES["stopped"] = asyncio.Event()  # never set: only the cancel made on the other replica ends it

    async def main() -> None:
        async with _fleet(tmp_path, redis_url, monkeypatch) as (one, two), \
                Client(build_server(one, "a"), cache=None, extensions=[Tasks()],
                       elicitation_callback=lambda c, p: _accept("", {})) as first, \
                Client(build_server(two, "a"), cache=None, extensions=[Tasks()],
                       elicitation_callback=lambda c, p: _accept("", {})) as second, \
                Client(build_server(two, "b"), cache=None, extensions=[Tasks()]) as other:
            made = await first.session.call_tool("jobs__hold", {"label": "far"}, allow_claimed=True)
            assert isinstance(made, Created)
            got = await request(second.session, "tasks/get", taskId=made.task_id)  # at once, on the other replica
            assert got["status"] == "working"
            with pytest.raises(MCPError) as info:  # another agent, on either replica: no such task
                await request(other.session, "tasks/get", taskId=made.task_id)
            assert info.value.error.message == NOT_FOUND
            GATES["far"].set()
            done = await _until(second, made.task_id, "completed")
            assert done["result"] == {"content": [{"type": "text", "text": "held far"}], "isError": False}

            asking = await first.session.call_tool("jobs__ask", {}, allow_claimed=True)
            assert isinstance(asking, Created)
            for field, value in (("name", "Ada"), ("town", "Oslo")):
                asked = await _until(second, asking.task_id, "input_required")
                (key,) = asked["inputRequests"]
                await request(second.session, "tasks/update", taskId=asking.task_id,
                              inputResponses={key: {"action": "accept", "content": {field: value}}})
                with anyio.fail_after(HANG_GUARD):  # the answer reached the replica that runs it
                    while (await request(second.session, "tasks/get", taskId=asking.task_id)).get(
                            "inputRequests", {}).keys() == {key}:
                        await anyio.sleep(0.01)
            answered = await _until(second, asking.task_id, "completed")
            assert answered["result"]["content"][0]["text"] == "Ada of Oslo (accept)"

            stopping = await first.session.call_tool("jobs__hold", {"label": "stopped"}, allow_claimed=True)
            assert isinstance(stopping, Created)
            ack = await request(second.session, "tasks/cancel", taskId=stopping.task_id)
            assert ack["resultType"] == "complete"
            cancelled = await _until(second, stopping.task_id, "cancelled")
            assert cancelled["statusMessage"] == "cancelled by the client"
            local = await one.tasks.find("a", None, stopping.task_id)
            assert local.runner is not None and local.runner.done()  # the work itself stopped, over there

    anyio.run(main)


def test_on_the_fleet_a_task_whose_replica_died_fails_within_a_lease_and_the_bound_is_the_fleets(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    GATES["orphan"] = asyncio.Event()

    async def main() -> None:
        async with _fleet(tmp_path, redis_url, monkeypatch, "[host]\nmax_tasks = 1\n", lease=0.3) as (one, two), \
                Client(build_server(one, "a"), cache=None, extensions=[Tasks()]) as first, \
                Client(build_server(two, "a"), cache=None, extensions=[Tasks()]) as second:
            made = await first.session.call_tool("jobs__hold", {"label": "orphan"}, allow_claimed=True)
            assert isinstance(made, Created)
            plain = await second.session.call_tool("jobs__greet", {"name": "x"}, allow_claimed=True)
            assert isinstance(plain, types.CallToolResult)
            over = await second.session.call_tool("jobs__only", {"x": 1}, allow_claimed=True)  # the fleet's bound
            assert isinstance(over, types.CallToolResult) and over.content[0].text.startswith(  # type: ignore[union-attr]
                "Tool jobs__only runs only as an MCP task, and agent 'a' has 1 tasks kept")
            renewing = one.tasks._renewing  # type: ignore[attr-defined]
            assert renewing is not None
            renewing.cancel()  # replica one stops renewing its leases, as if killed
            monkeypatch.setattr(one.tasks, "_renewing", asyncio.get_running_loop().create_future())
            failed = await _until(second, made.task_id, "failed")
            assert (failed["statusMessage"], failed["error"]) == (
                "the replica that ran it stopped before it ended",
                {"code": -32603, "message": "Internal error: the replica that ran it stopped before it ended"})
            GATES["orphan"].set()

    anyio.run(main)


def test_on_the_fleet_while_redis_does_not_answer_a_call_runs_plainly_or_is_refused_and_no_task_is_lost_track_of(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import redis.asyncio

    GATES["down"] = asyncio.Event()
    GATES["down"].set()

    async def main() -> None:
        async with _fleet(tmp_path, redis_url, monkeypatch) as (one, _two), \
                Client(build_server(one, "a"), cache=None, extensions=[Tasks()]) as client:
            assert one.store is not None
            up, one.store.client = one.store.client, redis.asyncio.Redis.from_url(
                "redis://127.0.0.1:1", socket_connect_timeout=0.2)
            try:
                plain = await client.session.call_tool("jobs__hold", {"label": "down"}, allow_claimed=True)
                assert isinstance(plain, types.CallToolResult) and plain.content[0].text == "held down"  # type: ignore[union-attr]
                refused = await client.session.call_tool("jobs__only", {"x": 1}, allow_claimed=True)
                assert isinstance(refused, types.CallToolResult) and refused.content[0].text == (  # type: ignore[union-attr]
                    "Tool jobs__only runs only as an MCP task, and none can be made now: the shared store where "
                    "tasks are kept is unreachable; try again shortly.")
                with pytest.raises(MCPError) as info:
                    await request(client.session, "tasks/get", taskId="A" * 32)
                assert (info.value.error.code, info.value.error.message) == (
                    -32603, "the shared store where tasks are kept is unreachable; try again shortly")
            finally:
                await one.store.client.aclose()
                one.store.client = up

    anyio.run(main)


def test_on_the_fleet_a_replica_that_stops_fails_its_running_tasks_for_the_others_to_say(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.mcp.state import serving_state

    GATES["stopping"] = asyncio.Event()  # never set

    async def main() -> None:
        async with _fleet(tmp_path, redis_url, monkeypatch) as (_one, two), \
                Client(build_server(two, "a"), cache=None, extensions=[Tasks()]) as second:
            async with serving_state(tmp_path / "one.toml") as three, \
                    Client(build_server(three, "a"), cache=None, extensions=[Tasks()]) as third:
                made = await third.session.call_tool("jobs__hold", {"label": "stopping"}, allow_claimed=True)
                assert isinstance(made, Created)
            failed = await _until(second, made.task_id, "failed")
            assert (failed["statusMessage"], failed["error"]["message"]) == (
                "the replica that ran it was stopped before it ended",
                "Internal error: the replica that ran it was stopped before it ended")

    anyio.run(main)


# -- an upstream server's tasks (another toolcrib serving the jobs pack, over stdio, speaking 2026-07-28) ----------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_upstream_servers_tasks_are_polled_through_and_their_questions_reach_the_agents_client(
        tmp_path: Path, mode: str) -> None:
    import json
    import sys

    from toolcrib.host import Host
    from toolcrib.supply import supply

    upstream = tmp_path / "up.toml"
    upstream.write_text(CONFIG.split("[agents.b.permissions]")[0])
    text = (f'[mcps.up]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "toolcrib.cli", "serve", "--agent", '
            f'"a", "--config", {json.dumps(str(upstream))}]\nenv = {{ TOOLCRIB_PLUGINS = "jobs=packs:JOBS", '
            f'TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD = "1", PYTHONPATH = {json.dumps(str(Path(__file__).parent))} }}\n'
            'forward = ["elicitation", "url_elicitation"]\n'
            '[agents.a.permissions]\nmcps = { allow = ["up"] }\ntools = { allow = ["*"] }\n')
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        if params.mode == "url":  # a page of the upstream's task (its forward has url_elicitation)
            asked.append(f"{params.url} {params.elicitation_id}")
            return types.ElicitResult(action="accept")
        field = next(iter(params.requested_schema["properties"]))
        return types.ElicitResult(action="accept", content={field: "Ada" if field == "name" else "London"})

    async def main() -> None:
        from conftest import config_from

        async with supply() as supplied:
            loaded = config_from(text, tmp_path)
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, plugins={}, env={})
            try:
                assert host.catalog.record("up").error is None
                async with Client(build_server(ServingState(host), "a"), mode=mode, cache=None,
                                  elicitation_callback=answer) as client:
                    only = await client.call_tool("up__jobs_only", {"x": 2})  # the upstream answers with a task
                    assert (only.is_error, only.content[0].text) == (False, "only 2")  # type: ignore[union-attr]
                    both = await client.call_tool("up__jobs_ask", {})
                    assert both.content[0].text == "Ada of London (accept)"  # type: ignore[union-attr]
                    page = await client.call_tool("up__jobs_sign_in", {})
                    assert page.content[0].text == "accept"  # type: ignore[union-attr]
            finally:
                host.close()

    anyio.run(main)
    assert asked == ["[upstream server 'up'] Your name?", "[upstream server 'up'] Your town?",
                     "[upstream server 'up'] Sign in.", "https://example.com/auth up:s-1"]


@contextlib.asynccontextmanager
async def _redis_replicas(url: str, prefix: str,
                          lease: float = 30.0) -> AsyncIterator[tuple[Any, Any, Any]]:
    """Two replicas' task stores on one real Redis (each with its own connection), and a plain client of it."""
    import redis.asyncio
    import redis.exceptions
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    from toolcrib.cluster import Fanout, Store
    from toolcrib.config import ClusterConfig
    from toolcrib.mcp.fleet import RedisTasks

    stores = [Store(ClusterConfig(redis_url=url, key_prefix=prefix, lease_seconds=lease)) for _ in range(2)]
    for store in stores:
        await store.open()
    one, two = (RedisTasks(store, Fanout(store)) for store in stores)
    # the test's own look at Redis: a connection the server drops (a loaded machine) is made again, never waited on
    raw = redis.asyncio.Redis.from_url(url, socket_timeout=HANG_GUARD / 6, retry=Retry(ExponentialBackoff(), 3),
                                       retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError])
    try:
        yield one, two, raw
    finally:
        for tasks in (one, two):
            await tasks.close()
        for store in stores:
            await store.close()
        await raw.aclose()


async def _eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until ``check()`` holds (what another task of the loop, or Redis, does meanwhile), with a hang guard."""
    with anyio.fail_after(HANG_GUARD):
        while not await check():
            await asyncio.sleep(0.01)


async def _status_on_redis(raw: Any, key: str, status: str) -> bool:
    import json

    record = await raw.get(key)
    return record is not None and json.loads(record)["status"] == status


async def _true(value: bool) -> bool:
    return value


def test_on_redis_a_task_is_the_documented_keys_with_their_lifetimes_and_its_principal_s_on_every_replica(
        redis_url: str) -> None:
    """What deploy.md says is on Redis, exactly: the record (no arguments), the lease held by the running replica,
    the agent's set by expiry; each kept for its time; another principal finds nothing on any replica."""
    import json

    async def main() -> None:
        async with _redis_replicas(redis_url, "t:", 9.0) as (one, two, raw):
            stop = asyncio.Event()

            async def work(task: Any) -> dict[str, Any]:
                await task.ask("elicitation/create", {"mode": "form", "message": "Go?", "requestedSchema": {}})
                await stop.wait()
                return {"content": [{"type": "text", "text": "done"}], "isError": False}

            try:
                task = await one.start("a", "alice", "jobs__hold", 60.0, 5, work)
                assert task is not None
                await _eventually(lambda: _status_on_redis(raw, f"t:task:{task.id}", "input_required"))
                keys = sorted(k.decode() for k in await raw.keys("t:*"))
                assert keys == [f"t:task:{task.id}", f"t:task:{task.id}:lease", "t:tasks:agent:a"]
                assert 50_000 < await raw.pttl(f"t:task:{task.id}") <= 60_000
                assert 3_000 < await raw.pttl(f"t:task:{task.id}:lease") <= 9_000
                assert (await raw.get(f"t:task:{task.id}:lease")).decode() == one.fanout.replica
                assert 50_000 < await raw.pttl("t:tasks:agent:a") <= 60_000
                score = await raw.zscore("t:tasks:agent:a", task.id)
                assert abs(score - (task.created + 60.0)) < 0.01
                record = json.loads(await raw.get(f"t:task:{task.id}"))
                assert record == {**task.record(), "asked": {"elicitation-1": {
                    "method": "elicitation/create", "params": {
                    "mode": "form", "message": "Go?", "requestedSchema": {}}}}, "status": "input_required"} \
                    | {"updated": record["updated"]}
                assert "arguments" not in json.dumps(record)
                for agent, principal in (("a", "bob"), ("a", None), ("b", "alice")):
                    with pytest.raises(MCPError) as info:
                        await two.find(agent, principal, task.id)
                    assert info.value.error.message == NOT_FOUND
                seen = await two.find("a", "alice", task.id)
                assert (seen.status, list(seen.asked), seen.runner) == ("input_required", ["elicitation-1"], None)
                # an answer given on the other replica waits beside the record until the running one takes it
                await two.answer(seen, {"elicitation-1": {"action": "accept", "content": {}}, "never-asked": {}})
                left = f"t:task:{task.id}:answers"
                assert 50_000 < await raw.pttl(left) <= 60_000  # (no replica listens here: it waits)
                assert {k.decode(): json.loads(v) for k, v in (await raw.hgetall(left)).items()} == {
                    "elicitation-1": {"action": "accept", "content": {}}}
                await one._take(task)  # (the announcement's work, done here at once)
                assert await raw.exists(left) == 0
                await _eventually(lambda: _status_on_redis(raw, f"t:task:{task.id}", "working"))
                await two.cancel(await two.find("a", "alice", task.id))
                assert 50_000 < await raw.pttl(f"t:task:{task.id}:cancel") <= 60_000
                await one._take(task)
                await _eventually(lambda: _status_on_redis(raw, f"t:task:{task.id}", "cancelled"))
                ended = await two.find("a", "alice", task.id)
                assert (ended.status, ended.message) == ("cancelled", "cancelled by the client")
                assert sorted(k.decode() for k in await raw.keys("t:*")) == [f"t:task:{task.id}", "t:tasks:agent:a"]
            finally:
                stop.set()

    asyncio.run(main())


# -- the task store, unit by unit ------------------------------------------------------------------------------


def _store_run(main: Callable[[Any], Awaitable[None]]) -> None:
    import toolcrib.mcp.tasks as tasks_module

    asyncio.run(main(tasks_module))


def test_a_task_s_times_are_utc_to_the_millisecond_and_its_record_reads_back_whole() -> None:
    from toolcrib.mcp.tasks import Task, speaks_tasks

    task = Task("i" * 32, "a", "alice", "jobs__hold", 60.0, created=1_800_000_000.25, updated=1_800_000_001.5)
    wire = task.wire()
    assert (wire["createdAt"], wire["lastUpdatedAt"]) == ("2027-01-15T08:00:00.250Z", "2027-01-15T08:00:01.500Z")
    assert Task("j", "a", None, "t", 1.0, created=5.0).updated == 5.0  # made now: updated when made
    back = Task.of_record(task.record())
    assert (back.principal, back.created, back.updated, back.ttl) == ("alice", 1_800_000_000.25, 1_800_000_001.5, 60.0)
    assert back.record() == task.record()
    assert (speaks_tasks(None), speaks_tasks(types.ClientCapabilities()),
            speaks_tasks(types.ClientCapabilities(extensions={EXTENSION: {}}))) == (False, False, True)


def test_a_question_answered_puts_the_task_back_to_working_and_answers_are_checked_per_question(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main(tasks: Any) -> None:
        store = tasks.Tasks()
        got: list[Any] = []

        async def work(task: Any) -> dict[str, Any]:
            got.append(await task.ask("sampling/createMessage", {"messages": [], "maxTokens": 5}))
            got.append(await task.ask("elicitation/create", {"mode": "form", "message": "?", "requestedSchema": {}}))
            return {"content": [], "isError": False}

        task = await store.start("a", None, "t", 60.0, 5, work)
        await asyncio.sleep(0)
        assert (task.status, list(task.asked)) == ("input_required", ["sampling-1"])
        turn = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m", "stopReason": "endTurn"}
        # an answer to a key never asked, before one that is: skipped, and the one after it still taken
        await store.answer(task, {"never": {"action": "accept"}, "sampling-1": turn})
        await asyncio.sleep(0)
        assert got == [{**turn, "content": {"type": "text", "text": "hi"}}]
        assert (task.status, list(task.asked)) == ("input_required", ["elicitation-2"])
        with pytest.raises(MCPError) as info:  # a model's turn is no answer to a form
            await store.answer(task, {"elicitation-2": turn})
        assert info.value.error.message.startswith("inputResponses.elicitation-2.action: ")
        await store.answer(task, {"elicitation-2": {"action": "decline"}})
        task.take({"elicitation-2": {"action": "accept"}})  # a second answer to an answered question: nothing
        await asyncio.sleep(0)
        assert got[1] == {"action": "decline"} and (task.status, task.asked) == ("completed", {})

    _store_run(main)


def test_how_a_task_s_work_ends_is_what_it_says(caplog: pytest.LogCaptureFixture) -> None:
    class Boom(Exception):
        pass

    async def main(tasks: Any) -> None:
        store = tasks.Tasks()

        async def refused(task: Any) -> dict[str, Any]:
            raise MCPError(code=-32602, message="Unknown tool: t")

        async def broken(task: Any) -> dict[str, Any]:
            raise Boom("deep inside")

        async def waits(task: Any) -> dict[str, Any]:
            await asyncio.Event().wait()
            return {}

        one = await store.start("a", None, "t", 60.0, 5, refused)
        two = await store.start("a", None, "t", 60.0, 5, broken)
        three = await store.start("a", None, "t", 60.0, 5, waits)
        await asyncio.sleep(0.01)
        assert (one.status, one.message, one.error) == ("failed", "Unknown tool: t",
                                                        {"code": -32602, "message": "Unknown tool: t"})
        assert (two.status, two.message, two.error) == (
            "failed", "the call failed inside toolcrib; the server's log says why",
            {"code": -32603, "message": "Internal error: Boom"})
        await store.fail(three, -32602, "Unknown tool: t", "its tool is no longer served to this agent")
        assert three.runner is None and (three.status, three.error["code"]) == ("failed", -32602)
        await asyncio.sleep(0.01)
        assert three.status == "failed"  # its work, stopped, does not make it cancelled
        await store.cancel(one)  # an ended task: nothing to stop
        assert one.status == "failed"

    with caplog.at_level("ERROR", logger="toolcrib.serve"):
        _store_run(main)
    assert [(r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("agent 'a', tool t: its task failed (Boom: deep inside)", None)]


def test_on_redis_leases_are_renewed_writes_lost_to_an_outage_are_made_again_and_a_remote_failure_holds(
        redis_url: str) -> None:
    import json

    import redis.asyncio

    async def main() -> None:
        async with _redis_replicas(redis_url, "r:", 3.0) as (one, two, raw):
            gates = [asyncio.Event(), asyncio.Event()]

            def waiting(gate: asyncio.Event) -> Any:
                async def work(task: Any) -> dict[str, Any]:
                    await gate.wait()
                    return {"content": [{"type": "text", "text": "done"}], "isError": False}
                return work

            try:
                task = await one.start("a", None, "t", 60.0, 5, waiting(gates[0]))
                assert task is not None
                lease = f"r:task:{task.id}:lease"
                low = [0]

                async def aged() -> bool:  # its time left has gone down (a lease of 3 s renewed every second)
                    low[0] = await raw.pttl(lease)
                    return low[0] < 2_700

                async def renewed() -> bool:  # and goes up again: renewed
                    return bool(await raw.pttl(lease) > low[0] + 100)

                await _eventually(aged)
                await _eventually(renewed)
                assert (await two.find("a", None, task.id)).status == "working"
                up, one.store.client = one.store.client, redis.asyncio.Redis.from_url(
                    "redis://127.0.0.1:1", socket_connect_timeout=0.1)
                gates[0].set()
                await _eventually(lambda: _true(task.status == "completed"))  # while Redis is unreachable: unwritten
                assert json.loads(await raw.get(f"r:task:{task.id}"))["status"] == "working"
                await one.store.client.aclose()
                one.store.client = up
                await _eventually(lambda: _status_on_redis(raw, f"r:task:{task.id}", "completed"))  # the next renewal
                assert await raw.exists(lease) == 0
                await _eventually(lambda: _true(one._renewing is None))  # nothing runs: the renewal stops

                other = await one.start("a", None, "t", 60.0, 5, waiting(gates[1]))
                assert other is not None
                far = await two.find("a", None, other.id)
                await two.fail(far, -32602, "Unknown tool: t", "its tool is no longer served to this agent")
                assert far.status == "failed" and json.loads(await raw.get(f"r:task:{other.id}"))["status"] == "failed"
                await one._take(other)
                await _eventually(lambda: _true(other.status == "failed"))
                assert (other.status, other.error, other.message) == (
                    "failed", {"code": -32602, "message": "Unknown tool: t"},
                    "its tool is no longer served to this agent")
                assert json.loads(await raw.get(f"r:task:{other.id}"))["status"] == "failed"
            finally:
                for gate in gates:
                    gate.set()

    asyncio.run(main())


def test_on_redis_ids_principals_failures_and_an_outage_answer_as_they_should_on_both_replicas(
        redis_url: str) -> None:
    import json

    import redis.asyncio

    async def main() -> None:
        async with _redis_replicas(redis_url, "f:") as (one, two, raw):
            gate = asyncio.Event()

            async def work(task: Any) -> dict[str, Any]:
                await task.ask("elicitation/create", {"mode": "form", "message": "?", "requestedSchema": {}})
                await gate.wait()
                return {"content": [], "isError": False}

            try:
                here = await one.start("a", "alice", "t", 60.0, 5, work)
                there = await one.start("a", "alice", "t", 60.0, 5, work)
                assert here is not None and there is not None
                for asking in (here, there):
                    await _eventually(lambda t=asking: _status_on_redis(raw, f"f:task:{t.id}", "input_required"))
                for store, principal, task_id in ((one, "bob", here.id), (two, "alice", "x" * 31 + ":"),
                                                  (two, "alice", "../" * 11)):
                    with pytest.raises(MCPError) as info:  # another principal where it runs; ids no task has
                        await store.find("a", principal, task_id)
                    assert (info.value.error.code, info.value.error.message) == (-32602, NOT_FOUND)
                await one.fail(here, -32602, "Unknown tool: t", "gone")  # where it runs: failed, its work stopped
                await _eventually(lambda: _status_on_redis(raw, f"f:task:{here.id}", "failed"))
                assert (here.status, here.error, here.asked, here.message) == (
                    "failed", {"code": -32602, "message": "Unknown tool: t"}, {}, "gone")
                far = await two.find("a", "alice", there.id)
                await two.fail(far, -32602, "Unknown tool: t", "gone")
                assert (far.error, far.asked, far.message) == (
                    {"code": -32602, "message": "Unknown tool: t"}, {}, "gone")
                record = json.loads(await raw.get(f"f:task:{there.id}"))
                assert (record["status"], record["error"], record["asked"]) == (
                    "failed", {"code": -32602, "message": "Unknown tool: t"}, {})
                up, two.store.client = two.store.client, redis.asyncio.Redis.from_url(
                    "redis://127.0.0.1:1", socket_connect_timeout=0.1)
                try:
                    answer = {"elicitation-1": {"action": "accept"}}
                    for action in (lambda: two.cancel(Task_(there)), lambda: two.answer(Task_(there), answer),
                                   lambda: two.find("a", "alice", there.id)):
                        with pytest.raises(MCPError) as info:
                            await action()
                        assert (info.value.error.code, info.value.error.message) == (
                            -32603, "the shared store where tasks are kept is unreachable; try again shortly")
                finally:
                    await two.store.client.aclose()
                    two.store.client = up
            finally:
                gate.set()

    def Task_(task: Any) -> Any:  # the record of a task still asking, as another replica reads it
            from toolcrib.mcp.tasks import Task

            return Task.of_record({**task.record(), "status": "input_required",
                                   "asked": {"elicitation-1": {"method": "elicitation/create", "params": {}}}})

    asyncio.run(main())


@toolcrib.tool(task="optional")
async def survey(ctx: toolcrib.Context) -> str:
    """Ask two things at once."""
    got = await ctx.ask({"who": toolcrib.Form("Your name?", {"type": "object", "properties": {
        "name": {"type": "string"}}}), "where": toolcrib.Roots()})
    return f"{got['who'].content['name']} in {got['where'][0]['uri']}"


def test_a_task_asks_several_questions_at_once_and_goes_on_when_all_are_answered() -> None:
    """``Context.ask`` in a task: every question open at once in one tasks/get (under the task's own keys, as all
    its questions are), a roots/list among them; the call goes on with the answers."""
    seen: list[dict[str, Any]] = []

    async def answer(key: str, request: dict[str, Any]) -> dict[str, Any]:
        if request["method"] == "roots/list":
            return {"roots": [{"uri": "file:///work"}]}
        return {"action": "accept", "content": {"name": "Ada"}}

    async def main() -> None:
        async with Client(build_server(ServingState(make_host(CONFIG, {"jobs": Pack(survey)})), "a"), cache=None,
                          extensions=[Tasks(answer, seen)], elicitation_callback=lambda c, p: _accept("", {}),
                          list_roots_callback=lambda c: _accept("", {})) as client:  # (declares both)
            result = await client.call_tool("jobs__survey", {})
            assert result.content[0].text == "Ada in file:///work"  # type: ignore[union-attr]

    anyio.run(main)
    asking = next(task for task in seen if task["status"] == "input_required")
    assert asking["inputRequests"] == {
        "elicitation-1": {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}},
        "roots-2": {"method": "roots/list", "params": {}}}
