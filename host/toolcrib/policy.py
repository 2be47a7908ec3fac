"""Policies as code: verdicts that packs (``toolcrib_policy``) add to the one decision.

A policy is asked about a *request*: an action (``list`` a tool, resource, template or prompt in a view; ``call`` a
tool; ``read`` a resource; ``get`` a prompt), the agent, the principal behind the request, and the thing with its
namespace, source, URI, annotations and, for ``call``, ``read`` and ``get``, the arguments as they will really run.
It answers ``toolcrib.Deny("why")`` or has no objection (None, ``toolcrib.Allow()``). A deny wins; a policy can hide
or refuse, never reveal what the config's rules hide (it is asked only about what they let through). Whatever else
it does (raises, answers something else, takes longer than ``[policy] timeout``) counts as a deny: fail closed.

For listing it is asked once per view and thing, together with the availability checks and under the same kind of
budget (on a worker thread: a policy that hangs costs its budget, not the view); for a call once, after every
pre-tool-use hook, with the final arguments. ``decide`` shows its reason (``explain``, ``check``, the console).
"""

from __future__ import annotations

import functools
import inspect
import logging
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from toolcrib.answers import Allow, Deny
from toolcrib.entries import Entry
from toolcrib.errors import contained

if TYPE_CHECKING:
    from toolcrib.plugins import PluginHook

log = logging.getLogger("toolcrib.policy")

MAX_FAILURES = 100
NO_ARGUMENTS: Mapping[str, Any] = types.MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    """What a policy decides on (``toolcrib_policy``). ``principal`` is who the request acts for, as the front end
    authenticated them: ``{"kind": "oauth", "subject", "client", "issuer", "scopes", "claims"}`` (the verified
    token's claims), ``{"kind": "token", "credential": "$VAR"}``, or ``{"kind": "agent"}`` (in-process, stdio, and
    listing, which is decided once for each agent's view). ``annotations`` are a tool's as its source declares them
    (an untrusted server's are its claims); ``read_only`` is what the host believes of it."""

    action: str  # "list" | "call" | "read" | "get"
    agent: str
    kind: str  # "tool" | "resource" | "template" | "prompt"
    name: str  # the full name (fs__write_file)
    namespace: str
    source: str  # the pack, server or OpenAPI document that serves it
    source_kind: str  # "pack" | "mcp" | "openapi" | "builtin" | ...
    dimension: str = "plugins"  # the permission dimension that names its source ("plugins", "mcps")
    origin: str = ""  # the installed plugin a pack serves a tool from (llm-tools-simpleeval), or ""
    uri: str | None = None  # a resource's URI (a template's, for listing; the one read, for read)
    annotations: Mapping[str, Any] = field(default_factory=lambda: NO_ARGUMENTS)
    read_only: bool = False  # a tool the host believes only reads (its source trusted, or its own pack's)
    arguments: Mapping[str, Any] = field(default_factory=lambda: NO_ARGUMENTS)
    principal: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({"kind": "agent"}))
    mode: str = "default"


def request_for(entry: Entry, agent: str, action: str, mode: str = "default",
                arguments: Mapping[str, Any] | None = None, principal: Mapping[str, Any] | None = None,
                uri: str | None = None) -> PolicyRequest:
    """The request a policy is asked about ``entry``."""
    provenance = entry.provenance
    annotations = entry.tool.annotations if entry.kind == "tool" else {}
    return PolicyRequest(
        action=action, agent=agent, kind=entry.kind, name=entry.name, namespace=entry.namespace,
        source=provenance.source, source_kind=provenance.kind.name, dimension=provenance.dimension,
        origin=(entry.tool.origin or "") if entry.kind == "tool" else "", uri=uri if uri is not None else entry.uri,
        annotations=types.MappingProxyType(dict(annotations or {})), read_only=entry.kind == "tool" and entry.read_only,
        arguments=types.MappingProxyType(dict(arguments)) if arguments else NO_ARGUMENTS,
        principal=types.MappingProxyType(dict(principal)) if principal else types.MappingProxyType({"kind": "agent"}),
        mode=mode)


