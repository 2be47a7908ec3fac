"""Served JSON Schemas in the shape every agent framework reads: self-contained, nullables as a type list.

What pydantic (and many upstream servers) write is valid JSON Schema that frameworks misread: openai-agents' strict
mode gives up on a schema with ``$ref``; llama-index turns an enum under ``$defs`` into an object; mcpadapt
(smolagents) types every ``anyOf`` as a string. So what toolcrib serves, on every transport and in every export,
is ``self_contained``: each local ``$ref`` (``#/$defs/X``, ``#/definitions/X``) replaced by what it names, and a
nullable ``anyOf: [X, {"type": "null"}]`` of a plain ``X`` written ``type: [X's type, "null"]`` (its ``enum``
taking ``null`` too). Both keep the meaning: the same values are valid. A schema that names its dialect
(``$schema``, a JSON Schema document a tool was given) keeps its ``$defs`` beside the inlined references, as MCP
asks servers to preserve 2020-12 keywords (SEP-1613, checked by the official conformance suite). A recursive
model cannot be inlined: its ``$ref`` and the ``$defs`` it needs stay, and ``recursive`` names them for ``toolcrib
check``. What a tool declared is untouched (the lock, curation and validation see it as written); only what is
served is reshaped.

``strict`` goes one step further, for OpenAI's strict function calling: every object closed and every property
required (the model gives each; an optional one keeps its default as a hint, as openai-agents' own conversion
does), or the reason a tool cannot be (a free-form mapping, a recursive model, a keyword strict mode refuses),
naming the argument.
"""

from __future__ import annotations

from typing import Any

_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
        "unevaluatedItems", "unevaluatedProperties", "additionalItems")  # keywords whose value is a schema
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")  # ... a list of schemas
_NAMED = ("properties", "patternProperties", "dependentSchemas")  # ... schemas by name
_DEFS = ("$defs", "definitions")
_SCHEMA_KEYS = frozenset(_ONE + _MANY + _NAMED)  # the keywords whose values hold schemas


def self_contained(schema: Any, recursive: list[str] | None = None) -> Any:
    """``schema`` with its local references inlined and its nullables as type lists; ``schema`` itself when there
    is nothing to change (the usual case for plain arguments: no copy). Names of recursive definitions, which keep
    their ``$ref``, are appended to ``recursive``."""
    if not isinstance(schema, dict):
        return schema
    defs: dict[str, Any] = {}
    for key in _DEFS:
        found = schema.get(key)
        if isinstance(found, dict):
            defs.update({f"#/{key}/{name}": value for name, value in found.items()})
    kept: dict[str, Any] = {}
    shaped = _shape(schema, defs, (), kept)
    if not defs and shaped is schema:
        return schema
    if "$schema" in schema:  # a JSON Schema document naming its dialect keeps its definitions as given (SEP-1613)
        return shaped
    out = {k: v for k, v in shaped.items() if k not in _DEFS}
    done: set[str] = set()
    while set(kept) - done:  # what a recursive reference still points at, itself shaped (which may keep more)
        for ref in sorted(set(kept) - done):
            done.add(ref)
            key, name = ref[2:].split("/", 1)
            out.setdefault(key, {})[name] = _shape(defs[ref], defs, (ref,), kept)
            if recursive is not None and name not in recursive:
                recursive.append(name)
    return out


def recursive(schema: Any) -> list[str]:
    """The definitions of ``schema`` that refer to themselves (kept as ``$ref`` when served)."""
    found: list[str] = []
    self_contained(schema, found)
    return found


