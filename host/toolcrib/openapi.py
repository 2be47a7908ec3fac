"""OpenAPI documents as a source (``[openapi.<namespace>]``): each operation of a 3.0 or 3.1 document, JSON or
YAML, becomes the tool ``<namespace>__<operationId>``, called over HTTP through ``toolcrib.net``.

- **Names** follow the upstream servers' rules (``names.serving_names``): an operationId that breaks the tool-name
  rule is mapped (``get-pet`` -> ``get_pet``); an operation without one is named from its method and path
  (``GET /pet/{petId}`` -> ``get_pet_petId``); two that would share a name are both left out, and ``check`` says so.
- **The input schema** holds the path, query, header and cookie parameters and the request body: an object body's
  properties sit beside the parameters, any other body is the argument ``body``. A name that two places share is
  kept apart: each parameter of it becomes ``<name>__<where>`` (``id__query``), as FastMCP names them. Schemas are
  JSON Schema 2020-12: a component a schema refers to is copied into ``$defs`` (so a recursive one stays
  recursive), 3.0's ``nullable``, boolean ``exclusiveMinimum``/``exclusiveMaximum`` and ``example`` become their
  2020-12 forms, and a ``readOnly`` property is no argument.
- **The output schema** is the success response's JSON schema (an object as it is; anything else as
  ``{"result": ...}``, as MCP wants an object); an answer that does not match it is an error result that says so.
- **Annotations** come from the method, which toolcrib itself sends: GET, HEAD and OPTIONS are read-only and
  idempotent, PUT and DELETE idempotent, DELETE and PUT destructive, POST not read-only and not destructive, PATCH
  neither read-only nor idempotent, TRACE (which echoes the request, credentials and all) not read-only. So plan
  mode and ``@writes`` work with no curation.
- **Calls** go to the base URL only (every redirect hop must stay under it), through ``toolcrib.net``'s guard: the
  base URL's own host may be a private address (the operator named it), no other; its deadline and size cap. The
  configured credentials (headers, bearer, API key) go with every call and never into a message, a log or a result,
  in any form (``Credentials.scrub_result``); names come from the document, never from an agent's keys.
  A 2xx answer's JSON is the structured content; text is text; images and audio are content blocks; other bytes an
  embedded resource. Any other status is an error result with the status and a trimmed body, never a traceback.
- **The lock** records each operation's method, path and where its arguments go (``Runner.runs``) beside what an
  agent sees, so a document that moves an operation to another path or method holds that operation back.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import functools
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from secrets import token_hex
from typing import Any
from urllib.parse import quote, quote_plus, urlencode, urlsplit

from pydantic import BaseModel

from toolcrib.config import LoadedConfig, MissingVariable, OpenAPIConfig, expand
from toolcrib.content import ToolResult
from toolcrib.entries import Entry
from toolcrib.errors import ToolDeclarationError, ToolError
from toolcrib.names import clean, clean_schema, full_name, serving_names
from toolcrib.net import WebLimits, fetch, request
from toolcrib.plugins import PluginRecord
from toolcrib.runner import Call
from toolcrib.sources import Offer
from toolcrib.tool import Tool, _json_schema_model

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PLACES = ("path", "query", "header", "cookie")
# Headers an argument never sets: those OpenAPI says a parameter is ignored as (the HTTP layer's), and the
# connection's and the message's framing, which would let a value reach another host or smuggle a second request
_IGNORED_HEADERS = frozenset({
    "accept", "content-type", "authorization", "host", "content-length", "transfer-encoding", "connection",
    "keep-alive", "te", "trailer", "upgrade", "proxy-connection", "proxy-authorization", "expect", "cookie"})
ERROR_BODY_CHARS = 2000  # of an error answer's body, in its error result
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
_JSON = re.compile(r"^application/(.+\+)?json$")
_DROPPED_KEYS = frozenset({"discriminator", "xml", "externalDocs", "example", "nullable", "readOnly", "writeOnly"})


class DocumentError(ValueError):
    """The document cannot be read or is not OpenAPI 3.0/3.1: the whole source fails, with this message."""


# -- reading the document --------------------------------------------------------------------------------------


def read_document(config: OpenAPIConfig, loaded: LoadedConfig) -> tuple[dict[str, Any], str]:
    """The document as data, and where it came from (its file or URL)."""
    if config.document is not None:
        path = loaded.resolve(config.document)
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise DocumentError(f"cannot read {path}: {exc.strerror or exc}") from None
        where = str(path)
    else:
        url = config.document_url or ""
        host = urlsplit(url)
        limits = WebLimits(max_bytes=config.max_bytes, timeout=config.timeout, verb="fetch",
                           where="its [openapi] table", allowed_private_hosts=(_host_port(host),))
        try:
            text = fetch(url, limits).body
        except ToolError as exc:
            raise DocumentError(str(exc)) from None
        where = url
    return parse_document(text, where), where


def parse_document(text: bytes, where: str) -> dict[str, Any]:
    """JSON, or YAML (a superset of JSON: a document that is not JSON is read as YAML, safely)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise DocumentError(f"{where} is nested too deeply to be read") from None
    except ValueError:
        data = _yaml(text, where)
    if not isinstance(data, dict):
        raise DocumentError(f"{where} is not an OpenAPI document (expected a mapping at its top)")
    version = data.get("openapi")
    if not isinstance(version, str) or not re.match(r"3\.[01]\.", version):
        given = version if isinstance(version, str) else ("Swagger " + str(data["swagger"]) if "swagger" in data
                                                          else "none")
        raise DocumentError(f"{where} is not an OpenAPI 3.0 or 3.1 document (its version: {given}); convert a "
                            "Swagger 2.0 document first")
    if not isinstance(data.get("paths", {}), dict):
        raise DocumentError(f"{where}: paths must be a mapping")
    return data