def principal_of(identity: Any) -> dict[str, Any] | None:
    """The principal of a request, from the identity its front end authenticated (``toolcrib.mcp.oauth.Identity``):
    never the token itself."""
    if identity is None:
        return None
    found: dict[str, Any] = dict(identity.record())
    if identity.kind == "oauth":
        found["scopes"] = sorted(identity.scopes)
        found["claims"] = identity.claims
    return found


Verdict = tuple[bool, str]  # (passed, why)
PASSED: Verdict = (True, "no policy objects")


@dataclass(frozen=True)
class Policies:
    """The policies a host asks, in pluggy's order; ``timeout`` is ``[policy] timeout``."""

    hooks: Sequence[PluginHook | Any]  # (the packs' implementations; Cedar's policies, cedar.CedarPolicy)
    timeout: float = 1.0
    # (plugin, what failed): the policies that failed closed, the first MAX_FAILURES of them (``toolcrib check``)
    failures: list[tuple[str, str]] = field(default_factory=list, compare=False)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def jobs(self, key: str, request: PolicyRequest) -> list[tuple[str, Any, PolicyRequest]]:
        """One job per policy for a listing decision (``permissions._run_checks``), keyed ``<key> <n>``."""
        return [(f"{key}\0{n}", functools.partial(_asked, hook), request) for n, hook in enumerate(self.hooks)]

    def interpret_all(self, key: str, outcomes: Mapping[str, tuple[str, Any]], request: PolicyRequest) -> Verdict:
        """The verdict of every policy on one listing request, from the outcomes of its ``jobs``: the first deny."""
        for n, hook in enumerate(self.hooks):
            kind, answer = outcomes[f"{key}\0{n}"]
            verdict = self.interpret(hook, kind, answer, request)
            if not verdict[0]:
                return verdict
        return PASSED

    def interpret(self, hook: PluginHook, kind: str, answer: Any, request: PolicyRequest) -> Verdict:
        """One policy's outcome as a verdict: a deny, or anything but no objection, denies."""
        if inspect.iscoroutine(answer):  # a policy decides; it does not wait on anything
            answer.close()
        if kind == "answer" and (answer is None or isinstance(answer, Allow)):
            return PASSED
        if kind == "answer" and isinstance(answer, Deny):
            return False, f"policy {hook.plugin}: {answer.message}"
        if kind == "timeout":
            failed = f"no answer within {self.timeout:g} seconds"
        elif kind == "raised":
            failed = f"raised {type(answer).__name__}"
        else:
            failed = f"answered {'an awaitable' if inspect.iscoroutine(answer) else type(answer).__name__}, not " \
                     "toolcrib.Deny or None"
        about = f"{request.action} {request.name} for agent {request.agent!r}"
        log.error("toolcrib_policy of %r %s (%s); denied (fail closed)", hook.plugin, failed, about,
                  exc_info=answer if kind == "raised" else None)
        if len(self.failures) < MAX_FAILURES:
            self.failures.append((hook.plugin, f"{failed} ({about}); denied, fail closed"))
        return False, f"policy {hook.plugin}: {failed} (fail closed)"

    async def decide(self, request: PolicyRequest) -> Verdict:
        """Every policy's verdict on one call, read or get, each within ``timeout`` on a worker thread (so that one
        that hangs costs its budget, not the loop)."""
        for hook in self.hooks:
            if getattr(hook, "inline", False):  # (Cedar: an evaluation that always ends, in microseconds)
                try:
                    kind, answer = "answer", hook(request=request)
                except BaseException as exc:
                    if not contained(exc):
                        raise
                    kind, answer = "raised", exc
            else:
                kind, answer = await self._ask(hook, request)
            verdict = self.interpret(hook, kind, answer, request)
            if not verdict[0]:
                return verdict
        return PASSED

    async def _ask(self, hook: Any, request: PolicyRequest) -> tuple[str, Any]:
        """One pack's policy, on a worker thread within ``timeout``: ("answer", what it returned), ("raised", what
        it raised) or ("timeout", None)."""
        with anyio.move_on_after(self.timeout):
            try:
                return "answer", await anyio.to_thread.run_sync(_asked, hook, request, abandon_on_cancel=True)
            except BaseException as exc:
                if not contained(exc):
                    raise
                return "raised", exc
        return "timeout", None


def _asked(hook: PluginHook, request: PolicyRequest) -> Any:
    return hook(request=request)
