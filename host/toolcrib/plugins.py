"""Discovery: a plugin-manager factory that loads tool packs one entry point at a time.

Nothing here runs at import of ``toolcrib``. ``load_plugins`` imports each entry point of the ``toolcrib``
group on its own, so a pack that fails (even with ``sys.exit``) is recorded as failed and every other pack
still loads. Two distributions offering the same entry-point name are a conflict: neither is loaded.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import logging
import os
import sys
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import FunctionType, MethodType, ModuleType
from typing import Any

import pluggy

from toolcrib import hookspecs
from toolcrib.dists import name_and_version
from toolcrib.errors import contained
from toolcrib.names import RESERVED_NAMESPACE, namespace_problem

ENTRY_POINT_GROUP = "toolcrib"
DISABLE_AUTOLOAD_ENV = "TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD"
PLUGINS_ENV = "TOOLCRIB_PLUGINS"
TRACE_ENV = "TOOLCRIB_TRACE_HOOKS"

log = logging.getLogger("toolcrib.plugins")


@dataclass
class PluginRecord:
    """One source of tools or behaviour, as ``toolcrib plugins`` shows it."""

    name: str  # the namespace for packs and upstream servers; a dotted name for built-ins
    kind: str  # "builtin" | "pack" | "mcp"
    state: str  # "loaded" | "failed" | "disabled"
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None
    error: str | None = None
    traceback: str | None = field(default=None, repr=False)
    tool_count: int = 0
    plugin: Any = field(default=None, repr=False)
    # its tools' definitions are pinned as this process first saw them when there is no lock: a source that runs
    # what someone else may change, which the operator neither trusted nor let follow its changes (set by its kind)
    pinned: bool = False

    def fail(self, error: str, tb: str | None = None) -> None:
        self.state = "failed"
        self.error = error
        self.traceback = tb
        self.tool_count = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.entry_point,
            "state": self.state,
            "error": self.error,
            "tool_count": self.tool_count,
        }


class LoadError(Exception):
    """Why a ``Deferred`` pack could not be loaded, said whole (the file, what it raised)."""


class Deferred:
    """A pack handed to ``load_plugins`` whose code is imported when it is loaded, with the same guard as an entry
    point's (``load`` answers the plugin; whatever it raises fails this pack alone, a ``LoadError`` in its own
    words): a tool folder (``toolcrib.folders``). ``where`` and ``distribution`` go to its record."""

    where: str = ""
    distribution: str | None = None

    def load(self) -> Any:
        raise NotImplementedError


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, which (as pytest does) also takes ``toolcrib_*`` functions without the marker, and
    remembers the hook implementations (name, options) the last ``register`` found: what toolcrib checks of a pack
    it registered, without pluggy's ``get_name``/``get_hookcallers``, which scan every plugin (1,000 packs would
    cost a million steps)."""

    registered_hooks: list[tuple[str, Any]]

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        self.registered_hooks = []
        return super().register(plugin, name)

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts: Any
        value = plugin.__dict__.get(name) if type(plugin) is ModuleType else None
        if value is not None and not name.startswith("toolcrib_") and not isinstance(
                value, staticmethod | classmethod | MethodType):
            # pluggy's answer for a module's own names, without its static lookup through the module's type (a
            # tenth of a millisecond a pack): only a function carrying the marker implements a hook.
            marked = getattr(value, "toolcrib_impl", None) if type(value) is FunctionType else None
            opts = marked if isinstance(marked, dict) else None
        else:
            opts = super().parse_hookimpl_opts(plugin, name)
            if opts is None and name.startswith("toolcrib_") and inspect.isroutine(getattr(plugin, name, None)):
                opts = {}
        if opts is not None:  # the hook it implements: the marker's specname, else its own name
            self.registered_hooks.append((opts.get("specname") or name, opts))
        return opts


def get_plugin_manager(env: Mapping[str, str] | None = None) -> PluginManager:
    """A fresh plugin manager with toolcrib's hook specifications and nothing registered. With
    ``$TOOLCRIB_TRACE_HOOKS`` set, every hook call and its result is traced to stderr (pluggy's tracing)."""
    pm = PluginManager("toolcrib")
    pm.add_hookspecs(hookspecs)
    if (os.environ if env is None else env).get(TRACE_ENV, "") not in ("", "0"):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return pm


