"""``@tool``: declare a tool. The decorator attaches a frozen ``Tool`` (``toolcrib.tool``) and returns the function
unchanged.

Every form is checked at declaration, so a pack author sees a mistake when the module is imported, with
a message that says the fix::

    @toolcrib.tool                                   # bare
    @toolcrib.tool()                                 # called
    @toolcrib.tool(name="find", annotations={...})   # with options
    toolcrib.tool("lookup", "Look up ...", OrderQuery, handler, {"annotations": {...}})   # explicit -> Tool
    toolcrib.tool("lookup", "Look up ...", {"type": "object", ...}, handler)              # JSON Schema -> Tool
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel

from toolcrib import inference
from toolcrib.context import AvailabilityContext
from toolcrib.errors import ToolDeclarationError
from toolcrib.names import tool_name_problem
from toolcrib.runner import Convention
from toolcrib.tool import ANNOTATION_KEYS, ATTRIBUTE, TASK_SUPPORT, Tool

F = TypeVar("F", bound=Callable[..., Any])


_OPTION_KEYS = ("annotations", "is_available", "timeout", "title", "rule_subject", "describe", "keywords", "inline",
                "task")


_TOOL_KEYWORDS = frozenset({"name", "description", "schema", "handler", "extras", *_OPTION_KEYS})  # tool()'s


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
    task: Literal["forbidden", "optional", "required"] = "forbidden",
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
    task: Literal["forbidden", "optional", "required"] = "forbidden",
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
    localns = inference.caller_locals()
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
        return _decorate(fn, kwargs, inference.caller_locals())

    return decorator


def _decorate(fn: F, options: dict[str, Any], localns: Mapping[str, Any] | None = None) -> F:
    if inspect.isclass(fn):
        raise ToolDeclarationError(f"@tool decorates functions, not classes ({fn.__name__})")
    if isinstance(getattr(fn, ATTRIBUTE, None), Tool):
        raise ToolDeclarationError(f"{inference.qualname(fn)} is already declared as a tool; decorate it once")
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
        description = inference.cleandoc(fn.__doc__) if fn.__doc__ else ""
    _check_description(name, description)
    hints = inference.type_hints(fn, name, localns)
    fields, context_param = inference.signature_fields(fn, name, hints)
    spec = _build(
        name=name,
        description=description,
        arguments=tuple(fields),
        make_input=lambda: inference.model_of_fields(name, fields),
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
    given = inference.json_schema(name, schema)
    if given is not None:
        arguments, make_input = tuple(given.get("properties", {})), inference.json_schema_model(name, given)
    else:
        arguments, make_input = inference.model_from_schema(name, schema)
    hints = inference.type_hints(handler, name, localns)
    context_param = inference.explicit_handler_params(name, handler, hints)
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
        inference.check_is_available(name, is_available)
    describe = options.get("describe")
    if describe is not None:
        inference.check_is_available(name, describe, "describe")
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
    task = options.get("task", "forbidden")
    if task not in TASK_SUPPORT:
        raise ToolDeclarationError(f"tool {name!r}: task is one of {', '.join(map(repr, TASK_SUPPORT))} (whether it "
                                   f"runs as an MCP task: never, when the client can, or only so), not {task!r}")
    return Tool(
        name=name,
        description=description.strip(),
        keywords=tuple(keywords or ()),
        arguments=arguments,
        make_input=make_input,
        return_annotation=return_annotation,
        runner=inference.python_runner(f"tool {name!r}", handler, options.get("inline", False), context_param,
                                       convention),
        annotations=types.MappingProxyType(annotations),
        is_available=is_available,
        timeout=float(timeout) if timeout is not None else None,
        title=title if title is not None else annotations.get("title"),
        rule_subjects=subjects,
        describe=describe,
        given_input_schema=given_input_schema,
        signature=types.MappingProxyType(dict(signature)) if signature is not None else None,
        task=task,
    )


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


