"""``@resource`` and ``@prompt``: what a pack offers besides tools, declared like tools.

A resource is data an agent reads by URI: a fixed one (``@resource("orders://index")``) or a template whose
parameters are the function's (``@resource("orders://{order_id}")``). A prompt is a named message template with
typed arguments. Both are plain functions (sync or async) with a frozen declaration attached, checked at
declaration; both take an availability check and completions for their arguments::

    @toolcrib.resource("orders://{order_id}", mime_type="application/json",
                       complete={"order_id": lambda value: [o for o in ORDERS if o.startswith(value)]})
    def order(order_id: str) -> dict: ...

    @toolcrib.prompt
    def review(code: Annotated[str, Field(description="The code")]) -> str:
        \"\"\"Review a piece of code.\"\"\"
        return f"Please review:\\n{code}"

A pack returns them from its ``toolcrib_resources`` and ``toolcrib_prompts`` hooks.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import inspect
import logging
import re
import types
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar, overload
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, create_model

from toolcrib import fastschema
from toolcrib.content import CONTENT_CLASSES, EmbeddedResource, Text, dumps
from toolcrib.context import AvailabilityContext
from toolcrib.errors import ToolDeclarationError
from toolcrib.fastschema import json_schema_of
from toolcrib.inference import caller_locals, check_is_available, cleandoc, python_runner, signature_fields, type_hints
from toolcrib.names import SOURCE_NAME_KEY, tool_name_problem
from toolcrib.runner import Runner

F = TypeVar("F", bound=Callable[..., Any])

RESOURCE_ATTRIBUTE = "__toolcrib_resource__"
PROMPT_ATTRIBUTE = "__toolcrib_prompt__"
MAX_COMPLETIONS = 100  # values one completion answer carries, as MCP allows
MAX_COMPLETION_SCAN = 10_000  # values counted for its total: a completer's endless generator ends there
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")
_VARIABLE = re.compile(r"\{(\+?)([A-Za-z_][A-Za-z0-9_]*)\}")  # what a pack's template may hold: {name}, {+name}
_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^{}]*)\}")  # any RFC 6570 expression (an upstream server's templates)
# What each RFC 6570 operator expands to, loosely: enough to tell whether a URI fits an upstream server's template.
_EXPANSIONS = {"": "[^/?#]+", "+": ".+", "#": "(?:#.*)?", ".": "(?:\\.[^/?#]*)?", "/": "(?:/[^?#]*)?",
               ";": "(?:;[^/?#]*)?", "?": "(?:\\?[^#]*)?", "&": "(?:&[^#]*)?"}


def template_variables(uri: str) -> tuple[str, ...]:
    """The variable names of an RFC 6570 template (modifiers ``*`` and ``:n`` dropped), in order."""
    names = (v.split(":", 1)[0].rstrip("*") for m in _EXPRESSION.finditer(uri) for v in m.group(2).split(","))
    return tuple(dict.fromkeys(n for n in names if n))

class Completions(list[str]):
    """The values a completion offers (at most ``MAX_COMPLETIONS``, as MCP allows) and how many it found in all."""

    def __init__(self, values: Sequence[Any] = ()) -> None:
        found = [str(v) for v in values]
        super().__init__(found[:MAX_COMPLETIONS])
        self.total = len(found)

    @property
    def has_more(self) -> bool:
        return self.total > len(self)


Completer = Callable[..., Any]
"""``(value)`` or ``(value, context)`` -> the values an argument may take that start from ``value`` (``context``:
the arguments already given, by name). Sync or async."""


def _check_completions(name: str, complete: Any, arguments: tuple[str, ...]) -> Mapping[str, Completer]:
    if complete is None:
        return types.MappingProxyType({})
    if not isinstance(complete, Mapping):
        raise ToolDeclarationError(f"{name!r}: complete must map argument names to functions, not "
                                   f"{type(complete).__name__}")
    for argument, completer in complete.items():
        if argument not in arguments:
            takes = ", ".join(arguments) or "none"
            raise ToolDeclarationError(f"{name!r}: complete names {argument!r}, which is not one of its arguments "
                                       f"({takes})")
        if not callable(completer):
            raise ToolDeclarationError(f"{name!r}: the completion of {argument!r} must be callable")
    return types.MappingProxyType(dict(complete))


def _check_name(kind: str, name: Any) -> None:
    problem = tool_name_problem(name)
    if problem is not None:
        raise ToolDeclarationError(f"{kind} {name!r}: invalid name: {problem.replace('tool names', f'{kind} names')}")


def _model(name: str, fields: dict[str, Any]) -> type[BaseModel]:
    try:
        return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:
        raise ToolDeclarationError(f"{name!r}: cannot build a model of its arguments: {exc}") from exc


# -- resources ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Resource:
    """A declared resource, or resource template (``parameters`` is not empty).

    ``uri`` is the pack's own; for a template it is the RFC 6570 template (``{name}`` for one path segment,
    ``{+name}`` for the rest of the URI).
    """

    name: str
    uri: str
    description: str
    runner: Runner  # how it is read: start(the validated parameters, the call)
    mime_type: str | None = None
    title: str | None = None
    parameters: tuple[str, ...] = ()
    is_available: Callable[[AvailabilityContext], Any] | None = None
    complete: Mapping[str, Completer] = dataclasses.field(default_factory=dict)
    make_model: Callable[[], type[BaseModel]] | None = dataclasses.field(default=None, repr=False)
    passthrough: bool = False  # an upstream server's: its runner answers MCP's resource contents itself
    icons: tuple[Mapping[str, Any], ...] = ()  # its source's (names.foreign_icons)
    meta: Mapping[str, Any] | None = None  # its source's _meta (names.foreign_meta): an MCP App page's ui (csp, ...)

    @property
    def is_template(self) -> bool:
        return bool(self.parameters)

    @cached_property
    def model(self) -> type[BaseModel] | None:
        return self.make_model() if self.make_model is not None else None

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        parts, last, named = [], 0, set()
        for match in _EXPRESSION.finditer(self.uri):
            parts.append(re.escape(self.uri[last:match.start()]))
            operator, variables = match.groups()
            expansion = _EXPANSIONS[operator]
            if operator in ("", "+") and variables.isidentifier() and variables not in named:
                named.add(variables)
                expansion = f"(?P<{variables}>{expansion})"  # one plain variable: its value is the parameter
            parts.append(expansion)
            last = match.end()
        parts.append(re.escape(self.uri[last:]))
        return re.compile("".join(parts), re.S)

    def match(self, uri: str) -> dict[str, str] | None:
        """The template's parameters in ``uri`` (percent-decoded), or None when it does not fit the template."""
        found = self._pattern.fullmatch(uri)
        return {k: unquote(v) for k, v in found.groupdict().items()} if found is not None else None

    def to_wire(self, full_name: str) -> dict[str, Any]:
        """As MCP's resources/list (or resources/templates/list) shows it."""
        wire: dict[str, Any] = {"name": full_name}
        if self.title:
            wire["title"] = self.title
        wire["uriTemplate" if self.is_template else "uri"] = self.uri
        wire["description"] = self.description
        if self.mime_type:
            wire["mimeType"] = self.mime_type
        if self.icons:
            wire["icons"] = [dict(icon) for icon in self.icons]
        if self.meta:
            wire["_meta"] = dict(self.meta)
        return wire