def autoload_enabled(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() in ("", "0", "false", "no")


def named_plugins(env: Mapping[str, str] | None = None) -> list[str]:
    """Packs named explicitly in ``$TOOLCRIB_PLUGINS`` (comma-separated), loaded even without autoload."""
    env = os.environ if env is None else env
    return [item.strip() for item in env.get(PLUGINS_ENV, "").split(",") if item.strip()]


def load_plugins(
    pm: PluginManager,
    *,
    disabled: Collection[str] = (),
    autoload: bool = True,
    named: Iterable[str] = (),
    plugins: Mapping[str, Any] | None = None,
    builtins: Iterable[tuple[str, Any]] = (),
    off: Mapping[str, str] | None = None,
) -> list[PluginRecord]:
    """Register ``builtins`` (name, object; None: switched off by config, ``off`` saying why), explicit
    ``plugins`` (namespace -> module, object or ``"module:attr"``), and the entry points of the ``toolcrib``
    group.

    ``named`` lists entry-point names (or ``namespace=module`` specs) to load even when ``autoload`` is
    off. A namespace in ``disabled`` is recorded as disabled and never imported.
    """
    records: list[PluginRecord] = []
    for name, obj in builtins:
        record = PluginRecord(name=name, kind="builtin", state="loaded", distribution="toolcrib")
        records.append(record)
        if obj is None:
            record.state = "disabled"
            record.error = (off or {}).get(name)  # not an error: what `plugins` notes of it
            continue
        _register(pm, record, obj)

    wanted: dict[str, Any] = dict(plugins or {})
    named_eps: set[str] = set()
    for spec in named:
        namespace, sep, target = spec.partition("=")
        if sep:
            wanted.setdefault(namespace.strip(), target.strip())
        else:
            named_eps.add(spec)

    for namespace in sorted(wanted):
        record = PluginRecord(name=namespace, kind="pack", state="loaded")
        records.append(record)
        if _skip(record, disabled):
            continue
        target = wanted[namespace]
        if isinstance(target, str):
            record.entry_point = target
            obj = _guarded(record, lambda t=target: _import_target(t))
            if obj is None:
                continue
        elif isinstance(target, Deferred):  # a pack whose code is imported here, guarded ([host] tool_dirs)
            record.entry_point, record.distribution = target.where, target.distribution
            obj = _guarded(record, target.load)
            if obj is None:
                continue
        else:
            obj = target
            record.entry_point = getattr(obj, "__name__", None) or type(obj).__name__
        _register(pm, record, obj)

    if autoload or named_eps:
        by_name: dict[str, list[importlib.metadata.EntryPoint]] = {}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if autoload or ep.name in named_eps:
                by_name.setdefault(ep.name, []).append(ep)
        for missing in sorted(named_eps - set(by_name)):
            records.append(
                PluginRecord(
                    name=missing,
                    kind="pack",
                    state="failed",
                    error=f"no installed distribution offers a {ENTRY_POINT_GROUP!r} entry point named {missing!r}",
                )
            )
        for namespace in sorted(by_name):
            records.append(_load_entry_points(pm, namespace, by_name[namespace], disabled, taken=set(wanted)))
    return records


def register_builtin(pm: PluginManager, name: str, obj: Any) -> PluginRecord:
    """Register one of the host's own plugins after the others (the ``toolcrib`` pack is built from what they
    offer), exactly as ``load_plugins`` registers every plugin."""
    record = PluginRecord(name=name, kind="builtin", state="loaded", distribution="toolcrib")
    _register(pm, record, obj)
    return record


def _skip(record: PluginRecord, disabled: Collection[str]) -> bool:
    problem = namespace_problem(record.name)
    if record.name == RESERVED_NAMESPACE:
        problem = f"{RESERVED_NAMESPACE!r} is reserved for the host's own tools"
    if problem is not None:
        record.fail(f"invalid namespace {record.name!r}: {problem}")
        return True
    if record.name in disabled:
        record.state = "disabled"
        return True
    return False


def _load_entry_points(
    pm: PluginManager,
    namespace: str,
    eps: list[importlib.metadata.EntryPoint],
    disabled: Collection[str],
    taken: Collection[str],
) -> PluginRecord:
    first = eps[0]
    distribution, version = name_and_version(first.dist) if first.dist is not None else (None, None)
    record = PluginRecord(name=namespace, kind="pack", state="loaded", distribution=distribution, version=version,
                          entry_point=first.value)
    if _skip(record, disabled):
        return record
    if len(eps) > 1 or namespace in taken:
        offered = sorted(
            "{} {}".format(*name_and_version(ep.dist)) if ep.dist is not None else ep.value for ep in eps
        )
        if namespace in taken:
            offered.append("a pack named explicitly")
        record.distribution = ", ".join(offered)
        record.version = None
        record.fail(
            f"namespace {namespace!r} is offered by more than one source ({'; '.join(offered)}); neither is "
            "loaded: uninstall one, or disable the namespace in config"
        )
        return record
    obj = _guarded(record, first.load)
    if obj is not None:
        _register(pm, record, obj)
    return record


def _import_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _guarded(record: PluginRecord, load: Any) -> Any:
    """Run ``load()``; on any failure (``SystemExit``, ``KeyboardInterrupt`` and every other ``BaseException``
    included, but the operator's own Ctrl-C) record it and return None."""
    try:
        return load()
    except BaseException as exc:
        if not contained(exc):
            raise
        if isinstance(exc, LoadError):
            error = str(exc)
        elif isinstance(exc, SystemExit):
            error = f"the pack called sys.exit({exc.code!r}) while being imported"
        else:
            error = f"{type(exc).__name__}: {exc}"
        record.fail(f"import failed: {error}", traceback.format_exc())
        log.warning("pack %r failed to load: %s", record.name, error)
        return None


def _register(pm: PluginManager, record: PluginRecord, obj: Any) -> None:
    if obj is None:
        record.fail("the entry point's value is None; point it at a module or object with hook implementations")
        return
    try:
        pm.register(obj, name=record.name)
    except pluggy.PluginValidationError as exc:
        record.fail(f"invalid hook implementation: {exc}")
        return
    except ValueError as exc:
        existing = pm.get_name(obj)
        if existing is not None:
            record.fail(f"the same object is already registered as {existing!r}; give each pack its own module")
        else:
            record.fail(f"cannot register: {exc}")
        return
    found = pm.registered_hooks
    unknown = sorted(name for name, _ in found if getattr(pm.hook, name).spec is None)
    if unknown:
        pm.unregister(obj)
        known = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("toolcrib_")))
        record.fail(f"unknown hook(s) {', '.join(unknown)}; toolcrib's hooks are {known}")
        return
    wrappers = sorted(name for name, opts in found if opts.get("wrapper") or opts.get("hookwrapper"))
    if wrappers:
        pm.unregister(obj)
        record.fail(f"hook {', '.join(wrappers)}: wrapper implementations (wrapper=True, hookwrapper=True) are not "
                    "supported: toolcrib calls each pack's implementation on its own; return an answer instead")
        return
    record.plugin = obj
    if isinstance(obj, ModuleType) and record.distribution is None and record.kind == "pack":
        record.distribution = _distribution_of(obj)


