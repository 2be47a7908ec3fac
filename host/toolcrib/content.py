"""Explicit result content and the normalized ``ToolResult``; MCP's wire shapes, without importing ``mcp``.

A handler may return ``str``, ``dict``, ``list``, a pydantic model, one of the content classes here (or a list
of them), an ``mcp.types`` content object, or a ``ToolResult``. ``normalize`` turns any of these into a
``ToolResult`` whose content blocks are plain dicts in the MCP wire shape.
"""

from __future__ import annotations

import base64
import functools
import json
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, Field
from pydantic_core import to_json, to_jsonable_python
from typing_extensions import TypedDict

_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})


@dataclass(frozen=True, slots=True)
class Text:
    text: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class Image:
    """Image content: raw bytes, sent base64-encoded. ``Image.from_path(p)`` guesses the MIME type."""

    data: bytes
    mime_type: str = "image/png"

    @classmethod
    def from_path(cls, path: str | Path, mime_type: str | None = None) -> Image:
        p = Path(path)
        return cls(p.read_bytes(), mime_type or mimetypes.guess_type(p.name)[0] or "application/octet-stream")

    def to_wire(self) -> dict[str, Any]:
        return {"type": "image", "data": base64.b64encode(self.data).decode("ascii"), "mimeType": self.mime_type}


@dataclass(frozen=True, slots=True)
class Audio:
    data: bytes
    mime_type: str = "audio/wav"

    def to_wire(self) -> dict[str, Any]:
        return {"type": "audio", "data": base64.b64encode(self.data).decode("ascii"), "mimeType": self.mime_type}


@dataclass(frozen=True, slots=True)
class ResourceLink:
    uri: str
    name: str
    mime_type: str | None = None
    description: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": "resource_link", "uri": self.uri, "name": self.name}
        if self.mime_type:
            wire["mimeType"] = self.mime_type
        if self.description:
            wire["description"] = self.description
        return wire


@dataclass(frozen=True, slots=True)
class EmbeddedResource:
    """A resource carried in the result: ``text`` or ``blob`` (bytes), exactly one."""

    uri: str
    text: str | None = None
    blob: bytes | None = None
    mime_type: str | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.blob is None):
            raise ValueError("EmbeddedResource takes exactly one of text= or blob=")

    def to_wire(self) -> dict[str, Any]:
        resource: dict[str, Any] = {"uri": self.uri}
        if self.text is not None:
            resource["text"] = self.text
        else:
            resource["blob"] = base64.b64encode(self.blob or b"").decode("ascii")
        if self.mime_type:
            resource["mimeType"] = self.mime_type
        return {"type": "resource", "resource": resource}


CONTENT_CLASSES = (Text, Image, Audio, ResourceLink, EmbeddedResource)
INTERRUPT_META = "toolcrib/interrupt"  # in a result's _meta: a policy ended the agent's turn


@dataclass(slots=True)
class ToolResult:
    """A normalized tool result. ``content`` blocks are dicts in the MCP wire shape (camelCase keys).

    Treat it as read-only; to change a result (a post-tool-use hook redacting it), return a new one.
    """

    content: tuple[dict[str, Any], ...] = ()
    structured_content: Any = None
    is_error: bool = False
    interrupt: bool = False  # a policy ended the agent's turn with this result (``Deny(..., interrupt=True)``)
    meta: Mapping[str, Any] | None = None  # the result's _meta (an upstream server's, as names.foreign_meta keeps it)

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(content=({"type": "text", "text": message},), is_error=True)

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (what a plain-text client shows)."""
        return "\n".join(block["text"] for block in self.content if block.get("type") == "text")

    def to_wire(self) -> dict[str, Any]:
        """The result as MCP's ``CallToolResult`` JSON object."""
        wire: dict[str, Any] = {"content": list(self.content), "isError": self.is_error}
        if self.structured_content is not None:
            wire["structuredContent"] = self.structured_content
        if self.meta or self.interrupt:
            wire["_meta"] = {**(self.meta or {}), **({INTERRUPT_META: True} if self.interrupt else {})}
        return wire