_RESOURCE_OPTIONS = frozenset({"name", "description", "mime_type", "title", "is_available", "complete", "inline"})


@overload
def resource(uri: str, /, *, name: str | None = None, description: str | None = None, mime_type: str | None = None,
             title: str | None = None, is_available: Callable[[AvailabilityContext], Any] | None = None,
             complete: Mapping[str, Completer] | None = None, inline: bool = False) -> Callable[[F], F]: ...


@overload
def resource(uri: str, /, **options: Any) -> Callable[[F], F]: ...


def resource(uri: str, /, **options: Any) -> Callable[[F], F]:
    """Declare a resource at ``uri`` (a template when it holds ``{parameters}``, which are then the function's).
    The function returns the content: ``str`` (text), ``bytes`` (binary), a dict, list or pydantic model (JSON),
    or ``toolcrib.EmbeddedResource`` items for several contents."""
    unknown = options.keys() - _RESOURCE_OPTIONS
    if unknown:
        raise ToolDeclarationError(f"resource() got unknown option(s) {', '.join(sorted(unknown))}; it takes "
                                   f"{', '.join(sorted(_RESOURCE_OPTIONS))}")
    if not isinstance(uri, str) or _URI.fullmatch(uri) is None:
        raise ToolDeclarationError(f"resource(): {uri!r} is not a URI (scheme:rest, no spaces): "
                                   "resource('orders://{order_id}')")
    localns = caller_locals()

    def decorator(fn: F) -> F:
        if not callable(fn) or inspect.isclass(fn):
            raise ToolDeclarationError(f"@resource({uri!r}) decorates a function, not {type(fn).__name__}")
        given = options.get("name") or getattr(fn, "__name__", "")
        _check_name("resource", given)
        name = str(given)
        description = options.get("description")
        if description is None:
            description = cleandoc(fn.__doc__) if fn.__doc__ else f"The resource {uri}."
        hints = type_hints(fn, name, localns)
        fields, context_param = signature_fields(fn, name, hints)
        unsupported = [m.group(0) for m in _EXPRESSION.finditer(uri) if _VARIABLE.fullmatch(m.group(0)) is None]
        if unsupported:
            raise ToolDeclarationError(f"resource {name!r}: {unsupported[0]} in {uri!r}: a template's parameters are "
                                       "written {name} (one path segment) or {+name} (the rest of the URI)")
        variables = tuple(m.group(2) for m in _VARIABLE.finditer(uri))
        if len(set(variables)) != len(variables):
            raise ToolDeclarationError(f"resource {name!r}: {uri!r} names a parameter twice")
        if set(variables) != set(fields):
            raise ToolDeclarationError(
                f"resource {name!r}: the parameters of {uri!r} ({', '.join(variables) or 'none'}) and of the function "
                f"({', '.join(fields) or 'none'}) must be the same")
        is_available = options.get("is_available")
        if is_available is not None:
            check_is_available(name, is_available)
        spec = Resource(
            name=name, uri=uri, description=description.strip(),
            runner=python_runner(f"resource {name!r}", fn, options.get("inline", False), context_param),
            mime_type=options.get("mime_type"), title=options.get("title"), parameters=variables,
            is_available=is_available, complete=_check_completions(name, options.get("complete"), variables),
            make_model=(lambda: _model(name, fields)) if fields else None)
        setattr(fn, RESOURCE_ATTRIBUTE, spec)
        return fn

    return decorator


