"""Permission rules -> decisions with reasons. ``decide`` is the one function that says whether an agent may see
anything: a tool, a skill, another agent, an upstream server. Listing, calling, schema export, ``explain``, the
host's own tools and every ``Context`` capability go through it.

Rules are compiled once per config. A tool is visible only when its source is permitted (``plugins`` for
packs, ``mcps`` for upstream servers, ...), its full name is permitted by ``tools``, the agent's mode lets
it be seen, and its ``is_available`` says yes. A missing ``permissions`` table or a missing dimension
denies everything of that dimension; wherever an allow and a deny both apply, deny wins.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolcrib import patterns, uris
from toolcrib.config import AgentConfig, LoadedConfig
from toolcrib.context import AvailabilityContext
from toolcrib.entries import BUILTIN, RULE_DIMENSION, Entry
from toolcrib.patterns import SELECTORS, Pattern, Specifiers
from toolcrib.policy import PASSED, Policies, Verdict, request_for
from toolcrib.sandbox import Unconfinable

log = logging.getLogger("toolcrib.permissions")


@dataclass(frozen=True, slots=True)
class Check:
    """One step of a decision: what was checked, whether it passed, and the rule or reason."""

    name: str  # "source" | "tools" | "mode" | "scope" | "available" (tools; items: their dimension)
    passed: bool
    detail: str
    kind: str | None = None  # "unconfinable": hidden because its programs could reach what governs the host


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether ``agent`` sees the ``kind`` named ``name`` (a tool, a skill, an agent, a server), with every check
    that was made, in order."""

    agent: str
    name: str
    visible: bool
    checks: tuple[Check, ...]
    kind: str = "tool"

    @property
    def reason(self) -> str:
        """The check that hid it; for a visible one, the rule that let it through (the ``tools`` rule for a tool,
        the dimension's rule for anything else)."""
        for check in self.checks:
            if not check.passed:
                return check.detail
        deciding = next((c for c in self.checks if c.name in ("tools", "rule")), None)
        return deciding.detail if deciding is not None else (self.checks[0].detail if self.checks else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            self.kind: self.name,
            "visible": self.visible,
            "checks": [{"check": c.name, "passed": c.passed, "detail": c.detail} for c in self.checks],
        }


@dataclass(frozen=True, slots=True)
class Named:
    """Something other than a tool an agent may be given, by the dimension that governs it and its name: a skill
    (``skills``), another agent to run (``subagents``), an upstream server to load (``mcps``)."""

    dimension: str
    name: str


KINDS = {"skills": "skill", "subagents": "agent", "mcps": "server", "plugins": "pack"}


def _deciding(kind: str, patterns: Sequence[Pattern]) -> tuple[Pattern, ...]:
    """A deny hides only with a bare pattern; a pattern with a specifier restricts calls instead."""
    return tuple(p for p in patterns if kind == "allow" or p.specifier is None)


@dataclass(frozen=True, slots=True)
class DimensionRule:
    """One compiled dimension of one agent: ``kind`` is "allow", "deny" or "missing"."""

    dimension: str
    kind: str
    patterns: tuple[Pattern, ...]
    where: str  # "agents.reviewer.permissions.tools"
    _exact: Mapping[str, Pattern] = field(default_factory=dict, repr=False)
    _globs: tuple[Pattern, ...] = ()

    @classmethod
    def build(cls, dimension: str, kind: str, compiled: tuple[Pattern, ...], where: str) -> DimensionRule:
        exact: dict[str, Pattern] = {}
        globs: list[Pattern] = []
        for p in _deciding(kind, compiled):
            if "*" in p.name:
                globs.append(p)
            else:
                exact.setdefault(p.name, p)
        return cls(dimension, kind, compiled, where, exact, tuple(globs))

    @property
    def deciding(self) -> tuple[Pattern, ...]:
        """The patterns that decide whether a name is seen (what ``match`` matches)."""
        return _deciding(self.kind, self.patterns)

    def match(self, name: str) -> Pattern | None:
        """The first pattern that decides for ``name`` (exact names first, then globs), or None."""
        found = self._exact.get(name)
        if found is not None:
            return found
        for pattern in self._globs:
            if pattern.matches(name):
                return pattern
        return None

    def permits(self, name: str, uri: str | None = None) -> tuple[bool, Pattern | None]:
        """Whether the rule lets ``name`` through (and the pattern that decided). A resource's rule is matched
        against its full name and its URI: an allow that matches either lets it through, a deny that matches
        either hides it."""
        if self.kind == "missing":
            return False, None
        pattern = self.match(name)
        if pattern is None and uri is not None:
            pattern = self.match(uris.normalize(uri))
        return (pattern is not None, pattern) if self.kind == "allow" else (pattern is None, pattern)

    def describe(self, passed: bool, pattern: Pattern | None) -> str:
        if self.kind == "missing":
            return f"{self.where} is not set, so nothing of '{self.dimension}' is allowed"
        if pattern is not None:
            verb = "allowed" if passed else "denied"
            return f"{verb} by {self.where}.{self.kind} {pattern.text!r}"
        if not passed:
            return f"not matched by any pattern of {self.where}.allow"
        return f"not matched by {self.where}.deny"

    def specifiers(self, name: str) -> tuple[Pattern, ...]:
        """The patterns with an argument specifier that name this tool."""
        return tuple(p for p in self.patterns if p.specifier is not None and p.matches(name))

    def bare_allow(self, name: str) -> bool:
        return self.kind == "allow" and any(p.specifier is None and p.matches(name) for p in self.patterns)