def _distribution_of(module: ModuleType) -> str | None:
    top = module.__name__.partition(".")[0]
    dists = _packages_distributions().get(top)
    return dists[0] if dists else None


@functools.cache
def _packages_distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


@dataclass(frozen=True, slots=True)
class PluginHook:
    """One plugin's implementation of one hook, called through pluggy on its own.

    toolcrib calls each plugin's implementation on its own rather than through the hook's combined caller, and this
    is the one place that does it: pluggy stops a hook call at the first implementation that raises, and in
    toolcrib one pack's failure must stay that pack's (a policy hook that raises denies the call, fail closed,
    and the others are still heard); implementations may also be ``async def``, whose answers are awaitables that
    only the caller can await (so ``firstresult`` across plugins is the caller's: the first answer, awaited, that
    is not None). Each call still goes through pluggy (``subset_hook_caller``): opt-in arguments, ``tryfirst`` and
    ``trylast`` ordering, tracing and call monitoring all apply.

    ``sees`` is the plugin's ``sees_calls(hook, agent, tool) -> bool``, when it has one: a plugin that hears only
    some calls (the config's hook programs) says which, and the pipeline calls it for those alone.
    """

    plugin: str
    caller: Callable[..., Any]
    sees: Callable[[str, str, str], bool] | None = None

    def __call__(self, **kwargs: Any) -> Any:
        """The implementation's answer: what it returned, or None."""
        result = self.caller(**kwargs)
        if isinstance(result, list):  # a hook without firstresult: the non-None results, here at most one
            return result[0] if result else None
        return result

    def heard(self, kwargs: Mapping[str, Any]) -> tuple[Any, BaseException | None]:
        """(its answer, None), or (None, what it raised) when that is to be contained (``errors.contained``):
        one implementation's failure is its own, whatever it raises."""
        try:
            return self(**kwargs), None
        except BaseException as exc:
            if not contained(exc):
                raise
            return None, exc

    async def heard_awaited(self, kwargs: Mapping[str, Any]) -> tuple[Any, BaseException | None]:
        """``heard``, the answer of an ``async def`` implementation awaited."""
        try:
            answer = self(**kwargs)
            if inspect.isawaitable(answer):
                answer = await answer
            return answer, None
        except BaseException as exc:
            if not contained(exc):
                raise
            return None, exc


