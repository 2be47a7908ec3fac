"""Permission rules -> decisions with reasons. ``decide`` is the one function that says whether an agent sees
a tool; listing, calling, schema export, ``explain`` and every meta tool go through it.

Rules are compiled once per config. A tool is visible only when its source is permitted (``plugins`` for
packs, ``mcps`` for upstream servers, ...), its full name is permitted by ``tools``, the agent's mode lets
it be seen, and its ``is_available`` says yes. A missing ``permissions`` table or a missing dimension
denies everything of that dimension; wherever an allow and a deny both apply, deny wins.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolcrib import patterns
from toolcrib.catalog import Entry
from toolcrib.config import AgentConfig, LoadedConfig
from toolcrib.context import AvailabilityContext
from toolcrib.patterns import Pattern

log = logging.getLogger("toolcrib.permissions")


@dataclass(frozen=True, slots=True)
class Check:
    """One step of a decision: what was checked, whether it passed, and the rule or reason."""

    name: str  # "source" | "tools" | "mode" | "available"
    passed: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether ``agent`` sees ``tool``, with every check that was made, in order."""

    agent: str
    tool: str
    visible: bool
    checks: tuple[Check, ...]

    @property
    def reason(self) -> str:
        """The check that hid the tool (or, for a visible tool, the rule that let it through)."""
        for check in self.checks:
            if not check.passed:
                return check.detail
        return self.checks[1].detail if len(self.checks) > 1 else (self.checks[0].detail if self.checks else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "tool": self.tool,
            "visible": self.visible,
            "checks": [{"check": c.name, "passed": c.passed, "detail": c.detail} for c in self.checks],
        }


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
        # A deny hides only with a bare pattern; a pattern with a specifier restricts calls instead.
        deciding = [p for p in compiled if kind == "allow" or p.specifier is None]
        exact: dict[str, Pattern] = {}
        for p in deciding:
            if "*" not in p.name:
                exact.setdefault(p.name, p)
        globs = tuple(p for p in deciding if "*" in p.name)
        return cls(dimension, kind, compiled, where, exact, globs)

    def match(self, name: str) -> Pattern | None:
        """The first pattern that decides for ``name`` (exact names first, then globs), or None."""
        found = self._exact.get(name)
        if found is not None:
            return found
        for pattern in self._globs:
            if pattern.matches(name):
                return pattern
        return None

    def permits(self, name: str) -> tuple[bool, Pattern | None]:
        if self.kind == "missing":
            return False, None
        pattern = self.match(name)
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

    def verdict(self, name: str) -> tuple[bool, str]:
        passed, pattern = self.permits(name)
        return passed, self.describe(passed, pattern)

    def specifiers(self, name: str) -> tuple[Pattern, ...]:
        """The patterns with an argument specifier that name this tool."""
        return tuple(p for p in self.patterns if p.specifier is not None and p.matches(name))

    def bare_allow(self, name: str) -> bool:
        return self.kind == "allow" and any(p.specifier is None and p.matches(name) for p in self.patterns)


@dataclass(frozen=True, slots=True)
class CallRules:
    """The argument rules (specifiers) and ``ask`` rules that apply to one visible tool's calls."""

    subject: str | None  # the argument the tool names as its rule subject
    allow: tuple[Pattern, ...]  # when set, a call's subject must match one of these
    deny: tuple[Pattern, ...]
    ask: tuple[Pattern, ...]

    def check(self, arguments: Mapping[str, Any]) -> tuple[str, Pattern | None]:
        """("deny", rule) | ("ask", rule) | ("ok", None) for one call; deny wins over ask."""
        value = arguments.get(self.subject) if self.subject is not None else None
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            subject: str | None = shlex.join(value)  # an argv is matched as the command line it spells
        else:
            subject = None if value is None else str(value)
        for pattern in self.deny:
            # A specifier on a tool with no rule subject cannot be checked: fail closed, it matches.
            if subject is None or pattern.matches_subject(subject):
                return "deny", pattern
        if self.allow and not any(subject is not None and p.matches_subject(subject) for p in self.allow):
            return "deny", None
        for pattern in self.ask:
            if pattern.specifier is None or subject is None or pattern.matches_subject(subject):
                return "ask", pattern
        return "ok", None


