"""Reading an OpenAPI document: from a file or a URL, JSON or YAML (bounded: ``YAML_NODES``, ``YAML_DEPTH``),
3.0 or 3.1 only; its local ``$ref``s followed (``resolve``); its operations and their parameters (``operations``),
and the operator's selection of them (``selected``)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from toolcrib.config import LoadedConfig
from toolcrib.errors import ToolDeclarationError, ToolError
from toolcrib.net import WebLimits, fetch
from toolcrib.supply.openapi.settings import OpenAPIConfig

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PLACES = ("path", "query", "header", "cookie")
# Headers an argument never sets: those OpenAPI says a parameter is ignored as (the HTTP layer's), and the
# connection's and the message's framing, which would let a value reach another host or smuggle a second request
IGNORED_HEADERS = frozenset({
    "accept", "content-type", "authorization", "host", "content-length", "transfer-encoding", "connection",
    "keep-alive", "te", "trailer", "upgrade", "proxy-connection", "proxy-authorization", "expect", "cookie"})

JSON_MEDIA = re.compile(r"^application/(.+\+)?json$")


class DocumentError(ValueError):
    """The document cannot be read or is not OpenAPI 3.0/3.1: the whole source fails, with this message."""


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
                           where="its [openapi] table", allowed_private_hosts=(host_port(host),))
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


def host_port(url: Any) -> str:
    return f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}"


def unescape(token: str) -> str:
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
            if not isinstance(target, Mapping) or unescape(token) not in target:
                raise ToolDeclarationError(f"$ref {ref!r} leads nowhere in the document")
            target = target[unescape(token)]
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