_STRICT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII kept readable; NaN and Infinity are refused (ValueError): they are not JSON."""
    text = to_json(value).decode()
    # looked for in the text: `in` on bytes costs ten times as much (CPython tries the needle as an int first)
    if "NaN" in text or "Infinity" in text:
        return _STRICT_JSON(value)  # rare: tells a real NaN from a string that mentions one
    return text


def result_problem(result: ToolResult) -> str | None:
    """Why a ``ToolResult`` built by user code (a handler or a hook) cannot be sent, or None when it can.

    Results toolcrib builds itself are right by construction and never pay for this check.
    """
    content: Any = result.content  # as user code set them, whatever the annotations say
    is_error: Any = result.is_error
    if not isinstance(content, tuple | list) or not all(type(b) is dict for b in content):
        return "content must be a tuple of dicts in the MCP wire shape"
    if result.structured_content is not None and not isinstance(result.structured_content, Mapping):
        return "structured_content must be a JSON object (a dict) or None"
    if not isinstance(is_error, bool):
        return "is_error must be a bool"
    meta: Any = result.meta
    if meta is not None and not isinstance(meta, Mapping):
        return "meta must be a JSON object (a dict) or None"
    for i, block in enumerate(content):
        if block.get("type") not in _CONTENT_TYPES:
            return f"content block {i} has type {block.get('type')!r}; MCP content is one of: {_TYPE_LIST}"
    from pydantic import ValidationError

    try:
        _content_adapter().validate_python(list(content))
    except ValidationError as exc:
        for err in exc.errors(include_url=False):  # the errors of the member the block's type selects
            index, member, *where = err["loc"]
            kind = content[int(index)]["type"]
            if member == _MODEL_OF[kind]:
                return f"content block {index} ({kind}): {'.'.join(map(str, where)) or 'block'}: {err['msg']}"
        return "content is not MCP content"
    return None


_TYPE_LIST = "text, image, audio, resource_link, resource"
_MODEL_OF = {"text": "_TextBlock", "image": "_ImageBlock", "audio": "_AudioBlock", "resource_link": "_LinkBlock",
             "resource": "_ResourceBlock"}


# MCP's content blocks as JSON shapes (the specification's, with camelCase keys), to check what user code built.
class _Annotations(TypedDict, total=False):
    audience: list[Literal["user", "assistant"]]
    priority: Annotated[float, Field(ge=0, le=1)]
    lastModified: str


class _TextBlock(TypedDict):
    type: Literal["text"]
    text: str
    annotations: NotRequired[_Annotations]


class _ImageBlock(TypedDict):
    type: Literal["image"]
    data: str
    mimeType: str
    annotations: NotRequired[_Annotations]


class _AudioBlock(_ImageBlock):
    pass


class _LinkBlock(TypedDict):
    type: Literal["resource_link"]
    uri: str
    name: str
    title: NotRequired[str]
    description: NotRequired[str]
    mimeType: NotRequired[str]
    size: NotRequired[int]
    annotations: NotRequired[_Annotations]


class TextResourceContents(TypedDict):
    uri: str
    text: str
    mimeType: NotRequired[str]


class BlobResourceContents(TypedDict):
    uri: str
    blob: str
    mimeType: NotRequired[str]


class _ResourceBlock(TypedDict):
    type: Literal["resource"]
    resource: TextResourceContents | BlobResourceContents
    annotations: NotRequired[_Annotations]


@functools.cache
def _content_adapter() -> Any:
    from pydantic import TypeAdapter

    block = _TextBlock | _ImageBlock | _AudioBlock | _LinkBlock | _ResourceBlock
    return TypeAdapter(list[block])


def _block(item: Any) -> dict[str, Any] | None:
    """``item`` as one wire content block, or None when it is not explicit content."""
    to_wire = getattr(item, "to_wire", None)
    if to_wire is not None and isinstance(item, CONTENT_CLASSES):
        return to_wire()  # type: ignore[no-any-return]
    if isinstance(item, BaseModel) and getattr(item, "type", None) in _CONTENT_TYPES:
        # mcp.types content (TextContent, ImageContent, ...): pass through in wire shape.
        return item.model_dump(by_alias=True, mode="json", exclude_none=True)
    return None


def normalize(value: Any, structured: Any = None) -> ToolResult:
    """Turn what a handler returned into a ``ToolResult``.

    ``str`` -> text; ``dict``/``list``/pydantic model -> JSON text plus structured content (a list is
    carried as ``{"result": [...]}``, since MCP before 2026-07-28 takes only objects there); explicit
    content passes through; other JSON values -> their JSON text. ``structured`` is the value already
    checked against the tool's output schema, when it has one.
    """
    kind = type(value)
    if kind is str:
        return ToolResult(content=({"type": "text", "text": value},))
    if kind is int or kind is float or kind is bool or value is None:
        text = str(value) if kind is int else _STRICT_JSON(value)
        return ToolResult(content=({"type": "text", "text": text},))
    if kind is dict and (structured is None or type(structured) is dict):  # a dict is never explicit content
        if structured is None:
            structured = to_jsonable_python(value)
        return ToolResult(content=({"type": "text", "text": dumps(structured)},), structured_content=structured)
    if isinstance(value, ToolResult):
        problem = result_problem(value)
        if problem is not None:
            raise ValueError(f"the handler's ToolResult cannot be sent: {problem}")
        return value
    if isinstance(value, str):
        return ToolResult(content=({"type": "text", "text": value},))
    block = _block(value)
    if block is not None:
        return ToolResult(content=(block,))
    if isinstance(value, list | tuple) and value and all(_block(v) is not None for v in value):
        return ToolResult(content=tuple(_block(v) for v in value))  # type: ignore[misc]
    if structured is None:
        if isinstance(value, BaseModel):
            structured = value.model_dump(mode="json", by_alias=True)
        elif isinstance(value, Mapping | Sequence) and not isinstance(value, bytes | bytearray):
            # datetimes, paths, UUIDs, dataclasses ... become their JSON forms, as pydantic would send them.
            structured = to_jsonable_python(value)
        elif value is None or isinstance(value, bool | int | float):
            text = str(value) if type(value) is int else _STRICT_JSON(value)
            return ToolResult(content=({"type": "text", "text": text},))
        else:
            raise TypeError(f"cannot turn a {type(value).__name__} into a tool result")
    if isinstance(structured, Mapping):
        text = dumps(structured)
        return ToolResult(content=({"type": "text", "text": text},), structured_content=structured)
    if isinstance(structured, list | tuple):
        structured = list(structured)
        text = dumps(structured)
        return ToolResult(content=({"type": "text", "text": text},), structured_content={"result": structured})
    return ToolResult(content=({"type": "text", "text": dumps(structured)},))
