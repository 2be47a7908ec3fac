"""What a declared function says of itself: its type hints (local types and forward references included), its
parameters as the fields of an input model, whether it is async or takes a ``Context``, and what its return
annotation makes of the output (structured or not, its schema, its adapter); and a model made from a JSON Schema
instead. Used by ``@tool`` (``toolcrib.decorator``), by ``@resource``/``@prompt`` (``toolcrib.declarations``) and by
``Tool`` itself (``toolcrib.tool``)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import sys
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import typing_extensions
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from toolcrib import fastschema
from toolcrib.content import CONTENT_CLASSES, ToolResult
from toolcrib.context import Context
from toolcrib.errors import ToolDeclarationError
from toolcrib.runner import Convention, PythonRunner

# Arguments come from a model: unknown keys and NaN/Infinity are refused rather than silently accepted.
INPUT_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)


def cleandoc(doc: str) -> str:
    """``inspect.cleandoc(doc)``; a one-line text without tabs (most docstrings of tools) read directly."""
    if "\n" not in doc and "\t" not in doc:
        return doc.lstrip()  # (what cleandoc makes of one line)
    return inspect.cleandoc(doc)


def caller_locals() -> Mapping[str, Any] | None:
    """The locals of the code that declares the tool: annotations of a function defined inside a function may
    name local types. At module level they are the module's globals, which type hints use anyway."""
    frame = sys._getframe(2)
    return frame.f_locals if frame.f_locals is not frame.f_globals else None


def qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def is_async(fn: Callable[..., Any]) -> bool:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if type(target) is types.FunctionType and not hasattr(target, "_is_coroutine_marker"):
        flags = target.__code__.co_flags  # a plain function: what inspect reads of it, read directly
        if not flags & inspect.CO_ASYNC_GENERATOR:  # (one is refused below)
            return bool(flags & inspect.CO_COROUTINE)
    if inspect.isasyncgenfunction(target):
        raise ToolDeclarationError(
            f"{qualname(fn)} is an async generator; a tool returns its result (return it, do not yield it)"
        )
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - callable objects with an async __call__
    return call is not None and not inspect.isfunction(target) and inspect.iscoroutinefunction(call)


def is_context(annotation: Any) -> bool:
    if annotation is Context:
        return True
    if type(annotation) is type:  # a plain class other than Context (most annotations)
        return False
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return is_context(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and args[0] is Context
    return False


def type_hints(fn: Callable[..., Any], name: str, localns: Mapping[str, Any] | None) -> dict[str, Any]:
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
            f"tool {name!r}: cannot resolve the type annotations of {qualname(fn)}: {exc}; "
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


def signature_fields(
    fn: Callable[..., Any], name: str, hints: Mapping[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The (annotation, default) of each argument, and the Context parameter's name; misuse is refused here."""
    fields: dict[str, Any] = {}
    context_param = None
    for pname, kind, default, given in parameters(fn, name):
        annotation = hints.get(pname, given)
        if is_context(annotation):
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


Parameter = tuple[str, inspect._ParameterKind, Any, Any]


def parameters(fn: Callable[..., Any], name: str) -> list[Parameter]:
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
    found: list[Parameter] = [(arg, inspect.Parameter.POSITIONAL_ONLY if i < posonly else positional,
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


def model_of_fields(name: str, fields: dict[str, Any]) -> type[BaseModel]:
    try:
        with warnings.catch_warnings():
            # A parameter named like a BaseModel attribute (json, copy, schema) only shadows it: harmless here.
            warnings.simplefilter("ignore", UserWarning)
            return create_model(f"{name}_arguments", __config__=INPUT_CONFIG, **fields)
    except Exception as exc:
        raise ToolDeclarationError(f"tool {name!r}: cannot build an input schema from its parameters: {exc}") from exc


def json_schema(name: str, schema: Any) -> dict[str, Any] | None:
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


def json_schema_model(name: str, schema: Mapping[str, Any]) -> Callable[[], type[BaseModel]]:
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


def model_from_schema(name: str, schema: Any) -> tuple[tuple[str, ...], Callable[[], type[BaseModel]]]:
    if isinstance(schema, Mapping):
        fields = {}
        for key, spec in schema.items():
            fields[key] = spec if isinstance(spec, tuple) else (spec, ...)
        return tuple(fields), lambda: model_of_fields(name, fields)
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


def explicit_handler_params(name: str, handler: Callable[..., Any], hints: Mapping[str, Any]) -> str | None:
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return None
    context_param = None
    others = []
    for param in signature.parameters.values():
        if is_context(hints.get(param.name, param.annotation)):
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


def is_content(annotation: Any) -> bool:
    """Explicit content (or Any, which may be content) describes no structured output."""
    if annotation is Any or annotation is Ellipsis:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(is_content(a) for a in typing.get_args(annotation))
    return inspect.isclass(annotation) and issubclass(annotation, (*CONTENT_CLASSES, ToolResult))


def output_kind(annotation: Any) -> tuple[bool, bool]:
    """Whether the declared return type describes structured output, and whether it is a list to wrap."""
    if annotation is inspect.Signature.empty or annotation is None:
        return False, False
    base = annotation
    if typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    if is_content(base):
        return False, False
    origin = typing.get_origin(base) or base
    if origin in (list, tuple, set, frozenset) and any(is_content(a) for a in typing.get_args(base)):
        return False, False
    structured = (inspect.isclass(base) and issubclass(base, BaseModel)) or typing_extensions.is_typeddict(base)
    structured = structured or (inspect.isclass(base) and dataclasses.is_dataclass(base))
    wrap = origin in (list, tuple, set, frozenset) and base is not origin  # a parameterized list[...]
    return structured or wrap, wrap


def output_adapter(name: str, annotation: Any) -> TypeAdapter[Any] | None:
    """An adapter for the declared return type when it describes structured output, else None."""
    if not output_kind(annotation)[0]:
        return None
    try:
        return TypeAdapter(annotation)
    except Exception as exc:
        raise ToolDeclarationError(f"tool {name!r}: cannot build an output schema from its return type: {exc}") from exc


def python_runner(what: str, handler: Callable[..., Any], inline: Any, context_param: str | None,
                   convention: Convention = "keywords") -> PythonRunner:
    """The runner of a declared function, its ``inline`` option checked."""
    asynchronous = is_async(handler)
    return PythonRunner(handler, asynchronous, convention, context_param, _check_inline(what, inline, asynchronous))


def _check_inline(what: str, inline: Any, is_async: bool) -> bool:
    """``inline``: a bool, for a sync handler (an async one runs on the event loop already)."""
    if not isinstance(inline, bool):
        raise ToolDeclarationError(f"{what}: inline must be True or False, not {inline!r}")
    if inline and is_async:
        raise ToolDeclarationError(f"{what}: inline is for a sync handler; an async one runs on the event loop "
                                   "already")
    return inline


def check_is_available(name: str, check: Any, option: str = "is_available") -> None:
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
