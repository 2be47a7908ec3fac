"""Name rules: tool names, namespaces, agent names, full names. Exact, ASCII, case-sensitive."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

SEPARATOR = "__"
RESERVED_NAMESPACE = "toolcrib"  # the host's own tools: no pack, server or other source may take it

TOOL_NAME_RULE = (
    "tool names are 1-64 characters: a letter first, then letters, digits and single underscores ('__' is reserved)"
)
NAMESPACE_RULE = (
    "namespaces are 1-32 characters: a lower-case letter first, then lower-case letters, digits and single "
    "underscores"
)
AGENT_NAME_RULE = (
    "agent names are 1-64 characters: a letter first, then letters, digits and single underscores"
)

# Control characters other than newline and tab (C0 and C1), zero-width, joining and direction-changing characters,
# line and paragraph separators, soft hyphens, fillers that draw nothing, variation selectors and Unicode tag
# characters: ways to hide text in a description that the model reads and a person reviewing it does not.
HIDDEN_CHARACTERS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U0001d173-\U0001d17a\U000e0000-\U000e007f"
    "\U000e0100-\U000e01ef]")

# Terminal escape sequences (colours, cursor moves, window titles): removed whole, not only their ESC.
ANSI_SEQUENCES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

# JSON Schema keys whose string values are prose for the reader; every other string in a schema is used for
# something (a property name, an enum value, a pattern), and cleaning it would change what the schema means.
_PROSE_KEYS = frozenset({"description", "title", "$comment", "examples"})


# What an operator is shown marked rather than as it is: every character that draws nothing or changes how the rest
# is drawn (besides HIDDEN_CHARACTERS: other format, private-use and unassigned characters, spaces other than the
# space), and the mark's own bracket, so that a text cannot pass for one with a mark in it.
_UNSHOWN_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"))
MARK = "\u27e8U+{:04X}\u27e9"  # ⟨U+202E⟩


def shown(text: str) -> str:
    """``text`` as an operator is shown it before approving anything (the console, a link's page, ``toolcrib
    approvals``): each character that would not show as itself, a newline aside, as a visible mark (``⟨U+202E⟩``),
    so that two texts that differ look different. Nothing is removed."""
    if text.isascii() and text.isprintable():
        return text
    import unicodedata

    return "".join(MARK.format(ord(c)) if c != "\n" and (
        c == "\u27e8" or (c != " " and unicodedata.category(c) in _UNSHOWN_CATEGORIES) or HIDDEN_CHARACTERS.match(c))
        else c for c in text)


def clean(text: str) -> str:
    """``text`` without hidden characters and terminal escape sequences: what an agent is shown of any text that
    a pack or an upstream server wrote (names, titles, descriptions)."""
    if HIDDEN_CHARACTERS.search(text) is None:
        return text
    return HIDDEN_CHARACTERS.sub("", ANSI_SEQUENCES.sub("", text))


_DATA = frozenset({str, int, float, bool, type(None)})  # JSON values with no schema in them


def clean_schema(schema: Any, hidden: list[str] | None = None, where: str = "") -> Any:
    """A JSON Schema whose prose (description, title, $comment, examples) is ``clean``: ``schema`` itself when
    nothing needs cleaning (the usual case: no copy is made), else a copy. A hidden character anywhere else (a
    property name, an enum value) cannot be removed without changing the schema: its place is appended to
    ``hidden``, for the caller to refuse or report."""
    if isinstance(schema, str):
        if hidden is not None and HIDDEN_CHARACTERS.search(schema):
            hidden.append(where or "(schema)")
        return schema
    if isinstance(schema, list):
        if hidden is None and all(type(item) in _DATA for item in schema):
            return schema  # ("required", "enum", "type" lists)
        items = [clean_schema(item, hidden, f"{where}[{i}]" if hidden is not None else "")
                 for i, item in enumerate(schema)]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    cleaned = None  # a copy, made at the first value that changes
    for key, value in schema.items():
        place = ""  # where a hidden character is, named only for a caller that collects them
        if hidden is not None:
            place = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and HIDDEN_CHARACTERS.search(key):
                hidden.append(place)
        if key in _PROSE_KEYS and isinstance(value, str):
            new = clean(value)
        elif key == "examples":
            new = _clean_strings(value)
        elif hidden is None and type(value) in _DATA:
            continue  # a value that is not prose stays as it is; only a caller that collects looks inside it
        else:
            new = clean_schema(value, hidden, place)
        if new is not value:
            if cleaned is None:
                cleaned = dict(schema)
            cleaned[key] = new
    return schema if cleaned is None else cleaned


def _clean_strings(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        items = [_clean_strings(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        cleaned = {k: _clean_strings(v) for k, v in value.items()}
        return value if all(cleaned[k] is v for k, v in value.items()) else cleaned
    return value


# Explicit ASCII classes: no \w, so no Unicode letter ever passes as a name character.
_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*_?")
_NAMESPACE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*_?")


def tool_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid tool name, or None when it is."""
    if not isinstance(name, str):
        return f"a tool name must be a string, not {type(name).__name__}"
    if not 1 <= len(name) <= 64 or _TOOL_NAME.fullmatch(name) is None:
        return TOOL_NAME_RULE
    return None


SOURCE_NAME_KEY = "io.toolcrib/source-name"  # in a served tool's _meta: the name its source gives it
ASKED_BY_KEY = "io.toolcrib/asked-by"  # in a forwarded request's _meta: the namespace of the server that asks
# _meta keys a source may not set: toolcrib's own (which only the host speaks), and the protocol's, which describe
# the hop between the source and toolcrib, not the one to the agent's client
_NOT_A_SOURCES = ("io.toolcrib/", "toolcrib/", "io.modelcontextprotocol/")