def _shape(node: Any, defs: dict[str, Any], stack: tuple[str, ...], kept: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref in defs:
        if ref in stack:  # a model that contains itself: it stays a reference
            kept[ref] = True
            return node
        target = _shape(defs[ref], defs, (*stack, ref), kept)
        siblings = {k: _shape_value(k, v, defs, stack, kept) for k, v in node.items() if k != "$ref"}
        return {**target, **siblings} if isinstance(target, dict) else node
    out: dict[str, Any] | None = None
    for key, value in node.items():
        if key not in _SCHEMA_KEYS:
            continue  # data (type, enum, default, ...), or the root's definitions (dropped by the caller)
        new = _shape_value(key, value, defs, stack, kept)
        if new is not value:
            if out is None:
                out = dict(node)
            out[key] = new
    result = out if out is not None else node
    return _nullable(result) if "anyOf" in result else result


def _shape_value(key: str, value: Any, defs: dict[str, Any], stack: tuple[str, ...], kept: dict[str, Any]) -> Any:
    if key in _ONE and isinstance(value, dict):
        return _shape(value, defs, stack, kept)
    if (key in _MANY and isinstance(value, list)) or (key == "items" and isinstance(value, list)):
        items = [_shape(v, defs, stack, kept) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if key in _NAMED and isinstance(value, dict):
        named = {name: _shape(v, defs, stack, kept) for name, v in value.items()}
        return value if all(named[n] is value[n] for n in value) else named
    return value  # data (enum, const, default, examples) or a keyword without schemas in it


_COMPOSED = frozenset({"anyOf", "oneOf", "allOf", "$ref", "not"})


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, {"type": "null"}]`` of a plain ``X`` (one type, nothing composed) as ``X`` with type ``[T,
    "null"]``; anything else as it is."""
    members = node.get("anyOf")
    if not isinstance(members, list) or len(members) != 2 or {"type": "null"} not in members:
        return node
    other = members[0] if members[1] == {"type": "null"} else members[1]
    if not isinstance(other, dict) or not isinstance(other.get("type"), str) or _COMPOSED & other.keys():
        return node
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    out = {**other, **merged, "type": [other["type"], "null"]}
    if "const" in other and "enum" not in other:
        out["enum"] = [other["const"], None]
        del out["const"]
    elif isinstance(other.get("enum"), list) and None not in other["enum"]:
        out["enum"] = [*other["enum"], None]
    return out


# -- OpenAI's strict mode -----------------------------------------------------------------------------------------

# what strict mode accepts of an object's or a value's keywords (OpenAI's structured outputs, "supported schemas")
_STRICT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum", "const",
                          "anyOf", "description", "title", "default", "$defs", "$ref", "pattern", "format", "minimum",
                          "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems"})


class NotStrict(Exception):
    """Why a schema cannot be strict (``argument``: the property path, empty for the whole schema)."""

    def __init__(self, argument: str, why: str) -> None:
        super().__init__(f"{argument}: {why}" if argument else why)
        self.argument, self.why = argument, why


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (served: self-contained) as OpenAI's strict mode takes it, or ``NotStrict``."""
    if recursive(schema):
        raise NotStrict("", f"a recursive model ({', '.join(recursive(schema))})")
    made: dict[str, Any] = _strict(self_contained(schema), "")
    return made


def _strict(node: Any, where: str) -> Any:
    if not isinstance(node, dict):
        return node
    for key in node:
        if key not in _STRICT_KEYS:
            raise NotStrict(where, f"strict mode does not take {key!r}")
    out = dict(node)
    if "anyOf" in out:
        out["anyOf"] = [_strict(member, where) for member in out["anyOf"]]
    kinds = out.get("type")
    if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
        extra = out.get("additionalProperties")
        if (isinstance(extra, dict) and extra) or extra is True or ("properties" not in out and extra is not False):
            raise NotStrict(where, "a mapping of free-form keys (a dict), which strict mode cannot describe")
        properties = out.get("properties", {})
        # every property required (strict mode's rule): the model gives each, an optional one its default or a
        # value of its own, as openai-agents' own conversion does
        out["properties"] = {name: _strict(value, f"{where}.{name}" if where else name)
                             for name, value in properties.items()}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if "items" in out:
        out["items"] = _strict(out["items"], f"{where}[]")
    return out


__all__ = ["NotStrict", "recursive", "self_contained", "strict"]
