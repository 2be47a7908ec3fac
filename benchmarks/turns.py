"""How the benchmarks time several sides of one comparison in one process: taking turns of ``TURN`` calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

TURN = 20  # calls a side makes in a row before the next side's turn


async def medians_in_turns(ops: dict[str, Callable[[], Awaitable[Any]]], order: list[str], iterations: int,
                           check: Callable[[str, Any], None] | None = None) -> dict[str, float]:
    """Each op's median over ``iterations`` calls, the ops (in ``order``) taking turns of ``TURN`` calls: what the
    machine does meanwhile (another process, a change of clock speed) falls on every op alike, where blocks of all
    of an op's calls would each meet it at a different time (two identical servers measured in such blocks differed
    by up to 10%; in turns of 20 calls, by 1-3%). A turn of several calls keeps each op's own code and data in the
    caches, as a server busy with its own calls has them (turns of one call made each side pay for the others'
    misses). ``check(name, what the op returned)``, if given, runs after each call, off the clock."""
    samples: dict[str, list[float]] = {name: [] for name in order}
    clock = time.perf_counter
    turn = [(name, ops[name], samples[name].append) for name in order]
    for done in range(0, iterations, TURN):
        for name, op, keep in turn:
            for _ in range(min(TURN, iterations - done)):
                start = clock()
                result = await op()
                keep(clock() - start)
                if check is not None:
                    check(name, result)
    return {name: statistics.median(values) for name, values in samples.items()}