@dataclass(frozen=True, slots=True)
class AgentRules:
    """One agent's compiled rules: built once per config, read by ``decide``."""

    agent: str
    config: AgentConfig
    capabilities: frozenset[str]
    dimensions: Mapping[str, DimensionRule]
    ask: tuple[Pattern, ...]
    has_permissions: bool
    _sources: dict[tuple[str, str], tuple[bool, Pattern | None]] = field(default_factory=dict, repr=False)

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
        ask = tuple(p for p in self.ask if p.matches(entry.name))
        if not (allow or deny or ask):
            return None
        return CallRules(subject=entry.tool.rule_subject, allow=allow, deny=deny, ask=ask)

    def source_permits(self, dimension: str, source: str) -> tuple[bool, Pattern | None]:
        """``permits`` of the source's dimension, remembered per source (there are few sources, many tools)."""
        key = (dimension, source)
        found = self._sources.get(key)
        if found is None:
            if dimension == "subagents" and source == self.agent:
                found = (False, None)  # an agent is never offered itself, whatever its rule says
            else:
                found = self.dimensions[dimension].permits(source)
            self._sources[key] = found
        return found


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
        rules[name] = AgentRules(
            agent=name,
            config=agent,
            capabilities=loaded.capabilities(agent.model),
            dimensions=dims,
            ask=ask,
            has_permissions=agent.permissions is not None,
        )
    return rules


_SOURCE_KIND = {"plugins": "pack", "mcps": "upstream server", "skills": "skill", "subagents": "agent"}


def decide(rules: AgentRules, entry: Entry, *, detail: bool = False, exhaustive: bool = False) -> Decision:
    """May ``rules.agent`` see ``entry``? The one decision.

    The checks run in order - source, tools, mode, availability - and stop at the first that fails.
    ``detail`` records each check with the rule or reason that decided it (``--all``, ``explain``);
    ``exhaustive`` also runs the checks after a failing one (``explain``). The verdict is the same either way.
    """
    exhaustive = exhaustive and detail
    if not rules.has_permissions:
        check = Check("permissions", False, f"agent {rules.agent!r} has no [agents.{rules.agent}.permissions] "
                                            "table, so it sees nothing")
        return Decision(rules.agent, entry.name, False, (check,) if detail else ())
    checks: list[Check] = []
    visible = True

    source_rule = rules.dimensions[entry.dimension]
    if entry.sources:
        permitted = [s for s in entry.sources if rules.source_permits(entry.dimension, s)[0]]
        passed = bool(permitted)
        if detail:
            text = (f"{len(permitted)} of {len(entry.sources)} {entry.dimension} permitted by {source_rule.where}"
                    if passed else f"none of its {entry.dimension} is permitted by {source_rule.where}")
            checks.append(Check("source", passed, text))
    else:
        passed, pattern = rules.source_permits(entry.dimension, entry.source)
        if detail:
            text = f"{_SOURCE_KIND[entry.dimension]} {entry.source!r}: {source_rule.describe(passed, pattern)}"
            checks.append(Check("source", passed, text))
    visible = passed
    if visible or exhaustive:
        tools_rule = rules.dimensions["tools"]
        passed, pattern = tools_rule.permits(entry.name)
        if detail:
            checks.append(Check("tools", passed, tools_rule.describe(passed, pattern)))
        visible = visible and passed
    if visible or exhaustive:
        passed = rules.mode != "plan" or entry.read_only
        if detail:
            checks.append(Check("mode", passed, _mode_detail(rules, entry, passed)))
        visible = visible and passed
    if visible or exhaustive:
        passed, why = _available(rules, entry)
        if detail:
            checks.append(Check("available", passed, why))
        visible = visible and passed
    return Decision(rules.agent, entry.name, visible, tuple(checks))


def _mode_detail(rules: AgentRules, entry: Entry, passed: bool) -> str:
    if rules.mode != "plan":
        return f"mode {rules.mode!r} shows every permitted tool"
    if passed:
        return "plan mode, and the tool is annotated read-only"
    if not entry.trusted and entry.tool.annotations.get("readOnlyHint") is True:
        return (f"plan mode shows only read-only tools; upstream server {entry.source!r} is not trusted, so its "
                "readOnlyHint does not count (set trusted = true to trust it)")
    return "plan mode shows only tools annotated read-only (readOnlyHint), and this one is not"


def _available(rules: AgentRules, entry: Entry) -> tuple[bool, str]:
    check = entry.tool.is_available
    if check is None:
        return True, "the tool has no availability check"
    ctx = AvailabilityContext(
        agent=rules.agent,
        model=rules.config.model,
        capabilities=rules.capabilities,
        settings=entry.settings,
        mode=rules.mode,
    )
    try:
        answer = check(ctx)
    except Exception as exc:
        log.warning("is_available of %s raised %s for agent %r; the tool is hidden", entry.name, type(exc).__name__,
                    rules.agent)
        log.debug("is_available of %s raised", entry.name, exc_info=True)
        return False, f"is_available raised {type(exc).__name__}: {exc} (hidden: fail closed)"
    if answer is True:
        return True, "is_available said yes"
    if answer is False:
        return False, "is_available said no"
    if isinstance(answer, str):
        return False, f"not available: {answer}" if answer.strip() else "is_available said no"
    return False, f"is_available returned {answer!r}; expected True, False or a reason (hidden: fail closed)"
