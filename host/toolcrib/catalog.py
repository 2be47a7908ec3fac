"""The catalog: every tool of every loaded source under its full name, with provenance.

Built once per (config, plugins). A pack whose ``toolcrib_tools`` raises contributes nothing (no half
registrations); an item that is not a tool, or a duplicate name, is rejected on its own; a namespace two
sources claim is served by neither.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from toolcrib.config import LoadedConfig, did_you_mean, problems_from_validation
from toolcrib.content import ToolResult
from toolcrib.declarations import get_prompt, get_resource
from toolcrib.entries import BUILTIN, PACK, RULE_DIMENSION, Entry, Kind, Provenance
from toolcrib.errors import Problem, ToolError
from toolcrib.names import RESERVED_NAMESPACE, full_name, tool_name_problem
from toolcrib.plugins import PluginHook, PluginManager, PluginRecord, hooks_by_plugin
from toolcrib.runner import pack_logger
from toolcrib.sources import Offer
from toolcrib.tool import Tool, Unserved, get_tool

log = logging.getLogger("toolcrib.catalog")


@dataclass
class Catalog:
    """What every source offers, by kind and full name: ``entries`` the tools, ``resources`` the resources and
    templates, ``prompts`` the prompts (each sorted by name)."""

    entries: dict[str, Entry]
    records: list[PluginRecord]
    problems: list[Problem] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Entry] = field(default_factory=dict)  # static ones and templates, by full name
    prompts: dict[str, Entry] = field(default_factory=dict)
    packs: list[PackSource] = field(default_factory=list)  # the pluggy plugins that serve tools, as sources

    def record(self, name: str) -> PluginRecord | None:
        for record in self.records:
            if record.name == name:
                return record
        return None


def _pack_problem(record: PluginRecord, message: str, severity: str = "error",
                  kinds: Mapping[str, Kind] | None = None) -> Problem:
    dist = f" ({record.distribution} {record.version})" if record.distribution and record.version else ""
    label = (kinds or {}).get(record.kind, PACK).label
    return Problem(severity, f"{label} {record.name!r}{dist}", message)


def build_catalog(
    pm: PluginManager,
    records: list[PluginRecord],
    loaded: LoadedConfig,
    offers: Iterable[Offer] = (),
    kinds: Sequence[Kind] = (PACK, BUILTIN),
) -> Catalog:
    """Collect the tools, resources and prompts of every loaded pack, and what every other source offers
    (``toolcrib.sources``: upstream servers); their records are among ``records`` already. ``kinds`` are the
    kinds of source there are (``toolcrib.supply.kinds.KINDS``): what each is called, the namespaces it claims."""
    offers = list(offers)
    config = loaded.config
    catalog = Catalog(entries={}, records=records)
    named = {known.name: known for known in kinds}
    configured = {known.name for known in kinds if known.where}  # kinds a config table makes, whose errors are theirs
    for record in records:
        if record.state == "failed" or (record.kind in configured and record.error):
            catalog.problems.append(_pack_problem(record, record.error or "failed", kinds=named))
    # namespaces of the config's other sources, which no pack may share: where each is configured
    tables = {ns: where for known in kinds for ns, where in known.claims(config).items()}
    claimed = set(tables)
    staged: list[Entry] = []
    clashing: set[str] = set()  # namespaces of a pack and an upstream server at once
    settings_hooks = hooks_by_plugin(pm, "toolcrib_settings_model")
    tools_hooks = hooks_by_plugin(pm, "toolcrib_tools")
    resources_hooks = hooks_by_plugin(pm, "toolcrib_resources")
    prompts_hooks = hooks_by_plugin(pm, "toolcrib_prompts")
    origins: list[tuple[PluginRecord, PluginRecord]] = []  # (a pack, an installed plugin it serves tools of)
    taken = claimed | {r.name for r in records}  # names an origin may not have
    offered = {id(offer.record) for offer in offers}  # records of other sources (an isolated pack's among them)
    for record in records:
        own = record.kind == "builtin" and record.name == RESERVED_NAMESPACE  # the host's own pack
        if record.state != "loaded" or not (record.kind == "pack" or own) or id(record) in offered:
            continue
        if record.name in claimed:
            clashing.add(record.name)
            record.fail(f"namespace {record.name!r} is also {tables[record.name]}; neither is served: rename that "
                        "source or disable one of them")
            catalog.problems.append(_pack_problem(record, record.error or "", kinds=named))
            continue
        source = PackSource(record, loaded, (settings_hooks.get(record.name), tools_hooks.get(record.name),
                                             resources_hooks.get(record.name), prompts_hooks.get(record.name)))
        offer = source.offer()
        catalog.problems.extend(source.problems)
        if record.state != "loaded":
            continue
        catalog.packs.append(source)
        catalog.settings[record.name] = source.settings
        entries, served_for = _origins(record, offer.entries, catalog, taken)
        served_for += _unserved(record, source.unserved, {r.name: r for r in served_for}, taken)
        origins += [(record, origin) for origin in served_for]
        record.tool_count = sum(1 for entry in entries if entry.kind == "tool")
        staged += entries
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
        if record.kind in configured and record.name in clashing:
            record.fail(f"namespace {record.name!r} is also a pack's; neither is served: rename the "
                        f"{named[record.kind].noun} or disable one of them")
            catalog.problems.append(_pack_problem(record, record.error or "", kinds=named))
    for entry in (entry for offer in offers for entry in offer.entries):
        if entry.namespace in clashing and entry.supplier is not BUILTIN:
            continue
        if entry.namespace != RESERVED_NAMESPACE:  # only the host's own pack names entries toolcrib__*
            staged.append(entry)
    _place(staged, catalog)
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
    unserved: list[Unserved] = field(default_factory=list)  # plugins its tools hook said it does not serve
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
        record, (settings_hook, *hooks) = self.record, self.hooks
        offer = Offer(record)
        with _warnings_of(record, self):
            self.settings = _settings(settings_hook, record, self.loaded, self)
            for what, hook in zip(_DECLARED, hooks, strict=True):
                if record.state != "loaded":
                    break
                offer.entries += _collect(hook, what, record, self.settings, self)
        if record.state != "loaded":
            offer.entries = []
        return offer


@contextmanager
def _warnings_of(record: PluginRecord, catalog: _Problems) -> Iterator[None]:
    """What a pack logs at warning level or above while the host collects its tools (on ``toolcrib.pack.<ns>``) is
    also a ``toolcrib check`` warning about the pack: it is how a pack says something is off in its settings."""

    def collect(log_record: logging.LogRecord) -> bool:  # a filter that lets everything through: handlers (or
        if log_record.levelno >= logging.WARNING:      # Python's last resort, printing to stderr) still get it
            catalog.problems.append(_pack_problem(record, log_record.getMessage(), "warning"))
        return True

    logger = pack_logger(record.name)
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
        origin = entry.tool.origin if entry.kind == "tool" else None
        if origin is not None and origin in taken:
            catalog.problems.append(_pack_problem(pack, f"{entry.name}: its plugin {origin!r} has the name of a pack "
                                                        "or server; rules that name it mean that one, not this plugin"))
            entry = dataclasses.replace(entry, definition=dataclasses.replace(entry.tool, origin=None))
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


def _unserved(pack: PluginRecord, unserved: list[Unserved], serving: dict[str, PluginRecord],
              taken: set[str]) -> list[PluginRecord]:
    """A record for each installed plugin the pack said it does not serve (``toolcrib.Unserved``), its reason as
    the record's note; a plugin some of whose tools the pack serves all the same gets the note on its record."""
    from importlib import metadata

    found: dict[str, PluginRecord] = {}
    for item in unserved:
        if item.origin in taken:
            continue
        record = serving.get(item.origin) or found.get(item.origin)
        if record is not None:
            record.error = f"{record.error}; {item.why}" if record.error else item.why
            continue
        try:
            version: str | None = metadata.version(item.origin)
        except (metadata.PackageNotFoundError, ValueError):
            version = None
        found[item.origin] = PluginRecord(name=item.origin, kind=pack.name, state="not served",
                                          distribution=item.origin, version=version,
                                          entry_point=f"offered to pack {pack.name!r}", error=item.why)
    return list(found.values())


