"""Calling an operation (``OperationRunner``): an agent's arguments become the request the document describes
(names from the document, values escaped or refused), the operator's credentials go with it (``Credentials``), and
what the API answers becomes a result with every form of every credential taken out (``toolcrib.credentials``)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from secrets import token_hex
from typing import Any
from urllib.parse import quote, urlencode

from anyio import to_thread
from pydantic import BaseModel

from toolcrib.config import expand
from toolcrib.consent import Consenting
from toolcrib.content import ToolResult
from toolcrib.credentials import Credentials
from toolcrib.delegation import Acting, ConsentNeeded, agents_of, ask_consent
from toolcrib.errors import ToolError
from toolcrib.net import WebLimits, request
from toolcrib.runner import Call
from toolcrib.supply.openapi.document import IGNORED_HEADERS, JSON_MEDIA, Operation, Parameter
from toolcrib.supply.openapi.operations import OperationTool
from toolcrib.supply.openapi.settings import OpenAPIConfig

ERROR_BODY_CHARS = 2000  # of an error answer's body, in its error result



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
    made: OperationTool
    limits: WebLimits
    secrets: Credentials
    output_check: Any = None  # a jsonschema validator of the output schema
    acting: Acting | Consenting | None = None  # its calls are made as their caller (exchange, consent)

    @property
    def is_async(self) -> bool:
        """A call made as its caller first gets its token (an exchange, a refresh: async), then calls on a worker
        thread; any other is a sync call, on the host's workers."""
        return self.acting is not None

    @property
    def runs(self) -> dict[str, Any]:
        """What the call does, for the lock: the method, the path and where each argument goes."""
        return {"method": self.operation.method.upper(), "path": self.operation.path,
                "arguments": {p.argument: [p.where, p.name] for p in self.made.parameters}, "media": self.made.media}

    def start(self, model: BaseModel, call: Call) -> Any:
        arguments = dict(model.__pydantic_extra__ or {})
        if self.acting is not None:
            return self._as_caller(arguments, call)
        return lambda: self.call(arguments)

    async def _as_caller(self, arguments: Mapping[str, Any], call: Call) -> ToolResult:
        assert self.acting is not None
        try:
            bearer = await self.acting.bearer(call.principal, agents_of(call))
        except ConsentNeeded as needed:  # the person is to grant access first: the page, or an error naming it
            raise ask_consent(call, needed) from None
        return await to_thread.run_sync(self.call, arguments, bearer)

    def call(self, arguments: Mapping[str, Any], bearer: str | None = None) -> ToolResult:
        """The operation called with ``arguments``; with ``bearer`` (a token of its caller's) in place of the
        source's own."""
        secrets = self.secrets.with_bearer(bearer) if bearer is not None else self.secrets
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
        headers.update(secrets.headers)
        query += list(secrets.query.items())
        data = self._body(body if payload is None and body else payload, headers)
        url = self.base_url.rstrip("/") + path + (("?" + urlencode(query)) if query else "")
        try:
            answer = request(method, url, self.limits, body=data, headers=headers, check=self._stays)
        except ToolError as exc:
            raise ToolError(secrets.scrub(f"{where}: {exc}")) from None
        return secrets.scrub_result(
            self._result(where, answer.status, answer.reason, answer.content_type, answer.body, answer.url, secrets))

    def _named(self, parameter: Parameter, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """``pairs`` as sent, each name checked: the document's own, or an agent's key (an exploded object's), which
        names no credential of the operator's and no header an argument never sets (a query's is percent-encoded;
        a header's or a cookie's must be a plain token)."""
        for name, _ in pairs:
            if name == parameter.name or name.startswith(parameter.name + "["):
                continue  # the document's (operation_tool() leaves out what an argument never sets)
            if parameter.where != "query" and not _TOKEN.fullmatch(name):
                raise ToolError(f"argument {parameter.argument!r}: {name!r} cannot be the name of a "
                                f"{parameter.where} (letters, digits and !#$%&'*+-.^_`|~ only)")
            if (parameter.where, name.lower()) in self.secrets.provided or (
                    parameter.where == "header" and name.lower() in IGNORED_HEADERS):
                raise ToolError(f"argument {parameter.argument!r} cannot set the {parameter.where} {name!r}: "
                                "toolcrib sets it")
        return pairs

    def _body(self, value: Any, headers: dict[str, str]) -> bytes | None:
        media = self.made.media
        if value is None or media is None:
            return None
        binary = {p.name: p.argument for p in self.made.parameters if p.binary}
        if JSON_MEDIA.match(media.split(";")[0].strip()):
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

    def _result(self, where: str, status: int, reason: str, content_type: str | None, body: bytes, url: str,
                secrets: Credentials) -> ToolResult:
        media = (content_type or "").split(";")[0].strip().lower()
        if not 200 <= status < 300:
            text = body.decode("utf-8", "replace").strip()
            if len(text) > ERROR_BODY_CHARS:
                left = len(text) - ERROR_BODY_CHARS
                text = text[:ERROR_BODY_CHARS] + f" [... {left} more character{'' if left == 1 else 's'}]"
            said = f": {text}" if text else ""
            return ToolResult.error(f"{where} answered HTTP {status} {reason}{said}")
        if JSON_MEDIA.match(media) and body.strip():
            try:
                value = secrets.scrub_value(json.loads(body))  # before its text is made: escapes differ there
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


