"""The call pipeline, the same for the Python API, the CLI and MCP:

resolve the name in the agent's view -> check the payload's size and shape -> validate against the input
model -> argument rules and ``ask`` approvals (modes) -> ``toolcrib_pre_tool_use`` hooks -> run the handler
under its timeout -> normalize the result -> ``toolcrib_post_tool_use`` hooks -> audit record.

Nothing a tool does takes the host down: ``ToolError`` text reaches the model, any other exception becomes
a generic error result (the traceback goes to the host's log), a timeout is an error result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools
import logging
import secrets
import time
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from pydantic import BaseModel, ValidationError

from toolcrib.answers import Allow, Ask, Deny
from toolcrib.approvals import MAX_PENDING, Desk, DeskFull, DeskUnreachable
from toolcrib.arguments import format_validation_error, payload_problem
from toolcrib.audit import AuditSink
from toolcrib.audit import record as audit_record
from toolcrib.content import ToolResult, normalize, result_problem
from toolcrib.context import Approver, ClientChannel
from toolcrib.declarations import MAX_COMPLETION_SCAN, Completions, prompt_messages, resource_contents
from toolcrib.entries import Entry
from toolcrib.errors import (
    InvalidArgumentsError,
    Suspend,
    ToolDeclarationError,
    ToolError,
    UnknownPromptError,
    UnknownResourceError,
    UnknownToolError,
    contained,
)
from toolcrib.limits import Lease, Limit, LimitBook, Limiter, Refusal, compile_limits
from toolcrib.observe import Metrics
from toolcrib.plugins import PluginHook, PluginManager, plugin_hooks
from toolcrib.policy import Policies, principal_of, request_for
from toolcrib.runner import Call, Runner
from toolcrib.uris import normalize as normalize_uri

if TYPE_CHECKING:
    from toolcrib.config import LoadedConfig
    from toolcrib.view import AgentView, ViewTool

log = logging.getLogger("toolcrib.calls")

WITHHELD_NOTE = "toolcrib.withheld"  # in an audit record's notes: the URIs taken out of what the agent was sent
_REFERRING = frozenset({"resource_link", "resource"})  # the content blocks that name a resource


class _Nothing(BaseModel):
    """The validated parameters of what takes none (and of an upstream server's passthrough)."""


_NOTHING = _Nothing()


@dataclass(frozen=True, slots=True)
class _Outcome:
    decision: str  # "allowed" | "denied" | "invalid" | "limited"
    by: str


_ALLOWED = _Outcome("allowed", "rules")


class Pipeline:
    """Runs calls for every view of one host state; holds what all calls share (hooks, limits, workers)."""

    def __init__(self, pm: PluginManager, loaded: LoadedConfig, settings: Mapping[str, Any],
                 metrics: Metrics | None = None, limits: Limiter | None = None,
                 sinks: Sequence[AuditSink] = ()) -> None:
        host = loaded.config.host
        self.workspace: Path = loaded.workspace
        self.call_timeout = host.call_timeout
        self.max_argument_bytes = host.max_argument_bytes
        self.max_result_chars = host.max_result_chars
        self.audit_arguments = host.audit_arguments
        self.settings = settings
        self._pre = plugin_hooks(pm, "toolcrib_pre_tool_use")
        # The config's command hooks say which calls they see: a call none of them matches does not call them.
        self._pm = pm
        self._pre_for: dict[tuple[str, str], list[PluginHook]] = {}
        self._post = plugin_hooks(pm, "toolcrib_post_tool_use")
        self._post_for: dict[tuple[str, str], list[PluginHook]] = {}
        self._approve = plugin_hooks(pm, "toolcrib_approve")
        self.policies = Policies(tuple(plugin_hooks(pm, "toolcrib_policy")), loaded.config.policy.timeout)
        self.version = loaded.version  # what an operator's answer is bound to, beside the call itself
        self.desk: Desk | None = None  # where operators answer approvals: the serving process's (ServingState)
        self._feed: Any = None  # the operator console's live feed (toolcrib.mcp.console.Feed), when one watches
        # The sinks the host hands over (its audit log) get each decision as it is; the other toolcrib_audit
        # plugins get the record.
        self._sinks: tuple[AuditSink, ...] = tuple(sinks)
        sinking = {name for name, plugin in pm.list_name_plugin() if any(plugin is sink for sink in self._sinks)}
        self._audit = [h for h in plugin_hooks(pm, "toolcrib_audit") if h.plugin not in sinking]
        self._metrics = metrics
        # then each decision is timed and reported
        self._observed = bool(self._audit) or bool(self._sinks) or metrics is not None
        self._audit_ids = bool(self._audit) or bool(self._sinks)
        self._ids = itertools.count(1)
        self._id_prefix = secrets.token_hex(4)  # call ids are this host's prefix and a count: unique, and cheap
        self._workers = host.sync_workers
        self._limiters: dict[bool, anyio.CapacityLimiter] = {}
        # [agents.<name>.limits], counted in a book that outlives reloads (serving keeps one)
        self._limits = {name: found for name, agent in loaded.config.agents.items()
                        if (found := compile_limits(name, agent.limits))}
        self._book: Limiter = limits if limits is not None else LimitBook()
        self._limits_for: dict[tuple[str, str], list[Limit]] = {}

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """What bounds the worker threads of sync handlers: one for asyncio and one for trio, since anyio's limiters
        work only on the backend they were made on (a host the Python API calls from both)."""
        on_asyncio = asyncio._get_running_loop() is not None
        found = self._limiters.get(on_asyncio)
        if found is None:
            found = self._limiters[on_asyncio] = anyio.CapacityLimiter(self._workers)
        return found

    def call(
        self,
        view: AgentView,
        name: str,
        arguments: Any,
        *,
        approver: Approver | None = None,
        channel: ClientChannel | None = None,
    ) -> Awaitable[ToolResult]:
        """One call as ``view.agent`` makes it, to be awaited. Raises ``UnknownToolError`` for a name the agent
        does not see (hidden or nonexistent alike), at once; every other failure is an ``isError`` result."""
        started = time.perf_counter() if self._observed else 0.0
        vt = view.lookup(name)  # hidden and nonexistent alike: None
        if vt is None:
            raise self.unknown(view, name, channel, started)
        return self.run(view, vt, arguments, approver, channel, started)

    def unknown(self, view: AgentView, name: Any, channel: ClientChannel | None,
                started: float | None = None) -> UnknownToolError:
        """The answer to a call of a name the agent does not see, audited (``"decision": "unknown"``)."""
        if self._observed:
            when = time.perf_counter() if started is None else started
            self._write_audit(Call(view, str(name)[:200], None, channel, started=when), "unknown",
                              "no such tool in the agent's view", True)
        return UnknownToolError(name if isinstance(name, str) else repr(name))

    async def run(
        self,
        view: AgentView,
        vt: ViewTool,
        arguments: Any,
        approver: Approver | None = None,
        channel: ClientChannel | None = None,
        started: float = 0.0,
    ) -> ToolResult:
        """The pipeline for a tool the caller has already resolved (and decided on) for ``view``'s agent; a
        watching feed (``watch``) is told of the call while it runs."""
        feed = self._feed
        if feed is None:
            return await self._through(view, vt, arguments, approver, channel, started)
        key = feed.begin(view.agent, vt.name)
        try:
            return await self._through(view, vt, arguments, approver, channel, started, key)
        finally:
            feed.end(key)

    async def _through(self, view: AgentView, vt: ViewTool, arguments: Any, approver: Approver | None,
                       channel: ClientChannel | None, started: float, feed_key: int = 0) -> ToolResult:
        if self._observed and not started:
            started = time.perf_counter()
        # one id for the call, in its hooks' answers and its audit record (the agent SDKs' toolUseID)
        pre = self._pre_hooks(view.agent, vt.name) if self._pre else self._pre
        post = self._hooks_for(view.agent, vt.name, self._post, self._post_for, "toolcrib_post_tool_use") \
            if self._post else self._post
        # an id only where something reads it: a hook this call meets, or the audit
        call_id = f"call_{self._id_prefix}{next(self._ids):x}" if pre or post or self._audit_ids else ""
        if arguments is None:
            arguments = {}
        curation = vt.entry.curation
        refused = None
        if curation is not None:  # the operator's defaults and fixed values go in before anything looks at them
            arguments, refused = curation.apply(arguments)
        call = Call(view, vt.name, arguments, channel, approver, started, call_id, "tool", vt, self.workspace)
        if feed_key:  # (the class's 0 otherwise: nothing more on a call that no console watches)
            call.feed_key = feed_key
        if refused is not None:
            return self._finish(call, _Outcome("invalid", "input validation"),
                                ToolResult.error(f"Invalid arguments for {vt.name}:\n- {refused}"))
        problem = payload_problem(arguments, self.max_argument_bytes)
        if problem is not None:
            return self._finish(call, _Outcome("invalid", "payload limits"),
                                ToolResult.error(f"Invalid arguments for {vt.name}: {problem}"))
        try:
            model = vt.tool.validate_input(arguments)
        except ToolDeclarationError:
            log.exception("tool %s cannot be called: its input model cannot be built", vt.name)
            return self._finish(call, _Outcome("invalid", "broken tool"), ToolResult.error(
                f"Tool {vt.name} cannot be called: its input schema could not be built (`toolcrib check` says "
                "why)."))
        except ValidationError as exc:
            return self._finish(call, _Outcome("invalid", "input validation"),
                                ToolResult.error(format_validation_error(vt.name, exc, vt.tool.input_model)))

        outcome = _ALLOWED
        if vt.call_rules is not None or pre:
            denied, outcome, model = await self._policy(call, model, pre)
            if denied is not None:
                return self._finish(call, outcome, denied)
        if self.policies.hooks:  # once, on the arguments that will really run
            passed, why = await self.policies.decide(request_for(
                vt.entry, view.agent, "call", view.mode, model.model_dump(mode="json"), principal_of(call.principal)))
            if not passed:
                return self._finish(call, _Outcome("denied", why.split(":", 1)[0]),
                                    ToolResult.error(f"Permission denied: {why}"))

        limits = self._limits_of(view.agent, vt.name) if self._limits else None
        if limits:
            entered = await self._book.admit(view.agent, limits)
            if isinstance(entered, Refusal):
                return self._finish(call, _Outcome("limited", f"limit {entered.limit!r}"),
                                    ToolResult.error(entered.text))
            call.lease = entered
            try:
                result = await self._run(call, model, outcome)
            finally:
                gone = call.lease.abandon()  # a sync handler still running gives its place back when it really ends
                if gone is not None:
                    with anyio.CancelScope(shield=True):  # given back even by a cancelled call
                        await gone
        else:
            result = await self._run(call, model, outcome)
        if post:
            result = await self._post_hooks(call, model.model_dump(mode="json"), result, post)
        result = self._withheld(call, result)
        if self._observed:
            self._finish(call, outcome, result)
        return result

    # -- steps ---------------------------------------------------------------------------------------------

    def _limits_of(self, agent: str, tool: str) -> list[Limit]:
        """The limits covering this agent's calls of this tool (remembered)."""
        found = self._limits_for.get((agent, tool))
        if found is None:
            found = self._limits_for[(agent, tool)] = [
                limit for limit in self._limits.get(agent, ()) if limit.covers(tool)]
        return found

    def _pre_hooks(self, agent: str, tool: str) -> list[PluginHook]:
        """The pre-tool-use hooks that see this agent's calls of this tool (remembered: a view never changes)."""
        return self._hooks_for(agent, tool, self._pre, self._pre_for, "toolcrib_pre_tool_use")

    def _hooks_for(self, agent: str, tool: str, hooks: list[PluginHook],
                   remembered: dict[tuple[str, str], list[PluginHook]], name: str) -> list[PluginHook]:
        """Of ``hooks`` (of the hook ``name``), those that see this agent's calls of this tool: a plugin that says
        which calls it sees (``PluginHook.sees``: the config's hook programs do) is not called for the others."""
        found = remembered.get((agent, tool))
        if found is None:
            found = [h for h in hooks if h.sees is None or h.sees(name, agent, tool)]
            remembered[(agent, tool)] = found
        return found

    async def _policy(self, call: Call, model: Any, pre: list[PluginHook]) -> tuple[ToolResult | None, _Outcome, Any]:
        """Argument rules and approvals, then the pre-tool-use hooks; when a hook replaced the input, the rules hold
        again for what will really run. Returns (a refusal or None, the outcome, the model); ``call.arguments``
        becomes the arguments as validated (as JSON), which the audit records."""
        vt = call.tool
        assert vt is not None
        outcome = _ALLOWED
        # Rules, approvals and hooks see the arguments as validated (a pack's validators may put a value into one
        # canonical spelling, so that './secrets//key' meets the rule 'fs__write_file(secrets/*)'), as JSON.
        arguments = call.arguments = model.model_dump(mode="json")
        approved = False
        if vt.call_rules is not None:
            refused, outcome, approved = await self._rules(call, arguments, "", False)
            if refused is not None:
                return refused, outcome, model
        if not pre:
            return None, outcome, model
        frozen = types.MappingProxyType(arguments)
        kwargs = {"agent": call.agent, "tool": vt.name, "arguments": frozen, "annotations": vt.tool.annotations,
                  "call_id": call.id}
        deny: Deny | None = None
        denier = ""
        updated: Mapping[str, Any] | None = None
        updater = ""
        ask: Ask | None = None
        asker = ""
        for impl in pre:
            answer, raised = await impl.heard_awaited(kwargs)
            if raised is not None:
                log.error("toolcrib_pre_tool_use of %r raised; the call is denied", impl.plugin, exc_info=raised)
                answer = Deny(f"{vt.name} was denied: a policy check failed ({type(raised).__name__}).")
            if isinstance(answer, Deny):
                if deny is None:
                    deny, denier = answer, impl.plugin
            elif isinstance(answer, Allow | Ask):
                if answer.updated_input is not None:
                    updated, updater = answer.updated_input, impl.plugin
                    kwargs["arguments"] = types.MappingProxyType(dict(updated))
                if isinstance(answer, Ask) and ask is None:
                    ask, asker = answer, impl.plugin
            elif answer is not None:
                log.error("toolcrib_pre_tool_use of %r returned %r; the call is denied", impl.plugin, answer)
                if deny is None:
                    deny = Deny(f"{vt.name} was denied: a policy check gave an invalid answer.")
                    denier = impl.plugin
        if deny is not None:
            refusal = ToolResult(content=({"type": "text", "text": deny.message},), is_error=True,
                                 interrupt=deny.interrupt)
            by = f"hook {denier}" + (" (interrupt)" if deny.interrupt else "")
            return refusal, _Outcome("denied", by), model
        if updated is not None:
            suffix = f" (as replaced by {updater!r})"
            try:
                model = vt.tool.input_model.model_validate(dict(updated))
            except ValidationError as exc:
                message = format_validation_error(vt.name, exc, vt.tool.input_model, suffix)
                return ToolResult.error(message), _Outcome("invalid", f"hook {updater}"), model
            arguments = call.arguments = model.model_dump(mode="json")
            outcome = _Outcome("allowed", f"hook {updater} (replaced input)")
            if vt.call_rules is not None:  # the rules hold for what really runs, whoever wrote it
                refused, rules_outcome, approved = await self._rules(call, arguments, suffix, approved)
                if refused is not None:
                    return refused, rules_outcome, model
        if ask is not None and not approved:
            ok, by = await self._approval(call, arguments, f"hook {asker}", f"hook {asker}: {ask.message}")
            if not ok:
                return ToolResult.error(by), _Outcome("denied", by), model
            outcome = _Outcome("allowed", by)
        return None, outcome, model

    async def _rules(self, call: Call, arguments: Mapping[str, Any], suffix: str,
                     approved: bool) -> tuple[ToolResult | None, _Outcome, bool]:
        """The argument rules and ``ask`` rules for one set of arguments: (a refusal or None, the outcome, whether
        the call is approved). A call approved once is not asked again."""
        vt = call.tool
        assert vt is not None and vt.call_rules is not None
        verdict, rule, subject = vt.call_rules.check(arguments)
        if verdict == "deny":
            by = f"rule {rule.text!r}" if rule is not None else "no allow rule matches its argument"
            shown = f"{subject}={arguments.get(subject)!r}" if subject else "this call"
            message = f"Permission denied: {vt.name} with {shown}{suffix} is denied by the agent's permissions ({by})."
            return ToolResult.error(message), _Outcome("denied", by), approved
        if verdict == "approve":
            assert rule is not None
            return None, _Outcome("allowed", f"approve rule {rule.text!r}"), True
        if verdict == "ask" and not approved:
            assert rule is not None
            ok, by = await self._approval(call, arguments, rule.text)
            if not ok:
                return ToolResult.error(by), _Outcome("denied", by), False
            return None, _Outcome("allowed", by), True
        return None, _ALLOWED, approved

    async def _approval(self, call: Call, arguments: Mapping[str, Any], rule: str,
                        why: str | None = None) -> tuple[bool, str]:
        """Whether a held call may run (and why): the mode, then ``toolcrib_approve`` hooks, then the client.
        ``why`` it is held: an ask rule (``rule``), or what a pre-tool-use hook said."""
        view, vt = call.view, call.tool
        assert vt is not None
        mode = view.mode
        why = why or f"ask rule {rule!r}"
        need = f"{vt.name} needs approval ({why})"
        if mode == "dontAsk":
            return False, f"Permission denied: {need}, and agent mode 'dontAsk' denies calls that need approval."
        if mode == "bypassPermissions":
            return True, "mode bypassPermissions"
        if mode == "acceptEdits" and not vt.entry.destructive:
            return True, "mode acceptEdits (tool is not destructive)"
        frozen = types.MappingProxyType(dict(arguments))
        kwargs = {"agent": view.agent, "tool": vt.name, "arguments": frozen, "annotations": vt.tool.annotations,
                  "rule": rule}
        for impl in self._approve:
            try:
                answer = impl(**kwargs)
                if inspect.isawaitable(answer):
                    answer = await answer
            except BaseException as exc:
                if not contained(exc):
                    raise
                log.error("toolcrib_approve of %r raised; the call is refused", impl.plugin, exc_info=exc)
                return False, f"Permission denied: {need}, and the approval check failed."
            if answer is True:
                return True, f"approved by hook {impl.plugin}"
            if answer is False:
                return False, f"Permission denied: {need}, and it was refused."
            if isinstance(answer, Deny):
                return False, f"Permission denied: {answer.message}"
        feed = self._feed if call.feed_key else None
        if feed is not None:  # the console's "Running now" marks it while it waits for an answer
            feed.waiting(call.feed_key, True)
        try:
            return await self._asked(call, arguments, frozen, rule, why, need)
        finally:
            if feed is not None:
                feed.waiting(call.feed_key, False)

    async def _asked(self, call: Call, arguments: Mapping[str, Any], frozen: Mapping[str, Any], rule: str, why: str,
                     need: str) -> tuple[bool, str]:
        """Ask the client (``frozen``: the arguments it is shown, read-only), then an operator, as the agent's
        ``approvals`` says."""
        view, vt, approver = call.view, call.tool, call.approver
        assert vt is not None
        ask_by = view.rules.config.approvals
        if approver is not None and ask_by != "operator":
            message = f"Agent {view.agent!r} wants to call {vt.name} ({why}). Allow this call?"
            try:
                answer = await approver(view.agent, vt.name, frozen, message)
            except Suspend:
                raise
            except Exception:
                log.exception("asking the client for approval failed")
                answer = None
            if answer is True:
                return True, "approved by the user"
            if answer is False:
                return False, f"Permission denied: {need}, and the user declined."
            if isinstance(answer, Deny):
                return False, f"Permission denied: {need}; {answer.message}"
        if ask_by != "client":
            return await self._operator_approval(call, arguments, why, need)
        return False, (f"Permission denied: {need}, and no approver could answer (the client does not support "
                       "elicitation and no approval hook decided).")

    async def _operator_approval(self, call: Call, arguments: Mapping[str, Any], why: str,
                                 need: str) -> tuple[bool, str]:
        """Hold the call until an operator answers it on the operator endpoint, or its agent's
        ``approval_timeout`` passes (``toolcrib.approvals``)."""
        view, vt, desk = call.view, call.tool, self.desk
        assert vt is not None
        if desk is None:
            return False, (f"Permission denied: {need}, and no operator can answer here: operators answer on the "
                           "operator endpoint of `toolcrib serve --http` ([operator]).")
        timeout = view.rules.config.approval_timeout
        if not call.id:  # the operator is shown it, and the audit record then has it too
            call.id = f"call_{self._id_prefix}{next(self._ids):x}"
        held = getattr(call.channel, "held", None)  # a front end that tells its client where the call stands
        if held is not None:
            held(f"waiting for an operator's approval ({why})")
        try:
            approved, by = await desk.ask(view.agent, call.identity, vt.name, arguments, why, call.id, self.version,
                                          timeout)
        except DeskUnreachable:
            return False, (f"Permission denied: {need}, and the shared store where operators answer approvals is "
                           "unreachable; try again shortly.")
        except DeskFull:
            return False, (f"Permission denied: {need}, and agent {view.agent!r} already has {MAX_PENDING} calls "
                           "waiting for an operator; try again when they are answered.")
        finally:
            if held is not None:
                held(None)
        if approved is None:
            return False, f"Permission denied: {need}, and no operator answered within {timeout:g} s."
        if approved:
            return True, f"approved by {by}"
        return False, f"Permission denied: {need}, and {by} denied it."

    async def _run(self, call: Call, model: Any, outcome: _Outcome) -> ToolResult:
        vt = call.tool
        assert vt is not None
        tool = vt.tool
        try:
            value = await self._execute(call, tool.runner, model, vt.timeout, "Tool", vt.name)
        except ToolError as exc:
            return ToolResult.error(str(exc) or f"Tool {vt.name} failed.")
        except Suspend as suspended:
            if suspended.ends and self._observed:  # the front end ends the call with a protocol error: audited
                self._finish(call, outcome, ToolResult.error(str(suspended)))
            raise
        try:
            check = tool.check_output
            result = normalize(value, check(value) if check is not None else None)
        except Exception:
            log.exception("tool %s returned a value that cannot be sent (agent %r)", vt.name, call.agent)
            return ToolResult.error(f"Tool {vt.name} returned a result that cannot be sent (it does not match its "
                                    "declared output, or is not JSON); the host's log has the details.")
        content = result.content
        if len(content) == 1 and len(content[0].get("text", "")) <= self.max_result_chars:
            return result
        return self._cap(vt, result)

    def _cap(self, vt: ViewTool, result: ToolResult) -> ToolResult:
        limit = self.max_result_chars
        total = 0
        for block in result.content:
            if block.get("type") == "text":
                total += len(block["text"])
        if total <= limit:
            return result
        blocks = []
        left = limit
        for block in result.content:
            if block.get("type") != "text":
                blocks.append(block)
                continue
            text = block["text"]
            if len(text) > left:
                text = text[:left] + (f"\n[... truncated by toolcrib: the result had {total} characters, more than "
                                      f"the limit of {limit}]")
                left = 0
            else:
                left -= len(text)
            blocks.append({**block, "text": text})
        structured = result.structured_content if vt.tool.output_adapter is not None else None
        return ToolResult(content=tuple(blocks), structured_content=structured, is_error=result.is_error,
                          meta=result.meta)

    async def _post_hooks(self, call: Call, arguments: Mapping[str, Any], result: ToolResult,
                          post: list[PluginHook]) -> ToolResult:
        kwargs: dict[str, Any] = {"agent": call.agent, "tool": call.name,
                                  "arguments": types.MappingProxyType(dict(arguments)), "result": result,
                                  "call_id": call.id}
        for impl in post:
            answer, raised = await impl.heard_awaited(kwargs)
            if raised is not None:
                log.error("toolcrib_post_tool_use of %r raised; the result is withheld", impl.plugin,
                          exc_info=raised)
                return ToolResult.error(f"The result of {call.name} was withheld: a post-processing check failed.")
            if answer is None:
                continue
            problem = result_problem(answer) if isinstance(answer, ToolResult) else "it is not a ToolResult"
            if problem is not None:
                log.error("toolcrib_post_tool_use of %r returned %r (%s); the result is withheld", impl.plugin,
                          answer, problem)
                return ToolResult.error(f"The result of {call.name} was withheld: a post-processing check failed.")
            result = answer
            kwargs["result"] = result
        return result

    async def _policies_allow(self, call: Call, entry: Entry, action: str, arguments: Mapping[str, Any],
                              uri: str | None = None) -> None:
        """The policies' verdict on reading a resource or getting a prompt: ``ToolError`` (audited) when one
        denies."""
        if not self.policies:
            return
        passed, why = await self.policies.decide(request_for(entry, call.agent, action, call.view.mode, arguments,
                                                             principal_of(call.principal), uri))
        if not passed:
            self._write_audit(call, "denied", why.split(":", 1)[0], True)
            raise ToolError(f"Permission denied: {why}")

    def _withheld(self, call: Call, result: ToolResult) -> ToolResult:
        """``result`` without its blocks that refer to a resource the agent may not see (``AgentView.withhold``):
        taken out as if the tool had not sent them, so that the agent cannot tell them from nothing, and named in
        the call's audit record (``notes``) and the log for the operator."""
        content = result.content
        if result.meta is None and ((len(content) == 1 and content[0].get("type") == "text") or
                                    not any(block.get("type") in _REFERRING for block in content)):
            return result  # (the usual result: text, images, nothing that names a resource)
        kept, taken = call.view.withhold(result.content)
        meta = call.view.withhold_app(result.meta, taken) if result.meta else result.meta
        if not taken:
            return result
        self._note_withheld(call, taken)
        return dataclasses.replace(result, content=tuple(kept), meta=meta)

    @staticmethod
    def _note_withheld(call: Call, taken: list[str]) -> None:
        log.info("%s %s for agent %r: withheld what refers to %s, which the agent may not see", call.kind, call.name,
                 call.agent, ", ".join(map(repr, taken)))
        call.notes = {**(call.notes or {}), WITHHELD_NOTE: taken}

    def _finish(self, call: Call, outcome: _Outcome, result: ToolResult) -> ToolResult:
        if self._observed:
            self._write_audit(call, outcome.decision, outcome.by, result.is_error)
        return result

    # -- resources, prompts, completions -------------------------------------------------------------------------

    async def read(self, view: AgentView, uri: str, *, channel: ClientChannel | None = None) -> list[dict[str, Any]]:
        """Read ``uri`` as ``view.agent``: the resource's contents. ``UnknownResourceError`` for one the agent may not
        read (hidden and nonexistent alike), ``InvalidArgumentsError`` for a template's parameters that do not
        validate, ``ToolError`` when the resource's function fails (with its message, or a generic one)."""
        started = time.perf_counter()
        found = view.resource(uri)
        if found is None:
            self._write_audit(Call(view, str(uri)[:2000], None, channel, started=started, kind="resource"), "unknown",
                              "no such resource in the agent's view", True)
            raise UnknownResourceError(str(uri))
        entry, parameters = found
        uri = normalize_uri(uri)  # what the rules saw is what the resource is read as, and what the audit records
        resource = entry.resource
        call = Call(view, uri, parameters or None, channel, started=started, kind="resource", workspace=self.workspace,
                    entry=entry)
        await self._policies_allow(call, entry, "read", parameters, uri)
        try:
            if resource.passthrough:
                contents = list(await self._invoke(call, _NOTHING))
            else:
                value = await self._invoke(call, self._validated(entry, resource.model, parameters, "parameters"))
                try:
                    contents = resource_contents(uri, resource.mime_type, value)
                except (TypeError, ValueError) as exc:
                    log.error("resource %s returned a value that cannot be sent: %s", entry.name, exc)
                    raise ToolError(f"Resource {uri} returned a value that cannot be sent; the host's log has the "
                                    "details.") from None
        except (ToolError, InvalidArgumentsError):
            self._write_audit(call, "allowed", "rules", True)
            raise
        kept, taken = view.withhold(contents)
        if taken:
            self._note_withheld(call, taken)
            contents = [dict(item) for item in kept]
        self._write_audit(call, "allowed", "rules", False)
        return contents

    async def get_prompt(self, view: AgentView, name: str, arguments: Mapping[str, Any] | None = None, *,
                         channel: ClientChannel | None = None) -> dict[str, Any]:
        """Get prompt ``name`` as ``view.agent``: ``{"description", "messages"}``. ``UnknownPromptError``,
        ``InvalidArgumentsError`` or ``ToolError`` as for ``read``."""
        started = time.perf_counter()
        entry = view.prompt(name)
        if entry is None:
            self._write_audit(Call(view, str(name)[:200], None, channel, started=started, kind="prompt"), "unknown",
                              "no such prompt in the agent's view", True)
            raise UnknownPromptError(str(name))
        prompt = entry.prompt
        arguments = dict(arguments or {})
        call = Call(view, entry.name, arguments, channel, started=started, kind="prompt", workspace=self.workspace,
                    entry=entry)
        await self._policies_allow(call, entry, "get", arguments)
        try:
            problem = payload_problem(arguments, self.max_argument_bytes)
            if problem is not None:
                raise InvalidArgumentsError(f"Invalid arguments for prompt {entry.name}: {problem}")
            if prompt.passthrough:
                answer = dict(await self._invoke(call, _NOTHING))
            else:
                value = await self._invoke(call, self._validated(entry, prompt.model, arguments, "arguments"))
                try:
                    answer = {"description": prompt.description, "messages": prompt_messages(value)}
                except (TypeError, ValueError) as exc:
                    log.error("prompt %s returned a value that cannot be sent: %s", entry.name, exc)
                    raise ToolError(f"Prompt {entry.name} returned a value that cannot be sent; the host's log has "
                                    "the details.") from None
        except (ToolError, InvalidArgumentsError):
            self._write_audit(call, "allowed", "rules", True)
            raise
        messages = answer.get("messages")
        if isinstance(messages, list):
            kept, taken = view.withhold(messages, inner="content")
            if taken:
                self._note_withheld(call, taken)
                answer = {**answer, "messages": kept}
        self._write_audit(call, "allowed", "rules", False)
        return answer

    async def complete(self, view: AgentView, ref: Mapping[str, Any], argument: str, value: str,
                       context: Mapping[str, str] | None = None) -> Completions:
        """The completions of ``argument`` of the prompt or template ``ref`` names, starting from ``value``; none
        for what the agent does not see, or what offers none."""
        entry: Entry | None = None
        if ref.get("type") == "ref/prompt":
            entry = view.prompt(ref.get("name"))
        elif ref.get("type") == "ref/resource":
            entry = next((t for t in view.templates if t.uri == ref.get("uri")), None)
        if entry is None:
            return Completions()
        completer = entry.item.complete.get(argument)
        if completer is None:
            return Completions()
        try:
            takes = len(inspect.signature(completer).parameters)
        except (TypeError, ValueError):
            takes = 2
        args: tuple[Any, ...] = (value, dict(context or {})) if takes >= 2 else (value,)
        try:
            with anyio.fail_after(self.call_timeout):
                found = completer(*args)
                if inspect.isawaitable(found):
                    found = await found
        except BaseException as exc:
            if not contained(exc):
                raise
            log.error("the completion of %s (%s) raised", entry.name, argument, exc_info=exc)
            return Completions()
        if found is None:
            return Completions()
        if isinstance(found, str | bytes) or not isinstance(found, Iterable):
            log.error("the completion of %s (%s) returned %s, not a list of values", entry.name, argument,
                      type(found).__name__)
            return Completions()
        return Completions(list(itertools.islice(found, MAX_COMPLETION_SCAN)))

    def _validated(self, entry: Entry, model: type[BaseModel] | None, values: Mapping[str, Any],
                   what: str) -> BaseModel:
        if model is None:
            return _NOTHING
        try:
            return model.model_validate(dict(values))
        except ValidationError as exc:
            raise InvalidArgumentsError(format_validation_error(entry.name, exc, model).replace(
                "Invalid arguments for", f"Invalid {what} for")) from None

    async def _execute(self, call: Call, runner: Runner, model: BaseModel, timeout: float, what: str,
                       name: str) -> Any:
        """Run what ``runner`` starts for ``call`` (a tool's handler, a resource's reader, a prompt's function) under
        ``timeout``, and answer its value. The one error rule: a ``ToolError`` is the handler's own answer; a
        timeout, or anything else it raises, becomes a ``ToolError`` that names ``what`` ran (the host's log has the
        rest); only a real cancel, or a ``Suspend`` (the front end asks the client, and the call is made again),
        passes through."""
        try:
            work = runner.start(model, call)
            if callable(work):
                # A thread cannot be stopped: on a timeout (or the client cancelling) the call returns at once and
                # the handler is told through ctx.cancelled, so a long one can stop and free its worker.
                lease = call.lease
                try:
                    with anyio.move_on_after(timeout):
                        return await anyio.to_thread.run_sync(
                            work if lease is None else functools.partial(_leased, lease, work),
                            limiter=self.limiter, abandon_on_cancel=True,
                        )
                except BaseException:  # cancelled from outside (the client gave up), or the handler failed
                    call.cancel()
                    raise
                call.cancel()  # (here only when the timeout cancelled the wait)
                raise _timed_out(what, name, timeout)
            if asyncio._get_running_loop() is not None:  # (anyio may run on trio, where this does not apply)
                # Run the coroutine up to its first suspension right here (as asyncio's eager tasks do): a handler
                # that never suspends cannot overrun its timeout and needs no timer, which is most of the
                # pipeline's own cost. One that suspends continues under asyncio.timeout, which (unlike an anyio
                # cancel scope) may be entered after the handler entered scopes of its own.
                try:
                    first = work.send(None)
                except StopIteration as done:
                    return done.value
                deadline = asyncio.timeout(timeout)
                try:
                    async with deadline:
                        return await _Resume(work, first)
                except TimeoutError:
                    if not deadline.expired():
                        raise  # the handler's own TimeoutError: a failure like any other
                    raise _timed_out(what, name, timeout) from None
            with anyio.move_on_after(timeout):
                return await work
            raise _timed_out(what, name, timeout)
        except (ToolError, Suspend):
            raise
        except BaseException as exc:  # whatever a handler raises, the host goes on; only a real cancel stops it
            if not contained(exc):
                raise
            log.error("%s %s raised (agent %r)", what.lower(), name, call.agent, exc_info=exc)
            raise ToolError(f"{what} {name} failed with an internal error; the host's log has the details.") from None

    async def _invoke(self, call: Call, model: BaseModel) -> Any:
        """Run a resource's or prompt's runner, as a tool's is run (``_execute``) under the call timeout."""
        entry = call.entry
        assert entry is not None
        return await self._execute(call, entry.item.runner, model, self.call_timeout,
                                   "Resource" if call.kind == "resource" else "Prompt", entry.name)

    def limit_usage(self, agent: str) -> list[dict[str, Any]] | None:
        """The agent's limits as they stand (``LimitBook.usage``); None when they are counted on a shared store."""
        return self._book.usage(agent) if isinstance(self._book, LimitBook) else None

    def watch(self, feed: Any) -> None:
        """Hand ``feed`` every decision as its audit record is made (the operator console's live feed), whether or
        not an audit log is kept, and tell it of each call while it runs (``feed.begin(agent, tool)`` gives a key,
        ``feed.waiting(key, True)`` while it waits for an approval and ``False`` once answered, ``feed.end(key)``)."""
        self._feed = feed
        self._observed = self._audit_ids = True

    def _write_audit(self, call: Call, decision: str, by: str, is_error: bool) -> None:
        """Report a decision: to the metrics (when kept), and as an audit record to every ``toolcrib_audit``."""
        elapsed = time.perf_counter() - call.started
        if self._metrics is not None:
            self._metrics.observe(call.agent, call.kind, call.name, decision, is_error, elapsed)
        if not self._sinks and not self._audit and self._feed is None:
            return
        given = call.arguments if self.audit_arguments and call.arguments is not None else None
        item = (time.time(), call.agent, call.kind, call.name, decision, by, elapsed, is_error, given, call.identity,
                call.id or None, call.notes)
        if self._feed is not None:
            self._feed(item)
        for sink in self._sinks:
            sink.log_decision(item)
        if not self._audit:
            return
        frozen = types.MappingProxyType(audit_record(item))
        for impl in self._audit:
            _, raised = impl.heard({"record": frozen})
            if raised is not None:
                log.error("toolcrib_audit of %r raised", impl.plugin, exc_info=raised)


# -- helpers ---------------------------------------------------------------------------------------------------


class _Resume:
    """Await a coroutine that has already run up to its first suspension (it yielded ``first``).

    This is ``await``'s own protocol (PEP 492's ``yield from``), spelled out so that the rest of the coroutine
    runs inside the caller's cancel scope: sends and throws are forwarded until it returns.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Any, first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Any:
        coro, pending = self._coro, self._first
        while True:
            try:
                sent = yield pending
            except BaseException as exc:  # cancellation included: the coroutine gets it, as with await
                try:
                    pending = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _leased(lease: Lease, work: Callable[[], Any]) -> Any:
    """Run a sync handler in its worker thread holding its limits' places until it really ends."""
    if not lease.start():
        return None  # the call was over before this thread began: nobody waits for the handler, so it never runs
    try:
        return work()
    finally:
        lease.end()


def _timed_out(what: str, name: str, timeout: float) -> ToolError:
    return ToolError(f"{what} {name} timed out after {_seconds(timeout)} and was stopped.")


def _seconds(value: float) -> str:
    return f"{value:g} second" + ("" if value == 1 else "s")
