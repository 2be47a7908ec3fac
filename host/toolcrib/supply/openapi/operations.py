"""What one operation is served as (``operation_tool``): its input schema (parameters and body side by side, JSON Schema
2020-12 with components in ``$defs``), its output schema, how each argument is sent, and the annotations its method
tells (``ANNOTATIONS``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolcrib.errors import ToolDeclarationError
from toolcrib.supply.openapi.document import (
    IGNORED_HEADERS,
    JSON_MEDIA,
    PLACES,
    Operation,
    Parameter,
    resolve,
    unescape,
)

# What each method tells of the operation (toolcrib sends that method, so these are not the document's claims)
ANNOTATIONS: dict[str, dict[str, bool]] = {
    "get": {"readOnlyHint": True, "idempotentHint": True},
    "head": {"readOnlyHint": True, "idempotentHint": True},
    "options": {"readOnlyHint": True, "idempotentHint": True},
    "put": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    "delete": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    "post": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "patch": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    # TRACE echoes the request it is sent: what a call carries comes back, so it is no read
    "trace": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
}
_DROPPED_KEYS = frozenset({"discriminator", "xml", "externalDocs", "example", "nullable", "readOnly", "writeOnly"})


# -- schemas ---------------------------------------------------------------------------------------------------


class _Schemas:
    """Turns the document's schemas into JSON Schema 2020-12 for one side (``"input"`` or ``"output"``), copying
    each component a schema refers to into ``defs`` once."""

    def __init__(self, document: Mapping[str, Any], side: str, v30: bool) -> None:
        self.document = document
        self.side = side
        self.v30 = v30
        self.defs: dict[str, Any] = {}

    def convert(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.convert(item) for item in node]
        if not isinstance(node, Mapping):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self._component(ref)
            if len(node) == 1 or self.v30:  # 3.0: siblings of a $ref are ignored
                return {"$ref": target}
            return {"allOf": [{"$ref": target}], **self.convert({k: v for k, v in node.items() if k != "$ref"})}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED_KEYS or key.startswith("x-"):
                continue
            if key == "properties" and isinstance(value, Mapping):
                out[key] = {name: self.convert(prop) for name, prop in value.items()
                            if not self._hidden(prop)}
            elif key in ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                         "unevaluatedItems", "unevaluatedProperties"):
                out[key] = self.convert(value)
            elif key in ("allOf", "oneOf", "anyOf", "prefixItems") and isinstance(value, list):
                out[key] = [self.convert(item) for item in value]
            elif key in ("patternProperties", "dependentSchemas", "$defs") and isinstance(value, Mapping):
                out[key] = {name: self.convert(item) for name, item in value.items()}
            else:
                out[key] = value
        if "required" in out and isinstance(out["required"], list) and isinstance(node.get("properties"), Mapping):
            hidden = {name for name, prop in node["properties"].items() if self._hidden(prop)}
            out["required"] = [name for name in out["required"] if name not in hidden]
            if not out["required"]:
                del out["required"]
        if self.side == "input" and out.get("format") == "binary" and out.get("type") in ("string", None):
            del out["format"]
            out["contentEncoding"] = "base64"  # an agent sends bytes as base64; they go as they were
        if "example" in node and "examples" not in out:
            out["examples"] = [node["example"]]
        if self.v30:
            self._from_30(node, out)
        return out

    def _hidden(self, prop: Any) -> bool:
        """A readOnly property is no argument. (A writeOnly one stays in an answer's schema: an API that sends it
        anyway, into a schema with unevaluatedProperties false, is not an error of the call.)"""
        prop = self._deref(prop)
        return self.side == "input" and isinstance(prop, Mapping) and prop.get("readOnly") is True

    def _from_30(self, node: Mapping[str, Any], out: dict[str, Any]) -> None:
        for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if out.get(exclusive) is True and bound in out:
                out[exclusive] = out.pop(bound)
            elif isinstance(out.get(exclusive), bool):
                del out[exclusive]
        if node.get("nullable") is True:
            kind = out.get("type")
            if isinstance(kind, str):
                out["type"] = [kind, "null"]
                if "enum" in out and None not in out["enum"]:
                    out["enum"] = [*out["enum"], None]
            elif kind is None:
                inner = dict(out)
                out.clear()
                out["anyOf"] = [inner, {"type": "null"}]

    def _component(self, ref: str) -> str:
        """A ``#/components/schemas/<name>`` reference as ``#/$defs/<name>``, the component copied there."""
        prefix = "#/components/schemas/"
        if not ref.startswith(prefix):
            raise ToolDeclarationError(f"$ref {ref!r} is not supported (only #/components/schemas/... within the "
                                       "document)")
        name = unescape(ref[len(prefix):])
        if name not in self.defs:
            schemas = self.document.get("components", {}).get("schemas", {})
            if name not in schemas:
                raise ToolDeclarationError(f"$ref {ref!r} names no schema of the document")
            self.defs[name] = True  # a placeholder while it converts: a recursive schema refers to itself
            self.defs[name] = self.convert(schemas[name])
        return "#/$defs/" + name.replace("~", "~0").replace("/", "~1")

    def _deref(self, node: Any) -> Any:
        return resolve(self.document, node)

    def finish(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self.defs:
            schema["$defs"] = dict(self.defs)
        return schema



def _media(content: Any) -> tuple[str, Any] | None:
    """The media type a body is sent or read as, and its schema: JSON first, then a form, then anything else."""
    if not isinstance(content, Mapping) or not content:
        return None
    types = [t for t in content if isinstance(t, str)]
    for wanted in ("json", "application/x-www-form-urlencoded", "multipart/form-data"):
        for media in types:
            if (wanted == "json" and JSON_MEDIA.match(media.split(";")[0].strip())) or media == wanted:
                return media, (content[media] or {}).get("schema", {})
    first = types[0]
    return first, (content[first] or {}).get("schema", {}) if isinstance(content[first], Mapping) else {}


@dataclass(frozen=True)
class OperationTool:
    """What one operation is served as: its input and output schemas and how its arguments are sent."""

    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    wrapped: bool  # the output is {"result": ...}
    parameters: tuple[Parameter, ...]
    media: str | None  # the request body's media type
    description: str
    title: str | None


def operation_tool(document: Mapping[str, Any], operation: Operation,
                   provided: frozenset[tuple[str, str]] = frozenset()) -> OperationTool:
    """The tool an operation is (``ToolDeclarationError`` when it cannot be served, saying why). A parameter the
    configured credentials fill (``provided``: (where, lower-case name)) is no argument: the operator's value goes."""
    v30 = str(document.get("openapi", "")).startswith("3.0")
    schemas = _Schemas(document, "input", v30)
    properties: dict[str, Any] = {}
    required: list[str] = []
    plan: list[tuple[Parameter, Any, bool]] = []
    for raw in operation.parameters:
        where = raw.get("in")
        if where not in PLACES:
            raise ToolDeclarationError(f"parameter {raw.get('name')!r} is in {where!r}, not one of "
                                       f"{', '.join(PLACES)}")
        name = raw["name"]
        if (where == "header" and name.lower() in IGNORED_HEADERS) or (where, name.lower()) in provided:
            continue
        as_json = False
        schema = raw.get("schema")
        if schema is None and isinstance(raw.get("content"), Mapping):
            given = _media(raw["content"])
            schema, as_json = (given[1] if given else {}), True
        style = raw.get("style") or ("simple" if where in ("path", "header") else "form")
        explode = raw.get("explode", style == "form")
        converted = schemas.convert(schema or {})
        if raw.get("description") and isinstance(converted, dict) and "description" not in converted:
            converted = {**converted, "description": raw["description"]}
        plan.append((Parameter(name, where, name, style, bool(explode), as_json), converted,
                     where == "path" or raw.get("required") is True))
    media: str | None = None
    body = resolve(document, operation.raw.get("requestBody"))
    if isinstance(body, Mapping):
        chosen = _media(body.get("content"))
        if chosen is not None:
            media, schema = chosen
            body_required = body.get("required") is True
            shape = resolve(document, schema) if isinstance(schema, Mapping) else {}
            spread = (isinstance(shape, Mapping) and isinstance(shape.get("properties"), Mapping) and
                      shape.get("type", "object") == "object" and not any(k in shape for k in (
                          "oneOf", "anyOf", "allOf", "additionalProperties", "patternProperties")))
            if spread:
                converted = schemas.convert(shape)
                inner_required = set(converted.get("required", []))
                for prop, prop_schema in converted.get("properties", {}).items():
                    binary = prop_schema.get("contentEncoding") == "base64" and _binary(document, shape, prop)
                    plan.append((Parameter(prop, "body", prop, binary=binary), prop_schema,
                                 body_required and prop in inner_required))
            else:
                converted = schemas.convert(schema or {})
                if body.get("description") and isinstance(converted, dict) and "description" not in converted:
                    converted = {**converted, "description": body["description"]}
                binary = isinstance(converted, dict) and converted.get("contentEncoding") == "base64"
                plan.append((Parameter("body", "payload", "body", binary=binary), converted, body_required))
    counts: dict[str, int] = {}
    for parameter, _, _ in plan:
        counts[parameter.name] = counts.get(parameter.name, 0) + 1
    parameters = []
    for parameter, schema, is_required in plan:
        argument = parameter.name
        if counts[parameter.name] > 1 and parameter.where in PLACES:
            argument = f"{parameter.name}__{parameter.where}"
        if argument in properties:
            raise ToolDeclarationError(f"two of its arguments would be named {argument!r}")
        properties[argument] = schema
        if is_required:
            required.append(argument)
        parameters.append(Parameter(parameter.name, parameter.where, argument, parameter.style, parameter.explode,
                                    parameter.as_json, parameter.binary))
    # an argument the operation does not take is refused, naming it (not silently dropped)
    input_schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = required
    input_schema = schemas.finish(input_schema)
    output_schema, wrapped = _output(document, operation, v30)
    summary = operation.raw.get("summary") if isinstance(operation.raw.get("summary"), str) else ""
    details = operation.raw.get("description") if isinstance(operation.raw.get("description"), str) else ""
    description = "\n\n".join(t.strip() for t in (summary, details) if t and t.strip())
    if operation.raw.get("deprecated") is True:
        description = f"Deprecated. {description}".strip()
    description = description or f"{operation.method.upper()} {operation.path}"
    title = summary.strip() if summary and len(summary.strip()) <= 80 else None
    return OperationTool(input_schema, output_schema, wrapped, tuple(parameters), media, description, title)


def _binary(document: Mapping[str, Any], shape: Mapping[str, Any], prop: str) -> bool:
    declared = resolve(document, shape.get("properties", {}).get(prop))
    return isinstance(declared, Mapping) and declared.get("format") == "binary"


def success(operation: Operation) -> tuple[str, Any] | None:
    """The success response the output schema comes from: 200, else the first 2xx, else ``default``."""
    given = operation.raw.get("responses")
    if not isinstance(given, Mapping):
        return None
    responses = {str(code): response for code, response in given.items()}  # YAML reads 200 as a number
    for code in ("200", *sorted(c for c in responses if c.startswith("2") and c != "200"), "2XX", "default"):
        if code in responses:
            return code, responses[code]
    return None


def _output(document: Mapping[str, Any], operation: Operation, v30: bool) -> tuple[dict[str, Any] | None, bool]:
    found = success(operation)
    if found is None:
        return None, False
    response = resolve(document, found[1])
    content = response.get("content") if isinstance(response, Mapping) else None
    media = _media(content)
    if media is None or not JSON_MEDIA.match(media[0].split(";")[0].strip()) or not media[1]:
        return None, False
    schemas = _Schemas(document, "output", v30)
    converted = schemas.convert(media[1])
    if _an_object(document, media[1]):
        whole = {"allOf": [converted]} if "$ref" in converted else dict(converted)
        return schemas.finish({**whole, "type": "object"}), False
    return schemas.finish({"type": "object", "properties": {"result": converted}, "required": ["result"]}), True


def _an_object(document: Mapping[str, Any], schema: Any, depth: int = 0) -> bool:
    """Whether every value the schema allows is an object (what MCP's outputSchema must describe): type object
    (not nullable), or an allOf of which one part is."""
    shape = resolve(document, schema)
    if not isinstance(shape, Mapping) or depth > 8 or shape.get("nullable") is True:
        return False
    kind = shape.get("type")
    if kind == "object":
        return not any(k in shape for k in ("oneOf", "anyOf"))
    if kind is None and isinstance(shape.get("allOf"), list):
        return any(_an_object(document, part, depth + 1) for part in shape["allOf"])
    return False

