"""``@tool``: declare a tool. The decorator attaches a frozen ``Tool`` and returns the function unchanged.

Every form is checked at declaration, so a pack author sees a mistake when the module is imported, with
a message that says the fix::

    @toolcrib.tool                                   # bare
    @toolcrib.tool()                                 # called
    @toolcrib.tool(name="find", annotations={...})   # with options
    toolcrib.tool("lookup", "Look up ...", OrderQuery, handler, {"annotations": {...}})   # explicit -> Tool
    toolcrib.tool("lookup", "Look up ...", {"type": "object", ...}, handler)              # JSON Schema -> Tool
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import sys
import types
import typing
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar, overload

import typing_extensions
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from toolcrib import fastschema
from toolcrib.content import CONTENT_CLASSES, ToolResult
from toolcrib.context import AvailabilityContext, Context
from toolcrib.errors import ToolDeclarationError
from toolcrib.fastschema import json_schema_of
from toolcrib.names import clean_schema, tool_name_problem
from toolcrib.runner import Convention, PythonRunner, Runner

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "__toolcrib_tool__"

ANNOTATION_KEYS: Mapping[str, type] = {
    "title": str,
    "readOnlyHint": bool,
    "destructiveHint": bool,
    "idempotentHint": bool,
    "openWorldHint": bool,
}

# Arguments come from a model: unknown keys and NaN/Infinity are refused rather than silently accepted.
INPUT_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

_OPTION_KEYS = ("annotations", "is_available", "timeout", "title", "rule_subject", "describe", "keywords", "inline")
_TOOL_KEYWORDS = frozenset({"name", "description", "schema", "handler", "extras", *_OPTION_KEYS})  # tool()'s


@dataclasses.dataclass(frozen=True, slots=True)
class Unserved:
    """An item of ``toolcrib_tools``: an installed plugin whose tools the pack could serve and does not, and why
    (``Unserved("llm-tools-sqlite", "toolbox SQLite not configured: add [packs.llm.toolboxes.SQLite]")``).
    ``toolcrib plugins`` lists it beside the pack, in state ``not served``, with the reason."""

    origin: str
    why: str


@dataclasses.dataclass(frozen=True, eq=False)
class Tool:
    """A declared tool: everything the host needs, fixed at declaration.

    ``name`` is the tool's own name; the host adds the pack's namespace (``orders__lookup_order``).
    ``input_model`` validates arguments and ``input_schema`` is its JSON Schema as clients see it; both are built
    on first use (pydantic models cost about 0.15 ms each, so a host with thousands of tools starts fast), and
    ``prepare()`` builds them at once (``toolcrib check`` and the pack test kit do).
    """

    name: str
    description: str
    runner: Runner  # how its handler is run (toolcrib.runner): a Python function's, an upstream server's, ...
    annotations: Mapping[str, Any]
    arguments: tuple[str, ...]  # argument names, in order
    is_available: Callable[[AvailabilityContext], Any] | None = None
    timeout: float | None = None
    title: str | None = None
    rule_subjects: tuple[str, ...] = ()  # the arguments operators' argument rules match (paths, URLs, commands)
    describe: Callable[[AvailabilityContext], str] | None = None  # the description, written for each agent
    keywords: tuple[str, ...] = ()  # more words tool search finds it by ("delete" for a tool named rm)
    make_input: Callable[[], type[BaseModel]] = dataclasses.field(default=lambda: BaseModel, repr=False)
    return_annotation: Any = dataclasses.field(default=inspect.Signature.empty, repr=False)
    # Schemas given as they are, for tools described by JSON Schema rather than Python (upstream MCP servers).
    given_input_schema: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    given_output_schema: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    source_name: str | None = None  # the name its source gives it, when served under another (names.served_name)
    # The decorated function's arguments, name -> (annotation, default or ...): their schema is written directly
    # when they are plain (toolcrib.fastschema)
    signature: Mapping[str, tuple[Any, Any]] | None = dataclasses.field(default=None, repr=False)
    # The installed plugin (a distribution, such as llm-tools-simpleeval) the tool comes from, when its pack serves
    # other plugins' tools: operators' plugins rules match it beside the pack's namespace.
    origin: str | None = None

    @property
    def handler(self) -> Callable[..., Any] | None:
        """The Python function that handles calls, when its runner is a ``PythonRunner``."""
        return getattr(self.runner, "handler", None)

    @property
    def is_async(self) -> bool:
        return self.runner.is_async

    @property
    def context_param(self) -> str | None:
        """The handler's parameter that gets the ``toolcrib.Context``, when its runner is a ``PythonRunner``."""
        return getattr(self.runner, "context_param", None)

    @cached_property
    def input_model(self) -> type[BaseModel]:
        """The pydantic model arguments are validated against (``ToolDeclarationError`` if it cannot be built)."""
        return self.make_input()

    @cached_property  # read on every call: cached as a plain attribute after the first
    def validate_input(self) -> Callable[[Any], BaseModel]:
        """Validate arguments into the input model (pydantic-core's own entry point, looked up once)."""
        return self.input_model.__pydantic_validator__.validate_python

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        if self.given_input_schema is not None:
            return dict(self.given_input_schema)
        if self.signature is not None:  # plain arguments: written directly, the model waits for the first call
            fast = fastschema.input_schema(self.signature)
            if fast is not None:
                return fast
        return json_schema_of(self.input_model, "validation")

    @cached_property  # read on every call: cached as a plain attribute after the first
    def output_adapter(self) -> TypeAdapter[Any] | None:
        """Validates results against the declared return type, when it describes structured output."""
        return _output_adapter(self.name, self.return_annotation)

    @cached_property  # read on every call
    def check_output(self) -> Callable[[Any], Any] | None:
        """A handler's value checked against the declared return type and made JSON data, as ``output_adapter``'s
        ``validate_python`` then ``dump_python(mode="json", by_alias=True)`` make it, through pydantic-core's own
        entry points (the adapter's wrappers around them cost 0.8 us a call); None without structured output."""
        adapter = self.output_adapter
        if adapter is None:
            return None
        validate, dump = adapter.validator.validate_python, adapter.serializer.to_python
        return lambda value: dump(validate(value), mode="json", by_alias=True)

    @cached_property
    def wrap_output(self) -> bool:
        """A list-valued output, carried as ``{"result": [...]}``."""
        return _output_kind(self.return_annotation)[1]

    @cached_property
    def output_schema(self) -> dict[str, Any] | None:
        if self.given_output_schema is not None:
            return dict(self.given_output_schema)
        structured, wrap = _output_kind(self.return_annotation)
        if not structured:
            return None
        fast = fastschema.output_schema(self.return_annotation) if not wrap else None
        if fast is not None:
            return fast
        assert self.output_adapter is not None
        schema = json_schema_of(self.output_adapter, "serialization")
        if self.wrap_output:
            defs = schema.pop("$defs", None)
            wrapped: dict[str, Any] = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
            if defs:
                wrapped["$defs"] = defs
            return wrapped
        return schema

    @cached_property
    def served_input_schema(self) -> dict[str, Any]:
        """The input schema as agents are served it (``toolcrib.schemas.self_contained``), made once a tool."""
        from toolcrib.schemas import self_contained

        if self._flat:
            return self.input_schema
        served: dict[str, Any] = self_contained(self.input_schema)
        return served

    @cached_property
    def served_output_schema(self) -> dict[str, Any] | None:
        from toolcrib.schemas import self_contained

        output = self.output_schema
        return None if output is None else self_contained(output)

    @cached_property
    def wire_input_schema(self) -> dict[str, Any]:
        """The input schema as tools/list shows it: served, its prose ``names.clean``."""
        if self._flat:
            return self.input_schema
        wire: dict[str, Any] = clean_schema(self.served_input_schema)
        return wire

    @cached_property
    def _flat(self) -> bool:
        """Plain scalar arguments (``fastschema.is_flat``): the input schema is served and shown as it is."""
        return self.given_input_schema is None and self.signature is not None and fastschema.is_flat(self.signature)

    @cached_property
    def wire_output_schema(self) -> dict[str, Any] | None:
        """The output schema as tools/list shows it (served, its prose clean), None without structured output. The
        tools that return one TypedDict share it: it is a function of the class alone, made once a class (a pack's
        tools mostly return one result type; made per tool, it cost 10 us a tool at 5,000 tools)."""
        annotation = self.return_annotation
        shared = self.given_output_schema is None and typing_extensions.is_typeddict(annotation)
        if shared and (known := _WIRE_OUTPUTS.get(annotation)) is not None:
            return known
        output = self.served_output_schema
        wire = None if output is None else clean_schema(output)
        if shared and wire is not None:
            _WIRE_OUTPUTS[annotation] = wire
        return wire

    def prepare(self) -> None:
        """Build the input model and both schemas now; ``ToolDeclarationError`` says what is wrong."""
        try:
            _ = self.input_model, self.input_schema, self.output_adapter, self.output_schema
        except ToolDeclarationError:
            raise
        except Exception as exc:
            raise ToolDeclarationError(f"tool {self.name!r}: cannot build its JSON schemas: {exc}") from exc

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"


