"""Every hook a tool pack can implement. docs/hooks.md documents each one; a test keeps the two in step.

Implementations take any subset of a hook's arguments (pluggy's opt-in arguments), so hooks can gain
arguments without breaking packs. Each pack's implementation is called on its own: one that raises is
reported against its pack and never hides another pack's answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import BaseModel

    from toolcrib.answers import Allow, Ask, Deny
    from toolcrib.content import ToolResult
    from toolcrib.policy import PolicyRequest

hookspec = pluggy.HookspecMarker("toolcrib")
hookimpl = pluggy.HookimplMarker("toolcrib")


@hookspec
def toolcrib_tools(settings: Any) -> Sequence[Any] | None:
    """Return the pack's tools.

    Called once per pack when the host builds its catalog, never per call. Each item is a function
    decorated with ``@toolcrib.tool`` or a ``toolcrib.Tool``; the host names each ``<namespace>__<tool>``.
    An item that is not a tool, or a duplicate name, is rejected on its own with an error naming the pack;
    the pack's other tools still load. If the implementation raises, none of the pack's tools load.

    :param settings: the pack's parsed settings (an instance of its settings model), or None.
    """


@hookspec
def toolcrib_resources(settings: Any) -> Sequence[Any] | None:
    """Return the pack's resources and resource templates.

    Called once per pack when the host builds its catalog. Each item is a function decorated with
    ``@toolcrib.resource(uri)``; its full name is ``<namespace>__<name>``, its URI the pack's own. A URI two sources
    declare is served by neither; an item that is not a resource is rejected on its own. If the implementation
    raises, none of the pack's tools, resources or prompts load.

    :param settings: the pack's parsed settings (an instance of its settings model), or None.
    """


@hookspec
def toolcrib_prompts(settings: Any) -> Sequence[Any] | None:
    """Return the pack's prompts.

    Called once per pack when the host builds its catalog. Each item is a function decorated with
    ``@toolcrib.prompt``; the host names each ``<namespace>__<prompt>``. An item that is not a prompt is rejected
    on its own. If the implementation raises, none of the pack's tools, resources or prompts load.

    :param settings: the pack's parsed settings (an instance of its settings model), or None.
    """


@hookspec
def toolcrib_skills() -> Sequence[str | Path] | None:
    """Return the folders of the skills the pack ships, each holding a ``SKILL.md``.

    A skill's name is the ``name:`` of its SKILL.md front matter (else the folder's name), its description the
    ``description:``. Agents load skills through the built-in ``toolcrib__load_skill`` tool, filtered by the
    ``skills`` permission dimension. A name two sources claim is served by neither. Called once per pack when the
    host is built.
    """


@hookspec(firstresult=True)
def toolcrib_settings_model() -> type[BaseModel] | None:
    """Return the pydantic model for the pack's ``[packs.<namespace>]`` table.

    The host validates the table against it at start-up (errors name the file and the key path) and hands
    the parsed instance to ``toolcrib_tools``, to ``is_available`` checks (``ctx.settings``) and to
    handlers (``Context.settings``). Return None (or do not implement the hook) for a pack without settings;
    such a pack's table may hold only ``enabled``. Stops at the first non-None result.
    """


@hookspec
def toolcrib_pre_tool_use(
    agent: str, tool: str, arguments: Mapping[str, Any], annotations: Mapping[str, Any], call_id: str
) -> Allow | Ask | Deny | None:
    """Decide on a call before its handler runs.

    Called for every call that passed name resolution, argument validation and the config's permission
    rules. Return ``toolcrib.Deny("message")`` to refuse the call (the model sees the message),
    ``toolcrib.Allow(updated_input={...})`` to run it with replaced arguments (validated again against the
    tool's input model), ``toolcrib.Ask("why")`` to hold it for approval as an ``ask`` rule would (unless an
    ask rule already had it approved), ``toolcrib.Allow()`` or None to have no objection. Every implementation
    is called; a deny wins over any allow or ask, and an implementation that raises denies the call (fail
    closed). ``toolcrib.Deny("message", interrupt=True)`` also ends the agent's turn (a sub-agent's whole run;
    over MCP an error result marked ``_meta["toolcrib/interrupt"]``). An implementation may be ``async def``.

    :param agent: the calling agent's name.
    :param tool: the tool's full name (``fs__write_file``).
    :param arguments: the validated arguments, as a read-only mapping of JSON values.
    :param annotations: the tool's MCP annotations (``readOnlyHint``, ...), as trusted by the host.
    :param call_id: the call's id (the agent SDKs' ``toolUseID``): the same in the post-tool-use hooks and the
        audit record of this call; empty when nothing observes calls.
    """


@hookspec
def toolcrib_policy(request: PolicyRequest) -> Deny | None:
    """Add a verdict to the one decision: policies as code.

    Asked about what the config's rules let through (never about what they hide: a policy can hide or refuse,
    never reveal), for listing once per agent's view and thing (``request.action == "list"``: a tool, resource,
    template or prompt, which a deny hides from every list, search, export and call, as a rule would), and once
    per call (``"call"``, with the arguments that will really run, after every pre-tool-use hook), resource read
    (``"read"``, with the URI read and the template's parameters) and prompt get (``"get"``). Return
    ``toolcrib.Deny("why")`` to hide or refuse (the reason is shown by ``explain``, ``check`` and the console, and a
    refused call's result says it), None or ``toolcrib.Allow()`` to have no objection. A deny wins; one that
    raises, answers anything else or takes longer than ``[policy] timeout`` denies (fail closed). A plain function:
    it runs on a worker thread, and must not wait on anything (an ``async def`` one denies).

    :param request: a ``toolcrib.PolicyRequest``: the action, the agent, the principal (who the request acts for:
        an OAuth subject with its client, issuer and scopes, a static token's variable, or the agent itself), and
        the thing with its kind, full name, namespace, source, URI, annotations and arguments.
    """


@hookspec
def toolcrib_post_tool_use(
    agent: str, tool: str, arguments: Mapping[str, Any], result: ToolResult, call_id: str
) -> ToolResult | None:
    """See (and optionally replace) a call's result before it goes back to the model.

    Called after the handler ran (also when it failed: ``result.is_error``). Return a ``toolcrib.ToolResult``
    to replace the result (redaction), or None to leave it. Implementations run one after another, each
    seeing the result the previous one left; one that raises, or returns content that is not MCP content, turns
    the result into an error (fail closed, so a redaction never silently fails open). An implementation may be
    ``async def``.

    :param agent: the calling agent's name.
    :param tool: the tool's full name.
    :param arguments: the arguments the handler ran with.
    :param result: the normalized result.
    :param call_id: the call's id, as its pre-tool-use hooks and audit record have it.
    """


@hookspec(firstresult=True)
def toolcrib_approve(
    agent: str, tool: str, arguments: Mapping[str, Any], annotations: Mapping[str, Any], rule: str
) -> bool | Deny | None:
    """Approve or refuse a call that an ``ask`` rule holds for approval, in ``default`` or ``plan`` mode.

    Return True to approve, False or ``toolcrib.Deny("why")`` to refuse, None to leave the question to the
    client (MCP elicitation) when there is one. Stops at the first non-None result. An implementation that
    raises refuses the call. An implementation may be ``async def``.

    :param agent: the calling agent's name.
    :param tool: the tool's full name.
    :param arguments: the validated arguments.
    :param annotations: the tool's MCP annotations.
    :param rule: the ``ask`` pattern that matched the call.
    """


@hookspec
def toolcrib_audit(record: Mapping[str, Any]) -> None:
    """Receive the audit record of one call decision.

    Called once per decision (a call, a resource read, a prompt get), after the decision and (when the handler
    ran) the result: ``record`` holds ``time``, ``agent``, ``kind`` (``tool``, ``resource``, ``prompt``), the
    name under the key of its kind (``record[record["kind"]]``), ``decision`` (``allowed``, ``denied``,
    ``unknown``, ``invalid``, ``limited``), ``by`` (the rule, mode, hook, approval or limit that decided),
    ``duration_ms``, ``is_error``, ``call_id`` for a call, ``identity`` for a request that came with a credential
    (never the token), and ``arguments`` only when the operator turned on ``[host] audit_arguments``. The built-in
    plugin ``toolcrib.audit`` writes these records as JSON lines to ``[host] audit_log``. An implementation that
    raises is logged and does not affect the call.

    :param record: the audit record, a read-only mapping of JSON values.
    """