def get_resource(obj: Any) -> Resource | None:
    """The ``Resource`` declared by ``obj`` (a decorated function or a ``Resource``), else None."""
    if isinstance(obj, Resource):
        return obj
    spec = getattr(obj, RESOURCE_ATTRIBUTE, None)
    return spec if isinstance(spec, Resource) else None


def resource_contents(uri: str, mime_type: str | None, value: Any) -> list[dict[str, Any]]:
    """What a resource's function returned, as MCP's resource contents (wire dicts)."""
    if isinstance(value, EmbeddedResource):
        value = [value]
    if isinstance(value, list | tuple) and value and all(isinstance(v, EmbeddedResource) for v in value):
        return [v.to_wire()["resource"] for v in value]
    if isinstance(value, bytes | bytearray):
        contents: dict[str, Any] = {"uri": uri, "blob": base64.b64encode(bytes(value)).decode("ascii")}
    elif isinstance(value, str):
        contents = {"uri": uri, "text": value}
    elif isinstance(value, BaseModel):
        contents = {"uri": uri, "text": value.model_dump_json(by_alias=True)}
        mime_type = mime_type or "application/json"
    elif isinstance(value, dict | list | tuple | int | float | bool) or value is None:
        contents = {"uri": uri, "text": dumps(value)}
        mime_type = mime_type or "application/json"
    else:
        raise TypeError(f"a resource's function returned {type(value).__name__}; expected str, bytes, JSON or "
                        "EmbeddedResource items")
    if mime_type:
        contents["mimeType"] = mime_type
    return [contents]