# a TypedDict's output schema as tools/list shows it (Tool.wire_output_schema), kept while the class lives
_WIRE_OUTPUTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


# -- the decorator -------------------------------------------------------------------------------------------


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(
    name: str | None = None,
    /,
    *,
    description: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    is_available: Callable[[AvailabilityContext], Any] | None = None,
    timeout: float | None = None,
    title: str | None = None,
    rule_subject: str | Sequence[str] | None = None,
    describe: Callable[[AvailabilityContext], str] | None = None,
    keywords: Sequence[str] | None = None,
    inline: bool = False,
) -> Callable[[F], F]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    is_available: Callable[[AvailabilityContext], Any] | None = None,
    timeout: float | None = None,
    title: str | None = None,
    rule_subject: str | Sequence[str] | None = None,
    describe: Callable[[AvailabilityContext], str] | None = None,
    keywords: Sequence[str] | None = None,
    inline: bool = False,
) -> Callable[[F], F]: ...


@overload
def tool(
    name: str,
    description: str,
    schema: type[BaseModel] | Mapping[str, Any],
    handler: Callable[..., Any],
    extras: Mapping[str, Any] | None = None,
    /,
) -> Tool: ...


def tool(*args: Any, **kwargs: Any) -> Any:
    """Declare a tool; see the module docstring for every form."""
    unknown = kwargs.keys() - _TOOL_KEYWORDS
    if unknown:
        raise ToolDeclarationError(
            f"tool() got unknown option(s) {', '.join(sorted(unknown))}; "
            f"it takes name, description, {', '.join(_OPTION_KEYS)}"
        )
    localns = _caller_locals()
    if args and callable(args[0]) and not isinstance(args[0], str):
        if len(args) > 1:
            raise ToolDeclarationError("@tool decorates one function; pass options as keywords: @tool(name=...)")
        return _decorate(args[0], kwargs, localns)
    if len(args) >= 3 or "schema" in kwargs or "handler" in kwargs:
        return _explicit(args, kwargs, localns)
    if len(args) == 2:
        raise ToolDeclarationError(
            "tool() with positional arguments is the explicit form: tool(name, description, schema, handler[, "
            "extras]); to decorate, use @tool(name=..., description=...)"
        )
    if args:
        if args[0] is not None and not isinstance(args[0], str):
            raise ToolDeclarationError(
                f"@tool's first argument is the function or the tool name, not {type(args[0]).__name__}"
            )
        if args[0] is not None and kwargs.get("name") is not None:
            raise ToolDeclarationError("tool name given twice: positionally and as name=")
        if args[0] is not None:
            kwargs["name"] = args[0]

    def decorator(fn: F) -> F:
        if not callable(fn):
            raise ToolDeclarationError(f"@tool(...) decorates a function, not {type(fn).__name__}")
        return _decorate(fn, kwargs, _caller_locals())

    return decorator