@dataclass(frozen=True, slots=True)
class CallRules:
    """The argument rules (specifiers) and ``ask`` rules that apply to one visible tool's calls.

    A tool names its rule subjects: the arguments it acts on (a path, a URL, a command; ``fs__copy`` names its
    source and its destination). A rule holds for every subject of a call: a deny specifier that matches any of
    them denies, an allow list must match each of them, an ask specifier that matches any of them asks. An
    ``approve`` rule pre-approves a call an ask rule would hold: by the tool alone, or with a specifier that matches
    each of its subjects.
    """

    subjects: tuple[str, ...]  # the arguments the tool names as its rule subjects
    allow: tuple[Pattern, ...]  # when set, each subject of a call must match one of these
    deny: tuple[Pattern, ...]
    ask: tuple[Pattern, ...]
    approve: tuple[Pattern, ...] = ()
    # allow and deny compiled together (patterns.Specifiers): hundreds of them cost a call a few look-ups
    _allow: Specifiers = field(init=False, repr=False, compare=False)
    _deny: Specifiers = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", Specifiers(self.allow))
        object.__setattr__(self, "_deny", Specifiers(self.deny))

    def values(self, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(argument, text) of each subject present in ``arguments``, as rules match it."""
        found = []
        for name in self.subjects:
            value = arguments.get(name)
            if value is None:
                continue
            if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                value = shlex.join(value)  # an argv is matched as the command line it spells
            found.append((name, uris.normalize(str(value))))  # in one spelling with the rules: a URL's normal form
        return found

    def to_json(self) -> dict[str, Any]:
        """The rules as ``explain --json`` shows them."""
        return {"subjects": list(self.subjects), "deny": [p.text for p in self.deny],
                "allow": [p.text for p in self.allow], "ask": [p.text for p in self.ask],
                "approve": [p.text for p in self.approve]}

    def check(self, arguments: Mapping[str, Any]) -> tuple[str, Pattern | None, str | None]:
        """("deny" | "ask" | "approve" | "ok", the rule that decided or None, the argument it decided on or None)
        for one call; deny wins over ask, approve over ask. A specifier on a call with no subject to match cannot
        be checked: it fails closed (a deny denies, an allow permits nothing, an ask asks, an approve does not
        approve)."""
        values = self.values(arguments)
        if self.deny:
            if not values:
                return "deny", self.deny[0], None
            first: tuple[int, str] | None = None  # the first deny pattern that matches a subject, and that subject
            for name, text in values:
                index = self._deny.first(text)
                if index is not None and (first is None or index < first[0]):
                    first = (index, name)
            if first is not None:
                return "deny", self.deny[first[0]], first[1]
        if self.allow:
            if not values:
                return "deny", None, None
            for name, text in values:
                if self._allow.first(text) is None:
                    return "deny", None, name
        for pattern in self.ask:
            if pattern.specifier is None or not values:
                return self._approved(values) or ("ask", pattern, None)
            for name, text in values:
                if pattern.matches_subject(text):
                    return self._approved(values) or ("ask", pattern, name)
        return "ok", None, None

    def _approved(self, values: list[tuple[str, str]]) -> tuple[str, Pattern, None] | None:
        for pattern in self.approve:
            if pattern.specifier is None or (values and all(pattern.matches_subject(text) for _, text in values)):
                return "approve", pattern, None
        return None


@dataclass(frozen=True, slots=True)
class AgentRules:
    """One agent's compiled rules: built once per config, read by ``decide``."""

    agent: str
    config: AgentConfig
    capabilities: frozenset[str]
    dimensions: Mapping[str, DimensionRule]
    ask: tuple[Pattern, ...]
    has_permissions: bool
    workspace: Path | None = None
    approve: tuple[Pattern, ...] = ()  # pre-approves what ask would hold
    availability_timeout: float = 5.0
    # (dimension, pattern, scope): what the request's OAuth token may not see, lacking a scope (identity.needs_scope)
    scope_hidden: tuple[tuple[str, Pattern, str], ...] = ()
    policies: Policies | None = None  # the packs' policies (toolcrib_policy), asked about what the rules permit
    _sources: dict[tuple[str, str, str | None], tuple[bool, Pattern | None]] = field(default_factory=dict, repr=False)

    def lacking(self, scopes: frozenset[str]) -> AgentRules:
        """These rules for a request whose token lacks ``scopes`` (of ``identity.needs_scope``): what each of them
        guards is hidden as well."""
        needs = self.config.identity.needs_scope if self.config.identity is not None else {}
        hidden = tuple((dimension, patterns.parse(dimension, text), scope) for scope in sorted(scopes) if scope in needs
                       for dimension in ("tools", "resources", "prompts")
                       for text in getattr(needs[scope], dimension))
        # (the copy shares source_permits' memo: what it remembers depends on the dimensions alone, which scopes
        # leave as they are)
        return dataclasses.replace(self, scope_hidden=hidden)

    @property
    def mode(self) -> str:
        return self.config.mode

    def call_rules(self, entry: Entry) -> CallRules | None:
        """The call-time rules for a tool this agent sees, or None when its calls need no check."""
        tools = self.dimensions["tools"]
        if not self.ask and not any(p.specifier is not None for p in tools.patterns):
            return None
        specs = tools.specifiers(entry.name)
        allow = specs if tools.kind == "allow" and not tools.bare_allow(entry.name) else ()
        deny = specs if tools.kind == "deny" else ()
        ask = tuple(p for p in self.ask if (_selects(p.text, entry) if p.text in SELECTORS else p.matches(entry.name)))
        if not (allow or deny or ask):
            return None
        approve = tuple(p for p in self.approve
                        if (_selects(p.text, entry) if p.text in SELECTORS else p.matches(entry.name)))
        return CallRules(subjects=entry.tool.rule_subjects, allow=allow, deny=deny, ask=ask, approve=approve)

    def source_permits(self, dimension: str, source: str, origin: str | None = None) -> tuple[bool, Pattern | None]:
        """``permits`` of a dimension's rule for one name, remembered (there are few sources, many tools). Only
        ``decide`` asks it: every other question goes through ``decide``.

        A tool a pack serves from another installed plugin (``origin``: ``llm-tools-simpleeval`` in the ``llm``
        pack) is of both: an allow that names either lets it through, a deny that names either hides it.
        """
        key = (dimension, source, origin)
        found = self._sources.get(key)
        if found is None:
            rule = self.dimensions[dimension]
            found = rule.permits(source)
            if origin is not None:  # (a missing rule permits neither name)
                by_origin = rule.permits(origin)
                # allow: either name lets it through; deny: either name hides it
                if (rule.kind == "allow" and not found[0]) or (rule.kind == "deny" and not by_origin[0]):
                    found = by_origin
            self._sources[key] = found
        return found


def _selects(selector: str, entry: Entry) -> bool:
    """Whether an ``ask`` selector chooses this tool (by its annotations, as the host trusts them). Never a proxy
    to the agent's own tools: the tool it calls is chosen, or not, by its own."""
    if entry.name in VIEW_PROXIES:
        return False
    if selector == "@writes":
        return not entry.read_only
    return entry.destructive  # "@destructive"


def compile_rules(loaded: LoadedConfig) -> dict[str, AgentRules]:
    """Compile every agent's rules (the config was validated, so every pattern parses)."""
    rules = {}
    for name, agent in loaded.config.agents.items():
        dims = {}
        for dimension in patterns.DIMENSIONS:
            where = f"agents.{name}.permissions.{dimension}"
            rule = getattr(agent.permissions, dimension) if agent.permissions is not None else None
            if rule is None:
                dims[dimension] = DimensionRule.build(dimension, "missing", (), where)
                continue
            kind = "allow" if rule.allow is not None else "deny"
            compiled = tuple(patterns.parse(dimension, text) for text in getattr(rule, kind))
            dims[dimension] = DimensionRule.build(dimension, kind, compiled, where)
        ask = tuple(patterns.parse("ask", t) for t in agent.permissions.ask) if agent.permissions else ()
        approve = tuple(patterns.parse("ask", t) for t in agent.permissions.approve) if agent.permissions else ()
        rules[name] = AgentRules(
            agent=name,
            config=agent,
            capabilities=loaded.capabilities(agent.model),
            dimensions=dims,
            ask=ask,
            approve=approve,
            has_permissions=agent.permissions is not None,
            workspace=loaded.workspace,
            availability_timeout=loaded.config.host.availability_timeout,
        )
    return rules


def permitted(rules: AgentRules, entry: Entry) -> bool:
    """``decide``'s verdict with every availability check assumed to pass: whether the subject's check is worth
    running (``build_view`` runs those together, under one budget). Derived from ``decide``, so that the order
    and meaning of the checks are written once."""
    return decide(rules, entry, availability=_ASSUMED, policy=_ASSUMED_POLICY).visible


class _AssumedAvailable(Mapping[str, "Availability"]):
    """Every subject available, without asking its check (``permitted``)."""

    def __getitem__(self, name: str) -> Availability:
        return (True, "assumed", None)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def decide(rules: AgentRules, subject: Entry | Named, *, detail: bool = False, exhaustive: bool = False,
           availability: Mapping[str, Availability] | None = None, chain: Sequence[str] = (),
           policy: Mapping[str, Verdict] | None = None) -> Decision:
    """May ``rules.agent`` see ``subject``? The one decision, for every kind of thing an agent may be given.

    An entry (a tool, resource, template or prompt): the checks run in order - the definition lock, source, the
    rule of its kind's dimension (``tools``, ``resources``, ``prompts``; a resource's rule is matched against its
    full name and its URI), the request's scopes, mode (tools only: reading changes nothing), the packs' policies
    (``toolcrib_policy``, action ``list``), availability, and for a resource that is an MCP App's page, that the
    agent sees one of its tools - and stop at the first that fails. The host's own
    entries (``toolcrib__*``) have no source to permit: each is available when the agent may have some of what it
    serves (a skill, an agent, a server). Anything else (a
    ``Named`` skill, agent or server): its dimension's rule; an agent is never offered itself, nor one of the
    ``chain`` of runs that led here.

    ``detail`` records each check with the rule or reason that decided it (``--all``, ``explain``); ``exhaustive``
    also runs the checks after a failing one (``explain``). The verdict is the same either way. ``availability``
    holds answers of availability checks already run (``check_availability``), by ``availability_key``; ``policy``
    the policies' verdicts (``check_policies``), the same way.
    """
    kind = subject.kind if isinstance(subject, Entry) else KINDS.get(subject.dimension, subject.dimension)
    if not rules.has_permissions:
        check = Check("permissions", False, f"agent {rules.agent!r} has no [agents.{rules.agent}.permissions] "
                                            "table, so it sees nothing")
        return Decision(rules.agent, subject.name, False, (check,) if detail else (), kind)
    if isinstance(subject, Named):
        return _decide_named(rules, subject, kind, detail, chain)
    entry = subject
    tool = kind == "tool"
    exhaustive = exhaustive and detail
    checks: list[Check] = []
    if entry.held is not None:  # the definition lock: for every agent, before any rule
        held = Check("lock", False, entry.held)
        if not exhaustive:
            return Decision(rules.agent, entry.name, False, (held,) if detail else (), kind)
        checks.append(held)
    provenance = entry.provenance
    if provenance.kind is BUILTIN:
        passed = True
        if detail:
            own = "the host's own tool" if tool else "the host's own"
            checks.append(Check("source", True, f"{own}: it is offered by what it serves (see available)"))
    else:
        source_rule = rules.dimensions[provenance.dimension]
        origin = entry.tool.origin if tool else None
        passed, pattern = rules.source_permits(provenance.dimension, provenance.source, origin)
        if detail:
            of = f" (its plugin {origin!r})" if origin is not None else ""
            word = provenance.kind.label  # (never the host's own here)
            text = (f"{word} {provenance.source!r}{of}: "
                    f"{source_rule.describe(passed, pattern)}")
            checks.append(Check("source", passed, text))
    visible = passed
    dimension = RULE_DIMENSION[kind]
    uri = entry.uri
    if visible or exhaustive:
        rule = rules.dimensions[dimension]
        passed, pattern = rule.permits(entry.name, uri)
        if detail:
            checks.append(Check(dimension, passed, rule.describe(passed, pattern)))
        visible = visible and passed
    if rules.scope_hidden and (visible or exhaustive):
        scope = _scope_check(rules, dimension, entry.name, uri)
        if detail:
            checks.append(scope)
        visible = visible and scope.passed
    if tool and (visible or exhaustive):
        passed = rules.mode != "plan" or entry.read_only or entry.name in VIEW_PROXIES
        if detail:
            checks.append(Check("mode", passed, _mode_detail(rules, entry, passed)))
        visible = visible and passed
    if rules.policies and (visible or exhaustive):
        passed, why = _policy(rules, entry, policy)
        if detail:
            checks.append(Check("policy", passed, why))
        visible = visible and passed
    if visible or exhaustive:
        answer = _availability(rules, entry, availability)
        passed = answer[0]
        if detail:
            checks.append(Check("available", passed, answer[1], answer[2]))
        visible = visible and passed
    if entry.app_of and (visible or exhaustive):  # an App's page is its tools': seen with one of them, or not at all
        seen = [tool.name for tool in entry.app_of
                if decide(rules, tool, availability=availability, policy=policy, chain=chain).visible]
        if detail:
            names = ", ".join(tool.name for tool in entry.app_of)
            checks.append(Check("app", bool(seen), f"the MCP App of {', '.join(seen)}" if seen else
                                f"the MCP App of {names}, which the agent does not see"))
        visible = visible and bool(seen)
    return Decision(rules.agent, entry.name, visible and entry.held is None, tuple(checks), kind)


def availability_key(entry: Entry) -> str:
    """Under what ``check_availability`` answers for ``entry``: a tool by its name, anything else by its kind
    and name (a tool and a prompt of one pack may share a name)."""
    return entry.name if entry.kind == "tool" else f"{entry.kind} {entry.name}"


def _availability(rules: AgentRules, entry: Entry, known: Mapping[str, Availability] | None) -> Availability:
    """The entry's availability: a given answer (``known``, asked once for a whole view), else its check asked
    now."""
    if entry.is_available is None:
        return (True, "the tool has no availability check" if entry.kind == "tool" else "no availability check",
                None)
    found = known.get(availability_key(entry)) if known is not None else None
    return found if found is not None else check_availability(rules, [entry])[availability_key(entry)]


def _policy(rules: AgentRules, entry: Entry, known: Mapping[str, Verdict] | None) -> Verdict:
    """The policies' verdict on listing ``entry``: a given one (``check_policies``, asked once for a whole view),
    else asked now."""
    key = availability_key(entry)
    found = known.get(key) if known is not None else None
    return found if found is not None else check_policies(rules, [entry])[key]


def check_policies(rules: AgentRules, entries: Sequence[Entry]) -> dict[str, Verdict]:
    """The policies' verdicts on listing ``entries`` for ``rules.agent``, by ``availability_key``: asked on a
    worker thread, each within ``[policy] timeout`` (one that hangs denies its entry, and the rest go on)."""
    policies = rules.policies
    if not policies:
        return {}
    asked = [(availability_key(entry), request_for(entry, rules.agent, "list", rules.mode)) for entry in entries]
    outcomes = _run_checks([job for key, request in asked for job in policies.jobs(key, request)], policies.timeout)
    return {key: policies.interpret_all(key, outcomes, request) for key, request in asked}


def _scope_hides(rules: AgentRules, dimension: str, name: str, uri: str | None = None) -> tuple[str, Pattern] | None:
    """The scope (and its pattern) the request's token lacks to see this, if any."""
    for hidden_dimension, pattern, scope in rules.scope_hidden:
        if hidden_dimension == dimension and (pattern.matches(name) or
                                              (uri is not None and pattern.matches(uris.normalize(uri)))):
            return scope, pattern
    return None


def _scope_check(rules: AgentRules, dimension: str, name: str, uri: str | None = None) -> Check:
    hides = _scope_hides(rules, dimension, name, uri)
    if hides is None:
        return Check("scope", True, "the token carries every scope it needs")
    return Check("scope", False, f"needs scope {hides[0]!r} (identity.needs_scope: {hides[1].text!r}), which the "
                                 "request's token does not carry")


def uri_check(rules: AgentRules, uris_of_it: Sequence[str]) -> Check:
    """Whether a URI that fits a template the agent sees may be read: a deny rule of ``resources`` or a scope the
    request's token lacks (``identity.needs_scope``) that names the URI itself hides it. ``uris_of_it`` are its
    normal form and the URI the template re-expands to from its decoded parameters (``toolcrib.uris``): a rule
    naming either hides it."""
    rule = rules.dimensions["resources"]
    for uri in uris_of_it:
        named = rule.match(uri) if rule.kind == "deny" else None
        if named is not None:
            return Check("uri", False, rule.describe(False, named))
        for dimension, pattern, scope in rules.scope_hidden:
            if dimension == "resources" and pattern.matches(uri):
                return Check("uri", False, f"needs scope {scope!r} (identity.needs_scope: {pattern.text!r}), which "
                                           "the request's token does not carry")
    return Check("uri", True, "no rule names it")


def _decide_named(rules: AgentRules, subject: Named, kind: str, detail: bool, chain: Sequence[str]) -> Decision:
    if subject.dimension == "subagents" and (subject.name == rules.agent or subject.name in chain):
        why = ("an agent is never offered itself" if subject.name == rules.agent
               else "it is one of the agents whose run led here, and a run never goes back along its chain")
        return Decision(rules.agent, subject.name, False, (Check("rule", False, why),) if detail else (), kind)
    rule = rules.dimensions[subject.dimension]
    passed, pattern = rules.source_permits(subject.dimension, subject.name)
    checks = (Check("rule", passed, f"{kind} {subject.name!r}: {rule.describe(passed, pattern)}"),) if detail else ()
    return Decision(rules.agent, subject.name, passed, checks, kind)


# The host's tools that call only the calling agent's own tools, through its own view (toolcrib__call_tool): what
# they may do is what those tools may, so plan mode, which keeps the view to read-only tools, keeps them too. The
# toolcrib namespace is the host's own: no pack or server can serve a tool under one of these names.
VIEW_PROXIES = frozenset({"toolcrib__call_tool"})


def permits(rules: AgentRules, dimension: str, name: str, chain: Sequence[str] = ()) -> bool:
    """``decide(rules, Named(dimension, name), chain=chain).visible``."""
    return decide(rules, Named(dimension, name), chain=chain).visible


def _mode_detail(rules: AgentRules, entry: Entry, passed: bool) -> str:
    if rules.mode != "plan":
        return f"mode {rules.mode!r} shows every permitted tool"
    if passed and entry.name in VIEW_PROXIES:
        return ("plan mode, and the tool calls only the agent's own tools, which plan mode keeps to the read-only "
                "ones")
    if passed:
        return "plan mode, and the tool is annotated read-only"
    if not entry.trusted and entry.tool.annotations.get("readOnlyHint") is True:
        return (f"plan mode shows only read-only tools; upstream server {entry.source!r} is not trusted, so its "
                "readOnlyHint does not count (set trusted = true to trust it)")
    return "plan mode shows only tools annotated read-only (readOnlyHint), and this one is not"


# -- availability checks -----------------------------------------------------------------------------------------

Availability = tuple[bool, str, "str | None"]
"""(available, the reason, a kind: ``"unconfinable"`` when the tool's programs could reach what governs the host)."""
_ASSUMED = _AssumedAvailable()


class _AssumedPassed(Mapping[str, "Verdict"]):
    """Every policy assumed to have no objection (``permitted``)."""

    def __getitem__(self, name: str) -> Verdict:
        return PASSED

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_ASSUMED_POLICY = _AssumedPassed()


def check_availability(rules: AgentRules, entries: Sequence[Entry],
                       chain: Sequence[str] = ()) -> dict[str, Availability]:
    """Run the availability checks of ``entries`` for ``rules.agent`` (within a run's ``chain``), each within
    ``[host] availability_timeout`` seconds: one that takes longer (or never returns) hides its tool with that
    reason, and the rest go on. The checks run one after another on a worker thread, so a slow one costs its
    budget, not the caller's loop."""
    jobs = []
    for entry in entries:
        check = entry.is_available
        if check is not None:
            jobs.append((availability_key(entry), check, availability_context(rules, entry, chain)))
    answers: dict[str, Availability] = {}
    for name, outcome in _run_checks(jobs, rules.availability_timeout).items():
        answers[name] = _interpret(rules, name, outcome)
    return answers


def availability_context(rules: AgentRules, entry: Entry,
                         chain: Sequence[str] = ()) -> AvailabilityContext:
    """What ``entry``'s ``is_available`` and ``describe`` see of ``rules.agent`` (within a run's ``chain``)."""
    return AvailabilityContext(agent=rules.agent, model=rules.config.model, capabilities=rules.capabilities,
                               settings=entry.settings, mode=rules.mode, workspace=rules.workspace,
                               _permits=lambda dimension, name: permits(rules, dimension, name, chain))


def _interpret(rules: AgentRules, name: str, outcome: tuple[str, Any]) -> Availability:
    kind, answer = outcome
    if kind == "timeout":
        log.warning("is_available of %s gave no answer within %g seconds for agent %r; the tool is hidden", name,
                    rules.availability_timeout, rules.agent)
        return False, (f"is_available gave no answer within {rules.availability_timeout:g} seconds (hidden: fail "
                       "closed; [host] availability_timeout)"), None
    if kind == "raised":
        log.warning("is_available of %s raised %s for agent %r; the tool is hidden", name, type(answer).__name__,
                    rules.agent)
        log.debug("is_available of %s raised", name, exc_info=answer)
        return False, f"is_available raised {type(answer).__name__}: {answer} (hidden: fail closed)", None
    if answer is True:
        return True, "is_available said yes", None
    if answer is False:
        return False, "is_available said no", None
    if isinstance(answer, str):
        why = "unconfinable" if isinstance(answer, Unconfinable) else None
        return (False, f"not available: {answer}", why) if answer.strip() else (False, "is_available said no", None)
    return False, f"is_available returned {answer!r}; expected True, False or a reason (hidden: fail closed)", None


class _Checks:
    """Availability checks (or policies) run in order on a thread of their own; ``current`` says which runs, since
    when."""

    def __init__(self, jobs: Sequence[tuple[str, Any, Any]]) -> None:
        self.jobs = jobs
        self.results: dict[str, tuple[str, Any]] = {}
        self.current = (0, time.monotonic())
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False

    def run(self) -> None:
        for i, (name, check, ctx) in enumerate(self.jobs):
            self.current = (i, time.monotonic())
            try:
                outcome: tuple[str, Any] = ("answer", check(ctx))
            except BaseException as exc:
                outcome = ("raised", exc)
            with self.lock:
                if self.abandoned:
                    return
                self.results[name] = outcome
        self.done.set()


def _run_checks(jobs: Sequence[tuple[str, Any, Any]], budget: float) -> dict[str, tuple[str, Any]]:
    """``check(argument)`` of each job ``(key, check, argument)``, in order on a worker thread, each within
    ``budget`` seconds: by key, ``("answer", what it returned)``, ``("raised", what it raised)`` or ``("timeout",
    None)``; the thread of one that hangs is abandoned and the rest go on on another."""
    results: dict[str, tuple[str, Any]] = {}
    while jobs:
        batch = _Checks(jobs)
        threading.Thread(target=batch.run, name="toolcrib-availability", daemon=True).start()
        while not batch.done.is_set():
            index, started = batch.current
            left = started + budget - time.monotonic()
            if left > 0:
                batch.done.wait(left)
                continue
            with batch.lock:
                if batch.done.is_set() or batch.current[0] != index:
                    continue  # it answered just now
                batch.abandoned = True  # its thread goes on with the check that hangs, and then stops
                results.update(batch.results)
            results[jobs[index][0]] = ("timeout", None)
            jobs = jobs[index + 1:]
            break
        else:
            results.update(batch.results)
            jobs = ()
    return results