YAML_NODES = 1_000_000  # nodes a YAML document may expand to through its aliases (or 10 times its own, if more)
YAML_DEPTH = 256  # how deeply its collections may nest, aliases followed (real documents nest a few dozen)


def _yaml(text: bytes, where: str) -> Any:
    """A YAML document, safely: its aliases may not expand it past ``YAML_NODES`` (an alias bomb of a kilobyte
    would take minutes and gigabytes to walk), its collections not nest past ``YAML_DEPTH``, and it holds no cycle."""
    import yaml  # type: ignore[import-untyped]  # PyYAML has no stubs of its own

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _bounded(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise DocumentError(f"{where} is neither JSON nor YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise DocumentError(f"{where} is nested too deeply to be read") from None
    finally:
        loader.dispose()


def _bounded(root: Any, where: str) -> None:
    """``DocumentError`` unless the node graph from ``root`` expands to a bounded tree. Each node is sized once
    (aliases share nodes), iteratively, so neither size nor depth costs more than the graph itself."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    graph = 0
    stack: list[tuple[Any, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = [] if not isinstance(node.value, list) else [
            c for item in node.value for c in (item if isinstance(item, tuple) else (item,))]
        if not done:
            if key in open_:
                raise DocumentError(f"{where} refers to itself through an alias, which no JSON value can")
            open_.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        open_.discard(key)
        graph += 1
        sizes[key] = 1 + sum(sizes[id(c)] for c in children)
        depths[key] = 1 + max((depths[id(c)] for c in children), default=0)
        if depths[key] > YAML_DEPTH:
            raise DocumentError(f"{where} nests deeper than {YAML_DEPTH} levels")
    limit = max(YAML_NODES, 10 * graph)
    if sizes[id(root)] > limit:
        raise DocumentError(f"{where} expands to more than {limit:,} nodes through its aliases (an alias bomb?); "
                            "it is not read")


def _host_port(url: Any) -> str:
    return f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}"


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
        name = _unescape(ref[len(prefix):])
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


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def resolve(document: Mapping[str, Any], node: Any, seen: frozenset[str] = frozenset()) -> Any:
    """``node`` with a local ``$ref`` (to a parameter, a request body, a response or a schema) followed."""
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if not ref.startswith("#/") or ref in seen:
            raise ToolDeclarationError(f"$ref {ref!r} cannot be followed (only references within the document, "
                                       "and none that leads back to itself)")
        seen |= {ref}
        target: Any = document
        for token in ref[2:].split("/"):
            if not isinstance(target, Mapping) or _unescape(token) not in target:
                raise ToolDeclarationError(f"$ref {ref!r} leads nowhere in the document")
            target = target[_unescape(token)]
        node = target
    return node


# -- operations ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parameter:
    name: str  # as the API names it
    where: str  # path | query | header | cookie | body (a property of an object body) | payload (the whole body)
    argument: str  # as the tool takes it
    style: str = ""
    explode: bool = False
    as_json: bool = False  # given as content: application/json, sent as its JSON text
    binary: bool = False  # format: binary, taken as base64 (contentEncoding) and sent as its bytes


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str | None
    tags: tuple[str, ...]
    raw: Mapping[str, Any] = field(repr=False)
    parameters: list[Mapping[str, Any]] = field(repr=False)

    @property
    def name(self) -> str:
        """The operationId, or one made of the method and path (``get_pet_petId``)."""
        if self.operation_id:
            return self.operation_id
        return f"{self.method}_{re.sub(r'[{}]', '', self.path).strip('/').replace('/', '_') or 'root'}"


def operations(document: Mapping[str, Any]) -> list[Operation]:
    """Every operation of the document, in its order."""
    found = []
    for path, item in document.get("paths", {}).items():
        item = resolve(document, item)
        if not isinstance(item, Mapping):
            continue
        shared = item.get("parameters", [])
        for method in METHODS:
            raw = item.get(method)
            if not isinstance(raw, Mapping):
                continue
            own = raw.get("parameters", [])
            merged: dict[tuple[str, str], Mapping[str, Any]] = {}
            for parameter in [*shared, *own]:  # an operation's own parameter overrides the path's
                parameter = resolve(document, parameter)
                if isinstance(parameter, Mapping) and isinstance(parameter.get("name"), str):
                    merged[(parameter["name"], str(parameter.get("in")))] = parameter
            tags = tuple(t for t in raw.get("tags", []) if isinstance(t, str))
            operation_id = raw.get("operationId") if isinstance(raw.get("operationId"), str) else None
            found.append(Operation(method, str(path), operation_id, tags, raw, list(merged.values())))
    return found


def selected(operation: Operation, patterns: Sequence[str]) -> bool:
    """Whether a pattern names it: ``tag:<tag>``, ``<METHOD> <path glob>``, or an operationId glob."""
    for pattern in patterns:
        if pattern.startswith("tag:"):
            if any(fnmatch.fnmatchcase(tag, pattern[4:]) for tag in operation.tags):
                return True
        elif " " in pattern:
            method, _, path = pattern.partition(" ")
            if fnmatch.fnmatchcase(operation.method.upper(), method.upper()) and fnmatch.fnmatchcase(
                    operation.path, path.strip()):
                return True
        elif fnmatch.fnmatchcase(operation.name, pattern):
            return True
    return False


def _media(content: Any) -> tuple[str, Any] | None:
    """The media type a body is sent or read as, and its schema: JSON first, then a form, then anything else."""
    if not isinstance(content, Mapping) or not content:
        return None
    types = [t for t in content if isinstance(t, str)]
    for wanted in ("json", "application/x-www-form-urlencoded", "multipart/form-data"):
        for media in types:
            if (wanted == "json" and _JSON.match(media.split(";")[0].strip())) or media == wanted:
                return media, (content[media] or {}).get("schema", {})
    first = types[0]
    return first, (content[first] or {}).get("schema", {}) if isinstance(content[first], Mapping) else {}


@dataclass(frozen=True)
class Made:
    """What one operation is served as: its input and output schemas and how its arguments are sent."""

    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    wrapped: bool  # the output is {"result": ...}
    parameters: tuple[Parameter, ...]
    media: str | None  # the request body's media type
    description: str
    title: str | None


def make(document: Mapping[str, Any], operation: Operation, provided: frozenset[tuple[str, str]] = frozenset(),
         ) -> Made:
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
        if (where == "header" and name.lower() in _IGNORED_HEADERS) or (where, name.lower()) in provided:
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
    return Made(input_schema, output_schema, wrapped, tuple(parameters), media, description, title)


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
    if media is None or not _JSON.match(media[0].split(";")[0].strip()) or not media[1]:
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


# -- calling ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """What goes with every call. Never shown: ``scrub_result`` takes every form of each value (bare and with its
    scheme, percent-, JSON-, HTML- and base64-encoded) out of whatever the API answered."""

    headers: Mapping[str, str]
    query: Mapping[str, str]

    @property
    def provided(self) -> frozenset[tuple[str, str]]:
        return frozenset({*(("header", k.lower()) for k in self.headers), *(("query", k.lower()) for k in self.query)})

    @functools.cached_property
    def _patterns(self) -> tuple[re.Pattern[str], re.Pattern[bytes]] | None:
        forms = sorted({f for value in _secrets(self) for f in _forms(value) if len(f) >= MIN_SECRET_FORM},
                       key=len, reverse=True)
        if not forms:
            return None
        text = "|".join(_percent_any_case(re.escape(f)) for f in forms)
        return re.compile(text), re.compile(text.encode())

    def scrub(self, text: str) -> str:
        return text if self._patterns is None else self._patterns[0].sub("***", text)

    def scrub_bytes(self, data: bytes) -> bytes:
        return data if self._patterns is None else self._patterns[1].sub(b"***", data)

    def scrub_value(self, value: Any) -> Any:
        """A JSON value with every credential taken out of its strings, keys among them."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, list):
            return [self.scrub_value(v) for v in value]
        if isinstance(value, dict):
            return {self.scrub(str(k)): self.scrub_value(v) for k, v in value.items()}
        return value

    def scrub_result(self, result: ToolResult) -> ToolResult:
        """``result`` with no credential in any block, URI or structured content; base64 data is scrubbed as the
        bytes it carries."""
        if self._patterns is None:
            return result
        content = tuple(self._block(block) for block in result.content)
        return ToolResult(content=content, structured_content=self.scrub_value(result.structured_content),
                          is_error=result.is_error)

    def _block(self, block: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in block.items():
            if key in ("data", "blob") and isinstance(value, str):
                value = base64.b64encode(self.scrub_bytes(base64.b64decode(value))).decode()
            elif isinstance(value, Mapping):
                value = self._block(value)
            elif isinstance(value, str):
                value = self.scrub(value)
            out[key] = value
        return out


MIN_SECRET_FORM = 4  # shorter forms would take ordinary words out of answers


def _secrets(credentials: Credentials) -> set[str]:
    """Every value the operator gave, and the parts an API might quote: a header's credentials without its scheme
    (``Bearer <token>`` -> ``<token>``), a Basic one's ``user:password`` and password."""
    found: set[str] = set()
    for value in (*credentials.headers.values(), *credentials.query.values()):
        found.add(value)
        scheme, _, rest = value.partition(" ")
        if rest.strip():
            found.add(rest.strip())
            if scheme.lower() == "basic":
                with contextlib.suppress(ValueError):
                    pair = base64.b64decode(rest.strip(), validate=True).decode()
                    found |= {pair, pair.partition(":")[2]}
    return {v for v in found if v}


def _forms(value: str) -> set[str]:
    """The ways an answer can carry ``value``: as it is; percent-encoded (path, query, form); escaped in JSON and
    HTML; and base64 (both alphabets) wherever it starts in the encoded bytes: the characters that only its own bytes
    decide."""
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value), json.dumps(value)[1:-1],
             json.dumps(value)[1:-1].replace("/", "\\/"), html.escape(value)}
    raw = value.encode()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw + b"\0" * 2)
        first, last = -(-8 * offset // 6), (8 * (offset + len(raw)) - 6) // 6
        core = encoded[first:last + 1].decode()
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    return forms


def _percent_any_case(pattern: str) -> str:
    """A pattern in which each ``%XX`` escape matches in either case (``%2F`` and ``%2f``)."""
    return re.sub(r"%([0-9A-F])([0-9A-F])", lambda m: f"%[{m[1]}{m[1].lower()}][{m[2]}{m[2].lower()}]", pattern)


def credentials(config: OpenAPIConfig, where: str, env: Mapping[str, str] | None = None) -> Credentials:
    """What the config says to send with every call, its ``${VARIABLES}`` taken from ``env`` (the host's)."""
    headers = {k: expand(v, f"{where}.headers.{k}", env) for k, v in config.headers.items()}
    query: dict[str, str] = {}
    if config.bearer is not None:
        headers["Authorization"] = "Bearer " + expand(config.bearer, f"{where}.bearer", env)
    if config.api_key is not None:
        value = expand(config.api_key.value, f"{where}.api_key.value", env)
        (headers if config.api_key.where == "header" else query)[config.api_key.name] = value
    return Credentials(headers, query)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _style(parameter: Parameter, value: Any) -> list[tuple[str, str]]:
    """A query, header or cookie parameter as (name, text) pairs, as its style and explode say."""
    name = parameter.name
    if parameter.as_json:
        return [(name, json.dumps(value, separators=(",", ":"), ensure_ascii=False))]
    if isinstance(value, list):
        if parameter.explode and parameter.style == "form":
            return [(name, _text(v)) for v in value]
        joiner = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(parameter.style, ",")
        return [(name, joiner.join(_text(v) for v in value))]
    if isinstance(value, dict):
        if parameter.style == "deepObject":
            return [(f"{name}[{k}]", _text(v)) for k, v in value.items()]
        if parameter.explode and parameter.where != "header":  # a query's or a cookie's: each key a name
            return [(str(k), _text(v)) for k, v in value.items()]
        pair = "=" if parameter.explode else ","  # a header's is one header, of the document's name (simple style)
        return [(name, ",".join(f"{k}{pair}{_text(v)}" for k, v in value.items()))]
    return [(name, _text(value))]


# RFC 9110's token: what a header's, a cookie's or (here) a query parameter's name made of an agent's key may be
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _header_value(parameter: Parameter, text: str) -> None:
    """A header's value holds no line break or other control character, and nothing beyond Latin-1 (what HTTP/1.1
    carries): a clear argument error, rather than a request split in two or refused by the HTTP client."""
    if "\r" in text or "\n" in text:
        raise ToolError(f"argument {parameter.argument!r} cannot hold a line break: it is a header")
    bad = next((c for c in text if (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F or ord(c) > 0xFF), None)
    if bad is not None:
        raise ToolError(f"argument {parameter.argument!r} cannot hold the character U+{ord(bad):04X}: it is a header")


def _path_value(parameter: Parameter, value: Any) -> str:
    if isinstance(value, list):
        text = ",".join(_text(v) for v in value)
    elif isinstance(value, dict):
        text = ",".join(f"{k}={_text(v)}" if parameter.explode else f"{k},{_text(v)}" for k, v in value.items())
    else:
        text = _text(value)
    if text in ("", ".", ".."):
        raise ToolError(f"argument {parameter.argument!r} cannot be {text!r}: it is a segment of the path")
    return quote(text, safe="")  # a '/' or '?' in it stays in its segment


def _bytes(value: Any, argument: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise ToolError(f"argument {argument!r} is not base64: a file's bytes are sent as base64") from None


@dataclass(frozen=True)
class OperationRunner:
    """Calls one operation with the validated arguments (a sync runner: ``toolcrib.net`` works on a worker)."""

    namespace: str
    base_url: str
    operation: Operation
    made: Made
    limits: WebLimits
    secrets: Credentials
    output_check: Any = None  # a jsonschema validator of the output schema
    is_async = False

    @property
    def runs(self) -> dict[str, Any]:
        """What the call does, for the lock: the method, the path and where each argument goes."""
        return {"method": self.operation.method.upper(), "path": self.operation.path,
                "arguments": {p.argument: [p.where, p.name] for p in self.made.parameters}, "media": self.made.media}

    def start(self, model: BaseModel, call: Call) -> Any:
        arguments = dict(model.__pydantic_extra__ or {})
        return lambda: self.call(arguments)

    def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        method = self.operation.method.upper()
        where = f"{method} {self.operation.path}"
        path = self.operation.path
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {"Accept": "application/json, */*;q=0.5"}
        cookies: list[str] = []
        body: dict[str, Any] = {}
        payload: Any = None
        for parameter in self.made.parameters:
            if parameter.argument not in arguments or arguments[parameter.argument] is None:
                continue
            value = arguments[parameter.argument]
            if parameter.where == "path":
                path = path.replace("{" + parameter.name + "}", _path_value(parameter, value))
            elif parameter.where == "query":
                query += self._named(parameter, _style(parameter, value))
            elif parameter.where == "header":
                for name, text in self._named(parameter, _style(parameter, value)):
                    _header_value(parameter, text)
                    headers[name] = text
            elif parameter.where == "cookie":
                cookies += [f"{name}={quote(text, safe='')}"
                            for name, text in self._named(parameter, _style(parameter, value))]
            elif parameter.where == "body":
                body[parameter.name] = value
            else:
                payload = value
        if cookies:
            headers["Cookie"] = "; ".join(cookies)
        headers.update(self.secrets.headers)
        query += list(self.secrets.query.items())
        data = self._body(body if payload is None and body else payload, headers)
        url = self.base_url.rstrip("/") + path + (("?" + urlencode(query)) if query else "")
        try:
            answer = request(method, url, self.limits, body=data, headers=headers, check=self._stays)
        except ToolError as exc:
            raise ToolError(self.secrets.scrub(f"{where}: {exc}")) from None
        return self.secrets.scrub_result(
            self._result(where, answer.status, answer.reason, answer.content_type, answer.body, answer.url))

    def _named(self, parameter: Parameter, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """``pairs`` as sent, each name checked: the document's own, or an agent's key (an exploded object's), which
        names no credential of the operator's and no header an argument never sets (a query's is percent-encoded;
        a header's or a cookie's must be a plain token)."""
        for name, _ in pairs:
            if name == parameter.name or name.startswith(parameter.name + "["):
                continue  # the document's (make() leaves out what an argument never sets)
            if parameter.where != "query" and not _TOKEN.fullmatch(name):
                raise ToolError(f"argument {parameter.argument!r}: {name!r} cannot be the name of a "
                                f"{parameter.where} (letters, digits and !#$%&'*+-.^_`|~ only)")
            if (parameter.where, name.lower()) in self.secrets.provided or (
                    parameter.where == "header" and name.lower() in _IGNORED_HEADERS):
                raise ToolError(f"argument {parameter.argument!r} cannot set the {parameter.where} {name!r}: "
                                "toolcrib sets it")
        return pairs

    def _body(self, value: Any, headers: dict[str, str]) -> bytes | None:
        media = self.made.media
        if value is None or media is None:
            return None
        binary = {p.name: p.argument for p in self.made.parameters if p.binary}
        if _JSON.match(media.split(";")[0].strip()):
            headers["Content-Type"] = media
            return json.dumps(value, ensure_ascii=False).encode()
        if media == "application/x-www-form-urlencoded":
            headers["Content-Type"] = media
            fields = value if isinstance(value, dict) else {"body": value}
            return urlencode([(k, _text(v)) for k, vs in fields.items() for v in (vs if isinstance(vs, list)
                                                                                else [vs])]).encode()
        if media == "multipart/form-data":
            boundary = "toolcrib-" + token_hex(12)
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
            fields = value if isinstance(value, dict) else {"body": value}
            parts = []
            for key, item in fields.items():
                name = quote(str(key))
                if key in binary:
                    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}"'
                                 f'\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
                                 + _bytes(item, binary[key]) + b"\r\n")
                else:
                    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                                 f'{_text(item)}\r\n'.encode())
            return b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers["Content-Type"] = media
        if "body" in binary:
            return _bytes(value, "body")
        return value.encode() if isinstance(value, str) else json.dumps(value).encode()

    def _stays(self, url: str) -> None:
        base = self.base_url.rstrip("/")
        if not (url == base or url.startswith(base + "/") or url.startswith(base + "?")):
            raise ToolError(f"the API redirected outside its base URL {self.base_url}; toolcrib does not follow it")

    def _result(self, where: str, status: int, reason: str, content_type: str | None, body: bytes,
                url: str) -> ToolResult:
        media = (content_type or "").split(";")[0].strip().lower()
        if not 200 <= status < 300:
            text = body.decode("utf-8", "replace").strip()
            if len(text) > ERROR_BODY_CHARS:
                left = len(text) - ERROR_BODY_CHARS
                text = text[:ERROR_BODY_CHARS] + f" [... {left} more character{'' if left == 1 else 's'}]"
            said = f": {text}" if text else ""
            return ToolResult.error(f"{where} answered HTTP {status} {reason}{said}")
        if _JSON.match(media) and body.strip():
            try:
                value = self.secrets.scrub_value(json.loads(body))  # before its text is made: escapes differ there
            except (ValueError, RecursionError):
                return ToolResult.error(f"{where} answered HTTP {status} with JSON that cannot be read")
            structured = {"result": value} if self.made.wrapped else value
            text = json.dumps(value, ensure_ascii=False)
            if self.made.output_schema is None:  # an object is structured content still, with no schema to match
                return ToolResult(content=({"type": "text", "text": text},),
                                  structured_content=value if isinstance(value, dict) else None)
            problem = self._mismatch(structured)
            if problem is not None:
                return ToolResult.error(f"{where} answered HTTP {status} with JSON that does not match its "
                                        f"documented response ({problem}): {text[:ERROR_BODY_CHARS]}")
            return ToolResult(content=({"type": "text", "text": text},), structured_content=structured)
        if self.made.output_schema is not None:
            return ToolResult.error(f"{where} answered HTTP {status} {reason} without the JSON its document promises"
                                    + (f" ({media})" if media else ""))
        if not body:
            return ToolResult(content=({"type": "text", "text": f"HTTP {status} {reason}"},))
        kind = media.split("/")[0]
        if kind in ("image", "audio"):
            return ToolResult(content=({"type": kind, "data": base64.b64encode(body).decode(), "mimeType": media},))
        if kind == "text" or media in ("application/xml", "application/yaml", "application/javascript", ""):
            try:
                return ToolResult(content=({"type": "text", "text": body.decode("utf-8")},))
            except UnicodeDecodeError:
                pass
        resource = {"uri": url, "mimeType": media or "application/octet-stream",
                    "blob": base64.b64encode(body).decode()}
        return ToolResult(content=({"type": "resource", "resource": resource},))

    def _mismatch(self, value: Any) -> str | None:
        check = self.output_check
        if check is None:
            from jsonschema import validators  # type: ignore[import-untyped]  # no stubs

            check = validators.Draft202012Validator(self.made.output_schema)
            object.__setattr__(self, "output_check", check)
        error = next(iter(check.iter_errors(value)), None)
        if error is None:
            return None
        at = "/".join(str(p) for p in error.absolute_path)
        return f"{at + ': ' if at else ''}{error.message[:200]}"


# -- the source ------------------------------------------------------------------------------------------------


class OpenAPISource:
    """``[openapi.<namespace>]`` as a ``toolcrib.sources.Source``: the document is read when the source is made
    (a host's start or reload); what cannot be served is in its record's error, and a document that cannot be read
    fails this source alone."""

    dimension = "plugins"
    lazy = False

    def __init__(self, namespace: str, config: OpenAPIConfig, loaded: LoadedConfig,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = namespace
        self.config = config
        where = config.document or config.document_url
        self.record = PluginRecord(name=namespace, kind="openapi", state="loaded", entry_point=where)
        self._good: set[str] = set()  # components checked against JSON Schema 2020-12 (``_checked``)
        self._offer = Offer(self.record)
        if not config.enabled:
            self.record.state = "disabled"
            return
        try:
            self._offer.entries = self._entries(loaded, env)
        except (DocumentError, MissingVariable, ToolDeclarationError) as exc:
            self.record.fail(str(exc))
        except Exception as exc:  # a document that breaks the reader in a way not foreseen fails this source alone
            self.record.fail(f"cannot be served: {type(exc).__name__}: {exc}")

    def _entries(self, loaded: LoadedConfig, env: Mapping[str, str] | None) -> list[Entry]:
        document, where = read_document(self.config, loaded)
        base_url = self._base_url(document, where)
        secrets = credentials(self.config, f"openapi.{self.name}", env)
        named = _host_port(urlsplit(base_url))
        if self.config.base_url is None and self.config.document_url is not None:
            # a fetched document's server may be anywhere public; a private one only where the operator named it
            exempt = (named,) if named == _host_port(urlsplit(self.config.document_url)) else ()
        else:
            exempt = (named,)  # the operator's base URL, or a server named by a document the operator keeps
        limits = WebLimits(max_bytes=self.config.max_bytes, timeout=self.config.timeout, verb="call",
                           where=f"[openapi.{self.name}]", allowed_private_hosts=exempt, max_redirects=5)
        problems: list[str] = []
        chosen = [op for op in operations(document)
                  if selected(op, self.config.operations) and not selected(op, self.config.exclude)]
        names = serving_names("operation", [op.name for op in chosen], problems, "the document has")
        entries = []
        for op in chosen:
            if op.name not in names:
                continue
            try:
                entries.append(self._entry(document, op, names[op.name], base_url, limits, secrets))
            except ToolDeclarationError as exc:
                problems.append(f"operation {op.name!r} ({op.method.upper()} {op.path}) is not served: {exc}")
        if problems:
            self.record.error = "; ".join(problems)
        self.record.tool_count = len(entries)
        return entries

    def _base_url(self, document: Mapping[str, Any], where: str) -> str:
        if self.config.base_url is not None:
            return self.config.base_url
        servers = document.get("servers")
        first = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], Mapping) else {}
        url = first.get("url")
        if isinstance(url, str):
            for name, variable in (first.get("variables") or {}).items():  # a server variable's default
                if isinstance(variable, Mapping) and isinstance(variable.get("default"), str):
                    url = url.replace("{" + str(name) + "}", variable["default"])
        if isinstance(url, str) and url.startswith(("http://", "https://")) and "{" not in url:
            return url
        raise DocumentError(f"{where} names no absolute server URL to call (its first server: {url!r}); set "
                            f"base_url in [openapi.{self.name}]")

    def _entry(self, document: Mapping[str, Any], op: Operation, served: str, base_url: str, limits: WebLimits,
               secrets: Credentials) -> Entry:
        made = make(document, op, secrets.provided)
        hidden: list[str] = []
        input_schema = clean_schema(made.input_schema, hidden, "its parameters")
        output_schema = clean_schema(made.output_schema, hidden, "its response")
        if hidden:
            raise ToolDeclarationError(f"hidden characters in {', '.join(clean(h) for h in hidden[:3])}")
        checked = self._checked(served, input_schema)
        made = Made(checked, output_schema, made.wrapped, made.parameters, made.media, made.description, made.title)
        runner = OperationRunner(self.name, base_url, op, made, limits, secrets)
        tool = Tool(name=served, description=clean(made.description), runner=runner,
                    annotations=dict(ANNOTATIONS[op.method]), arguments=tuple(checked["properties"]),
                    title=clean(made.title) if made.title else None, make_input=_json_schema_model(served, checked),
                    given_input_schema=checked, given_output_schema=output_schema,
                    source_name=op.name if served != op.name else None,
                    keywords=tuple(dict.fromkeys((op.method, *op.tags))))
        return Entry(name=full_name(self.name, served), namespace=self.name, supplier="openapi",
                     dimension=self.dimension, source=self.name, definition=tool)

    def _checked(self, served: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The input schema, checked against JSON Schema 2020-12 part by part: each argument's schema and each
        component in ``$defs`` once for the whole document (operations share most of them, and checking a schema
        against 2020-12 costs milliseconds: a big document's start would be mostly that)."""
        from jsonschema import Draft202012Validator  # no stubs
        from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

        parts = [(f"argument {k!r}", v) for k, v in schema["properties"].items()]
        parts += [(f"component {k!r}", v) for k, v in schema.get("$defs", {}).items()]
        for what, part in parts:
            key = json.dumps(part, sort_keys=True)
            if key in self._good:
                continue
            try:
                Draft202012Validator.check_schema(part)
            except SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
                raise ToolDeclarationError(f"invalid JSON Schema in {what} at {where}: {exc.message}") from None
            self._good.add(key)
        try:  # the rest is written by make(): an object of those parts
            return dict(json.loads(json.dumps(schema, allow_nan=False)))
        except ValueError:
            raise ToolDeclarationError("its schemas hold NaN or Infinity, which JSON does not") from None

    async def open(self) -> None:
        """Nothing to open: every call makes its own connection (``toolcrib.net``)."""

    async def close(self) -> None:
        """Nothing to close."""

    def offer(self) -> Offer:
        return self._offer

    async def fetch(self, name: str | None = None) -> list[Entry]:
        entries = self._offer.entries
        return entries if name is None else [e for e in entries if e.name == name]

    async def read(self, uri: str) -> ToolResult:
        raise ToolError(f"OpenAPI document {self.name!r} serves no resources")


def configured(loaded: LoadedConfig, given: Sequence[str] = (),
               env: Mapping[str, str] | None = None) -> list[OpenAPISource]:
    """A source for each ``[openapi.<namespace>]`` of the config (not those ``given`` names already); ``env`` holds
    the variables its credentials name (the host's environment)."""
    return [OpenAPISource(ns, config, loaded, env) for ns, config in sorted(loaded.config.openapi.items())
            if ns not in given]


__all__ = ["DocumentError", "OpenAPISource", "OperationRunner", "configured", "make", "operations",
           "parse_document", "read_document"]