def cleandoc(doc: str) -> str:
    """``inspect.cleandoc(doc)``; a one-line text without tabs (most docstrings of tools) read directly."""
    if "\n" not in doc and "\t" not in doc:
        return doc.lstrip()  # (what cleandoc makes of one line)
    return inspect.cleandoc(doc)


def _caller_locals() -> Mapping[str, Any] | None:
    """The locals of the code that declares the tool: annotations of a function defined inside a function may
    name local types. At module level they are the module's globals, which type hints use anyway."""
    frame = sys._getframe(2)
    return frame.f_locals if frame.f_locals is not frame.f_globals else None


def get_tool(obj: Any) -> Tool | None:
    """The ``Tool`` declared by ``obj`` (a decorated function or a ``Tool``), else None."""
    if isinstance(obj, Tool):
        return obj
    spec = getattr(obj, ATTRIBUTE, None)
    return spec if isinstance(spec, Tool) else None


def _decorate(fn: F, options: dict[str, Any], localns: Mapping[str, Any] | None = None) -> F:
    if inspect.isclass(fn):
        raise ToolDeclarationError(f"@tool decorates functions, not classes ({fn.__name__})")
    if isinstance(getattr(fn, ATTRIBUTE, None), Tool):
        raise ToolDeclarationError(f"{_qualname(fn)} is already declared as a tool; decorate it once")
    raw_name = getattr(fn, "__name__", None)
    name = options.get("name")
    if name is None:
        if raw_name is None or raw_name == "<lambda>":
            raise ToolDeclarationError(
                "a lambda (or nameless callable) has no name to give the tool; pass one: tool(name='...')(fn)"
            )
        name = raw_name
    _check_name(name)
    description = options.get("description")
    if description is None:
        description = cleandoc(fn.__doc__) if fn.__doc__ else ""
    _check_description(name, description)
    hints = _hints(fn, name, localns)
    fields, context_param = _signature_fields(fn, name, hints)
    spec = _build(
        name=name,
        description=description,
        arguments=tuple(fields),
        make_input=lambda: _create_model(name, fields),
        handler=fn,
        options=options,
        context_param=context_param,
        convention="keywords",
        return_annotation=hints.get("return", inspect.Signature.empty),
        signature=fields,
    )
    try:
        setattr(fn, ATTRIBUTE, spec)
    except (AttributeError, TypeError):
        raise ToolDeclarationError(
            f"cannot attach a tool to {fn!r}; wrap it in a def, or use the explicit form tool(name, ...)"
        ) from None
    return fn