def _place(entries: list[Entry], catalog: Catalog) -> None:
    """Every source's entries by kind and full name: a name two sources offer, or a URI (or URI template) two
    namespaces declare, is served by neither."""
    owners: dict[str, set[str]] = {}
    for entry in entries:
        if entry.uri is not None:
            owners.setdefault(entry.uri, set()).add(entry.namespace)
    for uri, namespaces in sorted(owners.items()):
        if len(namespaces) > 1:
            catalog.problems.append(Problem("error", f"resource {uri!r}", f"declared by more than one source "
                                            f"({', '.join(sorted(namespaces))}); neither is served"))
    placed: dict[str, dict[str, Entry]] = {"tools": {}, "resources": {}, "prompts": {}}  # by RULE_DIMENSION
    refused: set[tuple[str, str]] = set()
    for entry in entries:
        if entry.uri is not None and len(owners[entry.uri]) > 1:
            continue
        where = RULE_DIMENSION[entry.kind]  # a template and a resource share their names
        if (where, entry.name) in refused:
            continue
        other = placed[where].pop(entry.name, None)
        if other is not None:
            refused.add((where, entry.name))
            catalog.problems.append(Problem("error", f"{entry.kind} {entry.name!r}", f"offered by both "
                                            f"{other.supplier.name} {other.source!r} and {entry.supplier.name} "
                                            f"{entry.source!r}; neither is served"))
            continue
        placed[where][entry.name] = entry
    catalog.entries, catalog.resources, catalog.prompts = (
        {name: found[name] for name in sorted(found)} for found in placed.values())


