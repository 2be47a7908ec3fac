"""JSON Schemas of plain signatures, written directly: the same schema pydantic generates, without building a model.

Building a pydantic model and generating its schema costs about 0.5 ms a tool; a host serving 10,000 tools would
spend seconds on the first ``tools/list``. Most tools take plain arguments (``str``, ``int``, ``float``, ``bool``,
``list[...]``, ``dict[str, ...]``, ``Literal[...]``, ``X | None``, with ``Annotated[..., Field(description=...)]``
and simple defaults), whose schema is a short, fixed function of the annotations. For those this module writes it;
for anything else it answers None and the tool's schema comes from pydantic, as before. The model that validates
arguments is built when the tool is first called. ``tests/test_fastschema.py`` holds every answer to pydantic's.
"""

from __future__ import annotations

import builtins
import inspect
import json
import keyword
import math
import sys
import types
import typing
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import typing_extensions
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode
from pydantic_core import CoreSchema

_PRIMITIVE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


class _Unsupported(Exception):
    """Not a shape this module writes: pydantic's own schema is used."""


def input_schema(fields: Mapping[str, tuple[Any, Any]]) -> dict[str, Any] | None:
    """The input schema of a tool whose arguments are ``fields`` (name -> (annotation, default or ...)), or None."""
    try:
        properties: dict[str, Any] = {}
        required = []
        for name, (annotation, default) in fields.items():
            schema = _schema(annotation)
            if default is ...:
                required.append(name)
            else:
                schema["default"] = _default(default)
            properties[name] = schema
    except _Unsupported:
        return None
    result: dict[str, Any] = {"additionalProperties": False, "properties": properties}
    if required:
        result["required"] = required
    result["type"] = "object"
    return result


_SCALARS = frozenset(_PRIMITIVE) - {type(None)}


def is_flat(fields: Mapping[str, tuple[Any, Any]]) -> bool:
    """Whether every argument is a ``str``, ``int``, ``float`` or ``bool`` with no default or a JSON scalar one
    (most tools): then ``input_schema`` is already as agents are served it, with nothing to inline
    (``schemas.self_contained``) and no prose to clean (``names.clean_schema``), and both can be skipped."""
    return all(annotation in _SCALARS and (default is ... or default is None or type(default) in (str, int, bool)
                                           or (type(default) is float and math.isfinite(default)))
               for annotation, default in fields.values())


def output_schema(annotation: Any) -> dict[str, Any] | None:
    """The output schema of a tool returning a TypedDict of plain fields, or None. Written once a TypedDict: the
    tools of a pack that return the same one share their schema (read, never changed, as every schema here)."""
    if not typing_extensions.is_typeddict(annotation):
        return None
    known = _OUTPUT_SCHEMAS.get(annotation)
    if known is not None:
        return known
    try:
        hints = _typed_dict_hints(annotation)
        if hints is None:
            hints = typing.get_type_hints(annotation, include_extras=True)
        properties = {name: _schema(hint) for name, hint in hints.items()}
    except (_Unsupported, NameError, TypeError):
        return None
    required = [name for name in hints if name in annotation.__required_keys__]
    result: dict[str, Any] = {"properties": properties}
    if required:
        result["required"] = required
    result["type"] = "object"
    _OUTPUT_SCHEMAS[annotation] = result
    return result


# a TypedDict's output schema, once written (a class that goes, such as a reloaded module's, takes its entry along)
_OUTPUT_SCHEMAS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def _typed_dict_hints(annotation: Any) -> dict[str, Any] | None:
    """What ``typing.get_type_hints(annotation, include_extras=True)`` answers for a TypedDict whose every field is a
    class or names one (``result: int``, with or without ``from __future__ import annotations``), read without
    evaluating anything; None for any other. typing evaluates a field's reference with the class's module as locals
    and the module the reference was made in as globals."""
    if annotation.__mro__[1:] != (dict, object):
        return None
    own = getattr(sys.modules.get(annotation.__module__), "__dict__", None)
    hints: dict[str, Any] = {}
    for name, value in inspect.get_annotations(annotation).items():
        if isinstance(value, typing.ForwardRef):
            made_in = getattr(sys.modules.get(value.__forward_module__ or ""), "__dict__", None)
            if own is None or made_in is None:
                return None
            value = plain_hint(value.__forward_arg__, (own, made_in))
        else:  # a class (a text with no scope to look in is no hint)
            value = plain_hint(value, ())
        if value is None:
            return None
        hints[name] = value
    return hints


_MISSING = object()