def _explicit(args: tuple[Any, ...], kwargs: dict[str, Any], localns: Mapping[str, Any] | None = None) -> Tool:
    if len(args) > 5:
        raise ToolDeclarationError("tool(name, description, schema, handler, extras) takes at most 5 arguments")
    positional = dict(zip(("name", "description", "schema", "handler", "extras"), args, strict=False))
    for key, value in positional.items():
        if key in kwargs and kwargs[key] is not None:
            raise ToolDeclarationError(f"tool(): {key} given twice, positionally and as a keyword")
        kwargs[key] = value
    extras = kwargs.pop("extras", None) or {}
    if not isinstance(extras, Mapping):
        raise ToolDeclarationError(f"tool(): extras must be a mapping, not {type(extras).__name__}")
    bad = sorted(set(extras) - set(_OPTION_KEYS))
    if bad:
        raise ToolDeclarationError(f"tool(): unknown extras {', '.join(bad)}; extras take {', '.join(_OPTION_KEYS)}")
    for key, value in extras.items():
        if kwargs.get(key) is not None:
            raise ToolDeclarationError(f"tool(): {key} given twice, in extras and as a keyword")
        kwargs[key] = value
    name, description, schema, handler = (kwargs.get(k) for k in ("name", "description", "schema", "handler"))
    if name is None:
        raise ToolDeclarationError("tool(): the explicit form needs a name")
    _check_name(name)
    _check_description(name, description)
    if not callable(handler):
        raise ToolDeclarationError(f"tool {name!r}: handler must be callable, not {type(handler).__name__}")
    given = _json_schema(name, schema)
    if given is not None:
        arguments, make_input = tuple(given.get("properties", {})), _json_schema_model(name, given)
    else:
        arguments, make_input = _model_from_schema(name, schema)
    hints = _hints(handler, name, localns)
    context_param = _explicit_handler_params(name, handler, hints)
    return _build(
        name=name,
        description=description,  # type: ignore[arg-type]
        arguments=arguments,
        make_input=make_input,
        handler=handler,
        options=kwargs,
        context_param=context_param,
        convention="model" if given is None else "dict",
        return_annotation=hints.get("return", inspect.Signature.empty),
        given_input_schema=given,
    )