class _OneImpl:
    """pluggy's caller of a hook, holding one implementation: what ``subset_hook_caller`` gives when every other
    plugin is removed (the same ``_hookexec``: opt-in arguments, tracing and call monitoring apply), but without its
    cost, which grows with the plugins: it is built from a set of all the others, and each call filters every
    implementation again (a pass over 1,000 packs would take a million steps)."""

    __slots__ = ("_args", "_exec")

    def __init__(self, caller: pluggy.HookCaller, impl: pluggy.HookImpl) -> None:
        firstresult = bool(caller.spec.opts.get("firstresult")) if caller.spec is not None else False
        self._exec = caller._hookexec
        self._args = (caller.name, [impl], firstresult)

    def __call__(self, **kwargs: Any) -> Any:
        name, impls, firstresult = self._args
        return self._exec(name, impls, kwargs, firstresult)


def plugin_hooks(pm: PluginManager, hook: str) -> list[PluginHook]:
    """Every implementation of ``hook``, each on its own, in pluggy's call order (last registered first, then
    ``tryfirst`` / ``trylast``): a plugin with two (``toolcrib_pre_tool_use`` and a ``specname`` alias of it) is
    heard twice."""
    caller: pluggy.HookCaller = getattr(pm.hook, hook)
    names = {id(plugin): name for name, plugin in pm.list_name_plugin()}
    return [PluginHook(names.get(id(impl.plugin), "?"), _OneImpl(caller, impl), _sees(impl.plugin))
            for impl in reversed(caller.get_hookimpls())]


def _sees(plugin: Any) -> Callable[[str, str, str], bool] | None:
    sees = getattr(plugin, "sees_calls", None)
    return sees if callable(sees) else None


def hooks_by_plugin(pm: PluginManager, hook: str) -> dict[str, PluginHook]:
    """``plugin_hooks`` by plugin name, one caller a plugin (for code that visits every pack: a per-pack scan of all
    implementations would grow with the square of the packs). A plugin's several implementations of the hook all
    count: their lists are joined, in the order they were declared (``_Together``)."""
    grouped: dict[str, list[PluginHook]] = {}
    for found in plugin_hooks(pm, hook):
        grouped.setdefault(found.plugin, []).append(found)
    return {name: hooks[0] if len(hooks) == 1 else PluginHook(name, _Together(hook, tuple(reversed(hooks))))
            for name, hooks in grouped.items()}


@dataclass(frozen=True, slots=True)
class _Together:
    """One plugin's several implementations of one hook, answering as one: lists joined; one answer among Nones
    that answer; two answers that cannot be joined are the plugin's error, naming the hook."""

    hook: str
    hooks: tuple[PluginHook, ...]

    def __call__(self, **kwargs: Any) -> list[Any]:
        answers = [answer for answer in (h(**kwargs) for h in self.hooks) if answer is not None]
        if not answers:
            return []
        if all(isinstance(answer, list | tuple) for answer in answers):
            return [[item for answer in answers for item in answer]]
        if len(answers) == 1:
            return answers
        raise ValueError(f"{len(answers)} of its implementations of {self.hook} answer, and only one answer can be "
                         "taken: keep one")
