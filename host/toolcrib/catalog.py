"""The catalog: every tool of every loaded source under its full name, with provenance.

Built once per (config, plugins). A pack whose ``toolcrib_tools`` raises contributes nothing (no half
registrations); an item that is not a tool, or a duplicate name, is rejected on its own; a namespace two
sources claim is served by neither.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from toolcrib.config import LoadedConfig, did_you_mean, problems_from_validation
from toolcrib.content import ToolResult
from toolcrib.declarations import get_prompt, get_resource
from toolcrib.entries import Entry, ItemEntry
from toolcrib.errors import Problem, ToolError, contained
from toolcrib.names import RESERVED_NAMESPACE, full_name, tool_name_problem
from toolcrib.plugins import PluginHook, PluginManager, PluginRecord, hooks_by_plugin
from toolcrib.sources import Offer
from toolcrib.tool import Tool, get_tool

log = logging.getLogger("toolcrib.catalog")


@dataclass
class Catalog:
    entries: dict[str, Entry]
    records: list[PluginRecord]
    problems: list[Problem] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, ItemEntry] = field(default_factory=dict)  # static ones and templates, by full name
    prompts: dict[str, ItemEntry] = field(default_factory=dict)
    packs: list[PackSource] = field(default_factory=list)  # the pluggy plugins that serve tools, as sources

    def record(self, name: str) -> PluginRecord | None:
        for record in self.records:
            if record.name == name:
                return record
        return None


def _pack_problem(record: PluginRecord, message: str, severity: str = "error") -> Problem:
    dist = f" ({record.distribution} {record.version})" if record.distribution and record.version else ""
    kind = "upstream server" if record.kind == "mcp" else "pack"
    return Problem(severity, f"{kind} {record.name!r}{dist}", message)


def build_catalog(
    pm: PluginManager,
    records: list[PluginRecord],
    loaded: LoadedConfig,
    offers: Iterable[Offer] = (),
) -> Catalog:
    """Collect the tools, resources and prompts of every loaded pack, and what every other source offers
    (``toolcrib.sources``: upstream servers); their records are among ``records`` already."""
    offers = list(offers)
    config = loaded.config
    catalog = Catalog(entries={}, records=records)
    for record in records:
        if record.state == "failed" or (record.kind == "mcp" and record.error):
            catalog.problems.append(_pack_problem(record, record.error or "failed"))
    mcp_namespaces = {ns for ns, mcp in config.mcps.items() if mcp.enabled}
    staged: dict[str, Entry] = {}
    clashing: set[str] = set()  # namespaces of a pack and an upstream server at once
    settings_hooks = hooks_by_plugin(pm, "toolcrib_settings_model")
    tools_hooks = hooks_by_plugin(pm, "toolcrib_tools")
    resources_hooks = hooks_by_plugin(pm, "toolcrib_resources")
    prompts_hooks = hooks_by_plugin(pm, "toolcrib_prompts")
    staged_items: list[ItemEntry] = []
    origins: list[tuple[PluginRecord, PluginRecord]] = []  # (a pack, an installed plugin it serves tools of)
    taken = mcp_namespaces | {r.name for r in records}  # names an origin may not have
    for record in records:
        own = record.kind == "builtin" and record.name == RESERVED_NAMESPACE  # the host's own pack
        if record.state != "loaded" or not (record.kind == "pack" or own):
            continue
        if record.name in mcp_namespaces:
            clashing.add(record.name)
            record.fail(f"namespace {record.name!r} is also an upstream MCP server ([mcps.{record.name}]); neither is "
                        "served: rename the server or disable one of them")
            catalog.problems.append(_pack_problem(record, record.error or ""))
            continue
        source = PackSource(record, loaded, (settings_hooks.get(record.name), tools_hooks.get(record.name),
                                             resources_hooks.get(record.name), prompts_hooks.get(record.name)))
        offer = source.offer()
        catalog.problems.extend(source.problems)
        if record.state != "loaded":
            continue
        catalog.packs.append(source)
        catalog.settings[record.name] = source.settings
        entries, items = offer.entries, offer.items
        entries, served_for = _origins(record, entries, catalog, taken)
        origins += [(record, origin) for origin in served_for]
        record.tool_count = len(entries)
        for entry in entries:
            staged[entry.name] = entry
        staged_items.extend(items)
    for pack, origin in reversed(origins):  # each right after its pack, in the order the pack gave them
        records.insert(records.index(pack) + 1, origin)
    for ns in config.packs:
        if catalog.record(ns) is None:
            close = did_you_mean(ns, [r.name for r in records if r.kind == "pack"], 0.75)
            hint = f" (did you mean {close!r}?)" if close else ""
            catalog.problems.append(
                Problem("warning", f"{loaded.source}: packs.{ns}", f"no pack with namespace {ns!r} is installed{hint}")
            )
    # A namespace a pack and an upstream server both claim is served by neither: the pack was failed above, and the
    # server's tools are dropped here, so that what is served is exactly what `toolcrib check` says.
    for record in records:
        if record.kind == "mcp" and record.name in clashing:
            record.fail(f"namespace {record.name!r} is also a pack's; neither is served: rename the server or "
                        "disable one of them")
            catalog.problems.append(_pack_problem(record, record.error or ""))
    for entry in (entry for offer in offers for entry in offer.entries):
        if entry.namespace in clashing and entry.kind != "builtin":
            continue
        if entry.namespace == RESERVED_NAMESPACE:
            continue  # only the host's own pack names tools toolcrib__*
        if entry.name in staged:
            other = staged.pop(entry.name)
            catalog.problems.append(Problem("error", f"tool {entry.name!r}", f"offered by both {other.kind} "
                                            f"{other.source!r} and {entry.kind} {entry.source!r}; neither is served"))
            continue
        staged[entry.name] = entry
    catalog.entries = {name: staged[name] for name in sorted(staged)}
    for item in (item for offer in offers for item in offer.items):
        if item.namespace not in clashing and item.namespace != RESERVED_NAMESPACE:
            staged_items.append(item)
    _place_items(staged_items, catalog)
    return catalog


class _Problems(Protocol):
    problems: list[Problem]


@dataclass(eq=False)
class PackSource:
    """A pluggy plugin that serves tools (an entry-point pack, a tool folder, the host's own ``toolcrib`` pack) as
    a ``toolcrib.sources.Source``: its hooks (settings, tools, resources, prompts) are called, one plugin at a time,
    the first time it is asked what it offers. A hook that fails makes the whole pack fail (no half
    registrations); what is wrong is in ``problems``."""

    record: PluginRecord
    loaded: LoadedConfig
    hooks: tuple[PluginHook | None, PluginHook | None, PluginHook | None, PluginHook | None]
    dimension: str = "plugins"
    lazy: bool = False
    problems: list[Problem] = field(default_factory=list)
    settings: Any = None
    _offer: Offer | None = None

    @property
    def name(self) -> str:
        return self.record.name

    async def open(self) -> None:
        """Nothing to open: the plugin was imported when it was loaded (``toolcrib.plugins``)."""

    async def close(self) -> None:
        """Nothing to close: the plugin lives as long as its plugin manager."""

    def offer(self) -> Offer:
        if self._offer is None:
            self._offer = self._collect()
        return self._offer

    async def fetch(self, name: str | None = None) -> list[Entry]:
        entries = self.offer().entries
        return entries if name is None else [e for e in entries if e.name == name]

    async def read(self, uri: str) -> ToolResult:
        """A pack's resources are read through an agent's view (``AgentView.read``), where its rules apply."""
        raise ToolError(f"pack {self.name!r} has its resources read through an agent's view")

    def _collect(self) -> Offer:
        record, (settings_hook, tools_hook, resources_hook, prompts_hook) = self.record, self.hooks
        offer = Offer(record)
        with _warnings_of(record, self):
            self.settings = _settings(settings_hook, record, self.loaded, self)
            if record.state != "loaded":
                return offer
            offer.entries = _collect(tools_hook, record, self.settings, self)
            if record.state != "loaded":
                offer.entries = []
                return offer
            offer.items = [*_collect_items(resources_hook, "resources", record, self.settings, self),
                           *_collect_items(prompts_hook, "prompts", record, self.settings, self)]
        if record.state != "loaded":
            offer.entries, offer.items = [], []
        return offer


@contextmanager
def _warnings_of(record: PluginRecord, catalog: _Problems) -> Iterator[None]:
    """What a pack logs at warning level or above while the host collects its tools (on ``toolcrib.pack.<ns>``) is
    also a ``toolcrib check`` warning about the pack: it is how a pack says something is off in its settings."""

    def collect(log_record: logging.LogRecord) -> bool:  # a filter that lets everything through: handlers (or
        if log_record.levelno >= logging.WARNING:      # Python's last resort, printing to stderr) still get it
            catalog.problems.append(_pack_problem(record, log_record.getMessage(), "warning"))
        return True

    logger = logging.getLogger(f"toolcrib.pack.{record.name}")
    logger.addFilter(collect)
    try:
        yield
    finally:
        logger.removeFilter(collect)


def _origins(pack: PluginRecord, entries: list[Entry], catalog: Catalog,
             taken: set[str]) -> tuple[list[Entry], list[PluginRecord]]:
    """A record for each installed plugin whose tools the pack serves (``Tool.origin``), to show beside it; an
    origin named like a pack or a server is dropped (rules naming it mean that one)."""
    from importlib import metadata

    found: dict[str, PluginRecord] = {}
    kept = []
    for entry in entries:
        origin = entry.tool.origin
        if origin is not None and origin in taken:
            catalog.problems.append(_pack_problem(pack, f"{entry.name}: its plugin {origin!r} has the name of a pack "
                                                        "or server; rules that name it mean that one, not this plugin"))
            entry = dataclasses.replace(entry, tool=dataclasses.replace(entry.tool, origin=None))
            origin = None
        kept.append(entry)
        if origin is None:
            continue
        record = found.get(origin)
        if record is None:
            try:
                version: str | None = metadata.version(origin)
            except (metadata.PackageNotFoundError, ValueError):
                version = None
            record = found[origin] = PluginRecord(name=origin, kind=pack.name, state="loaded", distribution=origin,
                                                  version=version, entry_point=f"served by pack {pack.name!r}")
        record.tool_count += 1
    return kept, list(found.values())


def _place_items(items: list[ItemEntry], catalog: Catalog) -> None:
    """Resources and prompts by full name; a URI (or URI template) two namespaces declare is served by neither."""
    owners: dict[str, set[str]] = {}
    for item in items:
        if item.uri is not None:
            owners.setdefault(item.uri, set()).add(item.namespace)
    for uri, namespaces in sorted(owners.items()):
        if len(namespaces) > 1:
            catalog.problems.append(Problem("error", f"resource {uri!r}", f"declared by more than one source "
                                            f"({', '.join(sorted(namespaces))}); neither is served"))
    resources: dict[str, ItemEntry] = {}
    prompts: dict[str, ItemEntry] = {}
    for item in items:
        if item.uri is not None and len(owners[item.uri]) > 1:
            continue
        target = prompts if item.what == "prompt" else resources
        if item.name in target:
            catalog.problems.append(Problem("error", f"{item.what} {item.name!r}", "declared twice; neither is "
                                            "served: rename one"))
            target[item.name] = None  # type: ignore[assignment]
            continue
        target[item.name] = item
    catalog.resources = {n: resources[n] for n in sorted(resources) if resources[n] is not None}
    catalog.prompts = {n: prompts[n] for n in sorted(prompts) if prompts[n] is not None}


def _collect_items(hook: PluginHook | None, kind: str, record: PluginRecord, settings: Any,
                   catalog: _Problems) -> list[ItemEntry]:
    """A pack's resources or prompts (``kind``), from its ``toolcrib_<kind>`` hook; each bad item on its own."""
    if hook is None:
        return []
    try:
        items = hook(settings=settings)
    except BaseException as exc:
        if not contained(exc):
            raise
        record.fail(f"toolcrib_{kind} raised {type(exc).__name__}: {exc}", traceback.format_exc())
        catalog.problems.append(_pack_problem(record, record.error or ""))
        return []
    if items is None:
        return []
    if isinstance(items, Mapping) or not isinstance(items, Iterable) or isinstance(items, str | bytes):
        record.fail(f"toolcrib_{kind} returned {type(items).__name__}; expected a list")
        catalog.problems.append(_pack_problem(record, record.error or ""))
        return []
    get = get_resource if kind == "resources" else get_prompt
    found = []
    for i, item in enumerate(items):
        spec = get(item)
        if spec is None:
            decorator = "@toolcrib.resource(uri)" if kind == "resources" else "@toolcrib.prompt"
            catalog.problems.append(_pack_problem(
                record, f"toolcrib_{kind} item {i} ({item!r}) is not a {kind[:-1]}: decorate it with {decorator}"))
            continue
        found.append(ItemEntry(name=full_name(record.name, spec.name), namespace=record.name,
                               kind="builtin" if record.kind == "builtin" else "pack", dimension="plugins",
                               source=record.name, item=spec, settings=settings))
    return found


def _settings(hook: PluginHook | None, record: PluginRecord, loaded: LoadedConfig, catalog: _Problems) -> Any:
    table = loaded.config.packs.get(record.name)
    values = table.settings if table is not None else {}
    model = None
    if hook is not None:
        try:
            model = hook()
        except BaseException as exc:
            if not contained(exc):
                raise
            record.fail(f"toolcrib_settings_model raised {type(exc).__name__}: {exc}", traceback.format_exc())
            catalog.problems.append(_pack_problem(record, record.error or ""))
            return None
    where = f"{loaded.source}: packs.{record.name}"
    if model is None:
        if values:
            message = f"pack {record.name!r} takes no settings (only 'enabled'); unknown key(s): {', '.join(values)}"
            record.fail(message)
            catalog.problems.append(Problem("error", where, message))
        return None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        record.fail(f"toolcrib_settings_model returned {model!r}; expected a pydantic model class")
        catalog.problems.append(_pack_problem(record, record.error or ""))
        return None
    problems: list[Problem] = []
    if model.model_config.get("extra") != "allow":
        known = {f.alias or name for name, f in model.model_fields.items()} | set(model.model_fields)
        for key in values:
            if key not in known:
                takes = ", ".join(sorted(known)) or "none"
                problems.append(Problem("error", f"{where}.{key}", f"unknown setting; {record.name!r} takes: {takes}"))
        values = {k: v for k, v in values.items() if k in known}
    try:
        settings = model.model_validate(values)
    except ValidationError as exc:
        problems.extend(problems_from_validation(exc, loaded.source, prefix=("packs", record.name), root=model))
        settings = None
    if problems:
        catalog.problems.extend(problems)
        record.fail("invalid settings: " + "; ".join(f"{p.where.split(': ', 1)[-1]}: {p.message}" for p in problems))
        return None
    return settings


def _collect(hook: PluginHook | None, record: PluginRecord, settings: Any, catalog: _Problems) -> list[Entry]:
    found: list[Tool] = []
    items: Any = None
    if hook is not None:
        try:
            items = hook(settings=settings)
        except BaseException as exc:
            if not contained(exc):
                raise
            record.fail(f"toolcrib_tools raised {type(exc).__name__}: {exc}", traceback.format_exc())
            catalog.problems.append(_pack_problem(record, record.error or ""))
            return []
    if items is not None:
        if isinstance(items, Mapping) or not isinstance(items, Iterable) or isinstance(items, str | bytes):
            record.fail(f"toolcrib_tools returned {type(items).__name__}; expected a list of tools")
            catalog.problems.append(_pack_problem(record, record.error or ""))
            return []
        for i, item in enumerate(items):
            spec = get_tool(item)
            if spec is None:
                catalog.problems.append(_pack_problem(
                    record, f"toolcrib_tools item {i} ({item!r}) is not a tool: decorate it with @toolcrib.tool"))
                continue
            problem = tool_name_problem(spec.name)  # a Tool built by hand skips the decorator's checks
            if problem is not None:
                catalog.problems.append(_pack_problem(record, f"tool {spec.name!r} is not served: {problem}"))
                continue
            found.append(spec)
    counts: dict[str, int] = {}
    for spec in found:
        counts[spec.name] = counts.get(spec.name, 0) + 1
    entries = []
    for spec in found:
        if counts[spec.name] > 1:
            continue
        entries.append(Entry(
            name=full_name(record.name, spec.name),
            namespace=record.name,
            kind="builtin" if record.kind == "builtin" else "pack",
            dimension="plugins",
            source=record.name,
            tool=spec,
            settings=settings,
            distribution=record.distribution,
            version=record.version,
        ))
    for name, count in sorted(counts.items()):
        if count > 1:
            catalog.problems.append(_pack_problem(
                record, f"tool name {name!r} is declared {count} times; none of them is served: rename all but one"))
    return entries