def _build(
    *,
    name: str,
    description: str,
    arguments: tuple[str, ...],
    make_input: Callable[[], type[BaseModel]],
    handler: Callable[..., Any],
    options: Mapping[str, Any],
    context_param: str | None,
    convention: Convention,
    return_annotation: Any,
    given_input_schema: Mapping[str, Any] | None = None,
    signature: Mapping[str, tuple[Any, Any]] | None = None,
) -> Tool:
    annotations = _check_annotations(name, options.get("annotations"))
    is_available = options.get("is_available")
    if is_available is not None:
        _check_is_available(name, is_available)
    describe = options.get("describe")
    if describe is not None:
        _check_is_available(name, describe, "describe")
    timeout = options.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0):
        raise ToolDeclarationError(f"tool {name!r}: timeout must be a positive number of seconds, not {timeout!r}")
    title = options.get("title")
    if title is not None and not isinstance(title, str):
        raise ToolDeclarationError(f"tool {name!r}: title must be a string, not {type(title).__name__}")
    rule_subject = options.get("rule_subject")
    subjects: tuple[str, ...] = ()
    if isinstance(rule_subject, str):
        subjects = (rule_subject,)
    elif rule_subject is not None:
        if not isinstance(rule_subject, Sequence) or not all(isinstance(s, str) for s in rule_subject):
            raise ToolDeclarationError(f"tool {name!r}: rule_subject is an argument name or a list of them, not "
                                       f"{rule_subject!r}")
        subjects = tuple(dict.fromkeys(rule_subject))
    for subject in subjects:
        if subject not in arguments:
            takes = ", ".join(arguments) or "none"
            raise ToolDeclarationError(
                f"tool {name!r}: rule_subject {subject!r} is not one of its arguments ({takes})"
            )
    keywords = options.get("keywords")
    if keywords is not None and (isinstance(keywords, str) or not isinstance(keywords, Sequence)
                                 or not all(isinstance(k, str) for k in keywords)):
        raise ToolDeclarationError(f"tool {name!r}: keywords is a list of words, not {keywords!r}")
    return Tool(
        name=name,
        description=description.strip(),
        keywords=tuple(keywords or ()),
        arguments=arguments,
        make_input=make_input,
        return_annotation=return_annotation,
        runner=_python_runner(f"tool {name!r}", handler, options.get("inline", False), context_param, convention),
        annotations=types.MappingProxyType(annotations),
        is_available=is_available,
        timeout=float(timeout) if timeout is not None else None,
        title=title if title is not None else annotations.get("title"),
        rule_subjects=subjects,
        describe=describe,
        given_input_schema=given_input_schema,
        signature=types.MappingProxyType(dict(signature)) if signature is not None else None,
    )


# -- checks ----------------------------------------------------------------------------------------------------


def _qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _check_name(name: Any) -> None:
    problem = tool_name_problem(name)
    if problem is not None:
        raise ToolDeclarationError(f"tool {name!r}: invalid name: {problem}")


def _check_description(name: str, description: Any) -> None:
    if not isinstance(description, str) or not description.strip():
        raise ToolDeclarationError(
            f"tool {name!r} has no description: the model reads it to decide when to call the tool; "
            "write a docstring or pass description='...'"
        )


def _check_annotations(name: str, annotations: Any) -> dict[str, Any]:
    if annotations is None:
        return {}
    if hasattr(annotations, "model_dump") and not isinstance(annotations, Mapping):
        annotations = annotations.model_dump(by_alias=True, exclude_none=True)  # mcp.types.ToolAnnotations
    if not isinstance(annotations, Mapping):
        raise ToolDeclarationError(f"tool {name!r}: annotations must be a dict, not {type(annotations).__name__}")
    result: dict[str, Any] = {}
    for key, value in annotations.items():
        expected = ANNOTATION_KEYS.get(key)
        if expected is None:
            raise ToolDeclarationError(
                f"tool {name!r}: unknown annotation {key!r}; MCP annotations are {', '.join(ANNOTATION_KEYS)}"
            )
        if not isinstance(value, expected):
            raise ToolDeclarationError(
                f"tool {name!r}: annotation {key} must be a {expected.__name__}, not {type(value).__name__}"
            )
        result[key] = value
    return result


def _python_runner(what: str, handler: Callable[..., Any], inline: Any, context_param: str | None,
                   convention: Convention = "keywords") -> PythonRunner:
    """The runner of a declared function, its ``inline`` option checked."""
    is_async = _is_async(handler)
    return PythonRunner(handler, is_async, convention, context_param, _check_inline(what, inline, is_async))


def _check_inline(what: str, inline: Any, is_async: bool) -> bool:
    """``inline``: a bool, for a sync handler (an async one runs on the event loop already)."""
    if not isinstance(inline, bool):
        raise ToolDeclarationError(f"{what}: inline must be True or False, not {inline!r}")
    if inline and is_async:
        raise ToolDeclarationError(f"{what}: inline is for a sync handler; an async one runs on the event loop "
                                   "already")
    return inline


def _check_is_available(name: str, check: Any, option: str = "is_available") -> None:
    if not callable(check):
        raise ToolDeclarationError(f"tool {name!r}: {option} must be callable, not {type(check).__name__}")
    try:
        signature = inspect.signature(check)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise ToolDeclarationError(
            f"tool {name!r}: {option} must take one argument, the availability context (def check(ctx): ...)"
        ) from None


def _is_async(fn: Callable[..., Any]) -> bool:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if type(target) is types.FunctionType and not hasattr(target, "_is_coroutine_marker"):
        flags = target.__code__.co_flags  # a plain function: what inspect reads of it, read directly
        if not flags & inspect.CO_ASYNC_GENERATOR:  # (one is refused below)
            return bool(flags & inspect.CO_COROUTINE)
    if inspect.isasyncgenfunction(target):
        raise ToolDeclarationError(
            f"{_qualname(fn)} is an async generator; a tool returns its result (return it, do not yield it)"
        )
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - callable objects with an async __call__
    return call is not None and not inspect.isfunction(target) and inspect.iscoroutinefunction(call)