_update_listeners: list[Callable[[str | None], None]] = []


def resource_updated(uri: str) -> None:
    """Tell the clients that subscribed to ``uri`` that the resource changed (MCP ``notifications/resources/
    updated``), from any thread. A pack calls it when what one of its resources would read has changed; only clients
    of agents that may read the resource hear of it."""
    _tell(uri)


def catalog_changed() -> None:
    """Tell the host that what a pack's hooks answer has changed (its tools, resources or prompts), from any thread:
    ``toolcrib serve`` loads again, as if its config had changed (with ``[cluster]``, every replica does), and the
    clients of agents whose lists changed hear of it (``list_changed``). Elsewhere (the Python API, the CLI's one-off
    commands) nothing listens, and the next host built sees the change."""
    _tell(None)


def _tell(uri: str | None) -> None:
    for listener in list(_update_listeners):
        try:
            listener(uri)
        except Exception:  # one front end's trouble is not the pack's, nor the other front ends'
            logging.getLogger("toolcrib").exception("a pack update listener failed")


def add_update_listener(listener: Callable[[str | None], None]) -> Callable[[], None]:
    """Have ``resource_updated`` call ``listener(uri)`` and ``catalog_changed`` call ``listener(None)`` (a front end
    that serves clients registers one); returns the function that stops it."""
    _update_listeners.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _update_listeners.remove(listener)

    return remove


# -- prompts ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message of a prompt: ``role`` ``"user"`` or ``"assistant"``; ``content`` text or one content item
    (``toolcrib.Image``, ``toolcrib.Audio``, ``toolcrib.EmbeddedResource``, ``toolcrib.ResourceLink``)."""

    role: str
    content: Any

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(f"a message's role is 'user' or 'assistant', not {self.role!r}")

    def to_wire(self) -> dict[str, Any]:
        content = Text(self.content) if isinstance(self.content, str) else self.content
        if not isinstance(content, CONTENT_CLASSES):
            raise TypeError(f"a message's content is text or a toolcrib content item, not {type(content).__name__}")
        return {"role": self.role, "content": content.to_wire()}


@dataclasses.dataclass(frozen=True, eq=False)
class Prompt:
    """A declared prompt: its arguments are the function's (MCP passes them as strings; they are validated, and
    converted where the annotation says, against ``model``)."""

    name: str
    description: str
    runner: Runner  # how it is got: start(the validated arguments, the call)
    arguments: tuple[tuple[str, str | None, bool], ...]  # (name, description, required)
    title: str | None = None
    is_available: Callable[[AvailabilityContext], Any] | None = None
    complete: Mapping[str, Completer] = dataclasses.field(default_factory=dict)
    make_model: Callable[[], type[BaseModel]] = dataclasses.field(default=lambda: BaseModel, repr=False)
    passthrough: bool = False  # an upstream server's: its runner answers MCP's prompts/get itself
    source_name: str | None = None  # the name its source gives it, when served under another
    icons: tuple[Mapping[str, Any], ...] = ()  # its source's (names.foreign_icons)
    meta: Mapping[str, Any] | None = None  # its source's _meta (names.foreign_meta)

    @cached_property
    def model(self) -> type[BaseModel]:
        return self.make_model()

    def to_wire(self, full_name: str) -> dict[str, Any]:
        """As MCP's prompts/list shows it."""
        wire: dict[str, Any] = {"name": full_name}
        if self.title:
            wire["title"] = self.title
        wire["description"] = self.description
        wire["arguments"] = [{"name": n, **({"description": d} if d else {}), "required": r}
                             for n, d, r in self.arguments]
        if self.icons:
            wire["icons"] = [dict(icon) for icon in self.icons]
        if self.meta or self.source_name is not None:
            wire["_meta"] = {**(self.meta or {}),
                             **({SOURCE_NAME_KEY: self.source_name} if self.source_name is not None else {})}
        return wire


