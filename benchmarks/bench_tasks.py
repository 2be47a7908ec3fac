"""What running a call as an MCP task costs over the same call (in memory, 2026-07-28): the ``tools/call`` that
answers with the task and the ``tasks/get`` polls until it is found completed (polled without pause: the least a
client can spend), against a plain ``tools/call`` of the same tool on the same server, by a client that does not
declare the tasks extension. Medians over rounds of per-round medians, the two taking turns.

    cd benchmarks && python bench_tasks.py [--calls 1000] [--rounds 5]
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


async def overhead(calls: int, rounds: int) -> dict[str, float]:
    """{"task": seconds a call as a task takes, "plain": seconds the plain call takes}."""
    server = build_server(ServingState(peers.toolcrib_host(10, config=TASK)), peers.AGENT)
    async with contextlib.AsyncExitStack() as stack:
        clients = {"task": await stack.enter_async_context(Client(server, cache=None, extensions=[Polling()])),
                   "plain": await stack.enter_async_context(Client(server, cache=None))}
        ops = {name: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for name, c in clients.items()}
        names = list(ops)

        def check(name: str, result: Any) -> None:
            assert result.structured_content == {"result": 5}, (name, result)

        per_round: dict[str, list[float]] = {name: [] for name in names}
        for turn in range(rounds):
            order = names[turn % 2:] + names[:turn % 2]
            for name, value in (await medians_in_turns(ops, order, calls, check)).items():
                per_round[name].append(value)
    return {name: statistics.median(values) for name, values in per_round.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    found = anyio.run(overhead, args.calls, args.rounds)
    print(f"as a task: {found['task'] * 1e6:.0f} us; plain: {found['plain'] * 1e6:.0f} us; "
          f"{found['task'] / found['plain']:.2f}x")