def _is_context(annotation: Any) -> bool:
    if annotation is Context:
        return True
    if type(annotation) is type:  # a plain class other than Context (most annotations)
        return False
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and args[0] is Context
    return False


def _hints(fn: Callable[..., Any], name: str, localns: Mapping[str, Any] | None) -> dict[str, Any]:
    target = fn.func if isinstance(fn, functools.partial) else fn
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = getattr(target, "__call__", target)  # noqa: B004
    plain = _plain_hints(target, localns)
    if plain is not None:
        return plain
    try:
        return typing.get_type_hints(_referenced(target), localns=dict(localns) if localns else None,
                                     include_extras=True)
    except Exception as exc:  # NameError for an unresolvable forward reference, and friends
        raise ToolDeclarationError(
            f"tool {name!r}: cannot resolve the type annotations of {_qualname(fn)}: {exc}; "
            "define the types at module level"
        ) from exc


def _plain_hints(target: Any, localns: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What ``typing.get_type_hints`` answers for a plain function whose every annotation is a class or the name of
    one (``a: int``, ``-> Sum``, with or without ``from __future__ import annotations``: most tools), read without
    evaluating anything (``fastschema.plain_hint``: the declaring code's locals, the function's globals, their
    builtins); None for any other, which typing then evaluates."""
    if type(target) is not types.FunctionType or hasattr(target, "__wrapped__"):
        return None
    scopes = (target.__globals__,) if localns is None else (localns, target.__globals__)
    hints: dict[str, Any] = {}
    for key, value in target.__annotations__.items():
        hint = fastschema.plain_hint(value, scopes)
        if hint is None:
            return None
        hints[key] = hint
    return hints


class _Referenced:
    """What ``typing.get_type_hints`` reads of a function, its string annotations already forward references.

    typing compiles each string annotation it meets (a ``ForwardRef`` compiles its text), and a module under
    ``from __future__ import annotations`` has only strings, the same few ("int", "str") on every tool of a pack;
    a copy of one made before costs a tenth of that. Evaluating stays typing's (the same globals, locals, checks)."""

    def __init__(self, annotations: dict[str, Any], globalns: dict[str, Any]) -> None:
        self.__annotations__ = annotations
        self.__globals__ = globalns


@functools.lru_cache(maxsize=4096)
def _reference(text: str) -> typing.ForwardRef:
    return typing.ForwardRef(text, is_argument=True, is_class=False)  # as get_type_hints makes one for a function


def _referenced(target: Any) -> Any:
    """``target``, or for one with string annotations a ``_Referenced`` of them (never evaluated: a fresh copy of
    a cached reference for each, since a reference remembers what it evaluated to)."""
    annotations = getattr(target, "__annotations__", None)
    if not isinstance(annotations, dict) or not any(isinstance(value, str) for value in annotations.values()):
        return target
    source = target
    while hasattr(source, "__wrapped__"):  # where get_type_hints looks for the globals
        source = source.__wrapped__
    return _Referenced({key: _fresh(_reference(value)) if isinstance(value, str) else value
                        for key, value in annotations.items()}, getattr(source, "__globals__", {}))


def _fresh(reference: typing.ForwardRef) -> typing.ForwardRef:
    """A copy of ``reference`` (what ``copy.copy`` makes, at a fifth of its cost: its slots are all it has)."""
    made = typing.ForwardRef.__new__(typing.ForwardRef)
    for slot in _REFERENCE_SLOTS:
        setattr(made, slot, getattr(reference, slot))
    return made


_REFERENCE_SLOTS = typing.ForwardRef.__slots__


def _signature_fields(
    fn: Callable[..., Any], name: str, hints: Mapping[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The (annotation, default) of each argument, and the Context parameter's name; misuse is refused here."""
    fields: dict[str, Any] = {}
    context_param = None
    for pname, kind, default, given in _parameters(fn, name):
        annotation = hints.get(pname, given)
        if _is_context(annotation):
            context_param = pname
            continue
        if kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolDeclarationError(
                f"tool {name!r}: *{pname} is not supported: a tool's arguments are named; "
                "declare each one as a parameter"
            )
        if kind is inspect.Parameter.VAR_KEYWORD:
            raise ToolDeclarationError(
                f"tool {name!r}: **{pname} is not supported: a tool's arguments are named; "
                "declare each one as a parameter (or take one dict parameter)"
            )
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDeclarationError(
                f"tool {name!r}: parameter {pname!r} is positional-only; arguments are passed by name, "
                "remove the '/'"
            )
        if annotation is inspect.Parameter.empty:
            raise ToolDeclarationError(
                f"tool {name!r}: parameter {pname!r} has no type annotation; annotate it (e.g. "
                f"{pname}: str) so the input schema can say what it takes"
            )
        if pname.startswith("_"):
            raise ToolDeclarationError(
                f"tool {name!r}: parameter {pname!r} starts with '_', which a JSON argument cannot be named"
            )
        fields[pname] = (annotation, ... if default is inspect.Parameter.empty else default)
    return fields, context_param


_Parameter = tuple[str, inspect._ParameterKind, Any, Any]


def _parameters(fn: Callable[..., Any], name: str) -> list[_Parameter]:
    """The (name, kind, default, annotation) of each parameter of ``fn``, in its signature's order: read from its
    code for a plain function (as ``inspect.signature`` reads them, at a fifth of its cost), from
    ``inspect.signature`` for anything else (a partial, a wrapper, a callable object, a given ``__signature__``)."""
    if type(fn) is not types.FunctionType or hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"):
        try:
            parameters = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError) as exc:
            raise ToolDeclarationError(f"tool {name!r}: cannot read the signature of {fn!r}: {exc}") from exc
        return [(p.name, p.kind, p.default, p.annotation) for p in parameters]
    code, annotations, empty = fn.__code__, fn.__annotations__, inspect.Parameter.empty
    count, posonly, kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    names = code.co_varnames
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    first_default = count - len(defaults)
    positional, named = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    found: list[_Parameter] = [(arg, inspect.Parameter.POSITIONAL_ONLY if i < posonly else positional,
                                defaults[i - first_default] if i >= first_default else empty,
                                annotations.get(arg, empty)) for i, arg in enumerate(names[:count])]
    index = count + kwonly  # the code's names: positional, keyword-only, *args, **kwargs
    if code.co_flags & inspect.CO_VARARGS:
        found.append((names[index], inspect.Parameter.VAR_POSITIONAL, empty, annotations.get(names[index], empty)))
        index += 1
    if kwonly:
        found += [(arg, named, kwdefaults.get(arg, empty), annotations.get(arg, empty))
                  for arg in names[count:count + kwonly]]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        found.append((names[index], inspect.Parameter.VAR_KEYWORD, empty, annotations.get(names[index], empty)))
    return found


def _create_model(name: str, fields: dict[str, Any]) -> type[BaseModel]:
    try:
        with warnings.catch_warnings():
            # A parameter named like a BaseModel attribute (json, copy, schema) only shadows it: harmless here.
            warnings.simplefilter("ignore", UserWarning)
            return create_model(f"{name}_arguments", __config__=INPUT_CONFIG, **fields)
    except Exception as exc:
        raise ToolDeclarationError(f"tool {name!r}: cannot build an input schema from its parameters: {exc}") from exc


def _json_schema(name: str, schema: Any) -> dict[str, Any] | None:
    """The schema when it is JSON Schema (``{"type": "object", ...}``), checked against its dialect; else None.

    A dict of field types maps names to Python types; JSON Schema has ``type``, ``properties`` or ``$schema``
    with JSON values, so the two cannot be confused.
    """
    if not isinstance(schema, Mapping) or not (
        isinstance(schema.get("type"), str) or isinstance(schema.get("properties"), Mapping)
        or isinstance(schema.get("$schema"), str)
    ):
        return None
    from jsonschema import validators  # type: ignore[import-untyped]  # no stubs
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

    try:
        given = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError):
        raise ToolDeclarationError(
            f"tool {name!r}: a JSON Schema holds only JSON values (no NaN, Infinity, sets or Python objects)"
        ) from None
    if given.get("type") != "object":
        raise ToolDeclarationError(
            f"tool {name!r}: an input schema describes the arguments object, so its type must be \"object\", "
            f"not {given.get('type')!r}"
        )
    try:
        validators.validator_for(given, default=validators.Draft202012Validator).check_schema(given)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ToolDeclarationError(f"tool {name!r}: invalid JSON Schema at {where}: {exc.message}") from None
    return typing.cast(dict[str, Any], given)


def _json_schema_model(name: str, schema: Mapping[str, Any]) -> Callable[[], type[BaseModel]]:
    """A model that validates arguments with JSON Schema itself, each problem a pydantic error at its field."""

    def make() -> type[BaseModel]:
        from jsonschema import validators

        validator = validators.validator_for(schema, default=validators.Draft202012Validator)(schema)

        def check(data: Any) -> Any:
            errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
            if not errors:
                return data
            details: list[InitErrorDetails] = []
            for error in errors:
                loc = tuple(error.absolute_path)
                if error.validator == "required" and isinstance(error.validator_value, list):
                    present = data if isinstance(data, Mapping) else {}
                    for missing in error.validator_value:
                        if missing not in present:
                            details.append(InitErrorDetails(type="missing", loc=(*loc, missing), input=data))
                    continue
                details.append(InitErrorDetails(
                    type=PydanticCustomError("json_schema", "{message}", {"message": error.message}),
                    loc=loc, input=error.instance,
                ))
            raise ValidationError.from_exception_data(f"{name}_arguments", details)

        return create_model(
            f"{name}_arguments",
            __config__=ConfigDict(extra="allow"),
            # pydantic documents decorated validators in __validators__; its annotation says plain callables
            __validators__={"json_schema": model_validator(mode="before")(check)},  # type: ignore[dict-item]
        )

    return make


def _model_from_schema(name: str, schema: Any) -> tuple[tuple[str, ...], Callable[[], type[BaseModel]]]:
    if isinstance(schema, Mapping):
        fields = {}
        for key, spec in schema.items():
            fields[key] = spec if isinstance(spec, tuple) else (spec, ...)
        return tuple(fields), lambda: _create_model(name, fields)
    if not (inspect.isclass(schema) and issubclass(schema, BaseModel)):
        raise ToolDeclarationError(
            f"tool {name!r}: schema must be a pydantic model class, a dict of field types or a JSON Schema object, "
            f"not {schema!r}"
        )
    config = dict(schema.model_config)
    changes = {k: v for k, v in INPUT_CONFIG.items() if k not in config}
    if not changes:
        return tuple(schema.model_fields), lambda: schema
    # A subclass that refuses unknown keys and NaN unless the author chose otherwise; handlers still get an
    # instance of their own model.
    return tuple(schema.model_fields), lambda: type(
        schema.__name__, (schema,), {"model_config": ConfigDict(**{**config, **changes})}  # type: ignore[typeddict-item]
    )


def _explicit_handler_params(name: str, handler: Callable[..., Any], hints: Mapping[str, Any]) -> str | None:
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return None
    context_param = None
    others = []
    for param in signature.parameters.values():
        if _is_context(hints.get(param.name, param.annotation)):
            context_param = param.name
        elif param.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            others.append(param)
    required = [p for p in others if p.default is inspect.Parameter.empty]
    if len(others) < 1 or len(required) > 1 or others[0].kind is inspect.Parameter.KEYWORD_ONLY:
        raise ToolDeclarationError(
            f"tool {name!r}: the explicit form's handler takes one argument, the validated input "
            "(def handler(args): ...), plus optionally a toolcrib.Context parameter"
        )
    return context_param


def _is_content(annotation: Any) -> bool:
    """Explicit content (or Any, which may be content) describes no structured output."""
    if annotation is Any or annotation is Ellipsis:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_content(a) for a in typing.get_args(annotation))
    return inspect.isclass(annotation) and issubclass(annotation, (*CONTENT_CLASSES, ToolResult))


def _output_kind(annotation: Any) -> tuple[bool, bool]:
    """Whether the declared return type describes structured output, and whether it is a list to wrap."""
    if annotation is inspect.Signature.empty or annotation is None:
        return False, False
    base = annotation
    if typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    if _is_content(base):
        return False, False
    origin = typing.get_origin(base) or base
    if origin in (list, tuple, set, frozenset) and any(_is_content(a) for a in typing.get_args(base)):
        return False, False
    structured = (inspect.isclass(base) and issubclass(base, BaseModel)) or typing_extensions.is_typeddict(base)
    structured = structured or (inspect.isclass(base) and dataclasses.is_dataclass(base))
    wrap = origin in (list, tuple, set, frozenset) and base is not origin  # a parameterized list[...]
    return structured or wrap, wrap


def _output_adapter(name: str, annotation: Any) -> TypeAdapter[Any] | None:
    """An adapter for the declared return type when it describes structured output, else None."""
    if not _output_kind(annotation)[0]:
        return None
    try:
        return TypeAdapter(annotation)
    except Exception as exc:
        raise ToolDeclarationError(f"tool {name!r}: cannot build an output schema from its return type: {exc}") from exc