MAX_ICONS = 8  # of one tool, resource or prompt
MAX_ICON_CHARS = 100_000  # of one icon's src (a data: URI holds the image itself)
_ICON_SRC = re.compile(r"https://[^\s\\]+|data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]+")


def foreign_icons(icons: Any) -> tuple[dict[str, Any], ...]:
    """A source's icons (of a tool, a resource, a prompt) as toolcrib passes them on: those whose ``src`` is an
    ``https:`` URL or a ``data:`` URI of a raster image, with their ``mimeType``, ``sizes`` and ``theme``. Others
    are dropped: ``http:``, ``file:`` and ``javascript:`` URLs, and SVG, which can carry script into a client that
    renders it."""
    kept: list[dict[str, Any]] = []
    for icon in icons if isinstance(icons, list | tuple) else ():
        found = icon.model_dump(by_alias=True, mode="json", exclude_none=True) if hasattr(icon, "model_dump") else icon
        src = found.get("src") if isinstance(found, Mapping) else None
        if not isinstance(src, str) or len(src) > MAX_ICON_CHARS or _ICON_SRC.fullmatch(src) is None:
            continue
        icon_out: dict[str, Any] = {"src": src}
        if isinstance(found.get("mimeType"), str):
            icon_out["mimeType"] = clean(found["mimeType"])
        sizes = found.get("sizes")
        if isinstance(sizes, list) and all(isinstance(size, str) for size in sizes):
            icon_out["sizes"] = [clean(size) for size in sizes]
        if found.get("theme") in ("light", "dark"):
            icon_out["theme"] = found["theme"]
        kept.append(icon_out)
    return tuple(kept[:MAX_ICONS])


def foreign_meta(meta: Any) -> dict[str, Any] | None:
    """A source's ``_meta`` (of a tool, a result) as toolcrib passes it on: its keys but those that would let it
    speak for toolcrib or for the protocol (``_NOT_A_SOURCES``); None when nothing is left. Its text loses hidden
    characters, as every text of a source does."""
    if not isinstance(meta, Mapping):
        return None
    kept = {clean(key): _clean_strings(value) for key, value in meta.items()
            if isinstance(key, str) and not key.startswith(_NOT_A_SOURCES)}
    return kept or None


def foreign_item(item: dict[str, Any]) -> dict[str, Any]:
    """A source's content block or resource contents (in MCP's wire shape) with only the ``_meta`` keys
    ``foreign_meta`` keeps, its embedded resource's too; changed in place, and returned."""
    for part in (item, item.get("resource")):
        if isinstance(part, dict) and "_meta" in part:
            meta = foreign_meta(part.pop("_meta"))
            if meta:
                part["_meta"] = meta
    return item


def served_name(name: str) -> str:
    """The name toolcrib serves a source's tool (or prompt) under when the source's own name breaks the tool-name
    rule (MCP allows 1-128 characters of ``[A-Za-z0-9_.-]``): every other character becomes ``_``, runs of
    underscores become one, and leading underscores go (``get-tiny-image`` -> ``get_tiny_image``, another
    toolcrib's ``fs__read_file`` -> ``fs_read_file``). The result may still break the rule (a digit first, too
    long): ``tool_name_problem`` says so."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).lstrip("_")


def namespace_problem(name: object) -> str | None:
    """Why ``name`` is not a valid namespace, or None when it is."""
    if not isinstance(name, str):
        return f"a namespace must be a string, not {type(name).__name__}"
    if not 1 <= len(name) <= 32 or _NAMESPACE.fullmatch(name) is None:
        return NAMESPACE_RULE
    return None


def agent_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid agent name, or None when it is (agent names follow the tool-name rule)."""
    if not 1 <= len(name) <= 64 or _TOOL_NAME.fullmatch(name) is None:
        return AGENT_NAME_RULE
    return None


def full_name(namespace: str, tool: str) -> str:
    """The one name a tool has everywhere: ``<namespace>__<tool>``."""
    return f"{namespace}{SEPARATOR}{tool}"


def serving_names(kind: str, originals: list[str], problems: list[str],
                  offers: str = "the server offers") -> dict[str, str]:
    """The name each of a source's tools (or prompts) is served under, by its own name: its own where toolcrib's
    rule takes it, else ``served_name``'s. One that cannot be served, or that would share its served name with
    another, is left out (both are), and ``problems`` says why (``offers``: who offers them, "the document has")."""
    wanted: dict[str, str] = {}
    for original in originals:
        served = original if tool_name_problem(original) is None else served_name(original)
        problem = tool_name_problem(served)
        if problem is not None:
            problems.append(f"{kind} {original!r} is not served: {kind} names are served as 1-64 characters, a letter "
                            f"first, then letters, digits and underscores ({served!r} is not)")
            continue
        wanted[original] = served
    shared = Counter(wanted[original] for original in originals if original in wanted)
    for original, served in list(wanted.items()):
        if shared[served] > 1:
            others = sorted({o for o in originals if wanted.get(o) == served} - {original})
            why = (f"{offers} two {kind}s named {original!r}" if not others
                   else f"it would be served as {served!r}, like {', '.join(map(repr, others))}")
            problems.append(f"{kind} {original!r} is not served: {why}")
    return {original: served for original, served in wanted.items() if shared[served] == 1}
