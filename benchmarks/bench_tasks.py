"""What running a call as an MCP task costs over the same call (in memory, 2026-07-28): the ``tools/call`` that
answers with the task and the ``tasks/get`` polls until it is found completed (polled without pause: the least a
client can spend), against a plain ``tools/call`` of the same tool on the same server, by a client that does not
declare the tasks extension. Medians over rounds of per-round medians, the two taking turns.

    cd benchmarks && python bench_tasks.py [--calls 1000] [--rounds 5] [--redis redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from typing import Any, Literal

import anyio
import mcp_types as types
import peers
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict, TypeAdapter
from turns import medians_in_turns

from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState
from toolcrib.mcp.tasks import EXTENSION

# the bench pack's add, curated to run as a task, and as many tasks kept as the rounds make
TASK = '[host]\nmax_tasks = 1000000\n[tools."math__add"]\ntask = "optional"\n'


class _Created(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str


class _Get(types.Request[dict[str, Any], str]):
    method: str = "tasks/get"
    params: dict[str, Any]


_ANY = TypeAdapter(dict[str, Any])


class Polling(ClientExtension):
    """The tasks extension as a client speaks it at its simplest: poll each task until it ends, with no pause."""

    identifier = EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=_Created, resolve=self.resolve)]

    async def resolve(self, created: _Created, ctx: ClaimContext) -> types.CallToolResult:
        while True:
            task = await ctx.session.send_request(_Get(params={"taskId": created.task_id}), _ANY)
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"], by_name=False)
            if task["status"] != "working":
                raise RuntimeError(f"the task ended {task['status']}")
            await anyio.sleep(0)


async def overhead(calls: int, rounds: int, redis_url: str | None = None) -> dict[str, float]:
    """{"task": seconds a call as a task takes, "plain": seconds the plain call takes}; with ``redis_url``, also
    "task on Redis": the call as a task whose record is on that Redis (``[cluster]``'s ``RedisTasks``)."""
    from toolcrib.cluster import Fanout, Store
    from toolcrib.config import ClusterConfig
    from toolcrib.mcp.fleet import RedisTasks

    state = ServingState(peers.toolcrib_host(10, config=TASK))
    server = build_server(state, peers.AGENT)
    async with contextlib.AsyncExitStack() as stack:
        clients = {"task": await stack.enter_async_context(Client(server, cache=None, extensions=[Polling()])),
                   "plain": await stack.enter_async_context(Client(server, cache=None))}
        if redis_url is not None:
            store = Store(ClusterConfig(redis_url=redis_url))
            await store.open()
            stack.push_async_callback(store.close)
            shared = ServingState(peers.toolcrib_host(10, config=TASK))
            shared.tasks = RedisTasks(store, Fanout(store))
            stack.push_async_callback(shared.tasks.close)
            clients["task on Redis"] = await stack.enter_async_context(
                Client(build_server(shared, peers.AGENT), cache=None, extensions=[Polling()]))
        ops = {name: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for name, c in clients.items()}
        names = list(ops)

        def check(name: str, result: Any) -> None:
            assert result.structured_content == {"result": 5}, (name, result)

        per_round: dict[str, list[float]] = {name: [] for name in names}
        for turn in range(rounds):
            order = names[turn % len(names):] + names[:turn % len(names)]
            for name, value in (await medians_in_turns(ops, order, calls, check)).items():
                per_round[name].append(value)
    return {name: statistics.median(values) for name, values in per_round.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis", help="also a task on this Redis (redis://...)")
    args = parser.parse_args()
    found = anyio.run(overhead, args.calls, args.rounds, args.redis)
    for name, seconds in found.items():
        print(f"{name}: {seconds * 1e6:.0f} us ({seconds / found['plain']:.2f}x the plain call)")