@overload
def prompt(fn: F, /) -> F: ...


@overload
def prompt(*, name: str | None = None, description: str | None = None, title: str | None = None,
           is_available: Callable[[AvailabilityContext], Any] | None = None,
           complete: Mapping[str, Completer] | None = None, inline: bool = False) -> Callable[[F], F]: ...


def prompt(fn: Any = None, /, **options: Any) -> Any:
    """Declare a prompt (bare or with options). The function returns the prompt: a ``str`` (one user message), a
    ``toolcrib.Message``, or a list of them."""
    known = {"name", "description", "title", "is_available", "complete", "inline"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ToolDeclarationError(f"prompt() got unknown option(s) {', '.join(unknown)}; it takes "
                                   f"{', '.join(sorted(known))}")
    localns = caller_locals()

    def decorator(fn: F) -> F:
        if not callable(fn) or inspect.isclass(fn):
            raise ToolDeclarationError(f"@prompt decorates a function, not {type(fn).__name__}")
        given = options.get("name") or getattr(fn, "__name__", "")
        _check_name("prompt", given)
        name = str(given)
        description = options.get("description")
        if description is None:
            description = cleandoc(fn.__doc__) if fn.__doc__ else ""
        if not isinstance(description, str) or not description.strip():
            raise ToolDeclarationError(f"prompt {name!r} has no description: write a docstring or pass "
                                       "description='...'")
        hints = type_hints(fn, name, localns)
        fields, context_param = signature_fields(fn, name, hints)
        # plain arguments: their schema written directly, the model built at the first get (as a tool's at its first
        # call); any other: the model now, and its schema
        schema, model = fastschema.input_schema(fields), None
        if schema is None:
            model = _model(name, fields)
            schema = json_schema_of(model, "validation")
        required = set(schema.get("required", ()))
        arguments = tuple((arg, schema["properties"][arg].get("description"), arg in required) for arg in fields)
        is_available = options.get("is_available")
        if is_available is not None:
            check_is_available(name, is_available)
        spec = Prompt(name=name, description=description.strip(),
                      runner=python_runner(f"prompt {name!r}", fn, options.get("inline", False), context_param),
                      arguments=arguments, title=options.get("title"), is_available=is_available,
                      complete=_check_completions(name, options.get("complete"), tuple(fields)),
                      make_model=(lambda: model) if model is not None else lambda: _model(name, fields))
        setattr(fn, PROMPT_ATTRIBUTE, spec)
        return fn

    if fn is not None:
        if options:
            raise ToolDeclarationError("@prompt takes options as keywords only: @prompt(name=...)")
        return decorator(fn)
    return decorator


def get_prompt(obj: Any) -> Prompt | None:
    """The ``Prompt`` declared by ``obj`` (a decorated function or a ``Prompt``), else None."""
    if isinstance(obj, Prompt):
        return obj
    spec = getattr(obj, PROMPT_ATTRIBUTE, None)
    return spec if isinstance(spec, Prompt) else None


def prompt_messages(value: Any) -> list[dict[str, Any]]:
    """What a prompt's function returned, as MCP's prompt messages (wire dicts)."""
    if isinstance(value, str):
        value = [Message("user", value)]
    elif isinstance(value, Message):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(m, Message) for m in value):
        raise TypeError("a prompt returns a str, a toolcrib.Message or a list of them")
    return [m.to_wire() for m in value]
