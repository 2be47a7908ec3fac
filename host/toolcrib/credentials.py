"""Credentials the operator gives a source, and what keeps them from the agent: ``Credentials.scrub_result`` takes
every form of each value (bare and with its scheme, percent-, JSON-, HTML- and base64-encoded) out of whatever the
source answered. An OpenAPI source's ``bearer``, ``api_key`` and ``headers``; a token exchanged for a caller
(``toolcrib.delegation``), whatever source it went to."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

from toolcrib.content import ToolResult


@dataclass(frozen=True)
class Credentials:
    """What goes with every call of a source. Never shown: ``scrub_result`` takes every form of each value (bare and
    with its scheme, percent-, JSON-, HTML- and base64-encoded) out of whatever the source answered."""

    headers: Mapping[str, str]
    query: Mapping[str, str]
    # with_bearer's answers by token: a caller's token is used for many calls, and the patterns that take it out of
    # answers cost about 0.3 ms to make, a tenth of a local call
    _bearers: dict[str, Credentials] = field(default_factory=dict, repr=False, compare=False)

    @property
    def provided(self) -> frozenset[tuple[str, str]]:
        return frozenset({*(("header", k.lower()) for k in self.headers), *(("query", k.lower()) for k in self.query)})

    def with_bearer(self, token: str) -> Credentials:
        """These credentials for one call made as its caller: ``token`` its bearer, in place of the source's own
        (an agent never sets Authorization: ``IGNORED_HEADERS``), and taken out of the answer as every credential
        is."""
        found = self._bearers.get(token)
        if found is None:
            found = self._bearers[token] = Credentials({**self.headers, "Authorization": f"Bearer {token}"}, self.query)
            while len(self._bearers) > MAX_BEARERS:
                self._bearers.pop(next(iter(self._bearers)), None)
        return found

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
        content = tuple(self.scrub_block(block) for block in result.content)
        meta = self.scrub_value(dict(result.meta)) if result.meta is not None else None
        return dataclasses.replace(result, content=content, meta=meta,
                                   structured_content=self.scrub_value(result.structured_content))

    def scrub_block(self, block: Mapping[str, Any]) -> dict[str, Any]:
        """A content block or resource contents (MCP's wire shape) with no credential in it."""
        if self._patterns is None:
            return dict(block)
        out: dict[str, Any] = {}
        for key, value in block.items():
            if key in ("data", "blob") and isinstance(value, str):
                value = base64.b64encode(self.scrub_bytes(base64.b64decode(value))).decode()
            elif isinstance(value, Mapping):
                value = self.scrub_block(value)
            elif isinstance(value, str):
                value = self.scrub(value)
            out[key] = value
        return out


MAX_BEARERS = 256  # callers' tokens whose credentials are kept made, the oldest out first
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


NONE = Credentials({}, {})  # a source that sends none


__all__ = ["NONE", "Credentials"]
