"""toolcrib pack ``llm``: the tools of installed llm plugins. See README.md."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import importlib
import inspect
import logging
import os
import types
from importlib import metadata
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

import toolcrib
from toolcrib.errors import contained

__all__ = ["Settings", "toolcrib_settings_model", "toolcrib_tools"]

log = logging.getLogger("toolcrib.pack.llm")
_ANY = create_model("llm_tool_arguments", __config__=ConfigDict(extra="allow"))


class Settings(BaseModel):
    """``[packs.llm]``."""

    model_config = ConfigDict(extra="forbid")

    plugins: list[str] | None = Field(None, description="only the tools of these llm plugins, by the names `llm "
                                      "plugins` prints (default: all)")
    toolboxes: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="llm toolboxes to serve, by class name, each with its constructor's "
                                          "arguments ({} when it needs none); a toolbox not named here is not served")


def registered() -> list[tuple[str, Any]]:
    """(llm plugin name, what it registered) for every ``register_tools`` implementation, each called on its own
    (rather than through ``llm.get_tools()``, which renames a duplicate name silently). A plugin's name is the one
    ``llm plugins`` prints: its distribution's (``llm-tools-simpleeval``), or the module of one of llm's own."""
    pm, names = _tool_plugins()
    found: list[tuple[str, Any]] = []
    for plugin in pm.get_plugins():
        plugin_name = names.get(id(plugin)) or pm.get_name(plugin) or "?"
        for impl in pm.hook.register_tools.get_hookimpls():
            if impl.plugin is not plugin:
                continue

            def register(tool: Any, name: str | None = None, plugin_name: str = plugin_name) -> None:
                found.append((plugin_name, (tool, name)))

            impl.function(register=register)
    return found


LLM_OWN_TOOLS = "llm.default_plugins.default_tools"  # llm's own plugin of tools (llm_version, llm_time)


@functools.cache
def _tool_plugins() -> tuple[Any, dict[int, str]]:
    """llm's plugins as ``llm.load_plugins`` finds them (every ``llm`` entry point, or only those of the
    distributions $LLM_LOAD_PLUGINS names, then llm's own tools), in a plugin manager of this pack's own, with each
    plugin's distribution name: once per process, as llm loads them. llm's own manager would also import its OpenAI
    models module, which registers models and no tool, and whose import of ``openai`` cost every toolcrib process
    that discovers this pack about 0.6 s; it is left to llm (a sub-agent's model loads it). A plugin that cannot be
    imported is left out, named in the log; the others are served."""
    import pluggy
    from llm import hookspecs

    pm = pluggy.PluginManager("llm")
    pm.add_hookspecs(hookspecs)
    names: dict[int, str] = {}
    chosen = os.environ.get("LLM_LOAD_PLUGINS")
    if chosen is None:
        distributions = list(metadata.distributions())
    else:
        distributions = []
        for wanted in filter(None, (name.strip() for name in chosen.split(","))):
            try:
                distributions.append(metadata.distribution(wanted))
            except metadata.PackageNotFoundError:
                log.warning("$LLM_LOAD_PLUGINS names %r, which is not installed", wanted)
    for distribution in distributions:
        for entry_point in distribution.entry_points:
            if entry_point.group != "llm" or pm.get_plugin(entry_point.name) is not None:
                continue  # (two distributions, one plugin name: the first, as pluggy's own loader keeps it)
            dist_name = distribution.metadata["Name"]
            try:
                plugin = entry_point.load()
                pm.register(plugin, name=entry_point.name)
            except BaseException as exc:  # (SystemExit included: one plugin's failure is its own)
                if not contained(exc):
                    raise
                log.error("llm plugin %r (%s) cannot be loaded; its tools are not served", entry_point.name,
                          dist_name, exc_info=exc)
                continue
            names[id(plugin)] = dist_name
    pm.register(importlib.import_module(LLM_OWN_TOOLS), LLM_OWN_TOOLS)
    return pm, names


def _copy(fn: Any, name: str) -> Any:
    """A new function object with ``fn``'s code, so that declaring it a toolcrib tool never touches the plugin's
    own function."""
    copied = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copied.__kwdefaults__ = fn.__kwdefaults__
    copied.__annotations__ = dict(fn.__annotations__)
    copied.__doc__ = fn.__doc__
    copied.__module__ = fn.__module__
    copied.__qualname__ = fn.__qualname__
    return copied


def _from_llm_tool(tool: Any, name: str) -> toolcrib.Tool | None:
    """An ``llm.Tool`` that carries its own input schema: served with that schema; its implementation validates.
    (A name toolcrib does not take is refused by the host's catalog, which `toolcrib check` reports.)"""
    implementation = tool.implementation

    def call(arguments: dict[str, Any]) -> Any:
        return implementation(**arguments)

    async def call_async(arguments: dict[str, Any]) -> Any:
        return await implementation(**arguments)

    is_async = inspect.iscoroutinefunction(implementation)
    schema = tool.input_schema or {"type": "object"}
    runner = toolcrib.PythonRunner(call_async if is_async else call, is_async, convention="dict")
    return toolcrib.Tool(name=name, description=tool.description or f"The llm tool {name}.", runner=runner,
                         annotations={}, arguments=tuple(schema.get("properties", {})), make_input=lambda: _ANY,
                         given_input_schema=schema)


def _declare(fn: Any, name: str, description: str | None, bound_to: Any = None) -> toolcrib.Tool | None:
    """A tool from a plain function (or a method, ``bound_to`` its instance): toolcrib derives the schema and
    validates, as for its own tools."""
    copied = _copy(fn, name)
    target = copied if bound_to is None else functools.partial(copied, bound_to)
    try:
        toolcrib.tool(name=name, description=description or fn.__doc__ or f"The llm tool {name}.")(target)
    except toolcrib.ToolDeclarationError as exc:
        log.warning("llm tool %r is not served: %s", name, exc)
        return None
    return toolcrib.get_tool(target)


def _toolbox(cls: Any, arguments: dict[str, Any]) -> list[toolcrib.Tool]:
    """The tools of one instance of an ``llm.Toolbox``, built with the operator's constructor arguments. It is
    shared by every agent allowed its tools, and lives until the config is reloaded.

    The instance is built, and its plain methods run, on one thread of its own: objects such as a ``sqlite3``
    connection may be used only on the thread that made them, and worker threads come and go."""
    thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llm-{cls.__name__}")
    try:
        instance, tools = thread.submit(_set_up, cls, arguments).result()
    except Exception as exc:
        thread.shutdown(wait=False)
        log.warning("llm toolbox %s is not served: it cannot be set up with %r (%s: %s)", cls.__name__, arguments,
                    type(exc).__name__, exc)
        return []
    specs = []
    for tool in tools:
        implementation = tool.implementation
        if isinstance(implementation, types.MethodType) and implementation.__self__ is instance:
            spec = _declare(implementation.__func__, tool.name, tool.description, bound_to=instance)
        else:  # added with add_tool(): an llm.Tool of its own
            spec = _from_llm_tool(tool, tool.name)
        if spec is not None and not spec.is_async:
            spec = dataclasses.replace(spec, runner=_OnThread(spec.runner, thread))
        if spec is not None:
            specs.append(spec)
    return specs


def _set_up(cls: Any, arguments: dict[str, Any]) -> tuple[Any, list[Any]]:
    instance = cls(**arguments)
    instance.prepare()
    return instance, list(instance.tools())


@dataclasses.dataclass(frozen=True)
class _OnThread:
    """A sync tool's runner whose work runs on its toolbox's own thread (the event loop waits without blocking)."""

    inner: toolcrib.Runner
    thread: concurrent.futures.ThreadPoolExecutor
    is_async = True

    def start(self, model: Any, call: toolcrib.Call) -> Any:
        return self._run(self.inner.start(model, call))

    async def _run(self, work: Any) -> Any:
        return await asyncio.wrap_future(self.thread.submit(work))


@toolcrib.hookimpl
def toolcrib_tools(settings: Settings | None) -> list[Any]:
    """Every tool of the (chosen) llm plugins; two with one name are both rejected by toolcrib's catalog."""
    import llm

    settings = settings if settings is not None else Settings()
    wanted = set(settings.plugins) if settings.plugins is not None else None
    served = []
    toolboxes = set()
    found = registered()
    for unknown in sorted((wanted or set()) - {plugin_name for plugin_name, _ in found}):
        log.warning("[packs.llm] plugins names %r, which is not an installed llm plugin with tools (`llm plugins` "
                    "lists them)", unknown)
    for plugin_name, (thing, name) in found:
        if wanted is not None and plugin_name not in wanted:
            continue
        if inspect.isclass(thing) and issubclass(thing, llm.Toolbox):
            toolboxes.add(thing.__name__)
            if thing.__name__ not in settings.toolboxes:  # `toolcrib plugins` says so, beside the pack
                served.append(toolcrib.Unserved(plugin_name, f"toolbox {thing.__name__} not configured: to serve it, "
                                                f"add [packs.llm.toolboxes.{thing.__name__}] with its constructor's "
                                                "arguments"))
                continue
            box = _toolbox(thing, settings.toolboxes[thing.__name__])
            served += [dataclasses.replace(t, origin=plugin_name) for t in box]
            continue
        if isinstance(thing, llm.Tool):
            spec = _from_llm_tool(thing, name or thing.name)
        elif inspect.isfunction(thing):
            spec = _declare(thing, name or thing.__name__, None)
        else:
            log.warning("llm plugin %r registers %r, which is not a tool; skipped", plugin_name, thing)
            continue
        if spec is not None:
            served.append(dataclasses.replace(spec, origin=plugin_name))
    for unknown in sorted(set(settings.toolboxes) - toolboxes):
        log.warning("[packs.llm.toolboxes.%s]: no installed llm plugin registers a toolbox of that name", unknown)
    return served


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings
