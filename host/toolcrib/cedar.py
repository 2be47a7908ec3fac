"""Cedar as a policy source (``[policy] cedar = "policies.cedar"``, the ``toolcrib[cedar]`` extra).

The policies are evaluated by Cedar itself (``cedarpy``, the maintained bindings of the Rust implementation) against
the entity schema toolcrib publishes (``SCHEMA``, ``toolcrib policy schema``): principals are agents (who the request
acts for, an OAuth subject or a static token, is in ``context.principal``), actions are ``list``, ``call``, ``read``
and ``get``, resources are tools, resources, templates and prompts with their namespace, source, annotations and URI.
Cedar denies what no policy permits, and a ``forbid`` beats every ``permit``. In the host, Cedar is one more policy
of the one decision: it can hide or refuse what the config's rules let through, never reveal what they hide.

``export`` writes the config's TOML rules as Cedar (``toolcrib policy export --cedar``): the same decisions, which
a differential test checks over generated configs and catalogs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from toolcrib.answers import Deny
from toolcrib.entries import Entry
from toolcrib.errors import Problem
from toolcrib.permissions import VIEW_PROXIES, AgentRules, DimensionRule
from toolcrib.policy import PolicyRequest, request_for

NAMESPACE = "Toolcrib"
ENTITY_TYPES = {"tool": "Tool", "resource": "Resource", "template": "Template", "prompt": "Prompt"}

SCHEMA = """\
// The entities toolcrib gives Cedar (toolcrib policy schema). Every request's principal is the agent; who the
// request acts for (an OAuth subject, a static token) is context.principal.
namespace Toolcrib {
  entity Agent = { "name": String, "mode": String };
  entity Namespace;
  type Annotations = {
    "readOnlyHint"?: Bool, "destructiveHint"?: Bool, "idempotentHint"?: Bool, "openWorldHint"?: Bool, "title"?: String
  };
  // what every tool, resource, template and prompt has: its full name, its namespace (also its parent), the source
  // that serves it and that source's kind (pack, mcp, openapi, builtin), the permission dimension that names its
  // source (plugins, mcps, openapi) and the installed plugin a pack serves it from ("" for none)
  entity Tool in [Namespace] = {
    "name": String, "namespace": String, "source": String, "source_kind": String, "dimension": String,
    "origin": String, "annotations": Annotations, "read_only": Bool
  };
  entity Resource in [Namespace] = {
    "name": String, "namespace": String, "source": String, "source_kind": String, "dimension": String,
    "origin": String, "uri": String
  };
  entity Template in [Namespace] = {
    "name": String, "namespace": String, "source": String, "source_kind": String, "dimension": String,
    "origin": String, "uri": String
  };
  entity Prompt in [Namespace] = {
    "name": String, "namespace": String, "source": String, "source_kind": String, "dimension": String,
    "origin": String
  };
  type Principal = {
    "kind": String, "subject"?: String, "client"?: String, "issuer"?: String, "credential"?: String,
    "scopes"?: Set<String>
  };
  // uri: for read, the URI read (in its normal form)
  type Context = { "principal": Principal, "mode": String, "uri"?: String };
  action "list" appliesTo { principal: [Agent], resource: [Tool, Resource, Template, Prompt], context: Context };
  action "call" appliesTo { principal: [Agent], resource: [Tool], context: Context };
  action "read" appliesTo { principal: [Agent], resource: [Resource, Template], context: Context };
  action "get" appliesTo { principal: [Agent], resource: [Prompt], context: Context };
}
"""

NO_PERMIT = "no Cedar policy permits it (Cedar denies by default)"


def _cedarpy() -> Any:
    try:
        import cedarpy
    except ImportError:
        raise ImportError("[policy] cedar needs the cedar extra: pip install 'toolcrib[cedar]'") from None
    return cedarpy


def _uid(kind: str, name: str) -> dict[str, str]:
    return {"type": f"{NAMESPACE}::{kind}", "id": name}


_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _annotations(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's annotations as the schema types them: its boolean hints and its title."""
    found: dict[str, Any] = {key: annotations[key] for key in _HINTS if isinstance(annotations.get(key), bool)}
    if isinstance(annotations.get("title"), str):
        found["title"] = annotations["title"]
    return found


def _thing(kind: str, name: str, namespace: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """A tool, resource, template or prompt as a Cedar entity (JSON form), in its namespace."""
    return {"uid": _uid(ENTITY_TYPES[kind], name), "attrs": attrs, "parents": [_uid("Namespace", namespace)]}


def _agent(name: str, mode: str) -> dict[str, Any]:
    return {"uid": _uid("Agent", name), "attrs": {"name": name, "mode": mode}, "parents": []}


def entity(entry: Entry) -> dict[str, Any]:
    """``entry`` as a Cedar entity (JSON form): what a request about it says of it."""
    return _entity(request_for(entry, "", "list"))


class CedarPolicy:
    """A Cedar policy set as one of the host's policies: called as ``toolcrib_policy`` implementations are, on the
    calling thread (``inline``: Cedar's evaluation always ends, and quickly)."""

    plugin = "cedar"
    inline = True

    def __init__(self, text: str, entries: Iterable[Entry] = (), agents: Mapping[str, str] | None = None) -> None:
        cedarpy = _cedarpy()
        self._cedarpy = cedarpy
        self.policies = cedarpy.PolicySet.from_str(text)
        self._ids = _ids(text)
        self._entries = {(e.kind, e.name): e for e in entries}
        self._agents = dict(agents or {})
        self._entities: Any = None

    def _entities_handle(self) -> Any:
        if self._entities is None:
            found = [_agent(name, mode) for name, mode in self._agents.items()]
            found += [entity(e) for e in self._entries.values()]
            self._entities = self._cedarpy.Entities.from_json_str(json.dumps(found))
        return self._entities

    def __call__(self, request: PolicyRequest) -> Deny | None:
        # (a token's claims are any JSON, which Cedar's schema cannot type: policies in Python see them)
        principal = {key: value for key, value in request.principal.items() if key != "claims"}
        context: dict[str, Any] = {"principal": principal, "mode": request.mode}
        if request.action == "read" and request.uri is not None:
            context["uri"] = request.uri
        if (request.kind, request.name) in self._entries:
            entities = self._entities_handle()
        else:  # (a thing the host did not have when the policy was loaded: a lazy server's tool)
            entities = [_entity(request), _agent(request.agent, request.mode)]
        result = self._cedarpy.is_authorized({
            "principal": _uid("Agent", request.agent), "action": _uid("Action", request.action),
            "resource": _uid(ENTITY_TYPES[request.kind], request.name), "context": context},
            self.policies, entities)
        diagnostics = result.diagnostics
        if diagnostics.errors:  # Cedar skips a policy it cannot evaluate: a forbid among them would forbid nothing
            return Deny(f"Cedar could not evaluate a policy (denied, fail closed): "
                        f"{'; '.join(map(str, diagnostics.errors))}")
        if result.allowed:
            return None
        order = list(self._ids)  # (Cedar gives its reasons in no order: the file's is the one to read them in)
        ranked = sorted(diagnostics.reasons, key=lambda reason: order.index(reason) if reason in order else len(order))
        reasons = [self._ids.get(reason, reason) for reason in ranked]
        return Deny(f"forbidden by {', '.join(reasons)}" if reasons else NO_PERMIT)


def _entity(request: PolicyRequest) -> dict[str, Any]:
    """The Cedar entity of what ``request`` is about (JSON form), from what the request says of it: the host's
    catalog's things are made so once, a thing loaded later (a lazy server's tool) at each request."""
    attrs: dict[str, Any] = {"name": request.name, "namespace": request.namespace, "source": request.source,
                             "source_kind": request.source_kind, "dimension": request.dimension,
                             "origin": request.origin}
    if request.kind == "tool":
        attrs["annotations"] = _annotations(request.annotations)
        attrs["read_only"] = request.read_only  # (the host's belief, not an untrusted server's claim)
    elif request.kind in ("resource", "template"):
        attrs["uri"] = request.uri or ""
    return _thing(request.kind, request.name, request.namespace, attrs)


def _ids(text: str) -> dict[str, str]:
    """Each policy's name in a reason: ``policy0`` is the first policy, or its ``@id("...")`` annotation."""
    cedarpy = _cedarpy()
    found: dict[str, str] = {}
    try:
        parsed = json.loads(cedarpy.policies_to_json_str(text))
    except Exception:  # (the set parsed already; a reason then keeps Cedar's own name)
        return found
    static = (parsed.get("staticPolicies") or {}).items()
    for policy_id, policy in sorted(static, key=lambda item: (len(item[0]), item[0])):  # policy0, policy1, ...
        label = (policy.get("annotations") or {}).get("id")
        found[policy_id] = f"{policy.get('effect', 'policy')} {label!r}" if label else \
            f"{policy.get('effect', 'policy')} #{policy_id.removeprefix('policy')}"
    return found


def validate(text: str, where: str) -> list[Problem]:
    """``toolcrib check``'s findings on a policy file: Cedar's parse and validation errors against ``SCHEMA``."""
    cedarpy = _cedarpy()
    try:
        cedarpy.PolicySet.from_str(text)
    except Exception as exc:
        return [Problem("error", where, f"the policies do not parse: {exc}")]
    result = cedarpy.validate_policies(text, SCHEMA)
    if result.validation_passed:
        return []
    return [Problem("error", where, f"does not validate against toolcrib's schema: {error}")
            for error in result.errors]


# -- the TOML rules as Cedar ---------------------------------------------------------------------------------------


def _string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _matches(attribute: str, patterns: Iterable[Any]) -> str:
    """A Cedar condition true where ``attribute`` matches one of the compiled patterns (globs with ``like``, whose
    only wildcard is ``*``, as toolcrib's)."""
    tests = []
    for pattern in patterns:
        name = pattern.name
        tests.append(f"{attribute} like {_string(name)}" if "*" in name else f"{attribute} == {_string(name)}")
    return "(" + " || ".join(tests) + ")" if tests else "false"


def _rule(rule: DimensionRule, *attributes: str) -> str:
    """The condition of one dimension's rule over the attributes it is matched against (a resource's name and
    URI): an allow that matches any lets it through, a deny that matches any hides it, a missing rule permits
    nothing."""
    if rule.kind == "missing":
        return "false"
    matched = " || ".join(_matches(attribute, rule.deciding) for attribute in attributes)
    return f"({matched})" if rule.kind == "allow" else f"!({matched})"


def _source(rules: AgentRules) -> str:
    """The source check: the rule of the dimension that names the source (by its name, or the plugin a pack serves
    the tool from), the host's own things always."""
    parts = ['resource.source_kind == "builtin"']
    for dimension in ("plugins", "mcps"):
        rule = rules.dimensions[dimension]
        if rule.kind == "missing":
            continue
        by_source = _matches("resource.source", rule.patterns)  # (a source's patterns have no specifier)
        by_origin = f'(resource.origin != "" && {_matches("resource.origin", rule.patterns)})'
        named = f"({by_source} || {by_origin})"
        parts.append(f'(resource.dimension == "{dimension}" && ' + (named if rule.kind == "allow" else f"!{named}")
                     + ")")
    return "(" + " || ".join(parts) + ")"


def export(rules: Mapping[str, AgentRules]) -> str:
    """The config's rules as Cedar policies: one ``permit`` per agent, for every action, when its source, its
    kind's rule and its mode let a thing through (what ``decide`` checks of the rules; definition locks,
    availability checks and token scopes are not rules of the file and stay with the host)."""
    out = ["// toolcrib policy export --cedar: the config's rules as Cedar (deny by default: what no permit lets",
           "// through is hidden)."]
    proxies = " || ".join(f"resource.name == {_string(name)}" for name in sorted(VIEW_PROXIES)) or "false"
    for agent, agent_rules in sorted(rules.items()):
        if not agent_rules.has_permissions:
            out.append(f"// agent {agent!r} has no permissions table: it sees nothing")
            continue
        dims = agent_rules.dimensions
        mode = "" if agent_rules.mode != "plan" else f" && (resource.read_only || {proxies})"
        kinds = " ||\n    ".join([
            f"(resource is {NAMESPACE}::Tool && {_rule(dims['tools'], 'resource.name')}{mode})",
            f"(resource is {NAMESPACE}::Resource && {_rule(dims['resources'], 'resource.name', 'resource.uri')})",
            f"(resource is {NAMESPACE}::Template && {_rule(dims['resources'], 'resource.name', 'resource.uri')})",
            f"(resource is {NAMESPACE}::Prompt && {_rule(dims['prompts'], 'resource.name')})",
        ])
        out.append(f'@id("agent {agent}")\npermit (principal == {NAMESPACE}::Agent::{_string(agent)}, action, '
                   f"resource)\nwhen {{\n  {_source(agent_rules)} &&\n  (\n    {kinds}\n  )\n}};")
    return "\n".join(out) + "\n"

