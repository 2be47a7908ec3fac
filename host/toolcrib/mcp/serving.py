"""``toolcrib serve``'s run, apart from its command line: one agent over stdio, or every agent over HTTP, until the
client closes stdin or the operator stops it (SIGINT, SIGTERM); nothing the server started outlives it."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio

if TYPE_CHECKING:
    from toolcrib.mcp.http import HttpOptions
    from toolcrib.observe import Metrics

log = logging.getLogger("toolcrib.serve")


def serve(path: Path | None, agent: str | None, options: HttpOptions | None, watch: Path | None,
          metrics: Metrics | None, wire: tuple[BinaryIO, BinaryIO] | None) -> None:
    """Serve the config at ``path``: ``agent`` on ``wire`` (stdin and stdout as ``claim_stdio`` took them, before
    any pack was imported), or, with ``options``, every agent over HTTP. ``watch``: the config file to reload when it
    changes; ``metrics``: kept for ``/metrics`` (HTTP)."""
    from toolcrib.supply.mcp.isolated import ISOLATED_ENV

    # The lists each host is built with: every agent's over HTTP, the one agent's on stdio, none in an isolated pack's
    # process (its checks are taken off first, and run for the host's agents: toolcrib.supply.mcp.pack_checks).
    serves = None if agent is None else [] if os.environ.get(ISOLATED_ENV) else [agent]

    async def run() -> None:
        from toolcrib.mcp.state import serving_state

        async with serving_state(path, metrics, serves) as state, anyio.create_task_group() as tg:
            if agent is not None:
                from toolcrib.mcp.stdio import serve_stdio

                tg.start_soon(_stop_on_signal, tg.cancel_scope)
                await serve_stdio(state, agent, watch, wire, announce=True)
            else:
                from toolcrib.mcp.http import serve_http

                assert options is not None
                await serve_http(state, options, watch)
            tg.cancel_scope.cancel()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        anyio.run(run)
    except BaseException as exc:
        if _stopped(exc) is None:
            raise
        log.warning("stopped on %s", _stopped(exc))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        from toolcrib import sandbox

        sandbox.kill_tree(os.getpid(), group=False)  # nothing the server started outlives it


class _Stop(BaseException):
    """Raised by the signal handler of ``serve``: the operator stops the server (SIGINT or SIGTERM)."""


def _stop(signum: int, frame: Any) -> None:
    # Over HTTP uvicorn answers the signal first (it stops accepting and waits for open requests and streams, at
    # most [host] shutdown_timeout), then hands it on to this handler, which ends the serving process.
    raise _Stop(signal.Signals(signum).name)


def _stopped(exc: BaseException) -> str | None:
    """The signal's name when ``exc`` is (or wraps only) a ``_Stop``."""
    if isinstance(exc, _Stop):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        names = [_stopped(e) for e in exc.exceptions]
        if names and all(names):
            return names[0]
    return None


async def _stop_on_signal(scope: Any) -> None:
    """Stop serving stdio on SIGINT (Ctrl-C) or SIGTERM: the server's scope is cancelled and ``serve`` returns,
    ending what it started."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.warning("stopping on %s", signal.Signals(signum).name)
            scope.cancel()
            return


__all__ = ["serve"]
