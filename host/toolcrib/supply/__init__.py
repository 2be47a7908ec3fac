"""Where the sources a host serves come from: one assembler (``Supply``) that makes, opens, keeps across reloads
and closes every configured source, for every entrance alike (``toolcrib serve``, the CLI's commands,
``Host.from_config``, the test kit, the benchmarks).

Two families of kinds:

- sources that keep nothing open between calls (OpenAPI documents, ``toolcrib.supply.openapi``): made from the
  config with nothing read, then ``open``ed at once (reading a document, possibly fetching it), and closed once a
  later sync no longer offers them;
- sources that live on the assembler's event loop (upstream MCP servers, eager and lazy, confined servers and
  isolated packs, ``toolcrib.supply.mcp``): opening one starts its connection (a child process, an HTTP session)
  in the assembler's task group; the same source is given again across reloads while its config is unchanged
  (opened again, it lists what its server said changed), and closed, ending its connection, once a sync no longer
  gives it. Only an entrance that keeps a loop running for them has them (``serve``, the CLI's
  ``open_host``, the test kit); ``Host.from_config`` opens only the others (``opened``).

Packs, tool folders, the host's own tools and llm plugins are pluggy plugins (``toolcrib.plugins``), loaded by the
host itself. A failure of one source (whatever its ``open`` raises) is that source's, in its record; the others
are served.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from toolcrib.errors import contained
from toolcrib.sources import Source, Supplier

if TYPE_CHECKING:
    from toolcrib.config import LoadedConfig

log = logging.getLogger("toolcrib.supply")


class Supply:
    """The sources of one serving process, CLI command or host: ``sync`` gives those of a config, each kind's made
    by its supplier (``Kind.supplier``, for each kind in ``toolcrib.supply.kinds.KINDS``). ``tg`` is the task group
    live sources run in (none: ``sync`` makes only sources that keep nothing open)."""

    def __init__(self, tg: TaskGroup | None = None, env: Mapping[str, str] | None = None) -> None:
        self.env = env
        self._suppliers = _suppliers(tg, env)
        self._opened: list[Source] = []  # the last sync's sources

    @property
    def changed(self) -> Callable[[], Coroutine[Any, Any, Any]] | None:
        """Called when a live source says what it offers changed (the serving state reloads)."""
        return next((s.changed for s in self._suppliers if s.changed is not None), None)

    @changed.setter
    def changed(self, reload: Callable[[], Coroutine[Any, Any, Any]] | None) -> None:
        for supplier in self._suppliers:
            supplier.changed = reload

    async def sync(self, loaded: LoadedConfig, only: frozenset[str] | None = None) -> list[Source]:
        """Every source ``loaded`` configures, open: new ones opened at once, live ones given again while their
        config is unchanged (opened again, they list what changed), and the last sync's that are not given again
        closed. With ``only``, the upstream servers not named in it are left out (a command that needs only
        some)."""
        made = [source for supplier in self._suppliers for source in supplier.sources(loaded, only)]
        await _open_all(made)
        done, self._opened = [s for s in self._opened if not any(s is m for m in made)], made
        await _close_all(done)
        return made

    async def aclose(self) -> None:
        done, self._opened = self._opened, []
        await _close_all(done)
        for supplier in self._suppliers:
            await supplier.aclose()


def _suppliers(tg: TaskGroup | None, env: Mapping[str, str] | None) -> list[Supplier]:
    from toolcrib.supply.kinds import KINDS

    return [made for kind in KINDS if kind.supplier is not None and (made := kind.supplier(tg, env)) is not None]


async def _open_all(sources: list[Source]) -> None:
    async with anyio.create_task_group() as tg:
        for source in sources:
            tg.start_soon(_open, source)


def opened(loaded: LoadedConfig, env: Mapping[str, str] | None = None) -> list[Source]:
    """The sources of ``loaded`` that keep nothing open (OpenAPI documents), opened now, for code that is not async
    (``Host.from_config``); a live source needs an entrance that keeps a loop for it (``Supply``)."""
    made = [source for supplier in _suppliers(None, env) for source in supplier.sources(loaded)]
    _blocking(_open_all, made)
    return made


def closed(sources: list[Source]) -> None:
    """Close what ``opened`` opened, for code that is not async."""
    _blocking(_close_all, sources)


def _blocking(step: Callable[[list[Source]], Coroutine[Any, Any, None]], sources: list[Source]) -> None:
    if sources:  # (no event loop started for nothing)
        from anyio.from_thread import start_blocking_portal

        with start_blocking_portal() as portal:
            portal.call(step, sources)


async def _open(source: Source) -> None:
    try:
        await source.open()
    except BaseException as exc:  # a source that breaks while opening is failed alone, whatever it raises
        if not contained(exc):
            raise
        log.warning("source %r could not be opened: %s: %s", source.name, type(exc).__name__, exc)
        source.offer().record.fail(f"cannot be opened: {type(exc).__name__}: {exc}")
        source.offer().entries.clear()


async def _close_all(sources: list[Source]) -> None:
    for source in sources:
        with anyio.CancelScope(shield=True):
            try:
                await source.close()
            except BaseException as exc:
                if not contained(exc):
                    raise
                log.warning("source %r could not be closed: %s: %s", source.name, type(exc).__name__, exc)


@asynccontextmanager
async def supply(env: Mapping[str, str] | None = None) -> AsyncIterator[Supply]:
    """A ``Supply`` for the block, with a task group its servers and isolated packs run in; every source it opened
    is closed when the block ends."""
    async with anyio.create_task_group() as tg:
        made = Supply(tg, env)
        try:
            yield made
        finally:
            await made.aclose()
            tg.cancel_scope.cancel()


__all__ = ["Supply", "closed", "opened", "supply"]
