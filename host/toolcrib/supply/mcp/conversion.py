"""What an upstream server lists, as catalog entries of its namespace: its tools (``tool_entries``) and its
resources, resource templates and prompts (``item_entries``). Upstream text is not trusted: every text an agent
reads loses its hidden characters, and an item that cannot lose them without changing what it takes is left out,
with a problem that says why."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, create_model

from toolcrib.declarations import Prompt, Resource, template_variables
from toolcrib.entries import Entry
from toolcrib.errors import InvalidArgumentsError, ToolError
from toolcrib.names import clean, clean_schema, foreign_icons, foreign_item, foreign_meta, full_name, serving_names
from toolcrib.runner import Call
from toolcrib.supply.mcp.pack_checks import remote_describe
from toolcrib.supply.mcp.runners import UpstreamRunner, as_caller
from toolcrib.tool import ANNOTATION_KEYS, Tool

if TYPE_CHECKING:
    from toolcrib.supply.mcp.connections import Connection

log = logging.getLogger("toolcrib.upstream")

# Arguments go to the upstream server as they are (after the pipeline's size and shape checks); it validates them.
_ANY_ARGUMENTS: type[BaseModel] = create_model("upstream_arguments", __config__=ConfigDict(extra="allow"))


def tool_entries(connection: Connection, problems: list[str]) -> list[Entry]:
    names = serving_names("tool", [t.name for t in connection.tools], problems)
    made = (_entry(connection, t, names[t.name], problems) for t in connection.tools if t.name in names)
    return [e for e in made if e is not None]


def _icons(connection: Connection, declared: Any) -> tuple[dict[str, Any], ...]:
    """The icons a tool, resource or prompt of a server is served with: its own, else its server's (``serverInfo``:
    toolcrib serves many servers as one, so a client sees a server's icon on what it offers), as
    ``names.foreign_icons`` keeps them."""
    own = foreign_icons(getattr(declared, "icons", None))
    if own:
        return own
    server = getattr(connection.client, "server_info", None)
    return foreign_icons(getattr(server, "icons", None))


def _entry(connection: Connection, tool: Any, served: str, problems: list[str]) -> Entry | None:
    name = tool.name
    execution = getattr(tool, "execution", None)
    # (listed by a 2025-11-25 server only: 2026-07-28 lists no task support; its tasks are followed when they come)
    support = execution.task_support if execution is not None else None
    annotations: dict[str, Any] = {}
    if tool.annotations is not None:
        for key, value in tool.annotations.model_dump(by_alias=True, exclude_none=True).items():
            if key in ANNOTATION_KEYS and isinstance(value, ANNOTATION_KEYS[key]):
                annotations[key] = clean(value) if isinstance(value, str) else value
    # Upstream text is not trusted: every text an agent reads loses its hidden characters; one that cannot lose
    # them without changing what the tool takes (a property name, an enum value) keeps the tool out.
    hidden: list[str] = []
    input_schema = clean_schema(_mapping(tool.input_schema) or {"type": "object"}, hidden, "inputSchema")
    output_schema = clean_schema(_mapping(tool.output_schema), hidden, "outputSchema")
    if hidden:
        problems.append(f"tool {name!r} is not served: hidden characters in {', '.join(hidden[:3])}")
        return None
    description = clean(tool.description or "") or f"Tool {name} of the upstream server."
    title = getattr(tool, "title", None)
    namespace = connection.namespace
    runner = UpstreamRunner(connection.client, name, namespace, connection.what, connection.lane,
                            as_task=support == "required", forward=frozenset(connection.config.forward),
                            acting=connection.acting, secrets=connection.secrets)
    describe = None
    if "describe" in connection.checks.get("tool", {}).get(name, ()):
        describe = remote_describe(connection.check_line, name, description, lambda: connection.check_seconds)
    spec = Tool(
        name=served,
        description=description,
        runner=runner,
        annotations=annotations,
        is_available=connection.own_check("tool", name),
        describe=describe,
        arguments=tuple(input_schema.get("properties", {})),
        title=clean(title) if isinstance(title, str) and title else annotations.get("title"),
        make_input=lambda: _ANY_ARGUMENTS,
        given_input_schema=input_schema,
        given_output_schema=output_schema,
        source_name=name if served != name else None,
        meta=foreign_meta(getattr(tool, "meta", None)),
        icons=_icons(connection, tool),
        task="optional" if support in ("optional", "required") else "forbidden",  # a long call, as its server says
    )
    return Entry(name=full_name(namespace, served), provenance=connection.provenance, definition=spec)


def item_entries(connection: Connection, problems: list[str]) -> list[Entry]:
    """An upstream server's resources, templates and prompts as catalog items of its namespace. Each text an agent
    reads loses its hidden characters; an item that would have to change what identifies it (a name, a URI, an
    argument's name) to lose them is not served."""
    namespace = connection.namespace
    found: list[Entry] = []
    seen: set[tuple[str, str]] = set()

    def add(what: str, name: str, item: Resource | Prompt) -> None:
        if (what, name) in seen:
            problems.append(f"{what} {name!r} is not served: the server offers two of that name")
            return
        seen.add((what, name))
        found.append(Entry(name=full_name(namespace, name), provenance=connection.provenance, definition=item))

    for resource in connection.resources:
        made = _resource(connection, resource.name, str(resource.uri), resource, problems)
        if made is not None:
            add("resource", made.name, made)
    for template in connection.templates:
        made = _resource(connection, template.name, template.uri_template, template, problems)
        if made is not None:
            add("resource template", made.name, made)
    prompt_names = serving_names("prompt", [p.name for p in connection.prompts], problems)
    for prompt in connection.prompts:
        if prompt.name not in prompt_names:
            continue
        made_prompt = _prompt(connection, prompt, prompt_names[prompt.name], problems)
        if made_prompt is not None:
            add("prompt", made_prompt.name, made_prompt)
    return found


def _untouched(*texts: str) -> bool:
    return all(clean(t) == t for t in texts)


def _resource(connection: Connection, name: str, uri: str, declared: Any,
              problems: list[str]) -> Resource | None:
    template = getattr(declared, "uri_template", None) is not None
    what = "resource template" if template else "resource"
    if not _untouched(name, uri):
        problems.append(f"{what} {clean(name)!r} is not served: hidden characters in its name or URI")
        return None
    parameters = template_variables(uri) if template else ()
    if template and not parameters:
        problems.append(f"resource template {name!r} is not served: {uri!r} has no variables")
        return None
    client = connection.client
    title = getattr(declared, "title", None)

    async def read(uri: str, call: Any) -> list[dict[str, Any]]:
        from mcp.shared.exceptions import MCPError

        async with as_caller(connection.namespace, connection.acting, connection.secrets, call) as secrets:
            try:
                result = await client.read_resource(uri)
            except MCPError as exc:
                raise ToolError(secrets.scrub(f"upstream server {connection.namespace!r} could not read {uri!r}: "
                                              f"{exc.error.message}")) from None
            return [secrets.scrub_block(item) for item in contents_of(result)]

    completions = {p: _completer(client, "ref/resource", uri, p) for p in parameters}
    return Resource(name=name, uri=uri, description=clean(declared.description or "") or f"The resource {uri}.",
                    runner=_Passthrough(lambda call: read(call.name, call)),
                    mime_type=clean(declared.mime_type) if declared.mime_type else None,
                    title=clean(title) if title else None, parameters=parameters, complete=completions,
                    passthrough=True, is_available=connection.own_check("resource", uri),
                    icons=_icons(connection, declared),
                    meta=foreign_meta(getattr(declared, "meta", None)))


def contents_of(result: Any) -> list[dict[str, Any]]:
    """A server's ``resources/read`` result as toolcrib passes it on: its contents, each with only the ``_meta``
    keys ``names.foreign_meta`` keeps (none that speak for toolcrib or the protocol)."""
    return [foreign_item(c.model_dump(by_alias=True, mode="json", exclude_none=True)) for c in result.contents]


def _prompt(connection: Connection, declared: Any, served: str, problems: list[str]) -> Prompt | None:
    name = declared.name
    arguments = [(a.name, clean(a.description) if a.description else None, bool(a.required))
                 for a in declared.arguments or ()]
    if not _untouched(*(a for a, _, _ in arguments)):
        problems.append(f"prompt {name!r} is not served: hidden characters in the name of an argument")
        return None
    client = connection.client
    namespace = connection.namespace

    async def get(arguments: Mapping[str, Any], call: Any) -> dict[str, Any]:
        from mcp.shared.exceptions import MCPError

        bad = sorted(k for k, v in arguments.items() if not isinstance(v, str))
        if bad:
            raise InvalidArgumentsError(f"Invalid arguments for prompt {full_name(namespace, served)}: a prompt's "
                                        f"arguments are strings ({', '.join(bad)} is not)")
        async with as_caller(namespace, connection.acting, connection.secrets, call) as secrets:
            try:
                result = await client.get_prompt(name, dict(arguments))
            except MCPError as exc:
                raise ToolError(secrets.scrub(f"upstream server {namespace!r} could not give prompt {name!r}: "
                                              f"{exc.error.message}")) from None
        answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        for message in answer.get("messages", []):
            if isinstance(message.get("content"), dict):
                message["content"] = secrets.scrub_block(foreign_item(message["content"]))
        return {k: secrets.scrub_value(v) if k == "description" else v for k, v in answer.items()
                if k in ("description", "messages")}

    title = getattr(declared, "title", None)
    completions = {a: _completer(client, "ref/prompt", name, a) for a, _, _ in arguments}
    return Prompt(name=served, description=clean(declared.description or "") or f"The prompt {name} of the upstream "
                  "server.", runner=_Passthrough(lambda call: get(call.arguments, call)), arguments=tuple(arguments),
                  title=clean(title) if title else None, complete=completions, passthrough=True,
                  source_name=name if served != name else None, is_available=connection.own_check("prompt", name),
                  icons=_icons(connection, declared),
                  meta=foreign_meta(getattr(declared, "meta", None)))


@dataclass(frozen=True, slots=True)
class _Passthrough:
    """Reads a resource of a connected upstream server (the call's URI) or gets one of its prompts (the call's
    arguments, as sent): the server's answer, in MCP's shape, is the result."""

    ask: Callable[[Call], Coroutine[Any, Any, Any]]
    is_async = True

    def start(self, model: BaseModel, call: Call) -> Any:
        return self.ask(call)


def _completer(client: Any, kind: str, ref: str, argument: str) -> Any:
    """A completer that asks the upstream server (nothing when it offers no completion or fails)."""

    async def complete(value: str, context: Mapping[str, str]) -> list[str]:
        import mcp_types as types

        reference: Any = (types.PromptReference(name=ref) if kind == "ref/prompt"
                          else types.ResourceTemplateReference(uri=ref))
        try:
            result = await client.complete(reference, {"name": argument, "value": value}, dict(context) or None)
        except Exception:
            log.debug("upstream completion of %s %s failed", ref, argument, exc_info=True)
            return []
        return [clean(v) for v in result.completion.values]

    return complete


def _mapping(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return json.loads(json.dumps(value)) if value else None