def plain_hint(annotation: Any, scopes: Sequence[Mapping[str, Any]]) -> type | None:
    """What typing evaluates ``annotation`` to when it is a class or the name of one, the name looked up as ``eval``
    looks it up (in each scope in turn, then in the last one's builtins); None for anything else (typing's to
    evaluate). typing returns such a class unchanged, but for the two it refuses as plain types (``Generic``,
    ``Protocol``), left to it to refuse."""
    if type(annotation) is str:
        if not annotation.isidentifier() or keyword.iskeyword(annotation) or not scopes:
            return None
        for scope in scopes:
            found = scope.get(annotation, _MISSING)
            if found is not _MISSING:
                break
        else:
            given = scopes[-1].get("__builtins__", builtins)  # eval's builtins: a module's dict, or the module
            table = given.__dict__ if isinstance(given, types.ModuleType) else given
            found = table.get(annotation, _MISSING) if isinstance(table, dict) else _MISSING
        annotation = found
    if not isinstance(annotation, type) or annotation is typing.Generic or annotation is typing.Protocol:
        return None
    return annotation


def _schema(annotation: Any) -> dict[str, Any]:
    kind = _PRIMITIVE.get(annotation) if isinstance(annotation, type) else None
    if kind is not None:
        return {"type": kind}
    if annotation is list:
        return {"items": {}, "type": "array"}
    if annotation is dict:
        return {"additionalProperties": True, "type": "object"}
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = _schema(arguments[0])
        for extra in arguments[1:]:
            # only a description: constraints (in metadata), aliases, examples, defaults... are pydantic's to write
            if not isinstance(extra, FieldInfo) or extra.metadata or set(_attributes(extra)) - {"description"}:
                raise _Unsupported
            if extra.description is not None:
                schema["description"] = extra.description
        return schema
    if origin is list and len(arguments) == 1:
        return {"items": _schema(arguments[0]), "type": "array"}
    if origin is dict and len(arguments) == 2 and arguments[0] is str:
        return {"additionalProperties": _schema(arguments[1]), "type": "object"}
    if origin in (typing.Union, types.UnionType):
        if any(typing.get_origin(a) in (Literal, typing.Annotated) for a in arguments):
            raise _Unsupported  # pydantic merges and dedupes such members: not worth matching
        nullable = type(None) in arguments
        members: list[dict[str, Any]] = []
        for member in (_schema(a) for a in arguments if a is not type(None)):
            if "anyOf" in member:
                raise _Unsupported
            if member not in members:  # pydantic writes equal members once
                members.append(member)
        if nullable:
            return {"anyOf": [*members, {"type": "null"}]}  # pydantic puts null last
        return members[0] if len(members) == 1 else {"anyOf": members}
    if origin is Literal:
        return _literal(arguments)
    raise _Unsupported


def _attributes(field: FieldInfo) -> Any:
    """What the author gave ``Field(...)`` (pydantic keeps it as ``_attributes_set``; without it, assume all)."""
    given = getattr(field, "_attributes_set", None)
    if not isinstance(given, dict):
        raise _Unsupported
    return given


def _literal(values: tuple[Any, ...]) -> dict[str, Any]:
    if values and all(type(v) is str for v in values):
        kind = "string"
    elif values and all(type(v) is int for v in values):
        kind = "integer"
    else:
        raise _Unsupported
    if len(set(values)) != len(values):
        raise _Unsupported
    if len(values) == 1:
        return {"const": values[0], "type": kind}
    return {"enum": list(values), "type": kind}


def _default(value: Any) -> Any:
    """A default as pydantic puts it in a schema: plain JSON values only."""
    if value is None or type(value) in (str, int, bool):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise _Unsupported
        return value
    if type(value) in (list, dict):
        try:
            if json.loads(json.dumps(value, allow_nan=False)) == value:
                return json.loads(json.dumps(value))
        except (TypeError, ValueError):
            pass
    raise _Unsupported


class _SchemaGenerator(GenerateJsonSchema):
    """JSON Schema without the titles pydantic makes up from field names: they cost tokens and say nothing."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> dict[str, Any]:
        result = super().generate(schema, mode)
        result.pop("title", None)
        return result


def json_schema_of(adapter_or_model: type[BaseModel] | TypeAdapter[Any], mode: JsonSchemaMode) -> dict[str, Any]:
    if isinstance(adapter_or_model, TypeAdapter):
        return adapter_or_model.json_schema(schema_generator=_SchemaGenerator, mode=mode)
    return adapter_or_model.model_json_schema(schema_generator=_SchemaGenerator, mode=mode)