@dataclass(frozen=True)
class _Declared:
    """What one of a pack's declaring hooks (``toolcrib_<hook>``) returns, and how the host says it is wrong."""

    hook: str  # "tools" | "resources" | "prompts"
    noun: str
    get: Any  # the object -> its definition, or None
    decorator: str
    expected: str


_DECLARED = (
    _Declared("tools", "tool", get_tool, "@toolcrib.tool", "a list of tools"),
    _Declared("resources", "resource", get_resource, "@toolcrib.resource(uri)", "a list"),
    _Declared("prompts", "prompt", get_prompt, "@toolcrib.prompt", "a list"),
)


def _settings(hook: PluginHook | None, record: PluginRecord, loaded: LoadedConfig, catalog: _Problems) -> Any:
    table = loaded.config.packs.get(record.name)
    values = table.settings if table is not None else {}
    model = None
    if hook is not None:
        model, raised = hook.heard({})
        if raised is not None:
            record.fail(f"toolcrib_settings_model raised {type(raised).__name__}: {raised}",
                        "".join(traceback.format_exception(raised)))
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


def _collect(hook: PluginHook | None, what: _Declared, record: PluginRecord, settings: Any,
             catalog: _Problems) -> list[Entry]:
    """What one of a pack's hooks declares (``what``: its tools, resources or prompts), each bad item on its own; a
    hook that raises or returns something other than a list fails the pack."""
    found: list[Any] = []
    items: Any = None
    if hook is not None:
        items, raised = hook.heard({"settings": settings})
        if raised is not None:
            record.fail(f"toolcrib_{what.hook} raised {type(raised).__name__}: {raised}",
                        "".join(traceback.format_exception(raised)))
            catalog.problems.append(_pack_problem(record, record.error or ""))
            return []
    if items is not None:
        if isinstance(items, Mapping) or not isinstance(items, Iterable) or isinstance(items, str | bytes):
            record.fail(f"toolcrib_{what.hook} returned {type(items).__name__}; expected {what.expected}")
            catalog.problems.append(_pack_problem(record, record.error or ""))
            return []
        for i, item in enumerate(items):
            if isinstance(item, Unserved) and what.hook == "tools" and isinstance(catalog, PackSource):
                catalog.unserved.append(item)
                continue
            spec = what.get(item)
            if spec is None:
                catalog.problems.append(_pack_problem(
                    record, f"toolcrib_{what.hook} item {i} ({item!r}) is not a {what.noun}: decorate it with "
                            f"{what.decorator}"))
                continue
            problem = tool_name_problem(spec.name) if isinstance(spec, Tool) else None  # built by hand: no checks yet
            if problem is not None:
                catalog.problems.append(_pack_problem(record, f"tool {spec.name!r} is not served: {problem}"))
                continue
            found.append(spec)
    counts: dict[str, int] = {}
    for spec in found:
        counts[spec.name] = counts.get(spec.name, 0) + 1
    provenance = Provenance(record.name, BUILTIN if record.kind == BUILTIN.name else PACK,
                            distribution=record.distribution, version=record.version,
                            where=record.entry_point or "")
    entries = [Entry(name=full_name(record.name, spec.name), provenance=provenance, definition=spec,
                     settings=settings)
               for spec in found if counts[spec.name] == 1]
    for name, count in sorted(counts.items()):
        if count > 1:
            catalog.problems.append(_pack_problem(
                record, f"{what.noun} name {name!r} is declared {count} times; none of them is served: rename all "
                        "but one"))
    return entries
