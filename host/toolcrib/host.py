"""``Host``: the Python API. Config -> plugins -> catalog -> rules; one view per agent, built on first use.

    host = toolcrib.Host.from_config("toolcrib.toml")
    view = host.view("reviewer")
    [t.name for t in view.tools]
    result = await view.call("orders__lookup_order", {"order_id": "O-1001"})
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio

from toolcrib import default_plugins, lock, patterns, uris, workspace
from toolcrib.audit import AuditSink
from toolcrib.calls import Pipeline
from toolcrib.catalog import Catalog, build_catalog
from toolcrib.config import AgentConfig, LoadedConfig, did_you_mean, load_config
from toolcrib.content import ToolResult
from toolcrib.curation import curate
from toolcrib.default_plugins.builtins import Builtins
from toolcrib.entries import Entry
from toolcrib.errors import ConfigError, Problem, ToolDeclarationError, UnknownAgentError
from toolcrib.governing import unlocated
from toolcrib.limits import Limiter
from toolcrib.names import HIDDEN_CHARACTERS, RESERVED_NAMESPACE, clean, clean_schema, full_name
from toolcrib.observe import Metrics
from toolcrib.patterns import Pattern
from toolcrib.permissions import (
    AgentRules,
    Check,
    Decision,
    check_availability,
    compile_rules,
    decide,
    permits,
    permitted,
    uri_check,
)
from toolcrib.plugins import (
    PluginRecord,
    autoload_enabled,
    get_plugin_manager,
    load_plugins,
    named_plugins,
    register_builtin,
)
from toolcrib.skills import discover as discover_skills
from toolcrib.sources import Source
from toolcrib.supply.kinds import KINDS, kind_named
from toolcrib.view import AgentView, ServedUris, app_uri, build_view, collector_paused, served_names

log = logging.getLogger("toolcrib.host")


class Host:
    """A loaded toolcrib: the config, the packs, the catalog and every agent's rules.

    ``plugins`` registers packs by namespace without installing them (a module, an object, or
    ``"module:attr"``); ``autoload=False`` loads no entry points (``TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD=1``).
    ``sources`` are the other suppliers of tools, opened (``toolcrib.sources.Source``: OpenAPI documents, upstream
    MCP servers, isolated packs, from ``toolcrib.supply``); the host makes none itself.
    """

    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        plugins: Mapping[str, Any] | None = None,
        autoload: bool | None = None,
        env: Mapping[str, str] | None = None,
        sources: Iterable[Source] = (),
        metrics: Metrics | None = None,
        limits: Limiter | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.loaded = loaded
        self.sources: dict[str, Source] = {source.name: source for source in sources}
        offers = [source.offer() for source in self.sources.values()]
        with collector_paused():
            self.pm = get_plugin_manager(env)
            folders = loaded.config.host.tool_dirs
            if folders:  # [host] tool_dirs: each folder a pack (a pack given by name wins the namespace)
                from toolcrib.folders import folder_packs

                plugins = {**folder_packs([loaded.resolve(f) for f in folders]), **(plugins or {})}
            withheld = frozenset().union(*(known.withheld(loaded) for known in KINDS))  # packs another kind serves
            builtins = default_plugins.create(loaded)
            self.records: list[PluginRecord] = [r for r in load_plugins(
                self.pm,
                disabled=loaded.disabled_packs() | withheld,
                autoload=autoload_enabled(env) if autoload is None else autoload,
                named=named_plugins(env),
                plugins=plugins,
                builtins=builtins,
                off=default_plugins.OFF,
            ) if r.name not in withheld or r.kind != "pack"] + [offer.record for offer in offers]
            given = {offer.record.name for offer in offers}
            self.records += [record for known in KINDS for record in known.unserved(loaded, given)]
            skills, problems = discover_skills(loaded, self.pm, self.records)
            self.skills = skills
            packs = {r.name for r in self.records if r.kind == "pack"}
            # sources that offer on demand: an agent allowed one loads its tools (toolcrib__load_mcp)
            self.lazy_servers: tuple[str, ...] = tuple(sorted(
                s.name for s in self.sources.values() if s.lazy and s.dimension == "mcps" and s.name not in packs))
            # The host's own pack comes last: what it serves (skills from packs included) is known by now.
            own = register_builtin(self.pm, RESERVED_NAMESPACE,
                                   Builtins(skills, loaded.config.agents, self.lazy_servers))
            self.records.insert(sum(1 for r in self.records if r.kind == "builtin"), own)  # shown with the built-ins
            from toolcrib._version import __version__

            for record in self.records:
                if record.kind == "builtin":
                    record.version = __version__
            self.governing = self._governing(skills)
            workspace.protect(self.governing)  # before any tool can run
            workspace.protect_code(loaded.code_folders())
            self.catalog: Catalog = build_catalog(self.pm, self.records, loaded, offers, KINDS)
            self.catalog.problems.extend(problems)
            for pack in self.catalog.packs:  # every pluggy plugin that serves tools is a source too
                self.sources.setdefault(pack.name, pack)
            self.catalog.entries, curation_problems = curate(self.catalog.entries, loaded, frozenset(self.lazy_servers))
            self.catalog.problems.extend(curation_problems)
            self._apply_lock()
            self._mark_apps()
            self.rules: dict[str, AgentRules] = compile_rules(loaded)
            sinks = [plugin for _, plugin in builtins  # the audit log, when one is kept
                     if isinstance(plugin, AuditSink) and self.pm.is_registered(plugin)]
            self.pipeline = Pipeline(self.pm, loaded, self.catalog.settings, metrics, limits, sinks)
            if loaded.config.policy.cedar is not None:
                self.pipeline.policies = dataclasses.replace(
                    self.pipeline.policies, hooks=(self._cedar(), *self.pipeline.policies.hooks))
            if self.pipeline.policies:  # the packs' policies join every agent's one decision
                self.rules = {name: dataclasses.replace(rules, policies=self.pipeline.policies)
                              for name, rules in self.rules.items()}
        self._views: dict[str | tuple[str, frozenset[str]], AgentView] = {}
        self._lock = threading.Lock()
        self._opened: list[Source] = []  # the sources from_config opened for this host

    def _cedar(self) -> Any:
        """The config's Cedar policies (``[policy] cedar``), checked against toolcrib's schema: a file that is
        missing, does not parse or does not validate stops the config (a forbid that cannot be evaluated would
        forbid nothing)."""
        from toolcrib import cedar

        where = f"{self.loaded.source}: policy.cedar"
        path = self.loaded.base_dir / str(self.loaded.config.policy.cedar)
        try:
            text = path.read_text(encoding="utf-8")
            problems = cedar.validate(text, where)
        except (OSError, UnicodeDecodeError) as exc:
            problems = [Problem("error", where, f"cannot read {path}: {exc}")]
        except ImportError as exc:
            problems = [Problem("error", where, str(exc))]
        if problems:
            raise ConfigError(problems)
        entries = [*self.catalog.entries.values(), *self.catalog.resources.values(), *self.catalog.prompts.values()]
        return cedar.CedarPolicy(text, entries, {name: agent.mode for name, agent in self.loaded.config.agents.items()})

    def _mark_apps(self) -> None:
        """Each resource that is an MCP App's page (a tool's ``_meta.ui.resourceUri``) learns its tools: ``decide``
        hides it from an agent that sees none of them."""
        apps: dict[str, list[Entry]] = {}
        for entry in self.catalog.entries.values():
            uri = app_uri(entry.tool)
            if uri is not None:
                apps.setdefault(uri, []).append(entry)
        if not apps:
            return
        for name, entry in self.catalog.resources.items():
            tools = apps.get(uris.normalize(entry.resource.uri)) if entry.kind == "resource" else None
            if tools:
                self.catalog.resources[name] = dataclasses.replace(entry, app_of=tuple(tools))

    def _apply_lock(self) -> None:
        """Hold back what ``toolcrib.lock`` says changed (and, when strict, what it does not know)."""
        held, problems = lock.hold(self.loaded, self.catalog.entries, {r.name for r in self.records if r.pinned})
        for name, why in held.items():
            entry = self.catalog.entries[name] = dataclasses.replace(self.catalog.entries[name], held=why)
            record = self.catalog.record(entry.source)
            if record is not None:
                note = f"{name} is held back by toolcrib.lock"
                record.error = f"{record.error}; {note}" if record.error else note
        for problem in problems:
            log.warning("%s", problem)
        self.catalog.problems.extend(problems)

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Host:
        """Load the config (``path``, ``$TOOLCRIB_CONFIG``, ``./toolcrib.toml`` or the built-in default), with the
        sources that keep nothing open (OpenAPI documents) opened (``toolcrib.supply.opened``). Upstream servers and
        isolated packs need a running event loop of their own: ``toolcrib.mcp.connect.open_host`` has them."""
        from toolcrib import supply

        loaded = load_config(path, env)
        made = supply.opened(loaded, env)
        host = cls(loaded, env=env, sources=[*kwargs.pop("sources", ()), *made], **kwargs)
        host._opened = made  # its own, closed by close()
        return host

    def _governing(self, skills: Mapping[str, Any]) -> dict[Path, str]:
        """What governs this host, which no tool may change: the config's files, the skills folders packs ship,
        and the Python environment the host runs from (a file written there runs as the host at its next start)."""
        found = self.loaded.governing()
        for skill in skills.values():
            found.setdefault(skill.path, f"the folder of skill {skill.name!r}")
        for prefix in {sys.prefix, sys.exec_prefix}:
            found.setdefault(Path(prefix), "the Python environment the host runs from")
        return found

    def source(self, name: str) -> Source | None:
        """The source of that name handed to this host (``toolcrib.sources``), if any."""
        return self.sources.get(name)

    @property
    def agent_configs(self) -> Mapping[str, AgentConfig]:
        return self.loaded.config.agents

    # -- agents and views -----------------------------------------------------------------------------------

    @property
    def agents(self) -> list[str]:
        return sorted(self.rules)

    def _rules(self, agent: str) -> AgentRules:
        rules = self.rules.get(agent) if isinstance(agent, str) else None
        if rules is None:
            raise UnknownAgentError(str(agent), self.rules)
        return rules

    def view(self, agent: str, lacking: frozenset[str] = frozenset()) -> AgentView:
        """The agent's view, built on first use and then reused (views never change; a reload makes a new Host).
        ``lacking``: scopes of the agent's ``identity.needs_scope`` that the request's OAuth token does not carry;
        what they guard is hidden too (a view of its own, also kept)."""
        key = (agent, lacking) if lacking else agent
        view = self._views.get(key)
        if view is None:
            rules = self._rules(agent)
            if lacking:
                rules = rules.lacking(lacking)
            with self._lock:
                view = self._views.get(key)
                if view is None:
                    entries = [*self.catalog.entries.values(), *self.catalog.resources.values(),
                               *self.catalog.prompts.values()]
                    with collector_paused():
                        view = build_view(rules, entries, self.pipeline, self, lambda: self.served_uris)
                    self._views[key] = view
        return view

    @functools.cached_property
    def served_uris(self) -> ServedUris:
        """Every resource URI some source serves (fixed ones and templates), for every view: what a result may
        not hand an agent whose view hides it, and what ``explain`` finds a URI by."""
        return ServedUris(self.catalog.resources.values())

    def forget_views(self) -> None:
        """Build each view afresh at its next use: for a process that changed its catalog in place (an isolated
        pack's, whose checks the host asks for: ``toolcrib.supply.mcp.pack_checks.defer_checks``)."""
        with self._lock:
            self._views.clear()
            self.__dict__.pop("served_uris", None)

    def explain(self, agent: str, name: str, lacking: frozenset[str] = frozenset()) -> Decision | None:
        """Every check of the one decision for this agent and a tool, prompt or resource (by full name, or a
        resource by its URI: a fixed one's, a template's own, or one that fits a template); None when no source
        offers it. ``lacking``: as for a request whose OAuth token lacks these scopes of ``identity.needs_scope``."""
        rules = self._rules(agent)
        if lacking:
            rules = rules.lacking(lacking)
        entry = self.catalog.entries.get(name)
        if entry is not None:
            return decide(rules, entry, detail=True, exhaustive=True)
        item = self.catalog.prompts.get(name) or self.catalog.resources.get(name)
        if item is not None:
            return decide(rules, item, detail=True, exhaustive=True)
        uri = uris.normalize(name)  # a URI as every rule sees it (docs://pages/%69nternal is docs://pages/internal)
        found = self.served_uris.find(uri)
        if found is None:
            return None
        template, parameters = found
        if template.kind == "resource":
            return decide(rules, template, detail=True, exhaustive=True)
        decision = decide(rules, template, detail=True, exhaustive=True)
        expanded = uris.expand(template.resource.uri, parameters)
        named = uri_check(rules, [uri] if expanded in (None, uri) else [uri, expanded])
        detail = f"{name!r} fits the template {template.uri!r}"
        check = Check("uri", named.passed, detail if named.passed else f"{detail}; {named.detail}")
        return dataclasses.replace(decision, name=name, visible=decision.visible and named.passed,
                                   checks=(*decision.checks, check))

    def similar(self, name: str, n: int = 3) -> list[str]:
        """Installed tools, prompts and resources whose names (or URIs) are close to ``name`` (for "did you
        mean")."""
        import difflib

        known = [*self.catalog.entries, *self.catalog.prompts, *self.catalog.resources]
        known += [r.uri for r in self.catalog.resources.values() if r.uri]
        return difflib.get_close_matches(name, known, n=n, cutoff=0.8)

    def listing(self, agent: str, *, hidden: bool = False) -> list[dict[str, Any]]:
        """The agent's tools as MCP's tools/list gives them; with ``hidden``, every installed tool, each with
        ``visible`` and, for a hidden one, ``hidden_because`` (and only its name and description)."""
        view = self.view(agent)
        if not hidden:
            return [dict(tool) for tool in view.mcp_tools]
        out = []
        for decision in self.decisions(agent):
            vt = view.lookup(decision.name)
            if vt is not None:
                item = vt.to_mcp()
            else:
                tool = self.catalog.entries[decision.name].tool
                item = {"name": decision.name, "description": clean(tool.description)}
            item["visible"] = decision.visible
            if not decision.visible:
                item["hidden_because"] = decision.reason
            out.append(item)
        return out

    def decisions(self, agent: str) -> list[Decision]:
        """The decision for every tool in the catalog, in the views' order (``toolcrib tools --all``)."""
        rules = self._rules(agent)
        return [decide(rules, entry, detail=True) for entry in self.catalog.entries.values()]

    async def call(
        self, agent: str, tool: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> ToolResult:
        """Call ``tool`` as ``agent`` through the full pipeline."""
        return await self.view(agent).call(tool, arguments, **kwargs)

    def call_sync(self, agent: str, tool: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """``call`` for code that is not async (runs its own event loop)."""
        return anyio.run(lambda: self.call(agent, tool, arguments))

    # -- problems ------------------------------------------------------------------------------------------

    def problems(self, env: Mapping[str, str] | None = None) -> list[Problem]:
        """Everything ``toolcrib check`` reports: pack, settings, server and schema errors, then warnings about
        rules that match nothing installed, agents that end up with no tools, and what the environment (``env``,
        by default the process's) lacks: a workspace that is not there, variables that are not set."""
        found = list(self.catalog.problems)
        found += self._environment_warnings(os.environ if env is None else env)
        for entry in self.catalog.entries.values():
            try:
                entry.tool.prepare()  # schemas are built lazily; check builds them all
            except ToolDeclarationError as exc:
                found.append(Problem("error", f"{entry.supplier.name} {entry.source!r}", f"{entry.name}: {exc}"))
                continue
            found += _hidden_text(entry)
            found += _recursive_schemas(entry)
        for agent, rules in sorted(self.rules.items()):
            found += self._rule_warnings(agent, rules)
            found += self._unpermitted_items(agent)
        for plugin, failed in dict.fromkeys(self.pipeline.policies.failures):  # (while the views were built)
            found.append(Problem("warning", f"policy {plugin!r}", failed))
        found += self._governing_warnings()
        from toolcrib.default_plugins.hooks import program_path

        for where, hook in self.loaded.config.hooks.programs():
            program = hook.command[0]
            if program_path(program, self.loaded.base_dir) is None:
                shown = f" ({self.loaded.base_dir / program})" if os.sep in program else " on PATH"
                what = "every call it matches is refused" if where.startswith("hooks.pre") else \
                    "the result of every call it matches is withheld"
                found.append(Problem("warning", f"{self.loaded.source}: {where}.command",
                                     f"program {program!r} is not found{shown}; {what}"))
        return found

    def sampling_subagents(self) -> dict[str, list[str]]:
        """The agents that run as sub-agents on the calling client's model (MCP sampling, deprecated as of 2026-07-28
        by SEP-2577: a client of that era may not offer it), each with the agents that may hand it a task
        (``toolcrib check`` says so)."""
        from toolcrib.subagents import runs_on

        agents = self.loaded.config.agents
        callers = {name: sorted(caller for caller, rules in self.rules.items()
                                if caller != name and permits(rules, "subagents", name))
                   for name in agents if agents[name].runner != "llm"}
        return {name: by for name, by in sorted(callers.items()) if by and runs_on(agents[name]) == "client"}

    def _failed_source(self, pattern: str) -> str | None:
        """The failed pack or server a rule's pattern names by its namespace (``orders__*``), if any."""
        namespace = pattern.split("__", 1)[0] if "__" in pattern else None
        for record in self.records:
            if record.name == namespace and record.state == "failed":
                return record.name
        return None

    def _environment_warnings(self, env: Mapping[str, str]) -> list[Problem]:
        source = self.loaded.source
        ours = frozenset(known for path in self.governing for known in workspace.names_of(path))
        found = [problem for known in KINDS for problem in known.warnings(self.loaded, ours)]
        workspace_folder = self.loaded.workspace
        if not workspace_folder.is_dir():
            found.append(Problem("warning", f"{source}: host.workspace", f"{workspace_folder} is not a folder: every "
                                 "call of a file tool will fail"))
        named: list[tuple[str, str]] = []  # (where, variable)
        for name, agent in sorted(self.loaded.config.agents.items()):
            variables = [agent.token_env] if isinstance(agent.token_env, str) else agent.token_env or []
            named += [(f"agents.{name}.token_env", v) for v in variables]
        if self.loaded.config.host.metrics_token_env:
            named.append(("host.metrics_token_env", self.loaded.config.host.metrics_token_env))
        for ns, pack in sorted(self.loaded.config.packs.items()):
            named += [(f"packs.{ns}.{key}", value) for key, value in sorted(pack.settings.items())
                      if key.endswith("_env") and isinstance(value, str)]
        for where, variable in named:
            if not env.get(variable):
                found.append(Problem("warning", f"{source}: {where}", f"${variable} is not set here"))
        return found

    def _governing_warnings(self) -> list[Problem]:
        """Where what governs the host meets what agents could change: tools hidden because their programs could
        reach it, upstream servers given a folder that holds it."""
        found = []
        hidden: dict[tuple[str, str], list[str]] = {}
        for agent, rules in sorted(self.rules.items()):
            checked = [e for e in self.catalog.entries.values() if e.tool.is_available and permitted(rules, e)]
            for name, (_, why, kind) in check_availability(rules, checked).items():
                if kind == "unconfinable":
                    hidden.setdefault((name, why), []).append(agent)
        for (name, why), agents in sorted(hidden.items()):
            found.append(Problem("warning", f"tool {name!r}", f"hidden from {', '.join(agents)}: {why}"))
        loaded = self.loaded
        for where, hook in loaded.config.hooks.programs():
            refusal = unlocated(where, hook.command, loaded.base_dir, hook.environment(os.environ), loaded.workspace,
                                hook.out_of_reach)
            if refusal is not None:
                found.append(Problem("warning", f"{loaded.source}: {where}.command", refusal))
        ws = os.path.realpath(loaded.workspace)
        for module_folder, where in sorted(loaded.code_folders().items()):
            real = os.path.realpath(module_folder)
            if real == ws or ws.startswith(real.rstrip("/") + "/"):
                found.append(Problem("warning", f"{loaded.source}: {where}", (
                    f"{where} imports Python modules from {real}, which holds the workspace: no tool may change a "
                    "Python file anywhere in the workspace (one could shadow a module it imports); give it a cwd "
                    "(or a script folder) outside the workspace")))
        return found

    def _unpermitted_items(self, agent: str) -> list[Problem]:
        """A hint for each source whose tools the agent sees and whose resources or prompts it does not, having no
        ``resources`` (or ``prompts``) rule at all: an operator who allows a pack's tools often means its resources
        and prompts too, and without such a rule the agent gets none."""
        view = self.view(agent)
        permissions = self.loaded.config.agents[agent].permissions
        ruled = {kind for kind in ("resources", "prompts")  # a kind with a rule is the rule's to decide
                 if permissions is not None and getattr(permissions, kind) is not None}
        seen = {vt.entry.namespace for vt in view.tools} - {RESERVED_NAMESPACE}  # the host's own follow its config
        has = {(e.namespace, kind) for kind, entries in (("resources", (*view.resources, *view.templates)),
                                                         ("prompts", view.prompts)) for e in entries}
        found = []
        for namespace in sorted(seen):
            missing = []
            for kind, entries in (("resources", self.catalog.resources), ("prompts", self.catalog.prompts)):
                offered = sum(1 for e in entries.values() if e.namespace == namespace)
                if offered and kind not in ruled and (namespace, kind) not in has:
                    noun = kind[:-1] if offered == 1 else kind
                    missing.append((kind, f"{offered} {noun}"))
            if missing:
                rules = " and ".join(f'{kind} = {{ allow = ["{namespace}__*"] }}' for kind, _ in missing)
                found.append(Problem("warning", f"{self.loaded.source}: agents.{agent}.permissions", (
                    f"agent {agent!r} sees {namespace!r}'s tools but none of its {' and '.join(w for _, w in missing)}"
                    f": no rule permits them (add {rules} if it should have them)")))
        return found

    def _rule_warnings(self, agent: str, rules: AgentRules) -> list[Problem]:
        source = self.loaded.source
        names: dict[str, set[str]] = {known.dimension: set() for known in KINDS if known.dimension}
        for record in self.records:  # a pack's plugins among them
            if (dimension := kind_named(record.kind).dimension) is not None:
                names[dimension].add(record.name)
        for known in KINDS:  # what a config table names, enabled or not
            if known.dimension:
                names[known.dimension] |= set(known.table(self.loaded.config))
        names |= {
            "tools": set(self.catalog.entries),
            "skills": set(self.skills) | set(self.loaded.config.skills),
            "subagents": set(self.loaded.config.agents) - {agent},  # an agent is never offered itself
            "resources": set(self.catalog.resources) | {r.uri for r in self.catalog.resources.values() if r.uri},
            "prompts": set(self.catalog.prompts),
        }
        templates = [r.resource for r in self.catalog.resources.values() if r.kind == "template"]
        # a tool its source names otherwise (an operationId or an upstream tool name that breaks toolcrib's
        # rule): the name a rule may have been written with, by the served one
        respelt = {full_name(e.namespace, e.tool.source_name): name for name, e in self.catalog.entries.items()
                   if e.tool.source_name}
        found = []

        def warn(where: str, message: str, severity: str = "warning") -> None:
            found.append(Problem(severity, f"{source}: {where}", message))

        def misspelt(where: str, pattern: Pattern) -> bool:
            """A tool rule that matches nothing but the name a source gives a tool served under another: an error,
            not a warning (a deny or an ask written so holds nothing, and the tool goes on as if unruled)."""
            meant = sorted(served for spelt, served in respelt.items() if pattern.matches(spelt))
            if not meant or any(pattern.matches(n) for n in names["tools"]):
                return False
            them = "them" if len(meant) > 1 else "it"
            warn(where, f"{pattern.text!r} matches no installed tool: it names {them} as the source does, and "
                 f"toolcrib serves {them} as {', '.join(map(repr, meant))} (a tool's own part of its name is "
                 "letters, digits and single underscores): write the rule with that name", "error")
            return True

        for dimension, rule in rules.dimensions.items():
            for i, pattern in enumerate(rule.patterns):
                if dimension == "resources" and any(t.match(pattern.text) is not None for t in templates):
                    continue  # a URI (or URIs) a template serves
                if dimension == "tools" and misspelt(f"{rule.where}.{rule.kind}[{i}]", pattern):
                    continue
                if not any(pattern.matches(n) for n in names[dimension]):
                    what = "other agent" if dimension == "subagents" else f"installed {_NOUN[dimension]}"
                    close = did_you_mean(pattern.text, names[dimension], 0.85) if pattern.specifier is None else None
                    hint = f" (did you mean {close!r}?)" if close else ""
                    failed = self._failed_source(pattern.text) if dimension in ("tools", "resources",
                                                                                "prompts") else None
                    if failed is not None:
                        hint = f" (its source {failed!r} failed to load: see its error)"
                    warn(f"{rule.where}.{rule.kind}[{i}]", f"{pattern.text!r} matches no {what}{hint}")
                if pattern.specifier is None:
                    continue
                for name in sorted(names["tools"]):
                    if pattern.matches(name) and not self.catalog.entries[name].tool.rule_subjects:
                        warn(f"{rule.where}.{rule.kind}[{i}]", f"{pattern.text!r}: {name} names no rule subject, so "
                             "the specifier cannot be checked (a deny blocks every call, an allow permits none)")
        for i, pattern in enumerate(rules.ask):
            if pattern.text.startswith("@"):
                continue  # a selector: chooses tools by what they are, and may rightly choose none
            if misspelt(f"agents.{agent}.permissions.ask[{i}]", pattern):
                continue
            if not any(pattern.matches(n) for n in names["tools"]):
                warn(f"agents.{agent}.permissions.ask[{i}]", f"{pattern.text!r} matches no installed tool")
        view = self.view(agent)
        if not view.tools:
            hint = ("it has no permissions table" if not rules.has_permissions
                    else f"see `toolcrib tools --agent {agent} --all` for why each tool is hidden")
            warn(f"agents.{agent}", f"the agent sees no tools ({hint})")
        search = rules.config.tool_search
        if search is not None and view.lookup("toolcrib__search_tools") is None:
            warn(f"agents.{agent}.tool_search", "the agent does not see toolcrib__search_tools, so every tool it "
                 f"sees is listed (`toolcrib explain --agent {agent} toolcrib__search_tools` says why)")
        elif search is not None:
            for i, text in enumerate(search.listed):
                if not any(patterns.parse("tools", text).matches(vt.name) for vt in view.tools):
                    warn(f"agents.{agent}.tool_search.listed[{i}]", f"{text!r} matches no tool the agent sees")
        for dimension, seen in (("resources", (*view.resources, *view.templates)), ("prompts", view.prompts)):
            rule = rules.dimensions[dimension]
            if rule.kind != "missing" and not seen:
                warn(rule.where, f"the agent is given {dimension}, yet sees none (`toolcrib explain --agent {agent} "
                                 "NAME` says why for each)")
        if rules.config.bare_names:
            for what, full in (("tools", [vt.name for vt in view.tools]), ("prompts", [p.name for p in view.prompts])):
                kept = sorted(set(full) - set(served_names(full)))
                if kept:
                    warn(f"agents.{agent}.bare_names", f"{', '.join(kept)} keep their full names: another of the "
                                                       f"agent's {what} has the same name without its namespace")
        return found

    def close(self) -> None:
        """Release what plugins hold open (the audit log), and close the sources ``from_config`` opened."""
        for record in self.records:
            close = getattr(record.plugin, "close", None)
            if record.kind == "builtin" and callable(close):
                close()
        if self._opened:
            from toolcrib import supply

            done, self._opened = self._opened, []
            supply.closed(done)


_NOUN = {"plugins": "pack", "mcps": "upstream server", "tools": "tool", "skills": "skill", "subagents": "agent",
         "resources": "resource (by name or URI)", "prompts": "prompt"}


def _recursive_schemas(entry: Entry) -> list[Problem]:
    """A warning for a tool whose schema holds a recursive model: it is served with the ``$ref`` that cannot be
    inlined, which some agent frameworks do not follow (``toolcrib.schemas``)."""
    from toolcrib.schemas import recursive

    tool = entry.tool
    found = []
    for which, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
        names = recursive(schema) if schema is not None else []
        if names:
            found.append(Problem("warning", f"{entry.supplier.name} {entry.source!r}", (
                f"{entry.name}: its {which} schema holds a recursive model ({', '.join(names)}), served with $ref "
                "and $defs: some agent frameworks do not follow them (openai-agents' strict mode, llama-index)")))
    return found


def _hidden_text(entry: Entry) -> list[Problem]:
    """Warnings for a tool whose texts hold hidden characters: agents get its prose without them, but a reviewer
    should know a pack hides text, and a hidden character in a name or an enum value stays (it means something)."""
    tool = entry.tool
    prose = [what for what, text in (("description", tool.description), ("title", tool.title or ""))
             if HIDDEN_CHARACTERS.search(text)]
    used: list[str] = []
    for name, schema in (("inputSchema", tool.input_schema), ("outputSchema", tool.output_schema)):
        if schema is not None:
            before = len(used)
            cleaned = clean_schema(schema, used, name)
            if cleaned != schema and len(used) == before:
                prose.append(name)
    found = []
    where = f"{entry.supplier.name} {entry.source!r}"
    if prose:
        found.append(Problem("warning", where, f"{entry.name}: hidden characters (zero-width, direction, tag or "
                             f"control) in its {', '.join(prose)}; agents get the text without them"))
    if used:
        found.append(Problem("warning", where, f"{entry.name}: hidden characters in {', '.join(used[:3])}, which "
                             "cannot be removed without changing what the tool takes; agents see them"))
    return found
